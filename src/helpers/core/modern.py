"""Today's blocks: RMSNorm, SwiGLU, rotary positions (RoPE), ALiBi, grouped-query heads.

Each is a small function or module with its formula in the docstring, so that the book's
encoder-decoder (ModelConfig's norm, ffn, positions and num_kv_heads options) and the tiny Llama
(helpers.llama) share one implementation:

- rms_norm(d): torch's nn.RMSNorm, x / sqrt(mean(x^2) + eps) * g, eps = RMS_NORM_EPS = 1e-6
  (Hugging Face's LlamaRMSNorm default; torch's own default eps=None means finfo(dtype).eps);
- SwiGLU(d, hidden): down(silu(gate(x)) * up(x)), no biases (Shazeer 2020; Llama), with
  swiglu_hidden(dff) = round(2 * dff / 3) so that its 3 * d * hidden weights match the
  2 * d * dff of a two-matrix feed-forward of width dff;
- rope_angles / apply_rope / RotaryEmbedding: RoPE (Su et al. 2021) with theta 1e4 and Hugging
  Face's inv_freq expression (bitwise the same), in two layouts: "half" rotates the pairs
  (i, i + hd/2) (Hugging Face's rotate_half, the default) and "interleaved" the pairs
  (2i, 2i + 1) (the paper's and Meta's original code); rope_permutation maps one to the other;
- alibi_slopes / alibi_bias: ALiBi (Press et al. 2022), a per-head linear penalty -m * |i - j|
  added to the attention scores;
- repeat_kv: grouped-query attention's sharing of one key/value head by num_heads // num_kv_heads
  consecutive query heads (repeat_interleave, Hugging Face's repeat_kv).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

RMS_NORM_EPS = 1e-6
ROPE_THETA = 10000.0
ROPE_LAYOUTS = ("half", "interleaved")


def rms_norm(d_model: int, eps: float = RMS_NORM_EPS) -> nn.RMSNorm:
    """torch's nn.RMSNorm(d_model, eps): x / sqrt(mean(x^2, last dim) + eps) * weight (weight
    starts at ones; no mean is subtracted and there is no bias). eps = 1e-6 is Hugging Face's
    LlamaRMSNorm default; nn.RMSNorm's own default (eps=None) is finfo(dtype).eps."""
    return nn.RMSNorm(d_model, eps=eps)


def swiglu_hidden(dff: int) -> int:
    """The SwiGLU hidden width that matches a two-matrix feed-forward of width dff:
    round(2 * dff / 3) (Python's round, half to even). SwiGLU has three d x hidden matrices,
    3 * d * hidden ~ 2 * d * dff weights. (Llama rounds 2/3 * 4d up to a multiple of 256 for the
    hardware; the book keeps the plain rounding.)"""
    return max(1, round(2 * dff / 3))


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)), then dropout: the gated feed-forward of Shazeer (2020)
    used by Llama. gate, up: Linear(d, hidden); down: Linear(hidden, d); no biases by default
    (Llama's mlp_bias=False). Parameters: 3 * d * hidden (+ 2 * hidden + d with bias=True)."""

    def __init__(self, d_model: int, hidden: int, dropout: float = 0.0, bias: bool = False):
        super().__init__()
        self.gate = nn.Linear(d_model, hidden, bias=bias)
        self.up = nn.Linear(d_model, hidden, bias=bias)
        self.down = nn.Linear(hidden, d_model, bias=bias)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.down(F.silu(self.gate(x)) * self.up(x)))


def rope_inv_freq(head_dim: int, theta: float = ROPE_THETA, device=None) -> torch.Tensor:
    """float32 [head_dim / 2]: theta^(-2i / head_dim), written as Hugging Face's Llama writes it
    (1 / theta ** (arange(0, hd, 2) / hd)), so the angles are bitwise the same."""
    if head_dim < 2 or head_dim % 2:
        raise ValueError(f"RoPE rotates pairs of dimensions: head_dim must be even, got {head_dim}")
    exponent = torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim
    return 1.0 / (theta**exponent)


def rope_angles(positions: torch.Tensor, head_dim: int, theta: float = ROPE_THETA) -> torch.Tensor:
    """float32 [L, head_dim / 2]: angle p * theta^(-2i / hd) for each position p and pair i."""
    inv_freq = rope_inv_freq(head_dim, theta, positions.device)
    return positions.float()[:, None] * inv_freq[None, :]


