"""Chapter 14's checker accepts the book's top-p filter and rejects the likely mistakes."""

import pytest
import torch

from helpers.exercises import ExerciseError, check_top_p_filter
from helpers.gpt import top_p_filter

NEG_INF = float("-inf")


def _scatter_back(keep_sorted, order):
    return torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)


def test_the_books_filter_passes(capsys):
    check_top_p_filter(top_p_filter)
    assert "check_top_p_filter: all 5 checks passed" in capsys.readouterr().out


def test_keeping_only_tokens_strictly_below_p_is_rejected():
    def strictly_below(logits, p):
        probs, order = logits.softmax(-1).sort(-1, descending=True)
        keep = _scatter_back(probs.cumsum(-1) < p, order)
        return logits.masked_fill(~keep, NEG_INF)

    with pytest.raises(ExerciseError, match="keeps tokens \\[1, 3\\], expected \\[1, 3, 4\\]"):
        check_top_p_filter(strictly_below)
    with pytest.raises(ExerciseError, match="stopped before the token that takes"):
        check_top_p_filter(strictly_below)


def test_forgetting_to_sort_is_rejected():
    def unsorted(logits, p):
        probs = logits.softmax(-1)
        return logits.masked_fill(probs.cumsum(-1) - probs >= p, NEG_INF)

    with pytest.raises(ExerciseError, match="sort the probabilities in descending order"):
        check_top_p_filter(unsorted)


def test_returning_probabilities_is_rejected():
    with pytest.raises(ExerciseError, match="return logits, with -inf for every removed token"):
        check_top_p_filter(lambda logits, p: top_p_filter(logits, p).softmax(-1))


def test_changing_the_input_in_place_is_rejected():
    def in_place(logits, p):
        keep = torch.isfinite(top_p_filter(logits, p))
        return logits.masked_fill_(~keep, NEG_INF)

    with pytest.raises(ExerciseError, match="changed its input logits in place"):
        check_top_p_filter(in_place)


def test_changing_the_kept_logits_is_rejected():
    def sharpened(logits, p):
        return 2 * top_p_filter(logits, p)  # same nucleus, other probabilities

    with pytest.raises(ExerciseError, match="leave the kept logits as they were"):
        check_top_p_filter(sharpened)


def test_a_crash_names_the_input():
    def crashes(logits, p):
        return logits.sort(dim=2)

    with pytest.raises(ExerciseError, match="on one row with probabilities .*raised IndexError"):
        check_top_p_filter(crashes)
