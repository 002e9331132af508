"""The initialisation Experiments page and chapter 12's citation agree with the record.

The record is chapters/data/ch12_init_2x2.json (tools/record/ch12_init_2x2.py); the page is
appendix/experiment_initialisation.py. Every number and every comparison their prose states is
recomputed here with helpers.analysis.experiments, so that a re-recorded study that changes one
fails
this test until the prose follows.
"""

import dataclasses
import functools
from pathlib import Path

import pytest
from twin_prose import prose as twin_prose

from helpers.analysis.experiments import load_record, mean_interval
from helpers.training.recipes import fixed_budget_recipe

prose = functools.partial(twin_prose, markdown_only=True)  # markdown cells only
ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "appendix" / "experiment_initialisation.py"
CHAPTER = ROOT / "chapters" / "12_when_correct_code_learns_slowly.py"
LINK = "../appendix/experiment_initialisation.ipynb"


@pytest.fixture(scope="module")
def record():
    return load_record("ch12_init_2x2")


def scores(record, init, steps=None):
    steps = record["comparison_steps"] if steps is None else steps
    return {
        r["seed"]: r["test"]["exact_match"]
        for r in record["runs"]
        if r["init"] == init and r["steps"] == steps
    }


def paired(record, a, b):
    sa, sb = scores(record, a), scores(record, b)
    return mean_interval([sa[s] - sb[s] for s in record["seeds"]])


def test_record_is_the_recipe_the_page_describes(record):
    assert record["recipe"] == dataclasses.asdict(fixed_budget_recipe())
    assert record["comparison_steps"] == 300 and record["seeds"] == [0, 1, 2]
    assert record["test_size"] == 10_000 and record["test_seed"] == 2027
    assert record["budgets"] == [600, 1200]
    for init in record["inits"]:
        assert sorted(scores(record, init)) == [0, 1, 2]
        for r in record["runs"]:  # the recorded share is the recorded count over the test set
            assert r["test"]["exact_match"] == r["test"]["correct"] / record["test_size"]
    text = prose(PAGE)
    assert "three seeds" in text.lower() and "10,000 sequences, seed 2027" in text


def test_chapter_cites_the_page_with_the_record_intervals(record):
    text = prose(CHAPTER)
    assert LINK in text
    for init, label in (("embedding_only", "embedding fix alone"), ("xavier_only", "Xavier alone")):
        ci = mean_interval(list(scores(record, init).values()))
        assert label in text
        quoted = f"{ci.mean:.4f} (95 % interval {ci.low:.4f} to {ci.high:.4f})"
        short = f"{ci.mean:.4f} ({ci.low:.4f} to {ci.high:.4f})"
        assert quoted in text or short in text, (init, quoted)
    assert "three seeds each" in text


def test_xavier_not_distinguishable(record):
    """Page and chapter: Xavier's effect is not distinguishable from zero, with or without the
    embedding fix (the paired interval over seeds contains zero)."""
    for a, b in (("fixed", "embedding_only"), ("xavier_only", "default")):
        ci = paired(record, a, b)
        assert ci.low < 0 < ci.high, (a, b, ci)
    assert "not distinguishable from zero" in prose(PAGE)
    assert "not distinguishable from zero with three seeds" in prose(CHAPTER)


def test_embedding_fix_statements(record):
    """Page: every seed with the fix above every seed without; the paired interval is above 0
    with PyTorch's linears and reaches below 0 with Xavier linears."""
    with_fix = [*scores(record, "fixed").values(), *scores(record, "embedding_only").values()]
    without = [*scores(record, "xavier_only").values(), *scores(record, "default").values()]
    assert min(with_fix) > max(without)
    assert paired(record, "embedding_only", "default").low > 0
    assert paired(record, "fixed", "xavier_only").low < 0
    text = prose(PAGE)
    assert "interval above zero" in text and "reaches below zero" in text


def test_longer_budget_statements(record):
    """Page: at 1,200 steps every default seed is at or above the fixed arm's worst seed at 300
    steps; at 600 steps none is."""
    worst = min(scores(record, "fixed").values())
    assert all(x >= worst for x in scores(record, "default", 1200).values())
    assert not any(x >= worst for x in scores(record, "default", 600).values())
    text = prose(PAGE)
    assert "At 1,200 steps every seed is at or above" in text and "at 600 steps none is" in text
