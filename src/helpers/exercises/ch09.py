"""Checkers for the exercises of chapter 09 (data).

check_trim_padding(fn)   fn(src, tgt) -> (src, tgt) with the columns that are <pad> in every
                         row of the batch cut off (exercise 9.2).

The training loop of chapter 10 does this to every batch: padding trails, so a batch of short
sequences does not need all 14 columns. The checker runs the reader's function on batches of
different lengths and compares with the book's slicing; it recognises the usual slips (cutting
at the shortest row, dropping <eos>, giving src and tgt the same width).
"""

from __future__ import annotations

import torch

from helpers.core.data import make_reversal_dataset
from helpers.core.vocab import PAD_ID

from ._common import call, expect_equal, expect_tensor, fail, passed

__all__ = ["check_trim_padding"]


def _batches() -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    src, tgt = make_reversal_dataset(64, seed=90)
    lengths = (src != PAD_ID).sum(1) - 1
    short = torch.nonzero(lengths <= 5).flatten()[:6]  # 3 to 5 digits: most columns are padding
    one_long = torch.cat([short[:3], torch.nonzero(lengths == 12).flatten()[:1]])
    same = torch.nonzero(lengths == 7).flatten()[:4]  # every row 7 digits: one width for all
    return [
        ("a batch of 3- to 5-digit sequences", src[short], tgt[short]),
        (
            "a batch with one 12-digit row (src loses one column, tgt none)",
            src[one_long],
            tgt[one_long],
        ),
        ("a batch whose rows all have 7 digits", src[same], tgt[same]),
    ]


def _width_hint(name: str, got: int, want: int, x: torch.Tensor) -> str:
    real = (x != PAD_ID).sum(1)
    if got > want:
        return (
            f"column {want} of {name} is <pad> in every row: cut every column after the "
            "longest row's last real token"
        )
    if got == int(real.min()) and got != want:
        return (
            "you cut at the shortest row's length: the longer rows lose real tokens; keep as "
            "many columns as the longest row needs"
        )
    if got == want - 1:
        return (
            "one column short: <eos> is a real token (the model must learn to emit it), so the "
            "longest row keeps its <eos>"
        )
    return f"{name} needs exactly as many columns as its longest row has real tokens"


def check_trim_padding(fn) -> None:
    """Exercise 9.2: fn(src, tgt) cuts the all-padding columns of a batch off src and tgt."""
    checks = 0
    for where, src, tgt in _batches():
        got = call(fn, src.clone(), tgt.clone(), where=where)
        if not isinstance(got, tuple) or len(got) != 2:
            fail("fn should return a pair (src, tgt)", where)
        for name, x, y in (("src", src, got[0]), ("tgt", tgt, got[1])):
            expect_tensor(name, y, where)
            want = int((x != PAD_ID).sum(1).max())
            if y.dim() != 2 or y.size(0) != x.size(0):
                fail(
                    f"{name} has shape {tuple(y.shape)}, expected ({x.size(0)}, {want})",
                    where,
                    "cut columns (dim 1), keep every row",
                )
            if y.size(1) != want:
                hint = _width_hint(name, y.size(1), want, x)
                if name == "tgt" and y.size(1) == int((src != PAD_ID).sum(1).max()):
                    hint = (
                        "tgt got src's width: tgt holds one more real token per row than src "
                        "(<bos>), so measure each tensor's own longest row"
                    )
                fail(f"{name} has {y.size(1)} columns, expected {want}", where, hint)
            expect_equal(
                name,
                y,
                x[:, :want],
                where,
                "keep the first columns unchanged: padding trails, so the cut columns are the "
                "last ones",
            )
            checks += 1
    passed("check_trim_padding", checks)
