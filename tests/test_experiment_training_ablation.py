"""The training-ablation page and chapter 10 quote the record correctly
(appendix/experiment_training_ablation.py, chapters/10_training.py;
chapters/data/training_ablation.json)."""

from pathlib import Path

import pytest

from helpers.experiments import load_record, mean_interval
from helpers.recipes import BOOK_RECIPE, SEED_RECIPE

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "appendix" / "experiment_training_ablation.py").read_text()
CHAPTER = (ROOT / "chapters" / "10_training.py").read_text()


def prose(text: str) -> str:
    """The markdown of a py:percent twin, comment marks and line breaks removed."""
    lines = [ln[2:] if ln.startswith("# ") else ln.lstrip("#") for ln in text.splitlines()]
    return " ".join(ln.strip() for ln in lines)


@pytest.fixture(scope="module")
def record():
    return load_record("training_ablation")


def row(record, start):
    (found,) = [r for r in record["rows"] if r["lever"].startswith(start)]
    return found


def test_design_as_stated(record):
    assert record["repeats"] == 3 and "three seeds per row" in prose(PAGE)
    assert "seeds 0, 1 and 2" in prose(PAGE)
    extrapolated = [r for r in record["rows"] if r.get("extrapolated")]
    assert extrapolated == record["rows"][:2]
    budgets = f"{SEED_RECIPE.max_steps:,} steps for the first three"
    assert budgets in prose(PAGE) and f"{BOOK_RECIPE.max_steps} from the cooldown" in prose(PAGE)
    assert not any("correct_bits" in r for r in record["rows"])  # no per-sequence record


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


def test_first_kept_changes_lowered_every_seed(record):
    """'Each of the three first kept changes ... lowered every seed's step count'."""
    kept = [r for r in record["rows"] if r["status"] == "kept"]
    cheap, small, batch, nodrop = kept[:4]
    assert all(s < cheap["steps"] for s in small["all_steps"])
    for before, after in ((small, batch), (batch, nodrop)):
        assert all(a < b for a, b in zip(after["all_steps"], before["all_steps"]))
    assert "lowered every seed's step count" in prose(PAGE)


def test_chapter_citation(record):
    book = row(record, "evaluate at every 10th step")
    m = mean_interval(book["all_steps"])
    quoted = (
        f"after {m.mean:.0f} steps on average (95 % interval {m.low:.0f} to {m.high:.0f} steps, "
        f"{m.n} seeds)"
    )
    assert quoted in prose(CHAPTER)
    assert "experiment_training_ablation.ipynb" in CHAPTER
