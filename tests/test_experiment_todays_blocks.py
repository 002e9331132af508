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
from helpers.training.recipes import BOOK_RECIPE, blocks_recipe

prose = functools.partial(twin_prose, markdown_only=True)  # markdown cells only
ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "appendix" / "experiment_todays_blocks.py"
ARMS = ("baseline", "rms", "swiglu", "gqa", "mqa", "rope", "today")
OPTIONS = {
    "baseline": {},
    "rms": {"norm": "rms"},
    "swiglu": {"ffn": "swiglu"},
    "gqa": {"num_kv_heads": 2},
    "mqa": {"num_kv_heads": 1},
    "rope": {"positions": "rope"},
    "today": {"norm": "rms", "ffn": "swiglu", "positions": "rope", "num_kv_heads": 2},
}


@pytest.fixture(scope="module")
def record():
    record = load_record("todays_blocks")
    record["seeds_done"] = common_seeds(record)
    return record


def runs(record, arm):
    return {r["seed"]: r for r in record["arms"][arm]}


STEPS = ("more steps than the baseline", "fewer steps than the baseline")
MATCH = ("above the baseline", "below the baseline")


WORDS = {1: "one", 5: "five", 6: "six", 7: "seven", 30: "thirty"}


def step_interval(record, arm):
    mine, base = runs(record, arm), runs(record, "baseline")
    return mean_interval([mine[s]["steps"] - base[s]["steps"] for s in record["seeds_done"]])


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
    seeds = seeds_in_words(record["seeds_done"])
    r = record["recipe"]
    for words in (
        seeds,
        "10,000 sequences, seed 2027",
        f"at most {r['max_steps']} steps",
        f"The training data (seed {r['data_seed']})",
        f"the validation set ({r['val_size']:,} sequences, seed {r['val_seed']})",
        f"Validation is checked every {r['eval_every']} steps, once "
        f"{round(100 * r['eval_gate'])} % of a training batch is exactly right",
        f"first check that reaches {100 * r['target_exact_match']:.1f} % exact match",
    ):
        assert words in text, words


def test_shared_helpers():
    """A sweep stopped midway: seed 1 finished for one arm only; it is left out, in place."""
    rec = {
        "arms": {"a": [{"seed": 0}, {"seed": 1}], "b": [{"seed": 0}]},
        "arms_long": {"a": [{"seed": 0}, {"seed": 1}], "b": [{"seed": 0}]},
    }
    assert common_seeds(rec, ("arms", "arms_long")) == [0]
    assert rec["arms"]["a"] == rec["arms_long"]["a"] == [{"seed": 0}]
    assert seeds_in_words([0, 1, 2, 3, 4]) == "0 to 4, five per arm"
    with pytest.raises(ValueError):
        seeds_in_words([1, 2, 3])
    ci = mean_interval([0.01, 0.02, 0.03, 0.02, 0.02])
    assert percent_interval(ci) == "+2.00 % (95 % interval +1.12 % to +2.88 %)"
    assert in_words(ci, "up", "down") == "up"
    assert (
        in_words(mean_interval([-x for x in [0.01, 0.02, 0.03, 0.02, 0.02]]), "up", "down")
        == "down"
    )
    assert in_words(ci, "up", "down", agrees=False) == "not distinguishable with 5 seeds"
    assert (
        in_words(mean_interval([-1, 1, 0, 2, -2]), "up", "down")
        == "not distinguishable with 5 seeds"
    )
    assert in_words(mean_interval([1, 2, 3]), "up", "down") == "no conclusion with 3 seeds"


def test_page_command_is_the_records(record):
    assert "tools.record.todays_blocks" in record["command"]
    assert record["command"] in prose(PAGE).replace(" \\ ", " "), record["command"]
    # the recorder's --resume keeps every run a record already holds (matched by config key)
    assert ("--resume" in record["command"]) == ("leave `--resume` out" in prose(PAGE))
    # the mqa arm was added to the six others' runs: their counts, as the page words them
    n_mqa = len(record["arms"]["mqa"])
    n_others = sum(len(r) for arm, r in record["arms"].items() if arm != "mqa")
    quoted = f"trained the {WORDS[n_mqa]} runs of `mqa` and kept the {WORDS[n_others]} others"
    assert quoted in prose(PAGE), quoted
    others = " ".join(arm for arm in ARMS if arm != "mqa")
    assert f"--arms {others}`" in prose(PAGE)


