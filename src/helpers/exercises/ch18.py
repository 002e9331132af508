"""Checkers for the exercises of chapter 18 (today's blocks: RoPE, grouped-query attention)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._common import call, expect_close, expect_shape, expect_tensor, passed

__all__ = ["check_rope", "check_gqa_attention"]


def _matches(got, wrong) -> bool:
    return (
        isinstance(got, torch.Tensor)
        and got.shape == wrong.shape
        and bool(torch.isfinite(wrong).all())
        and torch.allclose(got.detach().double(), wrong.double(), atol=1e-5, rtol=1e-4)
    )


def _hint(got, expected, wrong: list) -> str:
    """The hint of the first known mistake that gives got, if that mistake differs here."""
    return next((hint for w, hint in wrong if _matches(got, w) and not _matches(expected, w)), "")


# --- Exercise 18.2: RoPE, Hugging Face's split halves ---


def _rope(x, start, layout="half", sign=1.0, exponent=2, shift=0, ignore_start=False, pairs="cat"):
    """RoPE in float64; the keywords reproduce common mistakes."""
    x = x.double()
    d_k, L = x.size(-1), x.size(-2)
    i = torch.arange(d_k // 2, dtype=torch.float64)
    theta = 10000.0 ** (-exponent * i / d_k)
    first = 0 if ignore_start else start
    p = torch.arange(first + shift, first + shift + L, dtype=torch.float64)
    angle = p[:, None] * theta  # [L, d_k / 2]
    if layout == "interleaved":
        a, b = x[..., 0::2], x[..., 1::2]
        c, s = angle.cos(), sign * angle.sin()
        return torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(-2)
    full = torch.cat([angle, angle], -1) if pairs == "cat" else angle.repeat_interleave(2, -1)
    x1, x2 = x[..., : d_k // 2], x[..., d_k // 2 :]
    return x * full.cos() + sign * torch.cat([-x2, x1], dim=-1) * full.sin()


def check_rope(fn) -> None:
    """Exercise 18.2: fn(x, start_pos=0) rotates x [B, h, L, d_k] with RoPE in Hugging Face's
    layout: the pairs (i, i + d_k/2) of row l (position start_pos + l) turn by the angle
    (start_pos + l) * 10000^(-2i / d_k), x * cos + rotate_half(x) * sin with
    rotate_half(x) = cat(-x2, x1).

    Compared with that formula in float64 on three inputs (two head sizes, start_pos 0 and
    not). Used in chapter 18.
    """
    g = torch.Generator().manual_seed(0)
    cases = [
        ("input 1 ([2, 3, 5, 8], start_pos=0)", torch.randn(2, 3, 5, 8, generator=g), 0),
        ("input 2 ([2, 3, 5, 8], start_pos=7: a KV cache's new rows)", None, 7),
        ("input 3 ([1, 2, 4, 16], start_pos=3)", torch.randn(1, 2, 4, 16, generator=g), 3),
    ]
    cases[1] = (cases[1][0], cases[0][1], 7)
    for where, x, start in cases:
        got = expect_tensor("the output", call(fn, x.clone(), start_pos=start, where=where), where)
        expected = _rope(x, start)
        wrong = [
            (
                _rope(x, start, layout="interleaved"),
                "it rotates neighbouring pairs (2i, 2i + 1), the RoFormer layout; Hugging "
                "Face's pairs dimension i with i + d_k/2",
            ),
            (_rope(x, start, sign=-1.0), "it turns the wrong way: rotate_half(x) = cat(-x2, x1)"),
            (
                _rope(x, start, exponent=1),
                "the frequencies are 10000^(-2i / d_k) for pair i: the exponent has a 2",
            ),
            (
                _rope(x, start, pairs="interleave"),
                "in the halves layout dimensions j and j + d_k/2 share an angle: "
                "cat(angles, angles), not repeat_interleave",
            ),
            (_rope(x, start, ignore_start=True), "row l is at position start_pos + l"),
            (_rope(x, start, shift=1), "the first row is at position start_pos, not one later"),
        ]
        expect_close(
            "the output",
            got,
            expected,
            atol=1e-5,
            rtol=1e-4,
            where=where,
            hint=_hint(got, expected, wrong),
        )
    passed("check_rope", len(cases))


# --- Exercise 18.3: grouped-query attention ---


def _gqa(q, k, v, causal, tile=False, scale=None, dim=-1, mask=True):
    rep = q.size(1) // k.size(1)
    if tile:
        k, v = k.repeat(1, rep, 1, 1), v.repeat(1, rep, 1, 1)
    else:
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    scale = q.size(-1) ** -0.5 if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale
    if causal and mask:
        blocked = torch.ones(q.size(2), k.size(2), dtype=torch.bool).triu(1)
        scores = scores.masked_fill(blocked, float("-inf"))
    return scores.softmax(dim=dim) @ v


def check_gqa_attention(fn) -> None:
    """Exercise 18.3: fn(q, k, v, causal=False) with q [B, h, Lq, d_k] and k, v
    [B, h_kv, Lk, d_k] (h_kv divides h; query head i uses key/value head i // (h / h_kv)).

    Compared with F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    on grouped heads (with and without the causal mask), one key/value head (multi-query), and
    as many key/value heads as query heads. Used in chapter 18.
    """
    g = torch.Generator().manual_seed(0)

    def draw(B, h, h_kv, Lq, Lk, d_k):
        q = torch.randn(B, h, Lq, d_k, generator=g, dtype=torch.float64) * 2
        k = torch.randn(B, h_kv, Lk, d_k, generator=g, dtype=torch.float64)
        v = torch.randn(B, h_kv, Lk, d_k, generator=g, dtype=torch.float64)
        return q, k, v

    grouped = draw(2, 4, 2, 5, 7, 8)
    square = draw(2, 4, 2, 6, 6, 8)
    cases = [
        ("input 1 (4 query heads, 2 key/value heads; Lq = 5, Lk = 7)", grouped, False),
        ("input 2 (4 query heads, 2 key/value heads; causal, L = 6)", square, True),
        (
            "input 3 (6 query heads, 1 key/value head: multi-query; causal)",
            draw(3, 6, 1, 4, 4, 4),
            True,
        ),
        (
            "input 4 (3 query heads, 3 key/value heads: plain multi-head)",
            draw(1, 3, 3, 4, 5, 8),
            False,
        ),
    ]
    for where, (q, k, v), causal in cases:
        got = call(fn, q.clone(), k.clone(), v.clone(), causal=causal, where=where)
        got = expect_tensor("the output", got, where)
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        expect_shape(
            "the output",
            got,
            expected.shape,
            where,
            "[B, h, Lq, d_k]: one output per query head; repeat the key/value heads to h",
        )
        wrong = [
            (
                _gqa(q, k, v, causal, tile=True),
                "k.repeat tiles the heads (query heads 0 and h/2 share key/value head 0): "
                "consecutive query heads share one, repeat_interleave(h // h_kv, dim=1)",
            ),
            (_gqa(q, k, v, causal, scale=1.0), "divide the scores by sqrt(d_k)"),
            (_gqa(q, k, v, causal, scale=1 / q.size(-1)), "divide by sqrt(d_k), not by d_k"),
            (_gqa(q, k, v, causal, mask=False), "with causal=True, query i sees keys 0..i only"),
            (_gqa(q, k, v, causal, dim=-2), "the softmax runs over the keys (dim=-1)"),
        ]
        hint = _hint(got, expected, wrong)
        if not hint and causal and not bool(torch.isfinite(got).all()):
            hint = (
                "a query whose every key is masked gives NaN: block only the keys after the "
                "query, torch.ones(Lq, Lk, dtype=torch.bool).triu(1)"
            )
        expect_close("the output", got, expected, atol=1e-6, rtol=1e-5, where=where, hint=hint)
    passed("check_gqa_attention", len(cases))
