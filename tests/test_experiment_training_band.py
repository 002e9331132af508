"""The training-band page and chapter 17 quote the record and the library correctly
(appendix/experiment_training_band.py, chapters/17_pitfalls_and_debugging.py;
chapters/data/training_band.json, made by tools/record_training_band.py)."""

import dataclasses
import inspect

import pytest
from twin_prose import prose

from helpers.debugging import check_model, training_band
from helpers.debugging.band import CPU_MARGIN, NEIGHBOURS, WINDOW
from helpers.experiments import load_record
from helpers.recipes import BOOK_RECIPE

PAGE = prose("appendix/experiment_training_band.py")
CHAPTER = prose("chapters/17_pitfalls_and_debugging.py")
NUMBER_WORDS = {5: "Five", 6: "Six", 7: "Seven", 8: "Eight"}


@pytest.fixture(scope="module")
def record():
    return load_record("training_band")


def test_design_as_stated(record):
    assert record["recipe"] == dataclasses.asdict(BOOK_RECIPE)
    seeds = record["seeds"]
    assert seeds == list(range(1, len(seeds) + 1)) and len(seeds) >= 5
    assert f"**Seeds**: 1 to {seeds[-1]}." in PAGE
    assert f"the {len(seeds)} runs" in PAGE and f"--jobs {len(seeds)}" in PAGE
    assert f"{NUMBER_WORDS[len(seeds)]} seeds of the book's recipe" in PAGE
    assert record["numerics"]["pinned"]
    assert f"the first {record['steps']} steps" in PAGE
    assert f"exact match every {record['eval_every']} steps" in PAGE
    assert f"exact match every {record['eval_every']} steps" in CHAPTER
    assert f"on the {BOOK_RECIPE.eval_size:,} validation sequences" in PAGE
    for r in record["runs"]:
        assert len(r["loss"]) == record["steps"]
        assert len(r["exact_match"]) == record["steps"] // record["eval_every"]


def test_band_rule_as_stated():
    assert CPU_MARGIN == 2 and "The margin at a point is twice the largest distance" in PAGE
    assert f"within {NEIGHBOURS} points of it" in PAGE
    assert f"windows of {WINDOW} steps" in PAGE
    band = training_band()
    assert 0 not in band.seeds and "Seed 0 is the book's own model" in PAGE


def test_chapter_quotes_the_overfit_stage():
    params = inspect.signature(check_model).parameters
    steps, ratio = params["overfit_steps"].default, params["overfit_ratio_limit"].default
    assert f"for {steps} steps on the batch" in CHAPTER
    assert f"below ${ratio:g} \\ln V$" in CHAPTER
    assert "[The training band](../appendix/experiment_training_band.ipynb)" in CHAPTER
