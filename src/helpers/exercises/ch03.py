"""Checkers for the exercises of chapter 3 (multi-head attention)."""

from __future__ import annotations

import math

import torch

from ._common import call, expect_close, expect_shape, expect_tensor, fail, passed

__all__ = ["check_additive_mask_attention", "check_alibi_bias"]


def _attention(q, k, v, mask, scale=None, dim=-1, fill_blocked_rows=True):
    """The book's masked attention in float64 (bool mask, True = blocked); a row whose keys
    are all blocked gives zero weights. The keyword arguments reproduce common mistakes."""
    scale = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale
    scores = scores.masked_fill(mask, float("-inf"))
    weights = scores.softmax(dim=dim)
    if fill_blocked_rows:
        weights = weights.masked_fill(mask.all(dim=-1, keepdim=True), 0.0)
    return weights @ v


def _uniform_on_blocked_rows(out, v, mask):
    """out with every fully blocked query row replaced by the plain mean of the values."""
    rows = mask.all(dim=-1, keepdim=True).expand(*out.shape[:-1], 1)
    return torch.where(rows, v.mean(dim=-2, keepdim=True).expand_as(out), out)


def _matches(got, wrong) -> bool:
    return got.shape == wrong.shape and torch.allclose(got.double(), wrong, atol=1e-6)


def _inputs():
    """(description, q, k, v, mask): float64 inputs [B, h, L, d_k], bool masks."""
    g = torch.Generator().manual_seed(0)
    B, h, L, dk = 2, 3, 5, 8
    q, k, v = (torch.randn(B, h, L, dk, generator=g, dtype=torch.float64) for _ in range(3))
    q = q * 2  # scores large enough that a missing 1/sqrt(d_k) shows
    nothing = torch.zeros(B, 1, 1, L, dtype=torch.bool)
    padding = torch.tensor([[0, 0, 0, 1, 1], [0, 0, 0, 0, 0]], dtype=torch.bool)[:, None, None]
    causal = torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1)
    all_blocked = padding.expand(B, 1, L, L).clone()
    all_blocked[0, 0, 1] = True  # sequence 0, query 1: every key blocked
    return [
        ("input 1 (no key blocked)", q, k, v, nothing),
        ("input 2 (padding | causal mask, [B, 1, Lq, Lk])", q, k, v, padding | causal),
        (
            "input 3 (padding mask [B, 1, 1, Lk]; d_k = 4, d_v = 8)",
            q[..., :4],
            k[..., :4],
            v,
            padding,
        ),
        ("input 4 (query 1 of sequence 0 has every key blocked)", q, k, v, all_blocked),
    ]


def check_additive_mask_attention(fn) -> None:
    """Exercise 3.2: fn(q, k, v, mask) -> out, with q [B, h, Lq, d_k], k [B, h, Lk, d_k],
    v [B, h, Lk, d_v] and a bool mask (True = blocked) broadcastable to [B, h, Lq, Lk].

    The reader turns the bool mask into an additive float mask (0 where allowed, -inf where
    blocked); the result must equal the book's masked attention, and a query whose keys are
    all blocked must get a zero output (as F.scaled_dot_product_attention returns in
    torch 2.13), not NaN. Used in chapter 3.
    """
    cases = _inputs()
    for where, q, k, v, mask in cases:
        got = call(fn, q.clone(), k.clone(), v.clone(), mask.clone(), where=where)
        got = expect_tensor("the output", got, where)
        expected = _attention(q, k, v, mask)
        expect_shape("the output", got, expected.shape, where, "[B, h, Lq, d_v]: weights @ v")
        if torch.isnan(got).any():
            fail(
                "the output contains NaN",
                where,
                "a row of scores that is -inf everywhere gives softmax 0/0 = NaN: set the "
                "weights of fully blocked rows to 0 (mask.all(dim=-1, keepdim=True))",
            )
        dk = q.size(-1)
        wrong = [
            (_attention(q, k, v, mask, scale=1.0), "the scores are not divided by sqrt(d_k)"),
            (_attention(q, k, v, mask, scale=1 / dk), "divide by sqrt(d_k), not by d_k"),
            (
                _attention(q, k, v, mask, dim=-2),
                "the weights sum to 1 over the wrong dimension: softmax over the keys (dim=-1)",
            ),
            (
                _attention(q, k, v, ~mask),
                "the mask polarity is reversed: True means blocked, so True -> -inf",
            ),
            (
                _uniform_on_blocked_rows(expected, v, mask),
                "a query whose keys are all blocked should get zero weights (a zero output), "
                "not the uniform average that a finite fill value such as finfo.min gives",
            ),
        ]
        hint = next((h for w, h in wrong if _matches(got, w) and not _matches(expected, w)), "")
        expect_close("the output", got, expected, atol=1e-6, where=where, hint=hint)
    passed("check_additive_mask_attention", len(cases))


def _alibi(num_heads: int, L: int, slopes=None, signed=False, sign=-1.0) -> torch.Tensor:
    if slopes is None:
        slopes = [2 ** (-8 * (i + 1) / num_heads) for i in range(num_heads)]
    pos = torch.arange(L, dtype=torch.float64)
    dist = pos[:, None] - pos[None, :]  # query i minus key j
    dist = dist if signed else dist.abs()
    return sign * torch.tensor(slopes, dtype=torch.float64)[:, None, None] * dist


def check_alibi_bias(fn) -> None:
    """Exercise 3.3: fn(num_heads, L) -> [num_heads, L, L] with
    bias[h, i, j] = -m_h * |i - j| and slopes m_h = 2^(-8 (h + 1) / num_heads).

    Compared with the formula of Press et al. (2022) on two head counts. Used in chapter 3.
    """
    for num_heads, L in ((4, 6), (8, 5)):
        where = f"num_heads={num_heads}, L={L}"
        got = expect_tensor("the bias", call(fn, num_heads, L, where=where), where)
        expected = _alibi(num_heads, L)
        expect_shape("the bias", got, expected.shape, where, "[num_heads, Lq, Lk]: one per head")
        heads = range(num_heads)
        wrong = [
            (-expected, "the bias must be a penalty: -m * distance, so far keys lose weight"),
            (
                _alibi(
                    num_heads, L, slopes=[2 ** (-8 * (num_heads - i) / num_heads) for i in heads]
                ),
                "the slopes are in reverse order: head 0 has the largest, 2^(-8/num_heads)",
            ),
            (
                _alibi(num_heads, L, slopes=[2 ** (-8 * i / num_heads) for i in heads]),
                "the slopes start at 2^(-8/num_heads) for head 0, not at 1",
            ),
            (
                _alibi(num_heads, L, slopes=[2 ** -(i + 1) for i in heads]),
                "the slopes are 2^(-8 (h+1) / num_heads): the ratio between heads depends on "
                "num_heads",
            ),
            (
                _alibi(num_heads, L, signed=True),
                "use the distance |i - j|: keys on both sides of the query are penalised",
            ),
            (
                _alibi(num_heads, L, signed=True, sign=1.0),
                "use the distance |i - j|: keys on both sides of the query are penalised",
            ),
        ]
        hint = next((h for w, h in wrong if _matches(got, w)), "")
        expect_close("the bias", got, expected, atol=1e-6, where=where, hint=hint)
    passed("check_alibi_bias", 2)
