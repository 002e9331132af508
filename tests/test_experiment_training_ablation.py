"""The training-ablation page and chapter 10 quote the record correctly
(appendix/experiment_training_ablation.py, chapters/10_training.py;
chapters/data/training_ablation.json)."""

from pathlib import Path

import pytest
from twin_prose import prose

from helpers.analysis.experiments import load_record, mean_interval
from helpers.training.recipes import BOOK_RECIPE, SEED_RECIPE

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "appendix" / "experiment_training_ablation.py").read_text()
CHAPTER = (ROOT / "chapters" / "10_training.py").read_text()


@pytest.fixture(scope="module")
def record():
    return load_record("training_ablation")


def ablation_configs() -> dict:
    """{lever: TrainConfig} of the measured rows, from the recorder (tools/bench/training.py)."""
    from tools.bench import training

    return {lever: cfg for _, lever, cfg in training.ablation_rows()}


def row(record, start):
    (found,) = [r for r in record["rows"] if r["lever"].startswith(start)]
    return found


def test_design_as_stated(record):
    assert record["repeats"] == 3 and "three seeds per row" in prose(PAGE)
    assert "seeds 0, 1 and 2" in prose(PAGE)
    extrapolated = [r for r in record["rows"] if r.get("extrapolated")]
    assert extrapolated == record["rows"][:2]
    assert not any("correct_bits" in r for r in record["rows"])  # no per-sequence record


def test_budgets_and_checks_as_stated(record):
    """The recorder's configs give the budgets and check intervals the Design quotes."""
    configs = ablation_configs()
    kept = [r["lever"] for r in record["rows"] if r["status"] == "kept" and "all_steps" in r]
    cfgs = [configs[lever] for lever in kept]
    assert kept[2] == "dropout 0" and kept[3].startswith("linear cooldown")
    assert {c.max_steps for c in cfgs[:3]} == {SEED_RECIPE.max_steps}
    assert {c.max_steps for c in cfgs[3:]} == {BOOK_RECIPE.max_steps}
    assert {c.eval_every for c in cfgs[:4]} == {20} and cfgs[4] == BOOK_RECIPE
    seed_run = load_record("seed_recipe_run")
    assert record["rows"][0]["steps"] % seed_run["steps_per_epoch"] == 0
    text = prose(PAGE)
    assert (
        f"{SEED_RECIPE.max_steps:,} steps (the reference recipe's 10 epochs of "
        f"{SEED_RECIPE.batch_size}) up to the dropout row, {BOOK_RECIPE.max_steps} from the "
        "cooldown row on"
    ) in text
    assert (
        f"at the end of each epoch ({seed_run['steps_per_epoch']} steps) in the first "
        f"extrapolated row, every {seed_run['config']['eval_every']} steps in the second, every "
        f"20 steps in the measured kept rows through the cooldown, every "
        f"{BOOK_RECIPE.eval_every}th step with a gate"
    ) in text


def test_page_numbers(record):
    text = prose(PAGE)
    book = row(record, "evaluate at every 10th step")
    a, b, c = book["all_steps"]
    assert f"after {a}, {b} and {c} steps" in text
    cheap = record["rows"][1]
    assert f"first got there after {cheap['steps']:,} steps" in text
    seed_run = load_record("seed_recipe_run")
    assert f"checked every {seed_run['config']['eval_every']} steps" in text
    moves = [
        abs(x - y)
        for r in (row(record, "+ fused Adam"), row(record, "2 threads ("))
        for x, y in zip(r["all_steps"], book["all_steps"])
    ]
    assert f"by up to {max(moves)} steps" in text
    bucket = row(record, "+ length bucketing")
    assert not bucket["reached"] and max(bucket["all_steps"]) == BOOK_RECIPE.max_steps
    assert "no seed reached the target within 500 steps" in text


def test_kept_changes_lowered_every_seed(record):
    """'Two kept changes, batch 128 ... and then no dropout, lowered every seed's step count';
    the smaller model's seeds all below the one reference run."""
    kept = [r for r in record["rows"] if r["status"] == "kept"]
    cheap, small, batch, nodrop = kept[:4]
    assert batch["lever"].startswith("batch 128") and nodrop["lever"] == "dropout 0"
    assert all(s < cheap["steps"] for s in small["all_steps"])
    for before, after in ((small, batch), (batch, nodrop)):
        assert all(a < b for a, b in zip(after["all_steps"], before["all_steps"]))
    text = prose(PAGE)
    assert "then no dropout, lowered every seed's step count" in text
    assert "smaller model's three seeds all took fewer steps than the one reference run" in text


def test_load_changed_from_row_to_row(record):
    starts = [
        float(r["load_average_at_start"].split()[0]) for r in record["rows"] if "all_steps" in r
    ]
    assert max(starts) - min(starts) > 1  # "the load changed from row to row"
    assert "the load changed from row to row" in prose(PAGE)


def test_chapter_citation(record):
    book = row(record, "evaluate at every 10th step")
    m = mean_interval(book["all_steps"])
    quoted = (
        f"after {m.mean:.0f} steps on average (95 % interval {m.low:.0f} to {m.high:.0f} steps, "
        f"{m.n} seeds)"
    )
    assert quoted in prose(CHAPTER)
    assert "experiment_training_ablation.ipynb" in CHAPTER