def apply_rope(x: torch.Tensor, angles: torch.Tensor, layout: str = "half") -> torch.Tensor:
    """Rotate each pair of dimensions of x [..., L, hd] by its angle [L, hd / 2] (positions
    along dim -2).

    layout "half": the pairs (i, i + hd/2), computed as Hugging Face does,
    x * cos + rotate_half(x) * sin with cos, sin = cat(angles, angles) and
    rotate_half(x) = cat(-x2, x1). layout "interleaved": the pairs (2i, 2i + 1), the paper's.
    cos and sin are computed in float32 and cast to x's dtype (as Hugging Face does)."""
    if layout == "half":
        emb = torch.cat([angles, angles], dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        half = x.size(-1) // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin
    if layout == "interleaved":
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)
    raise ValueError(f"rope layout must be one of {ROPE_LAYOUTS}, got {layout!r}")


def rope_permutation(head_dim: int) -> torch.Tensor:
    """The order of one head's dimensions that turns the interleaved layout into the half one:
    (0, 2, 4, ..., 1, 3, 5, ...). If q, k are rotated interleaved, then q[..., perm], k[..., perm]
    rotated with "half" give the same vectors permuted the same way (so the same scores);
    permuting the rows of W_q and W_k inside each head ports a model from one layout to the
    other."""
    return torch.cat([torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)])


class RotaryEmbedding(nn.Module):
    """RoPE for one attention: forward(x [B, h, L, hd], start_pos=0) rotates the L positions
    start_pos .. start_pos + L - 1. No parameters and no table: the angles are computed for the
    positions asked, so there is no max_len."""

    def __init__(self, head_dim: int, theta: float = ROPE_THETA, layout: str = "half"):
        super().__init__()
        if layout not in ROPE_LAYOUTS:
            raise ValueError(f"rope layout must be one of {ROPE_LAYOUTS}, got {layout!r}")
        rope_inv_freq(head_dim, theta)  # checks head_dim
        self.head_dim, self.theta, self.layout = head_dim, float(theta), layout

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, theta={self.theta}, layout={self.layout!r}"

    def forward(self, x: torch.Tensor, start_pos: int = 0) -> torch.Tensor:
        L = x.size(-2)
        positions = torch.arange(start_pos, start_pos + L, device=x.device)
        return apply_rope(x, rope_angles(positions, self.head_dim, self.theta), self.layout)


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """float32 [num_heads]: ALiBi's head slopes. For n a power of two, the geometric sequence
    2^(-8/n), 2^(-16/n), ..., 2^(-8) (ratio 2^(-8/n)); otherwise the slopes of the power of
    two m just below n, followed by the odd-indexed slopes of 2m (Press et al.'s code, also
    Hugging Face's build_alibi_tensor)."""
    if num_heads < 1:
        raise ValueError(f"num_heads must be >= 1, got {num_heads}")

    def power_of_two(n):
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    m = 2 ** math.floor(math.log2(num_heads))
    slopes = power_of_two(m)
    if m < num_heads:
        slopes += power_of_two(2 * m)[0::2][: num_heads - m]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(
    slopes: torch.Tensor, num_queries: int, num_keys: int, query_start: int = 0
) -> torch.Tensor:
    """float32 [h, Lq, Lk]: -slope_h * |i - j| for query position i = query_start + row and key
    position j = column. The encoder uses it as is (symmetric); in the decoder the causal mask
    blocks j > i, so on the keys it sees this is ALiBi's causal bias -m * (i - j).
    query_start: the positions a KV cache already holds (the new queries come after them)."""
    i = torch.arange(query_start, query_start + num_queries, device=slopes.device)
    j = torch.arange(num_keys, device=slopes.device)
    distance = (i[:, None] - j[None, :]).abs().float()  # [Lq, Lk]
    return -slopes[:, None, None] * distance[None]


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """[B, h_kv, L, d_k] -> [B, h_kv * n_rep, L, d_k]: key/value head j serves the query heads
    j * n_rep .. j * n_rep + n_rep - 1 (repeat_interleave; Hugging Face's repeat_kv and
    F.scaled_dot_product_attention(enable_gqa=True) group the heads the same way). Tiling
    (x.repeat) would pair the heads differently: a different model."""
    return x if n_rep == 1 else x.repeat_interleave(n_rep, dim=1)
