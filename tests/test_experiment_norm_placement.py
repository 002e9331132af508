"""The Pre/Post-Norm Experiments page and chapter 5's citation agree with the record.

The record is chapters/data/ch05_norm_sweep.json (tools/record/ch05_norm_sweep.py); the page
is appendix/experiment_norm_placement.py. Every number their prose quotes is recomputed here
with helpers.analysis.experiments, so that a re-recorded sweep that changes a number fails this test
until the prose follows.
"""

import functools
import math
from pathlib import Path

import pytest
import torch
from twin_prose import prose as twin_prose

from helpers import make_reversal_dataset
from helpers.analysis.experiments import load_record, mean_interval
from helpers.analysis.norm_experiment import order_blind_loss, running_mean, tagging_labels

prose = functools.partial(twin_prose, markdown_only=True)  # markdown cells only
ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "appendix" / "experiment_norm_placement.py"
CHAPTER = ROOT / "chapters" / "05_encoder.py"
LINK = "../appendix/experiment_norm_placement.ipynb"


@pytest.fixture(scope="module")
def record():
    return load_record("ch05_norm_sweep")


def runs(record):
    return {(r["norm"], r["lr"], r["seed"]): r for r in record["runs"]}


def difference(record, lr):
    r = runs(record)
    seeds = record["settings"]["seeds"]
    return mean_interval(
        [r["pre", lr, s]["exact_match"] - r["post", lr, s]["exact_match"] for s in seeds]
    )


def test_running_mean_matches_a_loop():
    values = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0]
    got = running_mean(values, window=3)
    windows = [values[max(0, i - 2) : i + 1] for i in range(len(values))]
    want = [sum(w) / len(w) for w in windows]
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64))


def test_order_blind_loss_by_hand():
    # digits 7 7 3 (ids 10 10 6), <eos> (2), <pad> (0): the labels (reversed) are 3 7 7 <eos>;
    # the guess gives 3 one third, 7 two thirds, <eos> certainty; the padding is not scored
    src = torch.tensor([[10, 10, 6, 2, 0]])
    lab = torch.tensor([[6, 10, 10, 2, 0]])
    want = -(math.log(1 / 3) + 2 * math.log(2 / 3) + 0.0) / 4
    assert order_blind_loss(src, lab) == pytest.approx(want, rel=1e-6)


def test_design_five_seeds_equal_budgets(record):
    cfg = record["settings"]
    r = runs(record)
    assert len(cfg["seeds"]) >= 5
    assert len(r) == 2 * len(cfg["lrs"]) * len(cfg["seeds"])
    assert {len(run["losses"]) for run in record["runs"]} == {cfg["steps"]} == {400}
    assert cfg["num_layers"] == 6


def test_page_quotes_the_record(record):
    text = prose(PAGE)
    r = runs(record)
    cfg = record["settings"]
    # "At 2 x 10^-3 the mean difference is 0.952 (0.870 to 1.034)"
    d = difference(record, 2e-3)
    assert f"{d.mean:.3f} ({d.low:.3f} to {d.high:.3f})" in text
    # "The paired 95 % intervals over 5 seeds all lie above 0."
    assert all(difference(record, lr).low > 0 for lr in cfg["lrs"])
    assert "over 5 seeds all lie above 0" in text
    # "Pre-Norm's runs reached 0.846 to 0.999, Post-Norm's at most 0.004."
    pre = [r["pre", 2e-3, s]["exact_match"] for s in cfg["seeds"]]
    post = [r["post", 2e-3, s]["exact_match"] for s in cfg["seeds"]]
    assert f"reached {min(pre):.3f} to {max(pre):.3f}, Post-Norm's at most {max(post):.3f}" in text
    # "flatten out near a loss of 1.45", "Most Post-Norm runs at the two lower rates ended on
    # the plateau of the order-blind guess"
    src, tgt = make_reversal_dataset(1000, seed=1)
    blind = order_blind_loss(src, tagging_labels(tgt))
    assert "near a loss of 1.45" in text and round(blind, 2) == 1.45
    low_rates = [r["post", lr, s]["val_loss"] for lr in cfg["lrs"][:2] for s in cfg["seeds"]]
    on_plateau = [v for v in low_rates if abs(v - blind) < 0.03]
    assert len(on_plateau) > len(low_rates) / 2
    # "At 4 x 10^-3 the Post-Norm runs end higher, near ln 11"
    top = [r["post", 4e-3, s]["val_loss"] for s in cfg["seeds"]]
    assert all(abs(v - math.log(11)) < 0.02 for v in top)
    assert "5 per arm and learning rate" in text and "400 steps of batch 64" in text
    # "Pre-Norm ended with a higher held-out exact match than Post-Norm on every seed at each
    # of the three learning rates: 15 of 15 pairs."
    pairs = [
        (r["pre", lr, s]["exact_match"], r["post", lr, s]["exact_match"])
        for lr in cfg["lrs"]
        for s in cfg["seeds"]
    ]
    assert f"{len(pairs)} of {len(pairs)} pairs" in text and all(a > b for a, b in pairs)
    # "at 4 x 10^-3 its mean exact match was 0.333 (0.049 to 0.617)"
    top_pre = mean_interval([r["pre", 4e-3, s]["exact_match"] for s in cfg["seeds"]])
    assert (
        f"mean exact match was {top_pre.mean:.3f} ({top_pre.low:.3f} to {top_pre.high:.3f})" in text
    )
    # "four lie above 0.9 and one at 0.523" (the differences at 10^-3)
    low_lr = sorted(
        r["pre", 1e-3, s]["exact_match"] - r["post", 1e-3, s]["exact_match"] for s in cfg["seeds"]
    )
    assert "four lie above 0.9 and one at 0.523" in text
    assert f"{low_lr[0]:.3f}" == "0.523" and all(v > 0.9 for v in low_lr[1:])
    # the sign test's smallest two-sided p with 5 seeds: "2/2^5 = 0.0625", "p = 0.0625"
    n = len(cfg["seeds"])
    assert n == 5 and text.count(f"{2 / 2**n:.4f}") == 2


