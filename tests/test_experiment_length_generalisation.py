"""The Experiments page on length generalisation agrees with its record.

The record is chapters/data/positions_length.json (tools/record/positions_length.py); the page
is appendix/experiment_length_generalisation.py. Every number and every direction its conclusion
states is recomputed here with helpers.analysis.experiments, so that a re-recorded study that
changes one fails this test until the prose follows.
"""

import dataclasses
import functools
import re
from pathlib import Path

import numpy as np
import pytest
from twin_prose import prose as twin_prose

from helpers import TEST_SEED, TEST_SIZE, make_reversal_dataset
from helpers.analysis.experiments import (
    arm_bits,
    common_seeds,
    compare_arms,
    in_words,
    load_record,
    mcnemar_exact,
    mean_interval,
    p_text,
    percent_interval,
    seeds_in_words,
)
from helpers.core.vocab import PAD_ID
from helpers.training.recipes import BOOK_RECIPE, blocks_recipe, fixed_budget_recipe

prose = functools.partial(twin_prose, markdown_only=True)  # markdown cells only
ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "appendix" / "experiment_length_generalisation.py"
ARMS = ("sinusoidal", "learned", "rope", "alibi")
RECIPE = dataclasses.replace(fixed_budget_recipe(BOOK_RECIPE), eval_every=300)


@pytest.fixture(scope="module")
def record():
    record = load_record("positions_length")
    record["seeds_done"] = common_seeds(record, ("arms", "arms_long"))
    return record


def long_view(record):
    return {"test_set": record["long_test_set"], "arms": record["arms_long"]}


SIDES = ("above the sinusoidal table", "below the sinusoidal table")


def bullet(text: str, arm: str) -> str:
    m = re.search(rf"- \*\*`{arm}`\*\*(.*?)(?= - \*\*`|$)", text)
    assert m, f"no conclusion bullet for {arm}"
    return m.group(1)


def test_record_is_the_design_the_page_describes(record):
    assert tuple(record["arms"]) == ARMS and tuple(record["arms_long"]) == ARMS
    assert record["recipe"] == dataclasses.asdict(RECIPE)
    assert record["steps"] == 300 and record["seq_len"] == 22 and record["stop_after"] is None
    assert record["test_set"] == {"seed": TEST_SEED, "n": TEST_SIZE, "min_len": 3, "max_len": 12}
    assert record["long_test_set"] == {"seed": 2028, "n": 10_000, "min_len": 13, "max_len": 20}
    assert record["numerics"]["pinned"] is True
    # the long test set the record names holds 13 to 20 digits
    src, _ = make_reversal_dataset(100, seed=2028, min_len=13, max_len=20)
    digits = (src != PAD_ID).sum(1) - 1
    assert int(digits.min()) >= 13 and int(digits.max()) <= 20
    for arm in ARMS:
        for view in (record, long_view(record)):
            runs = {r["seed"]: r for r in view["arms"][arm]}
            assert sorted(runs) == record["seeds_done"], arm
            for seed, bits in arm_bits(view, arm).items():
                run = runs[seed]
                assert int(np.sum(bits)) == run["test_correct"]
                assert run["steps"] == 300
                cfg = blocks_recipe(RECIPE, positions=arm, seq_len=22, seed=seed)
                assert run["config_key"] == cfg.key()
                assert sum(c["n"] for c in run["by_length"].values()) == view["test_set"]["n"]
                assert sum(c["correct"] for c in run["by_length"].values()) == run["test_correct"]
    text = prose(PAGE)
    seeds = seeds_in_words(record["seeds_done"])
    for words in (seeds, "3 to 12 digits, seed 2027", "13 to 20 digits, seed 2028"):
        assert words in text, words
    assert "exactly 300 steps" in text and "`seq_len=22`" in text
    # "about 1,000 sequences of each length from 3 to 12, and about 1,250 of each from 13 to 20"
    for key, about in (("arms", 1000), ("arms_long", 1250)):
        n = [c["n"] for c in record[key]["sinusoidal"][0]["by_length"].values()]
        assert 0.9 * about <= min(n) and max(n) <= 1.1 * about, (key, n)
    assert "about 1,000 sequences of each length from 3 to 12, and about 1,250" in text


