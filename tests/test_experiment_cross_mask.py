"""The cross-mask Experiments page and chapter 7's citation agree with the record.

The record is chapters/data/ch07_cross_mask.json (tools/record/ch07_cross_mask.py); the page is
appendix/experiment_cross_mask.py. Every number and comparison their prose states is recomputed
here with helpers.analysis.experiments, so that a re-recorded study that changes one fails this test
until the prose follows.
"""

import functools
from pathlib import Path

import numpy as np
import pytest
from twin_prose import prose as twin_prose

from helpers import COMPARISON_STEPS, TEST_SEED, TEST_SIZE
from helpers.analysis.experiments import arm_bits, compare_arms, load_record, mcnemar_exact

prose = functools.partial(twin_prose, markdown_only=True)  # markdown cells only
ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "appendix" / "experiment_cross_mask.py"
CHAPTER = ROOT / "chapters" / "07_masks_and_full_model.py"
LINK = "../appendix/experiment_cross_mask.ipynb"
ARMS = ("correct", "triangular_cross")


@pytest.fixture(scope="module")
def record():
    return load_record("ch07_cross_mask")


@pytest.fixture(scope="module")
def comparison(record):
    return compare_arms(record, *ARMS)


def pct(x: float) -> str:
    return f"{100 * x:.2f} %"


def test_record_is_the_design_the_page_describes(record):
    assert record["seeds"] == [0, 1, 2, 3, 4]
    assert record["steps"] == COMPARISON_STEPS == 300
    assert record["recipe"] == "fixed_budget_recipe(BOOK_RECIPE, steps=300)"
    assert record["test_set"] == {"seed": TEST_SEED, "n": TEST_SIZE}
    assert record["numerics"]["pinned"] is True
    for arm in ARMS:
        assert sorted(r["seed"] for r in record["arms"][arm]) == record["seeds"]
        for run, (seed, bits) in zip(record["arms"][arm], arm_bits(record, arm).items()):
            assert run["seed"] == seed and int(np.sum(bits)) == run["test_correct"]
    text = prose(PAGE)
    for words in (
        "0 to 4, five per arm",
        "10,000 sequences, seed 2027",
        "exactly 300 steps",
        "14 columns wide and the decoder input 13",
    ):
        assert words in text, words


def test_chapter_cites_the_page_with_the_record_interval(comparison):
    text = prose(CHAPTER)
    assert LINK in text
    d = comparison.difference
    quoted = f"{pct(d.mean)} (95 % interval {pct(d.low)} to {pct(d.high)})"
    assert quoted in text, quoted
    assert f"{len(comparison.seeds)} seeds" in text


def test_conclusions_are_the_verdict(comparison):
    verdict = comparison.verdict
    page, chapter = prose(PAGE), prose(CHAPTER)
    d, pooled = comparison.difference, comparison.pooled
    assert f"{pct(d.mean)} (95 % interval {pct(d.low)} to {pct(d.high)})" in page
    assert f"p = {pooled.p_value:.2g}" in page
    assert f"{pooled.only_a} sequences" in page and f"{pooled.only_b} " in page
    if verdict.startswith("A is better"):
        claim = "the correct mask is better"
    elif verdict.startswith("B is better"):
        claim = "the triangular mask is better"
    else:
        claim = f"not distinguishable with {len(comparison.seeds)} seeds"
    assert claim in page.lower() and claim in chapter.lower(), (verdict, claim)


def test_page_details_follow_the_record(record, comparison):
    page = prose(PAGE)
    bits = {arm: arm_bits(record, arm) for arm in ARMS}
    ahead = [
        s
        for s in comparison.seeds
        if bits["triangular_cross"][s].mean() > bits["correct"][s].mean()
    ]
    assert ahead == [0, 3, 4] and "the triangular mask is ahead in seeds 0, 3 and 4" in page
    seed2 = comparison.per_seed[comparison.seeds.index(2)]
    gap, pooled_gap = (
        seed2.only_a - seed2.only_b,
        comparison.pooled.only_a - comparison.pooled.only_b,
    )
    assert 2 * gap > pooled_gap > 0 and f"seed 2 ({seed2.only_a} against {seed2.only_b})" in page
    runs = [r for arm in ARMS for r in record["arms"][arm]]
    assert min(r["test_token_accuracy_by_position"][0] for r in runs) >= 0.999
    assert "at least 99.9 % of the test sequences in every run" in page


def test_the_pooled_p_is_read_against_seed_pairs_and_without_seed_2(record, comparison):
    # the conclusion says the pooled McNemar p rests on seed 2 and that the same test separates
    # runs with the same mask: every count and p it quotes, recomputed
    page = prose(PAGE)
    bits = {arm: arm_bits(record, arm) for arm in ARMS}
    rest = [s for s in comparison.seeds if s != 2]
    without_2 = mcnemar_exact(
        np.concatenate([bits["correct"][s] for s in rest]),
        np.concatenate([bits["triangular_cross"][s] for s in rest]),
    )
    assert without_2.p_value > 0.05
    quoted = (
        f"without seed 2 the counts are {without_2.only_a} against {without_2.only_b}"
        f" (p = {without_2.p_value:.2g})"
    )
    assert quoted in page, quoted
    seeds = comparison.seeds
    tests = {
        (s, t): mcnemar_exact(bits["correct"][s], bits["correct"][t])
        for s in seeds
        for t in seeds
        if s < t
    }
    (s, t), low = min(tests.items(), key=lambda kv: kv[1].p_value)
    below = sum(m.p_value < 0.05 for m in tests.values())
    assert low.p_value < comparison.pooled.p_value  # same mask, yet further apart
    quoted = (
        f"Seeds {s} and {t} of the correct arm differ by {low.only_a} against {low.only_b}"
        f" sequences (p = {low.p_value:.2g}), and {below} of the {len(tests)} pairs"
    )
    assert quoted in page, quoted
    n = len(seeds) * record["test_set"]["n"]
    assert (
        f"{n:,} sequence pairs" in page and f"{record['test_set']['n']:,} pairs of one seed" in page
    )
