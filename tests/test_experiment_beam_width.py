"""The beam-width page quotes its record correctly (appendix/experiment_beam_width.py;
chapters/data/beam_width.json, made by tools/record/beam_width.py)."""

import dataclasses
import inspect

import pytest
from twin_prose import prose

from helpers.analysis.experiments import compare_arms, load_record
from helpers.decoding.beam_search import DEFAULT_LENGTH_PENALTY
from helpers.training.evaluation import TEST_SEED
from helpers.training.recipes import BOOK_RECIPE, fixed_budget_recipe
from tools.record import beam_width as recorder

PAGE = prose("appendix/experiment_beam_width.py")
CHAPTER = prose("chapters/20_beam_search.py")


@pytest.fixture(scope="module")
def record():
    return load_record("beam_width")


def points(d) -> str:
    return f"{100 * d.mean:+.2f} points"


def interval(d) -> str:
    return f"95 % interval {100 * d.low:+.2f} to {100 * d.high:+.2f} points"


def test_design_as_stated(record):
    steps = record["steps"]
    assert record["recipe"] == dataclasses.asdict(fixed_budget_recipe(BOOK_RECIPE, steps=steps))
    assert f"fixed_budget_recipe(BOOK_RECIPE, steps={steps})" in PAGE
    assert f"fixed_budget_recipe(BOOK_RECIPE, steps={steps})" in CHAPTER  # seed 0 is its model
    seed0 = record["arms"]["greedy"][0]
    assert seed0["seed"] == 0
    assert seed0["config_key"] == fixed_budget_recipe(BOOK_RECIPE, steps=steps).key()
    assert f"trained for exactly {steps} steps" in PAGE
    assert list(record["arms"]) == ["greedy", "beam 2", "beam 4", "beam 8"]
    assert record["seeds"] == [0, 1, 2, 3, 4] and "**Seeds.** 0 to 4" in PAGE
    for runs in record["arms"].values():
        assert [r["seed"] for r in runs] == record["seeds"]
        keys = {r["config_key"] for r in runs}
        assert len(keys) == 5  # one model per seed ...
    assert all(  # ... the same one in every arm
        [r["config_key"] for r in runs] == [r["config_key"] for r in record["arms"]["greedy"]]
        for runs in record["arms"].values()
    )
    # both arms run on the KV cache: greedy_decode's default (use_cache=False) is far slower
    decode = inspect.getsource(recorder.decode)
    assert (
        "greedy_decode(model, s, use_cache=True)" in decode
        and "use_cache"
        not in (
            decode.split("beam_search(", 1)[1].split(")", 1)[0]  # beam_search's default: True
        )
    )
    assert inspect.signature(recorder.beam_search).parameters["use_cache"].default is True
    assert "`greedy_decode` with `use_cache=True`" in PAGE and "All four arms run on the KV" in PAGE
    assert record["length_penalty"] == DEFAULT_LENGTH_PENALTY
    assert f"$\\alpha = {DEFAULT_LENGTH_PENALTY}$" in PAGE
    n = record["test_set"]["n"]
    assert record["test_set"]["seed"] == TEST_SEED and record["test_set"]["first"]
    assert f"first {n:,} sequences of the test set (seed {TEST_SEED})" in PAGE
    t = record["timing"]
    assert (
        f"first {t['sources']:,} test sources, in batches of 500, with seed {t['seed']}'s "
        f"model, in {t['repeats']} rounds"
    ) in PAGE
    assert t["order"].startswith("rounds: every arm once per round")
    assert record["numerics"]["pinned"] and record["threads"] == 1
    assert "tools.record.beam_width" in record["command"] and "pin.py pinned" in record["command"]
    assert "python -m tools.record.beam_width" in PAGE


def test_beam_against_greedy_as_quoted(record):
    c = {w: compare_arms(record, f"beam {w}", "greedy") for w in (2, 4, 8)}
    assert "beam search of width 2 reverses more" in PAGE
    assert (
        f"{points(c[2].difference)} of exact match ({interval(c[2].difference)}, 5 seeds)" in PAGE
    )
    assert all(t.only_a > t.only_b for t in c[2].per_seed) and "Every seed favours the beam" in PAGE
    p = c[2].pooled
    assert (
        f"Pooled, {p.only_a} sequences only the beam got right against {p.only_b} only greedy "
        f"decoding got right (McNemar p = {p.p_value:.2g})"
    ) in PAGE
    assert f"Width 4 gives {points(c[4].difference)} ({interval(c[4].difference)})" in PAGE
    assert f"width 8 {points(c[8].difference)} ({interval(c[8].difference)})" in PAGE
    for w in (2, 4, 8):
        assert c[w].verdict.startswith("A is better")
        assert c[w].difference.low > 0  # the seed-level interval alone excludes zero
    assert "The seed-level intervals alone already exclude zero" in PAGE
    assert "Verdict for each width against greedy: the beam is better" in PAGE


