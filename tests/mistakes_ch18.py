"""The catalogue of plausible wrong answers to chapter 18's implement exercises.

Not collected by pytest (the name does not start with test_): tests/test_exercises_ch18.py
shows each one rejected by its checker with its own message.

- RoPE mistakes (exercise 18.2) are functions `fn(x, start_pos=0)`, x [B, h, L, d_k].
- Grouped-query attention mistakes (exercise 18.3) are functions `fn(q, k, v, causal=False)`.
"""

import torch

# --- RoPE in the halves layout (exercise 18.2) ---


def _angles(d_k, L, start, exponent=2.0, shift=0):
    theta = 10000.0 ** (-exponent * torch.arange(0, d_k // 2, dtype=torch.float32) / d_k)
    p = torch.arange(start + shift, start + shift + L, dtype=torch.float32)
    return p[:, None] * theta  # [L, d_k / 2]


def _halves(x, angle, sign=1.0):
    d_k = x.size(-1)
    x1, x2 = x[..., : d_k // 2], x[..., d_k // 2 :]
    return x * angle.cos() + sign * torch.cat([-x2, x1], dim=-1) * angle.sin()


def rope_correct(x, start_pos=0):
    a = _angles(x.size(-1), x.size(-2), start_pos)
    return _halves(x, torch.cat([a, a], -1))


def rope_interleaved(x, start_pos=0):  # the RoFormer layout
    a = _angles(x.size(-1), x.size(-2), start_pos)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * a.cos() - x2 * a.sin(), x1 * a.sin() + x2 * a.cos()], -1).flatten(-2)


def rope_wrong_direction(x, start_pos=0):  # rotate_half as cat(x2, -x1)
    a = _angles(x.size(-1), x.size(-2), start_pos)
    return _halves(x, torch.cat([a, a], -1), sign=-1.0)


def rope_exponent_without_2(x, start_pos=0):
    a = _angles(x.size(-1), x.size(-2), start_pos, exponent=1.0)
    return _halves(x, torch.cat([a, a], -1))


def rope_repeat_interleave_angles(x, start_pos=0):
    a = _angles(x.size(-1), x.size(-2), start_pos)
    return _halves(x, a.repeat_interleave(2, -1))


def rope_ignores_start_pos(x, start_pos=0):
    a = _angles(x.size(-1), x.size(-2), 0)
    return _halves(x, torch.cat([a, a], -1))


def rope_positions_from_one(x, start_pos=0):
    a = _angles(x.size(-1), x.size(-2), start_pos, shift=1)
    return _halves(x, torch.cat([a, a], -1))


# --- Grouped-query attention (exercise 18.3) ---


def _attend(q, k, v, causal, scale=None, dim=-1, mask=True):
    scale = q.size(-1) ** -0.5 if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale
    if causal and mask:
        blocked = torch.ones(q.size(2), k.size(2), dtype=torch.bool).triu(1)
        scores = scores.masked_fill(blocked, float("-inf"))
    return scores.softmax(dim=dim) @ v


def _interleave(q, k, v):
    rep = q.size(1) // k.size(1)
    return k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)


def gqa_correct(q, k, v, causal=False):
    return _attend(q, *_interleave(q, k, v), causal)


def gqa_tiled(q, k, v, causal=False):
    rep = q.size(1) // k.size(1)
    return _attend(q, k.repeat(1, rep, 1, 1), v.repeat(1, rep, 1, 1), causal)


def gqa_no_scale(q, k, v, causal=False):
    return _attend(q, *_interleave(q, k, v), causal, scale=1.0)


def gqa_scale_d_k(q, k, v, causal=False):
    return _attend(q, *_interleave(q, k, v), causal, scale=1 / q.size(-1))


def gqa_ignores_causal(q, k, v, causal=False):
    return _attend(q, *_interleave(q, k, v), causal, mask=False)


def gqa_softmax_over_queries(q, k, v, causal=False):
    return _attend(q, *_interleave(q, k, v), causal, dim=-2)


def gqa_no_repeat(q, k, v, causal=False):  # broadcasting fails unless h_kv is 1 or h
    return _attend(q, k, v, causal)


def gqa_masks_the_diagonal(q, k, v, causal=False):  # triu(0): query 0 sees no key at all
    k, v = _interleave(q, k, v)
    scores = q @ k.transpose(-2, -1) * q.size(-1) ** -0.5
    if causal:
        blocked = torch.ones(q.size(2), k.size(2), dtype=torch.bool).triu(0)
        scores = scores.masked_fill(blocked, float("-inf"))
    return scores.softmax(dim=-1) @ v
