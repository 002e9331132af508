"""Checkers for the exercises of chapter 22 (the attention benchmark).

check_blocked_attention(fn)   fn(Q, K, V, mask=None, block_size=64) -> [B, h, Lq, d_v]:
                              attention computed one block of keys at a time, with a running
                              maximum and a running sum (the online softmax), never holding
                              the whole [Lq, Lk] score matrix.

The checker compares the reader's function with the book's attention in float64 on fixed
inputs: several block sizes (one that does not divide the number of keys, one block holding
every key, blocks of one key), no mask, a causal mask, a padding mask with a fully masked
query row, and scores large enough to overflow exp() without the running maximum. A last case
runs the function on 96 queries and 96 keys in blocks of 8 under a dispatch mode that records
every tensor it creates (helpers.benchmark.record_op_outputs), and refuses any floating-point
intermediate with as many elements as one head's L_q x L_k score matrix: a solution that
builds the full matrix fails there, however right its output.
"""

from __future__ import annotations

import math

import torch

from ..benchmark import record_op_outputs
from ._common import call, expect_shape, fail, passed

__all__ = ["check_blocked_attention"]


def reference_attention(Q, K, V, mask=None) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d_k)) V with our mask (True = blocked); a row with every key
    blocked gives 0, as helpers.MultiHeadAttention does. Used in chapter 22."""
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = scores.softmax(-1)
    if mask is not None:
        weights = weights.masked_fill(mask.all(-1, keepdim=True), 0.0)
    return weights @ V


def _inputs(seed: int, Lq: int, Lk: int, B: int = 2, h: int = 3, d_k: int = 8, scale: float = 1):
    g = torch.Generator().manual_seed(seed)
    Q = torch.randn(B, h, Lq, d_k, generator=g, dtype=torch.float64) * scale
    K = torch.randn(B, h, Lk, d_k, generator=g, dtype=torch.float64) * scale
    V = torch.randn(B, h, Lk, d_k + 2, generator=g, dtype=torch.float64)  # d_v != d_k
    return Q, K, V


def _cases():
    """(description, Q, K, V, mask, block_size)."""
    Q, K, V = _inputs(0, 9, 13)
    yield "no mask, 13 keys in blocks of 13 (one block)", Q, K, V, None, 13
    yield "no mask, 13 keys in blocks of 4 (the last block holds 1 key)", Q, K, V, None, 4
    yield "no mask, blocks of 1 key", Q, K, V, None, 1
    Q, K, V = _inputs(1, 11, 11)
    causal = torch.triu(torch.ones(11, 11, dtype=torch.bool), diagonal=1)[None, None]
    yield "a causal mask [1, 1, 11, 11], blocks of 4", Q, K, V, causal, 4
    Q, K, V = _inputs(2, 6, 10)
    pad = torch.zeros(2, 1, 6, 10, dtype=torch.bool)
    pad[1, :, :, 7:] = True  # sequence 1: its last 3 keys are padding
    pad[0, :, 3, :] = True  # query 3 of sequence 0 may see no key at all
    where = "a padding mask [2, 1, 6, 10] with a fully masked row (query 3), blocks of 3"
    yield where, Q, K, V, pad, 3
    # scores of about +-1000: exp() overflows even float64 (beyond 709) without the maximum
    Q, K, V = _inputs(3, 5, 12, scale=25.0)
    yield "large scores (about 1000 in size), blocks of 4", Q, K, V, None, 4


def _hint(fn, got, Q, K, V, mask, block_size, want) -> str:
    """Name the likely mistake by comparing with what a known mistake would give."""
    close = lambda a: a is not None and torch.allclose(got, a, atol=1e-6, rtol=1e-5)  # noqa: E731
    if not torch.isfinite(got).all():
        if mask is not None and mask.all(-1).any():
            return (
                "the output holds NaN or inf: a query whose keys are all blocked has a running "
                "maximum of -inf, and exp(-inf - (-inf)) is NaN; keep such rows at 0 (e.g. "
                "replace a -inf maximum by 0 before exp, and divide by a sum clamped above 0)"
            )
        return (
            "the output holds NaN or inf: subtract the running maximum from the scores before "
            "exp(), or exp() overflows for large scores"
        )
    d_k = Q.size(-1)
    if close(reference_attention(Q * math.sqrt(d_k), K, V, mask)):
        return "the scores are not divided by sqrt(d_k) (Q.size(-1))"
    if mask is not None and close(reference_attention(Q, K, V, ~mask)):
        return "the mask polarity is reversed: our masks are True where a key is blocked"
    one_block = call(fn, Q, K, V, mask, K.size(-2), where="one block holding every key")
    if isinstance(one_block, torch.Tensor) and torch.allclose(one_block, want, atol=1e-6):
        return (
            "with one block holding every key the result is right, with several it is not: "
            "when a new block raises the running maximum from m to m', multiply the running sum "
            "and the accumulated output by exp(m - m') before adding the new block's terms"
        )
    return (
        "compare with softmax(Q K^T / sqrt(d_k)) V over the last dimension (the keys), "
        "normalised once at the end by the running sum"
    )


def check_blocked_attention(fn) -> None:
    """Check exercise 22.3: fn(Q, K, V, mask=None, block_size=64) -> [B, h, Lq, d_v].

    Q [B, h, Lq, d_k], K [B, h, Lk, d_k], V [B, h, Lk, d_v]; mask: bool, True = blocked,
    broadcastable to [B, h, Lq, Lk]; block_size: keys per block. Used in chapter 22.
    """
    n = 0
    for where, Q, K, V, mask, block_size in _cases():
        want = reference_attention(Q, K, V, mask)
        got = call(fn, Q, K, V, mask, block_size, where=where)
        expect_shape(
            "the output",
            got,
            want.shape,
            where,
            "the output has one row per query and d_v (V.size(-1)) columns: [B, h, Lq, d_v]",
        )
        got = got.detach().to(torch.float64)
        if not torch.allclose(got, want, atol=1e-6, rtol=1e-5):
            bad = ~torch.isclose(got, want, atol=1e-6, rtol=1e-5)
            idx = tuple(int(i) for i in bad.nonzero()[0])
            fail(
                f"the output{list(idx)} is {got[idx].item():.6g}, expected "
                f"{want[idx].item():.6g} ({int(bad.sum())} of {bad.numel()} values differ)",
                where,
                _hint(fn, got, Q, K, V, mask, block_size, want),
            )
        n += 1
    largest = _largest_intermediate(fn)
    n += 1
    passed(
        "check_blocked_attention",
        n,
        "every block size and mask equals full attention, and no intermediate holds an "
        f"L_q x L_k matrix (the largest: {list(largest.shape)}, from {largest.op})",
    )


MEMORY_LQ = MEMORY_LK = 96  # the memory case: one head's score matrix has 96 * 96 elements
MEMORY_BLOCK = 8


def _largest_intermediate(fn):
    """Run fn on the memory case, check its output, and fail if any floating-point tensor it
    created holds at least L_q * L_k elements; return the largest one it created."""
    where = f"{MEMORY_LQ} queries, {MEMORY_LK} keys, a causal mask, blocks of {MEMORY_BLOCK}"
    Q, K, V = _inputs(4, MEMORY_LQ, MEMORY_LK, B=2, h=2)
    mask = torch.triu(torch.ones(MEMORY_LQ, MEMORY_LK, dtype=torch.bool), diagonal=1)[None, None]
    want = reference_attention(Q, K, V, mask)
    got, ops = call(record_op_outputs, fn, Q, K, V, mask, MEMORY_BLOCK, where=where)
    expect_shape("the output", got, want.shape, where, "[B, h, Lq, d_v]")
    if not torch.allclose(got.detach().to(torch.float64), want, atol=1e-6, rtol=1e-5):
        fail("the output differs from full attention", where, "see the earlier cases' hints")
    made = [r for r in ops if r.dtype.is_floating_point]
    limit = MEMORY_LQ * MEMORY_LK
    full = [r for r in made if r.numel >= limit]
    if full:
        r = max(full, key=lambda r: r.numel)
        fail(
            f"{r.op} made a tensor of shape {list(r.shape)}: {r.numel:,} numbers, at least the "
            f"{MEMORY_LQ} x {MEMORY_LK} = {limit:,} of one head's whole score matrix",
            where,
            "compute the scores of one block of keys at a time (K[..., start : start + "
            "block_size, :]) and keep only the running maximum, sum and output across blocks",
        )
    return max(made, key=lambda r: r.numel)