def test_widths_against_each_other_as_quoted(record):
    four_two = compare_arms(record, "beam 4", "beam 2")
    eight_four = compare_arms(record, "beam 8", "beam 4")
    assert (
        f"Width 4 minus width 2 is {points(four_two.difference)} ({interval(four_two.difference)})"
        in PAGE
    )
    assert (
        f"width 8 minus width 4 is {points(eight_four.difference)} "
        f"({interval(eight_four.difference)})"
    ) in PAGE
    for c in (four_two, eight_four):
        assert c.verdict == "not distinguishable with 5 seeds"
    assert "not distinguishable with 5 seeds" in PAGE


def test_cost_follows_the_record(record):
    """The cost bullet quotes each width's time over greedy decoding's: the median of the
    rounds, with the lowest and highest, and says each stays below k times."""
    t = record["timing"]
    arms = t["arms"]
    for a in arms.values():  # the time per token is the median over the runs, per token written
        assert len(a["seconds"]) == len(a["over_greedy_by_round"]) == t["repeats"]
        assert a["seconds_per_token"] * a["generated_tokens"] == pytest.approx(
            sorted(a["seconds"])[len(a["seconds"]) // 2], abs=1e-4
        )
        for ratio, s, g in zip(a["over_greedy_by_round"], a["seconds"], arms["greedy"]["seconds"]):
            assert ratio == pytest.approx(s / g, abs=2e-3)  # rounded seconds
    # an idle machine: the 1-minute load average stayed below one busy core
    assert float(t["load_average_before"].split()[0]) < 1
    assert float(t["load_average_after"].split()[0]) < 1
    n = t["sources"]
    assert f"To decode the same {n:,} sources on one thread" in PAGE
    quoted = {}
    for width in (2, 4, 8):
        r = sorted(arms[f"beam {width}"]["over_greedy_by_round"])
        median, low, high = r[len(r) // 2], r[0], r[-1]
        assert high < width  # "each width cost less than k times greedy decoding"
        quoted[width] = f"{median:.2f} times", f"({low:.2f} to {high:.2f})", median
    assert "In every round each width cost less than $k$ times greedy decoding" in PAGE
    assert f"with seed {t['seed']}'s model, width 2 took a median {quoted[2][0]} as long" in PAGE
    assert f"greedy decoding over the {t['repeats']} rounds {quoted[2][1]}" in PAGE
    assert (
        f"width 4 {quoted[4][0]} {quoted[4][1]} and width 8 {quoted[8][0]} {quoted[8][1]}" in PAGE
    )
    assert f"about {quoted[2][2]:.1f} times the decoding time" in PAGE
    # "in every round each width also cost more than the next narrower one" (greedy, 2, 4, 8)
    for narrow, wide in (("greedy", "beam 2"), ("beam 2", "beam 4"), ("beam 4", "beam 8")):
        assert all(
            w > n for n, w in zip(arms[narrow]["seconds"], arms[wide]["seconds"], strict=True)
        )
    assert "In every round each width also cost more than the next narrower one" in PAGE
    # "the best hypotheses of every width wrote about as many tokens as greedy decoding"
    for width in (2, 4, 8):
        assert arms[f"beam {width}"]["generated_tokens"] == pytest.approx(
            arms["greedy"]["generated_tokens"], rel=0.01
        )
    assert "The best hypotheses of every width wrote about as many tokens" in PAGE
    # the lowest ratios all come from the round of greedy's slowest run, as the page says
    rounds = range(t["repeats"])
    slow = max(rounds, key=lambda i: arms["greedy"]["seconds"][i])
    for width in (2, 4, 8):
        by_round = arms[f"beam {width}"]["over_greedy_by_round"]
        assert min(rounds, key=lambda i: by_round[i]) == slow
    assert (
        f"Each width's lowest ratio comes from round {slow + 1}, the round where greedy "
        "decoding ran slowest"
    ) in PAGE
    assert "A slow drift in the machine's speed reaches all arms of a round alike" in PAGE
    tokens = (
        f"{arms['beam 2']['generated_tokens']:,} against {arms['greedy']['generated_tokens']:,}"
    )
    assert tokens in PAGE, tokens
    assert "information only" not in PAGE and "cost per token" not in CHAPTER


def test_chapter_links_the_page():
    assert "experiment_beam_width.ipynb" in CHAPTER
