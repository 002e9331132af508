"""The reference-recipe page and chapter 10 quote the record correctly
(appendix/experiment_reference_recipe.py, chapters/10_training.py;
chapters/data/seed_recipe_run.json)."""

from pathlib import Path

from twin_prose import prose

from helpers.analysis.experiments import load_record
from helpers.training.recipes import SEED_RECIPE

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "appendix" / "experiment_reference_recipe.py").read_text()
CHAPTER = (ROOT / "chapters" / "10_training.py").read_text()
ORDINAL = {6: "sixth", 7: "seventh", 8: "eighth", 9: "ninth", 10: "tenth"}


RUN = load_record("seed_recipe_run")
FIRST_I = next(i for i, e in enumerate(RUN["exact_match"]) if e >= 0.995)
FIRST = RUN["eval_step"][FIRST_I]


def test_the_run_is_the_reference_recipe():
    cfg = RUN["config"]
    for key in ("d_model", "dff", "dropout", "batch_size", "warmup", "max_steps", "seed"):
        assert cfg[key] == getattr(SEED_RECIPE, key), key
    assert cfg["max_steps"] == 10 * RUN["steps_per_epoch"]
    assert f"{cfg['max_steps']:,} steps of {cfg['batch_size']}" in prose(PAGE)
    assert f"every {cfg['eval_every']} steps" in prose(PAGE)


def test_page_numbers():
    text = prose(PAGE)
    sequences = FIRST * RUN["config"]["batch_size"]
    assert f"at step {FIRST:,}, after {sequences:,} training sequences" in text
    epoch = FIRST // RUN["steps_per_epoch"] + 1
    assert f"in its {ORDINAL[epoch]} epoch" in text
    later = RUN["exact_match"][FIRST_I + 1 :]
    below = sum(e < 0.995 for e in later)
    assert f"fell below 99.5 % again at {below} of the {len(later)} later checks" in text


def test_chapter_citation():
    sequences = FIRST * RUN["config"]["batch_size"]
    quoted = (
        f"after {FIRST:,} steps of {RUN['config']['batch_size']} sequences: {sequences:,} "
        "training sequences"
    )
    assert quoted in prose(CHAPTER)
    assert "experiment_reference_recipe.ipynb" in CHAPTER
