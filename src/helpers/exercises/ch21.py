"""Checkers for the exercises of chapter 21 (cross-attention heatmaps).

check_mirror_weight(fn)   fn(weights [n+1, n+1], n) -> the mean weight on the mirrored position;
check_row_entropy(fn)     fn(weights [..., Ls]) -> the entropy of every row, in bits.

Each checker runs the reader's function on fixed attention maps, compares it with the book's
answer and, when the answer matches a known mistake (the diagonal instead of the
anti-diagonal, the natural log instead of log2, ...), says which one.
"""

from __future__ import annotations

import math

import torch

from helpers.analysis.visualize import mirrored_columns

from ._common import call, expect_close, expect_shape, fail, passed

__all__ = ["check_mirror_weight", "check_row_entropy"]


# ------------------------------------------------------------------ exercise 21.2


def mirror_weight(weights: torch.Tensor, n: int) -> torch.Tensor:
    """The book's answer: the mean over the n + 1 rows of the weight on the mirrored column.
    Used in chapter 21 (exercise 21.2)."""
    cols = torch.as_tensor(mirrored_columns(n))
    return weights[torch.arange(n + 1), cols].mean()


def _mirror_mistakes(weights: torch.Tensor, n: int) -> dict:
    """What the likely wrong answers compute, with the hint each one deserves."""
    rows = torch.arange(n + 1)
    cols = torch.as_tensor(mirrored_columns(n))
    on = weights[rows, cols]
    return {
        "the diagonal": (
            weights.diagonal().mean(),
            "you read weights[i, i], the diagonal; a reversing model reads row i at column "
            "n - 1 - i (the anti-diagonal), and the last row at n (the source's <eos>)",
        ),
        "n - i": (
            weights[rows[:n], n - rows[:n]].mean(),
            "row i should read column n - 1 - i (row 0, <bos>, reads the last digit, n - 1); "
            "column n - i is one to the right: the digit the decoder has just written",
        ),
        "digit rows only": (
            on[:n].mean(),
            "the mean is over all n + 1 rows: the last row, which predicts <eos>, should read "
            "the source's <eos> in column n",
        ),
        "the sum": (
            on.sum(),
            "return the mean over the rows, not the sum (a perfect map gives 1.0)",
        ),
        "argmax hits": (
            (weights.argmax(dim=-1) == cols).float().mean(),
            "the question is the weight on the mirrored column, not whether the row's maximum "
            "is there",
        ),
        "the flipped map": (
            weights.flip(-1).diagonal().mean(),
            "flipping the columns puts <eos> first: the anti-diagonal of the flipped map pairs "
            "the last row with the first digit; use mirrored_columns' rule instead",
        ),
    }


def _sample_map(n: int, seed: int, sharp: float) -> torch.Tensor:
    """A random attention map [n+1, n+1] whose rows lean on the mirrored column."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(n + 1, n + 1, generator=gen)
    logits[torch.arange(n + 1), torch.as_tensor(mirrored_columns(n))] += sharp
    return logits.softmax(dim=-1)


def check_mirror_weight(fn) -> None:
    """Exercise 21.2: fn(weights [n+1, n+1], n) returns the mean weight on the mirrored position.

    Checked on a one-hot anti-diagonal map (1.0), a uniform one (1 / (n+1)) and random maps of
    3, 5 and 7 digits; a wrong answer that matches a known mistake gets that mistake's hint.
    """
    perfect = torch.zeros(5, 5)
    perfect[torch.arange(5), torch.as_tensor(mirrored_columns(4))] = 1.0
    cases = [
        ("a perfect map of 4 digits", perfect, 4),
        ("a uniform map of 4 digits", torch.full((5, 5), 0.2), 4),
        ("a random map of 3 digits", _sample_map(3, 0, 1.5), 3),
        ("a random map of 5 digits", _sample_map(5, 1, 2.0), 5),
        ("a random map of 7 digits", _sample_map(7, 2, 0.5), 7),
    ]
    answers = []
    for where, weights, n in cases:
        got = call(fn, weights.clone(), n, where=where)
        got = torch.as_tensor(got, dtype=torch.float32)
        if got.numel() != 1:
            fail(
                f"the answer has shape {tuple(got.shape)}, expected one number",
                where,
                "average over the rows: one number per map",
            )
        answers.append(got.item())
    wrong = [
        (i, want)
        for i, (_, weights, n) in enumerate(cases)
        if abs(answers[i] - (want := mirror_weight(weights, n).item())) > 1e-5
    ]
    if wrong:
        i, want = wrong[0]
        hint = (
            "row i (i < n) should read column n - 1 - i and the last row column n; "
            "mirrored_columns(n) lists them"
        )
        # a known mistake explains the answer only if it gives the same number on every map
        mistakes = [_mirror_mistakes(w, n) for _, w, n in cases]
        for name, (_, mistake_hint) in mistakes[0].items():
            if all(abs(a - m[name][0].item()) <= 1e-5 for a, m in zip(answers, mistakes)):
                hint = mistake_hint
                break
        fail(f"the answer is {answers[i]:.4f}, expected {want:.4f}", cases[i][0], hint)
    passed("check_mirror_weight", len(cases))


# ------------------------------------------------------------------ exercise 21.3


def row_entropy_bits(weights: torch.Tensor) -> torch.Tensor:
    """The book's answer: -sum_j w_j log2 w_j over the last dimension, with 0 log 0 = 0.
    Used in chapter 21 (exercise 21.3)."""
    return -torch.special.xlogy(weights, weights).sum(dim=-1) / math.log(2)


def check_row_entropy(fn) -> None:
    """Exercise 21.3: fn(weights [..., Ls]) returns the entropy of every row in bits, [...].

    Checked on one-hot rows (0 bits, with exact zeros elsewhere), uniform rows (log2 Ls bits)
    and a random batch shaped like a cross-attention tensor [B, h, Lt, Ls].
    """
    gen = torch.Generator().manual_seed(18)
    one_hot = torch.eye(4)[[3, 2, 1, 0]]
    cases = [
        ("one-hot rows [4, 4]", one_hot),
        ("uniform rows [3, 8]", torch.full((3, 8), 1 / 8)),
        ("random rows [2, 4, 6, 7]", torch.randn(2, 4, 6, 7, generator=gen).mul(2).softmax(-1)),
    ]
    for where, weights in cases:
        got = call(fn, weights.clone(), where=where)
        want = row_entropy_bits(weights)
        hint = "sum over the last dimension (the keys, along which each row sums to 1)"
        if isinstance(got, torch.Tensor) and tuple(got.shape) == tuple(want.shape) + (1,):
            hint = "sum over the last dimension without keepdim: one entropy per row"
        expect_shape("the entropies", got, want.shape, where, hint)
        got = got.detach().to(want.dtype)
        if torch.isnan(got).any():
            fail(
                "the answer contains NaN",
                where,
                "0 * log(0) is NaN in floating point but counts as 0 in an entropy: use "
                "torch.special.xlogy(w, w), or clamp w before the log",
            )
        if torch.allclose(got, want * math.log(2), atol=1e-5) and not torch.allclose(
            got, want, atol=1e-5
        ):
            fail(
                "the answer is ln(2) = 0.693 times the expected one: natural log",
                where,
                "bits need log2 (torch.log2), or divide the natural-log entropy by ln 2",
            )
        if torch.allclose(got, -want, atol=1e-5) and not torch.allclose(got, want, atol=1e-5):
            fail("the entropies are negative", where, "the entropy is MINUS sum w log2 w")
        expect_close("the entropies", got, want, atol=1e-4, where=where)
    passed("check_row_entropy", len(cases))
