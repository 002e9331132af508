"""Checkers for the exercises of chapter 14 (a decoder-only mini GPT)."""

from __future__ import annotations

import torch

from ..gpt import top_p_filter
from ._common import call, expect_close, expect_shape, fail, passed

__all__ = ["check_top_p_filter"]

NEG_INF = float("-inf")


def _cases() -> list[tuple[str, torch.Tensor, float]]:
    """Fixed inputs: (description, logits [B, V], p). No ties, so the nucleus is unique."""
    g = torch.Generator().manual_seed(14)
    return [
        (
            "one row with probabilities [0.05, 0.40, 0.10, 0.30, 0.15] and p = 0.8",
            torch.tensor([[0.05, 0.40, 0.10, 0.30, 0.15]]).log(),
            0.8,
        ),
        ("a batch of 4 rows of 12 random logits and p = 0.6", torch.randn(4, 12, generator=g), 0.6),
        ("2 rows of 30 random logits and p = 0.9", 2 * torch.randn(2, 30, generator=g), 0.9),
        ("one row of 8 random logits and p = 0.01", torch.randn(1, 8, generator=g), 0.01),
        ("3 rows of 10 random logits and p = 1.0", torch.randn(3, 10, generator=g), 1.0),
    ]


def _kept_strictly_below(logits: torch.Tensor, p: float) -> torch.Tensor:
    """The wrong nucleus that stops before the token that takes the sum past p."""
    probs, order = logits.softmax(-1).sort(-1, descending=True)
    keep = probs.cumsum(-1) < p
    return torch.zeros_like(keep).scatter(-1, order, keep)


def _kept_unsorted(logits: torch.Tensor, p: float) -> torch.Tensor:
    """The wrong nucleus of a cumulative sum taken in vocabulary order."""
    probs = logits.softmax(-1)
    return probs.cumsum(-1) - probs < p


def check_top_p_filter(top_p_filter_fn) -> None:
    """Exercise 14.3: top_p_filter_fn(logits [B, V], p) -> logits with -inf outside the nucleus.

    Used in chapter 14. The nucleus of a row is the smallest set of most likely tokens whose
    probabilities sum to at least p. Compared with helpers.gpt.top_p_filter on five fixed inputs.
    """
    for where, logits, p in _cases():
        original = logits.clone()
        got = call(top_p_filter_fn, logits, p, where=where)
        expected = top_p_filter(original, p)
        expect_shape(
            "the filtered logits",
            got,
            expected.shape,
            where,
            hint="return one filtered logit per token, the same shape as the input",
        )
        if not torch.equal(logits, original):
            fail(
                "your function changed its input logits in place",
                where,
                hint="use masked_fill (which returns a new tensor), not masked_fill_",
            )
        got = got.detach().float()
        kept, want = torch.isfinite(got), torch.isfinite(expected)
        if kept.all() and not want.all():
            probs_like = bool((got >= 0).all()) and torch.allclose(
                got.sum(-1), torch.ones(got.size(0)), atol=1e-4
            )
            fail(
                f"no token was removed (-inf), but the nucleus keeps {int(want.sum())} of "
                f"{want.numel()} tokens",
                where,
                hint="return logits, with -inf for every removed token (softmax then "
                "renormalises the kept ones)"
                if probs_like
                else "set the logits outside the nucleus to float('-inf')",
            )
        if not torch.equal(kept, want):
            row = int((kept != want).any(-1).nonzero()[0])
            detail = (
                f"row {row} keeps tokens {kept[row].nonzero().flatten().tolist()}, expected "
                f"{want[row].nonzero().flatten().tolist()}"
            )
            if torch.equal(kept, _kept_strictly_below(original, p)):
                hint = (
                    "you stopped before the token that takes the cumulative probability past "
                    "p: keep it too (the kept mass must reach p, so keep a token while the mass "
                    "of the more likely ones is still below p)"
                )
            elif torch.equal(kept, _kept_unsorted(original, p)):
                hint = (
                    "the cumulative sum runs over the vocabulary order: sort the probabilities "
                    "in descending order first, then map the decision back with the sort order"
                )
            elif int(kept.sum()) < int(want.sum()):
                hint = "the kept tokens' probabilities must sum to at least p"
            else:
                hint = "keep the *smallest* set of most likely tokens whose probabilities reach p"
            fail(f"the kept set differs: {detail}", where, hint)
        expect_close(
            "softmax of the filtered logits",
            got.softmax(-1),
            expected.softmax(-1),
            atol=1e-5,
            where=where,
            hint="leave the kept logits as they were: softmax renormalises them by itself",
        )
    passed("check_top_p_filter", len(_cases()), "the nucleus and its renormalised probabilities")
