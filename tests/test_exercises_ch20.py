"""Chapter 20's exercise checker: the book's answer passes, and each catalogued wrong answer
(tests/mistakes_ch20.py) is rejected with a message that names its mistake."""

import mistakes_ch20
import pytest
import torch

from helpers.exercises import ExerciseError, check_reorder_caches


def test_the_books_answer_passes(capsys):
    check_reorder_caches(mistakes_ch20.book)
    assert "check_reorder_caches: all 3 checks passed" in capsys.readouterr().out


def test_an_answer_that_raises_is_reported():
    def broken(caches, parent):
        raise RuntimeError("boom")

    with pytest.raises(ExerciseError, match="raised RuntimeError: boom"):
        check_reorder_caches(broken)


@pytest.mark.parametrize("name", sorted(mistakes_ch20.EXERCISE_MISTAKES))
def test_catalogue_each_mistake_named(name):
    fn, fragment = mistakes_ch20.EXERCISE_MISTAKES[name]
    with pytest.raises(ExerciseError) as err:
        check_reorder_caches(fn)
    assert fragment in str(err.value), str(err.value)


def test_catalogue_messages_are_distinct():
    messages = set()
    for fn, _ in mistakes_ch20.EXERCISE_MISTAKES.values():
        with pytest.raises(ExerciseError) as err:
            check_reorder_caches(fn)
        messages.add(str(err.value).split("\nHint: ")[-1])
    assert len(messages) == len(mistakes_ch20.EXERCISE_MISTAKES)


def test_a_rebound_list_is_told_to_write_into_the_dicts():
    """Rebinding the name caches to a new list leaves the caller's caches as they were; that
    message (shared with doing nothing) says where to write."""
    with pytest.raises(ExerciseError, match="Write into the dicts of the list you are given"):
        check_reorder_caches(mistakes_ch20.new_list_not_returned)


def test_the_search_part_catches_what_made_up_caches_miss():
    """An answer right on the made-up caches (3 sources x 4 beams) but wrong for other
    widths fails inside the search (width 3)."""

    def only_width_four(caches, parent):
        B, k = parent.shape
        rows = (torch.arange(B)[:, None] * 4 + parent).view(-1)  # k assumed to be 4
        for cache in caches:
            cache["self_k"] = cache["self_k"].index_select(0, rows.clamp(max=B * k - 1))
            cache["self_v"] = cache["self_v"].index_select(0, rows.clamp(max=B * k - 1))

    with pytest.raises(ExerciseError, match="other beams than helpers.beam_search"):
        check_reorder_caches(only_width_four)