def test_grouped_heads_are_self_attention_only(record):
    """The page's design: gqa and mqa share key/value heads in self-attention only."""
    from helpers.training.train import build_model

    d_k = BOOK_RECIPE.d_model // BOOK_RECIPE.num_heads
    for arm, kv_heads in (("baseline", 4), ("gqa", 2), ("mqa", 1), ("today", 2)):
        model = build_model(blocks_recipe(BOOK_RECIPE, **OPTIONS[arm]))
        for name, w in model.named_parameters():
            if name.endswith("W_k.weight"):
                heads = BOOK_RECIPE.num_heads if ".cross_mha." in name else kv_heads
                assert w.size(0) == heads * d_k, (arm, name)
        (params,) = {r["parameters"] for r in record["arms"][arm]}
        assert sum(p.numel() for p in model.parameters()) == params, arm
    text = prose(PAGE)
    assert f"self-attention (cross-attention keeps its {BOOK_RECIPE.num_heads} key/value" in text
    assert f"key/value heads times {d_k}" in text


def test_conclusion_follows_the_record(record):
    text = prose(PAGE)
    base = runs(record, "baseline")
    all_reached = all(r["reached_target"] for arm in ARMS for r in record["arms"][arm])
    assert all_reached == (f"Every run reached the target within {BOOK_RECIPE.max_steps}" in text)
    for arm in ARMS[1:]:
        mine = runs(record, arm)
        says = bullet(text, arm)
        (params,) = {r["parameters"] for r in mine.values()}
        delta = params - base[0]["parameters"]
        assert f"{params:,} parameters, {delta:+,}" in says, (arm, says)
        st = mean_interval([mine[s]["steps"] - base[s]["steps"] for s in sorted(base)])
        quoted = f"{st.mean:+.0f} (95 % interval {st.low:+.0f} to {st.high:+.0f})"
        assert f"Steps to the target: {quoted}, {in_words(st, *STEPS)}" in says, (arm, quoted)
        cmp = compare_arms(record, arm, "baseline")
        p = cmp.pooled
        quoted = f"Test exact match: {percent_interval(cmp.difference)}"
        assert quoted in says, (arm, quoted)
        assert f"{p.only_a} against {p.only_b} sequences, {p_text(p.p_value)}" in says, arm
        assert cmp.in_words(*MATCH) in says, (arm, cmp.verdict)


def test_summary_follows_the_record(record):
    text = prose(PAGE)
    base = runs(record, "baseline")
    seeds = record["seeds_done"]
    today = runs(record, "today")
    assert all(today[s]["steps"] > base[s]["steps"] for s in seeds)
    assert (
        "The four changes of `today`, together, needed more steps than the baseline on every seed"
        in text
    )
    for arm in ("rms", "swiglu", "gqa", "mqa", "rope"):
        mine = runs(record, arm)
        ci = mean_interval([mine[s]["steps"] - base[s]["steps"] for s in seeds])
        assert ci.low < 0 < ci.high, arm
    assert "one at a time, none is distinguishable from the baseline in steps" in text
    verdicts = {compare_arms(record, arm, "baseline").verdict for arm in ARMS[1:]}
    assert verdicts == {f"not distinguishable with {len(seeds)} seeds"}
    assert f"no change is distinguishable from the baseline with {len(seeds)} seeds" in text
    # today's step difference: every seed one way, a sign test, one interval of six
    sign_p = 2 * 0.5 ** len(seeds)
    quoted = f"{WORDS[len(seeds)]} out of {WORDS[len(seeds)]} one way would come with p = {sign_p}"
    assert quoted in text, quoted
    more = {a: sum(runs(record, a)[s]["steps"] > base[s]["steps"] for s in seeds) for a in ARMS[1:]}
    assert [a for a in ARMS[1:] if more[a] in (0, len(seeds))] == ["today"]
    stepped = [a for a in ARMS[1:] if in_words(step_interval(record, a), *STEPS) in STEPS]
    assert stepped == ["today"]
    quoted = f"one of {WORDS[len(ARMS) - 1]} step intervals on this page, each at 95 %"
    assert quoted in text, quoted
    assert "a lead for a study with more seeds, not a settled cost" in text


def test_seed_against_seed_statement(record):
    bits = arm_bits(record, "baseline")
    seeds = record["seeds_done"]
    n = record["test_set"]["n"]
    quoted = (
        f"McNemar's test pools {n * len(seeds):,} sequence pairs, but the {n:,} pairs of one seed"
    )
    assert quoted in prose(PAGE), quoted
    pairs = [(s, t) for s in seeds for t in seeds if s < t]
    below = sum(mcnemar_exact(bits[s], bits[t]).p_value < 0.05 for s, t in pairs)
    quoted = f"{below} of its {len(pairs)} pairs of seeds differ at p < 0.05"
    assert quoted in prose(PAGE), quoted
    # within one seed, a change against the baseline
    within = [
        m.p_value < 0.05 for arm in ARMS[1:] for m in compare_arms(record, arm, "baseline").per_seed
    ]
    quoted = f"separates a change from the baseline in {sum(within)} of the {len(within)} pairs"
    assert quoted in prose(PAGE), quoted
