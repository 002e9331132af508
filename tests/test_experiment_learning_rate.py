"""The learning-rate page and chapter 10 quote the record correctly
(appendix/experiment_learning_rate.py, chapters/10_training.py; chapters/data/ch10_stability.json,
made by tools/record/ch10_stability.py)."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from twin_prose import prose

from helpers.analysis.experiments import (
    arm_bits,
    compare_arms,
    largest_fall,
    load_record,
    mcnemar_exact,
    mean_interval,
)
from helpers.training.recipes import BOOK_RECIPE, SEED_RECIPE

ROOT = Path(__file__).resolve().parents[1]


PAGE = prose("appendix/experiment_learning_rate.py")
CHAPTER = prose("chapters/10_training.py")


@pytest.fixture(scope="module")
def record():
    return load_record("ch10_stability")


def steps_by_seed(record, arm):
    return {r["seed"]: r["steps"] for r in record["arms"][arm]}


def test_design_as_stated(record):
    assert record["recipe"] == dataclasses.asdict(BOOK_RECIPE)
    assert set(record["arms"]) == {"lr_scale_1", "lr_scale_3"}
    for arm, scale in (("lr_scale_1", 1.0), ("lr_scale_3", 3.0)):
        runs = record["arms"][arm]
        assert [r["seed"] for r in runs] == [0, 1, 2, 3, 4]
        assert all(r["lr_scale"] == scale and "correct_bits" in r for r in runs)
        assert all(r["steps"] <= BOOK_RECIPE.max_steps for r in runs)
    assert record["numerics"]["pinned"] and record["test_set"]["n"] == 10_000
    assert "Seeds**: 0 to 4 in each arm" in PAGE and "the budget (500 steps)" in PAGE
    cpu = sum(r["cpu_seconds"] for runs in record["arms"].values() for r in runs) / 60
    assert f"about {cpu:.0f} CPU-minutes" in PAGE


def test_peak_ratio_as_quoted():
    def peak(cfg):
        return cfg.lr_scale * cfg.d_model**-0.5 * cfg.warmup**-0.5

    assert f"{peak(BOOK_RECIPE) / peak(SEED_RECIPE):.1f} times the reference" in PAGE


def step_difference(record):
    one, three = steps_by_seed(record, "lr_scale_1"), steps_by_seed(record, "lr_scale_3")
    return mean_interval([three[s] - one[s] for s in sorted(one)])


def test_step_difference_as_quoted(record):
    d = step_difference(record)
    quoted = (
        f"{d.mean:.0f} more steps on average (95 % interval {d.low:.0f} to {d.high:.0f} steps, "
        f"{d.n} seeds)"
    )
    assert quoted in PAGE
    assert quoted in CHAPTER
    assert "experiment_learning_rate.ipynb" in CHAPTER


def test_test_set_comparison_as_quoted(record):
    c = compare_arms(record, "lr_scale_1", "lr_scale_3")
    assert f"McNemar gives p = {c.pooled.p_value:.2g}" in PAGE
    d = c.difference
    quoted = (
        f"{100 * d.mean:+.2f} points of exact match (95 % interval {100 * d.low:+.2f} to "
        f"{100 * d.high:+.2f} points)"
    )
    assert quoted.lstrip("+") in PAGE
    assert c.verdict == "not distinguishable with 5 seeds" and f"Verdict: {c.verdict}." in PAGE
    assert "The test scores of the stopped models are not distinguishable with 5 seeds" in CHAPTER
    favours_3 = [s for s, t in zip(c.seeds, c.per_seed) if t.only_b > t.only_a]
    favours_1 = [s for s, t in zip(c.seeds, c.per_seed) if t.only_a > t.only_b]
    assert (favours_3, favours_1) == ([0, 2], [1, 3, 4])
    assert "seeds 0 and 2 favour `lr_scale` 3, seeds 1, 3 and 4 favour `lr_scale` 1" in PAGE
    assert f"`lr_scale` 1 scores {-100 * d.mean:.2f} points below `lr_scale` 3" in PAGE
    significant = [t for t in c.per_seed if t.p_value < 0.05]
    assert len({t.only_a > t.only_b for t in significant}) == 2  # the winner changes
    assert (
        f"For {['no', 'one', 'two', 'three', 'four', 'five'][len(significant)]} seeds p < 0.05"
        in PAGE
    )


def test_pooled_test_rests_on_one_seed_as_stated(record):
    c = compare_arms(record, "lr_scale_1", "lr_scale_3")
    seed0 = c.per_seed[c.seeds.index(0)]
    assert (
        f"seed 0 alone has {seed0.only_a} sequences only `lr_scale` 1 got right against "
        f"{seed0.only_b} only `lr_scale` 3 got right"
    ) in PAGE
    a, b = arm_bits(record, "lr_scale_1"), arm_bits(record, "lr_scale_3")
    rest = [s for s in c.seeds if s != 0]
    without = mcnemar_exact(
        np.concatenate([a[s] for s in rest]), np.concatenate([b[s] for s in rest])
    )
    assert without.only_a > without.only_b  # the other way round from the pooled test
    assert c.pooled.only_b > c.pooled.only_a
    assert (
        f"Without seed 0, the pooled counts are {without.only_a} against {without.only_b}, in "
        f"favour of `lr_scale` 1 (p = {without.p_value:.2f})"
    ) in PAGE


def test_every_seed_needed_more_steps_and_all_reached(record):
    one, three = steps_by_seed(record, "lr_scale_1"), steps_by_seed(record, "lr_scale_3")
    assert all(three[s] > one[s] for s in one)
    assert "Every seed needed more steps at `lr_scale` 3" in PAGE
    assert all(r["reached"] for runs in record["arms"].values() for r in runs)
    assert "All ten runs reached it within the 500 steps" in PAGE
    assert "every seed reached 99.5 % later" in CHAPTER


def test_the_fall_and_the_loss_as_stated(record):
    import math

    warm = BOOK_RECIPE.warmup
    found = {
        arm: [largest_fall(r["batch_exact"], warm - 1) for r in runs]
        for arm, runs in record["arms"].items()
    }
    falls = {arm: [f for f, _ in v] for arm, v in found.items()}
    ends = [step for v in found.values() for _, step in v]
    assert f"largest falls end between steps {min(ends)} and {max(ends)}" in PAGE
    f = mean_interval([b - a for a, b in zip(falls["lr_scale_1"], falls["lr_scale_3"])])
    assert f.low < 0 < f.high and "interval includes 0" in PAGE
    assert min(min(v) for v in falls.values()) > 0  # every run falls back
    losses = [max(r["loss"][warm:]) for runs in record["arms"].values() for r in runs]
    assert (
        max(losses) < math.log(13)
        and "No run's training loss after the warmup reached ln 13" in PAGE
    )
