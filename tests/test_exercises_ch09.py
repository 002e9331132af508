"""Exercise 9.2's checker accepts the book's solution and rejects the usual slips."""

import pytest

from helpers import PAD_ID
from helpers.exercises import ExerciseError, check_trim_padding


def trim_padding(src, tgt):
    """The book's solution: keep as many columns as each tensor's longest row needs."""
    ws, wt = int((src != PAD_ID).sum(1).max()), int((tgt != PAD_ID).sum(1).max())
    return src[:, :ws], tgt[:, :wt]


def test_the_solution_passes(capsys):
    check_trim_padding(trim_padding)
    assert "all 6 checks passed" in capsys.readouterr().out


def test_cutting_at_the_shortest_row_is_rejected():
    def shortest(src, tgt):
        ws, wt = int((src != PAD_ID).sum(1).min()), int((tgt != PAD_ID).sum(1).min())
        return src[:, :ws], tgt[:, :wt]

    with pytest.raises(ExerciseError, match="shortest row"):
        check_trim_padding(shortest)


def test_dropping_eos_is_rejected():
    def no_eos(src, tgt):
        ws, wt = trim_padding(src, tgt)
        return ws[:, :-1], wt[:, :-1]

    with pytest.raises(ExerciseError, match="<eos> is a real token"):
        check_trim_padding(no_eos)


def test_one_width_for_both_is_rejected():
    def same_width(src, tgt):
        w = int((src != PAD_ID).sum(1).max())
        return src[:, :w], tgt[:, :w]

    with pytest.raises(ExerciseError, match=r"tgt got src's width"):
        check_trim_padding(same_width)


def test_not_cutting_is_rejected():
    with pytest.raises(ExerciseError, match="is <pad> in every row"):
        check_trim_padding(lambda src, tgt: (src, tgt))
