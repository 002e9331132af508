"""The training-band page and chapter 17 quote the record and the library correctly
(appendix/experiment_training_band.py, chapters/17_pitfalls_and_debugging.py;
chapters/data/training_band.json, made by tools/record/training_band.py)."""

import dataclasses
import inspect

import pytest
from twin_prose import prose

from helpers import wilson_interval
from helpers.analysis.experiments import load_record
from helpers.debugging import check_model, compare_with_band, training_band
from helpers.debugging.band import FACTORS, NEIGHBOURS, WINDOW, _history, held_out_outside
from helpers.training.recipes import BOOK_RECIPE

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
    assert "The margin at a point is a factor times the largest distance" in PAGE
    assert FACTORS[:3] == (1, 1.5, 2) and "the smallest of 1, 1.5, 2, ..." in PAGE
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


def test_the_factor_and_the_check_seeds_as_stated(record):
    band = training_band(record)
    check = record["check"]
    assert check["seeds"] == [r["seed"] for r in check["runs"]]
    assert check["seeds"] == list(range(record["seeds"][-1] + 1, record["seeds"][-1] + 7))
    assert f"Seeds {check['seeds'][0]} to {check['seeds'][-1]}, the **check seeds**" in PAGE
    assert check["numerics"] == record["numerics"]
    assert f"The measured factor is {band.factor:g}." in PAGE
    # "With 2, one seed held out and one check seed left the band"
    with_two = training_band(record, factor=2.0)
    out_two = [r for r in check["runs"] if not compare_with_band(_history(r, 10), with_two,
                                                                 verbose=False).ok]  # fmt: skip
    assert len(held_out_outside(record, 2.0)) == 1 and len(out_two) == 1
    assert "With 2, one seed held out and one check seed left the band" in PAGE
    out = [r for r in check["runs"] if not compare_with_band(_history(r, 10), band,
                                                             verbose=False).ok]  # fmt: skip
    assert not out and f"none of the {NUMBER_WORDS[len(check['runs'])].lower()} check seeds" in PAGE
    assert f"below {wilson_interval(0, len(check['runs']))[1]:.2f}" in PAGE
    n = NUMBER_WORDS[len(check["runs"])].lower()
    assert f"Of {n} more seeds, none left it" in CHAPTER
    assert f"that share: 0 to {wilson_interval(0, len(check['runs']))[1]:.2f})" in CHAPTER
    assert (
        f"band of its training curve over {NUMBER_WORDS[len(band.seeds)].lower()} seeds" in CHAPTER
    )