def test_page_command_is_the_records(record):
    assert "tools.record.positions_length" in record["command"]
    assert record["command"] in prose(PAGE).replace(" \\ ", " "), record["command"]


def test_conclusion_follows_the_record(record):
    text = prose(PAGE)
    long = long_view(record)
    lead = {
        arm: {r["seed"]: r["leading_fraction"] for r in record["arms_long"][arm]} for arm in ARMS
    }
    for arm in ARMS[1:]:
        says = bullet(text, arm)
        for name, view in (("3 to 12 digits", record), ("13 to 20 digits", long)):
            cmp = compare_arms(view, arm, "sinusoidal")
            p = cmp.pooled
            quoted = (
                f"On {name}: exact match {percent_interval(cmp.difference)}, McNemar {p.only_a} "
                f"against {p.only_b} sequences, {p_text(p.p_value)}: {cmp.in_words(*SIDES)}"
            )
            assert quoted in says, (arm, quoted)
        d = mean_interval([lead[arm][s] - lead["sinusoidal"][s] for s in sorted(lead[arm])])
        quoted = (
            f"Leading digits right on 13 to 20 digits: {percent_interval(d)}: {in_words(d, *SIDES)}"
        )
        assert quoted in says, (arm, quoted)


def test_count_statements_follow_the_record(record):
    text = prose(PAGE)
    long = record["arms_long"]
    assert all(r["test_correct"] == 0 for r in long["learned"])
    assert "No run of the learned table reversed a single sequence of 13 to 20 digits" in text
    assert all(r["by_length"]["13"]["correct"] == r["test_correct"] for r in long["sinusoidal"])
    assert all(r["test_correct"] > 0 for r in long["sinusoidal"])
    assert "Every long sequence the sinusoidal table got right has 13 digits" in text
    assert all(r["by_length"]["20"]["correct"] == 0 for runs in long.values() for r in runs)
    assert "No run of any arm got a 20-digit sequence right" in text
    # RoPE and ALiBi: most leading digits right, whole sequences far less often
    n = record["long_test_set"]["n"]
    for arm in ("rope", "alibi"):
        for r in long[arm]:
            assert r["leading_fraction"] > 0.5 and r["test_correct"] / n < r["leading_fraction"] / 3
    assert "get most of the leading digits of a long input right" in text
    # ALiBi below the others on 3 to 12 digits at this budget
    mean = {a: np.mean([r["test_correct"] for r in runs]) for a, runs in record["arms"].items()}
    assert mean["alibi"] == min(mean.values())
    assert "ALiBi is still below the other arms on 3 to 12 digits" in text


def test_small_and_pooled_statements_follow_the_record(record):
    text = prose(PAGE)
    # the learned table's lead on 3 to 12 digits is small
    cmp = compare_arms(record, "learned", "sinusoidal")
    assert f"{100 * cmp.difference.low:+.2f}" == "+0.00"
    n = record["test_set"]["n"]
    for arm in ("learned", "sinusoidal"):
        assert np.mean([r["test_correct"] / n for r in record["arms"][arm]]) > 0.998, arm
    quoted = "both arms score above 99.8 %, and the interval starts at +0.00 %"
    assert quoted in bullet(text, "learned"), quoted
    # two seeds of the sinusoidal arm, pair by pair, on each test set
    seeds = record["seeds_done"]
    pairs = [(s, t) for s in seeds for t in seeds if s < t]
    below = []
    for view in (record, long_view(record)):
        bits = arm_bits(view, "sinusoidal")
        below.append(sum(mcnemar_exact(bits[s], bits[t]).p_value < 0.05 for s, t in pairs))
    quoted = (
        f"differ from each other at p < 0.05 in {below[0]} of {len(pairs)} pairs on 3 to 12 "
        f"digits and in {below[1]} of {len(pairs)} on 13 to 20"
    )
    assert quoted in text, quoted
    # the example: a small pooled p, no conclusion
    rope = compare_arms(record, "rope", "sinusoidal")
    assert rope.pooled.p_value < 0.05 and rope.verdict.startswith("not distinguishable")
    quoted = (
        f"RoPE's {rope.pooled.only_a} against {rope.pooled.only_b} on 3 to 12 digits is not "
        f"distinguishable with {len(seeds)} seeds"
    )
    assert quoted in text, quoted
