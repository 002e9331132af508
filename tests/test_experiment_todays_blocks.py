"""The Experiments page of today's blocks agrees with its record.

The record is chapters/data/todays_blocks.json (tools/record/todays_blocks.py); the page is
appendix/experiment_todays_blocks.py. Every number and every direction its conclusion states is
recomputed here with helpers.analysis.experiments, so that a re-recorded study that changes one
fails this test until the prose follows.
"""

import dataclasses
import functools
import re
from pathlib import Path

import numpy as np
import pytest
from twin_prose import prose as twin_prose

from helpers import TEST_SEED, TEST_SIZE
from helpers.analysis.experiments import (
    arm_bits,
    compare_arms,
    load_record,
    mcnemar_exact,
    mean_interval,
)
from helpers.training.recipes import BOOK_RECIPE, blocks_recipe

prose = functools.partial(twin_prose, markdown_only=True)  # markdown cells only
ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "appendix" / "experiment_todays_blocks.py"
ARMS = ("baseline", "rms", "swiglu", "gqa", "rope", "today")
OPTIONS = {
    "baseline": {},
    "rms": {"norm": "rms"},
    "swiglu": {"ffn": "swiglu"},
    "gqa": {"num_kv_heads": 2},
    "rope": {"positions": "rope"},
    "today": {"norm": "rms", "ffn": "swiglu", "positions": "rope", "num_kv_heads": 2},
}


WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}


def common_seeds(record, keys=("arms",)):
    """The seeds every arm finished; the record is cut to them, as the page cuts it."""
    arms = record[keys[0]]
    seeds = sorted(set.intersection(*({r["seed"] for r in runs} for runs in arms.values())))
    for key in keys:
        record[key] = {
            a: [r for r in runs if r["seed"] in seeds] for a, runs in record[key].items()
        }
    return seeds


def seeds_words(seeds) -> str:
    assert seeds == list(range(len(seeds))) and len(seeds) >= 2, seeds
    return f"0 to {seeds[-1]}, {WORDS[len(seeds)]} per arm"


@pytest.fixture(scope="module")
def record():
    record = load_record("todays_blocks")
    record["seeds_done"] = common_seeds(record)
    return record


def runs(record, arm):
    return {r["seed"]: r for r in record["arms"][arm]}


def p_text(p: float) -> str:
    """A p-value as the page prints it (an exact test's p can underflow to 0.0)."""
    return f"p = {p:.2g}" if p > 0 else "p < 1e-300"


def pct(ci) -> str:
    return f"{100 * ci.mean:+.2f} % (95 % interval {100 * ci.low:+.2f} % to {100 * ci.high:+.2f} %)"


def steps_claim(ci) -> str:
    if ci.n < 5:
        return f"no conclusion with {ci.n} seeds"
    if ci.high < 0:
        return "fewer steps than the baseline"
    if ci.low > 0:
        return "more steps than the baseline"
    return "not distinguishable with 5 seeds"


def match_claim(verdict: str, n: int) -> str:
    if n < 5:
        return f"no conclusion with {n} seeds"
    if verdict.startswith("A is better"):
        return "above the baseline"
    if verdict.startswith("B is better"):
        return "below the baseline"
    assert verdict == f"not distinguishable with {n} seeds", verdict
    return verdict


def bullet(text: str, arm: str) -> str:
    """The conclusion's bullet about one arm: from its bold name to the next bold name."""
    m = re.search(rf"- \*\*`{arm}`\*\*(.*?)(?= - \*\*`|$)", text)
    assert m, f"no conclusion bullet for {arm}"
    return m.group(1)


def test_record_is_the_design_the_page_describes(record):
    assert tuple(record["arms"]) == ARMS
    assert record["arm_options"] == OPTIONS
    assert record["recipe"] == dataclasses.asdict(BOOK_RECIPE)
    assert record["stop_after"] is None and record["threads"] == 1
    assert record["test_set"] == {"seed": TEST_SEED, "n": TEST_SIZE}
    assert record["numerics"]["pinned"] is True
    for arm in ARMS:
        by_seed = runs(record, arm)
        assert sorted(by_seed) == record["seeds_done"], arm
        for seed, bits in arm_bits(record, arm).items():
            run = by_seed[seed]
            assert int(np.sum(bits)) == run["test_correct"]
            # the run is the config the page names: BOOK_RECIPE with this arm's options
            assert run["config_key"] == blocks_recipe(BOOK_RECIPE, seed=seed, **OPTIONS[arm]).key()
            assert run["steps"] <= BOOK_RECIPE.max_steps
            assert run["reached_target"] == (run["val_exact_match"][-1] >= 0.995)
    text = prose(PAGE)
    seeds = seeds_words(record["seeds_done"])
    for words in (seeds, "10,000 sequences, seed 2027", "at most 500 steps"):
        assert words in text, words


def test_page_command_is_the_records(record):
    assert "tools.record.todays_blocks" in record["command"]
    assert record["command"] in prose(PAGE).replace(" \\ ", " "), record["command"]


def test_conclusion_follows_the_record(record):
    text = prose(PAGE)
    base = runs(record, "baseline")
    all_reached = all(r["reached_target"] for arm in ARMS for r in record["arms"][arm])
    assert all_reached == ("Every run reached the target" in text)
    for arm in ARMS[1:]:
        mine = runs(record, arm)
        says = bullet(text, arm)
        (params,) = {r["parameters"] for r in mine.values()}
        delta = params - base[0]["parameters"]
        assert f"{params:,} parameters, {delta:+,}" in says, (arm, says)
        st = mean_interval([mine[s]["steps"] - base[s]["steps"] for s in sorted(base)])
        quoted = f"{st.mean:+.0f} (95 % interval {st.low:+.0f} to {st.high:+.0f})"
        assert f"Steps to the target: {quoted}, {steps_claim(st)}" in says, (arm, quoted)
        cmp = compare_arms(record, arm, "baseline")
        p = cmp.pooled
        assert f"Test exact match: {pct(cmp.difference)}" in says, (arm, pct(cmp.difference))
        assert f"{p.only_a} against {p.only_b} sequences, {p_text(p.p_value)}" in says, arm
        assert match_claim(cmp.verdict, len(cmp.seeds)) in says, (arm, cmp.verdict)


def test_summary_follows_the_record(record):
    text = prose(PAGE)
    base = runs(record, "baseline")
    seeds = record["seeds_done"]
    today = runs(record, "today")
    assert all(today[s]["steps"] > base[s]["steps"] for s in seeds)
    assert "All four changes together needed more steps than the baseline on every seed" in text
    for arm in ("rms", "swiglu", "gqa", "rope"):
        mine = runs(record, arm)
        ci = mean_interval([mine[s]["steps"] - base[s]["steps"] for s in seeds])
        assert ci.low < 0 < ci.high, arm
    assert "one at a time, none is distinguishable from the baseline in steps" in text
    verdicts = {compare_arms(record, arm, "baseline").verdict for arm in ARMS[1:]}
    assert verdicts == {f"not distinguishable with {len(seeds)} seeds"}
    assert f"no change is distinguishable from the baseline with {len(seeds)} seeds" in text


def test_seed_against_seed_statement(record):
    bits = arm_bits(record, "baseline")
    seeds = record["seeds_done"]
    pairs = [(s, t) for s in seeds for t in seeds if s < t]
    below = sum(mcnemar_exact(bits[s], bits[t]).p_value < 0.05 for s, t in pairs)
    quoted = f"{below} of its {len(pairs)} pairs of seeds differ at p < 0.05"
    assert quoted in prose(PAGE), quoted