def test_seeded_arms_start_from_the_same_weights():
    """The design's pairing: the same seed gives both arms identical initial weights; only
    Pre-Norm's final LayerNorm is extra, and it starts at scale 1 and shift 0."""
    from helpers.analysis.norm_experiment import EncoderTagger

    torch.manual_seed(3)
    pre = EncoderTagger("pre", num_layers=2).state_dict()
    torch.manual_seed(3)
    post = EncoderTagger("post", num_layers=2).state_dict()
    assert set(pre) - set(post) == {"ln_final.weight", "ln_final.bias"} and set(post) <= set(pre)
    for name, value in post.items():
        assert torch.equal(pre[name], value), name
    assert torch.equal(pre["ln_final.weight"], torch.ones(64)) and not pre["ln_final.bias"].any()


def test_chapter_5_cites_the_page_with_the_interval(record):
    text = prose(CHAPTER)
    assert text.count(LINK) >= 1
    d = difference(record, 2e-3)
    quoted = f"by {d.mean:.2f} on average (95 % interval {d.low:.2f} to {d.high:.2f}"
    assert quoted in text
    assert "5 seeds each, for 400 steps" in text and "6-layer encoder" in text
    r = runs(record)
    cfg = record["settings"]
    assert len(cfg["lrs"]) == 3 and "ahead on every seed at each of three learning rates" in text
    assert all(
        r["pre", lr, s]["exact_match"] > r["post", lr, s]["exact_match"]
        for lr in cfg["lrs"]
        for s in cfg["seeds"]
    )
    # the summary's bullet quotes the same interval
    assert text.count(f"{d.low:.2f} to {d.high:.2f}") == 2


def test_recorder_stores_per_sequence_outcomes(tmp_path, monkeypatch):
    """A tiny sweep through the recorder: its runs carry correct_bits in the layout of
    helpers.analysis.experiments, so that a re-recorded sweep supports McNemar's test."""
    import sys

    from helpers.analysis.experiments import compare_arms, unpack_bits
    from tools.record import ch05_norm_sweep as recorder

    out = tmp_path / "tiny_sweep.json"
    argv = ["x", "--seeds", "2", "--lrs", "0.001", "--steps", "2", "--layers", "1"]
    monkeypatch.setattr(sys, "argv", [*argv, "--out", str(out)])
    threads = torch.get_num_threads()
    try:
        assert recorder.main() == 0  # it sets one thread, as a recording should
    finally:
        torch.set_num_threads(threads)
    tiny = load_record("tiny_sweep", data_dir=tmp_path)
    n = tiny["test_set"]["n"]
    assert n == 1000 and set(tiny["arms"]) == {"pre@0.001", "post@0.001"}
    for run in tiny["runs"]:
        bits = unpack_bits(run["correct_bits"], n)
        assert int(bits.sum()) == run["test_correct"]
        assert run["test_correct"] / n == pytest.approx(run["exact_match"], abs=1e-4)
    comparison = compare_arms(tiny, "pre@0.001", "post@0.001")
    assert comparison.seeds == (0, 1)
