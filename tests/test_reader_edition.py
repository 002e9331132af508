"""The reader's-edition rules of tools/check/notebooks.py (issue 18): each chapter opens with
its picture and its measured run time, its median sentence is at most 20 words, and its
main-path prose (outside dropdowns) at most 2,500 words. Each rule is shown failing on a copy
of a real chapter with one thing broken."""

import base64
import json
import shutil

import pytest

from tools.bench import time_chapters
from tools.check import notebooks, prose_stats
from tools.common import ROOT

CHAPTER = ROOT / "chapters" / "09_data.ipynb"


def test_sentences_and_dropdowns_are_counted_apart():
    assert prose_stats.sentences("One two three. Four five.\n\n- six seven") == [3, 2, 2]
    main, deep = prose_stats.split_dropdowns(
        "a\n::::{dropdown} T\nb\n:::{note}\nc\n:::\nd\n::::\ne\n:::{dropdown} U\nf\n:::\ng"
    )
    assert main.split() == ["a", "e", "g"]
    assert deep.split() == ["b", ":::{note}", "c", ":::", "d", "f"]


def test_run_time_text():
    assert (
        time_chapters.run_time_text({"cached_s": 12.4, "trains": []}) == "**Run time:** about 10 s."
    )
    text = time_chapters.run_time_text(
        {"cached_s": 130, "trains": [{"recipe": "BOOK_RECIPE", "seconds": 50.0}]}
    )
    assert text.startswith("**Run time:** about 2.2 min. The first time, it also trains ")
    assert "`BOOK_RECIPE`" in text and "(about 50 s more)" in text and "caches it " in text
    two = time_chapters.run_time_text(
        {
            "cached_s": 700,
            "trains": [
                {"recipe": "fixed_budget_recipe()", "seconds": 61},
                {"recipe": "default_init_recipe()", "seconds": 60},
            ],
        }
    )
    assert "about 12 min" in two and " and chapter 12's badly" in two and "caches them" in two
    assert "(about 2 min more)" in two


@pytest.fixture()
def chapter(tmp_path):
    """A copy of chapter 09 with its picture, in a folder of its own."""
    shutil.copy2(CHAPTER, tmp_path / CHAPTER.name)
    (tmp_path / "figures").mkdir()
    png = ROOT / "chapters" / "figures" / f"{CHAPTER.stem}.png"
    shutil.copy2(png, tmp_path / "figures" / png.name)
    return tmp_path / CHAPTER.name


def edit(path, change):
    nb = json.loads(path.read_text())
    change(nb)
    path.write_text(json.dumps(nb))


def reader_problems(path):
    words = (
        "picture",
        "opening-figure",
        "run-time",
        "run time",
        "median",
        "main-path",
        "collapsed",
    )
    return [p for p in notebooks.check(path) if any(w in p for w in words)]


def test_the_real_chapter_keeps_the_rules(chapter):
    assert reader_problems(chapter) == []


def test_a_missing_or_stale_run_time_cell_fails(chapter):
    edit(chapter, lambda nb: nb["cells"].pop(1))
    assert any("run-time cell" in p for p in reader_problems(chapter))


def test_a_run_time_cell_that_says_another_time_fails(chapter):
    def change(nb):
        nb["cells"][1]["source"] = "**Run time:** about 1 s."

    edit(chapter, change)
    assert any("differs from the record" in p for p in reader_problems(chapter))


def test_an_opening_without_its_picture_fails(chapter):
    def change(nb):
        src = "".join(nb["cells"][0]["source"])
        nb["cells"][0]["source"] = src.replace("](figures/", "](elsewhere/")

    edit(chapter, change)
    assert any("shows no picture" in p for p in reader_problems(chapter))


def test_a_picture_that_is_not_the_cells_output_fails(chapter):
    (chapter.parent / "figures" / f"{chapter.stem}.png").write_bytes(base64.b64decode("AAAA"))
    assert any("differs from the opening-figure" in p for p in reader_problems(chapter))


def long_prose(n_sentences, words_each):
    sentence = " ".join(["Word"] + ["word"] * (words_each - 2)) + " end."
    return " ".join([sentence] * n_sentences)


def test_long_sentences_fail(chapter):
    def change(nb):
        cell = {"cell_type": "markdown", "id": "long1", "metadata": {}}
        cell["source"] = long_prose(400, 30)
        nb["cells"].insert(3, cell)

    edit(chapter, change)
    assert any("median sentence" in p for p in reader_problems(chapter))


def test_main_path_words_fail_but_the_same_words_in_a_dropdown_pass(chapter):
    text = long_prose(200, 15)  # 3,000 words of 15-word sentences

    def add(source):
        def change(nb):
            nb["cells"].insert(
                3, {"cell_type": "markdown", "id": "x1", "metadata": {}, "source": source}
            )

        return change

    edit(chapter, add(text))
    assert any("main-path prose" in p for p in reader_problems(chapter))
    shutil.copy2(CHAPTER, chapter)
    edit(chapter, add(":::{dropdown} Going deeper: more\n" + text + "\n:::"))
    assert reader_problems(chapter) == []


def test_a_collapsed_markdown_cell_fails(chapter):
    def change(nb):
        i = next(i for i, c in enumerate(nb["cells"]) if i > 1 and c["cell_type"] == "markdown")
        nb["cells"][i]["metadata"]["jupyter"] = {"source_hidden": True}

    edit(chapter, change)
    assert any("collapsed" in p for p in reader_problems(chapter))
