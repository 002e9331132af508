"""Each rule of tools/check/notebooks.py, shown on a tiny chapter made with nbformat: the
chapter keeps every rule, and each copy that breaks one rule gets exactly that rule's
message. Then tools/build/hide_solutions.py, which applies the exercise rules: what it writes
passes the check, running it twice changes nothing, and it changes no chapter today."""

import base64
import json

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from tools.bench import time_chapters
from tools.build import hide_solutions
from tools.check import notebooks, prose_stats
from tools.common import ROOT

# A chapter the run-time record knows, so that the tiny copy can say what the record says.
NAME = "09_data.ipynb"
PNG = b"\x89PNG tiny opening picture"


def tiny_chapter() -> nbformat.NotebookNode:
    """The smallest chapter that keeps every convention."""
    record = json.loads(time_chapters.RECORD.read_text())["chapters"][NAME[:2]]
    picture = new_code_cell("draw()", execution_count=1)
    picture.metadata["tags"] = ["opening-figure"]
    png = base64.b64encode(PNG).decode()
    picture.outputs = [new_output("display_data", data={"image/png": png, "text/plain": "<Fig>"})]
    run_time = new_markdown_cell(time_chapters.run_time_text(record))
    run_time.metadata["tags"] = [time_chapters.TAG]
    predict = new_code_cell("# Solution to exercise 9.1\nprint(2 + 2)", execution_count=2)
    predict.metadata.update(
        tags=["hide-cell"], jupyter={"source_hidden": True, "outputs_hidden": True}
    )
    predict.outputs = [new_output("stream", name="stdout", text="4\n")]
    implement = new_code_cell("# Solution to exercise 9.2\nx = 1", execution_count=3)
    implement.metadata.update(tags=["hide-input"], jupyter={"source_hidden": True})
    return new_notebook(
        cells=[
            new_markdown_cell("# 9. Tiny\n\nA few lines.\n\n![A picture](figures/09_data.png)"),
            run_time,
            picture,
            new_markdown_cell("## Summary\n\nShort."),
            new_markdown_cell("## Exercises\n\n### Exercise 9.1 (predict, then run): Guess."),
            predict,
            new_markdown_cell(":::{dropdown} Answer to exercise 9.1\nFour.\n:::"),
            new_markdown_cell("### Exercise 9.2 (implement): Write it."),
            implement,
        ]
    )


def write(tmp_path, nb):
    (tmp_path / "figures").mkdir(exist_ok=True)
    (tmp_path / "figures" / NAME.replace(".ipynb", ".png")).write_bytes(PNG)
    path = tmp_path / NAME
    nbformat.write(nb, path)
    return path


def stream(text):
    return new_output("stream", name="stdout", text=text)


def set_meta(i, **meta):
    return lambda nb: nb.cells[i].metadata.update(meta)


def set_source(i, text):
    return lambda nb: setattr(nb.cells[i], "source", text)


def append_output(i, out):
    return lambda nb: nb.cells[i].outputs.append(out)


def insert(i, cell):
    return lambda nb: nb.cells.insert(i, cell)


def swap(i, j):
    def change(nb):
        nb.cells[i], nb.cells[j] = nb.cells[j], nb.cells[i]

    return change


def renumber(nb):
    """Exercise 9.2 and its solution numbered 8.2."""
    nb.cells[7].source = "### Exercise 8.2 (implement): Write it."
    nb.cells[8].source = "# Solution to exercise 8.2\nx = 1"


def ungrade(nb):
    """The implement exercise first, the prediction second, each solution collapsed right."""
    nb.cells[4].source = "## Exercises\n\n### Exercise 9.1 (implement): Write it."
    nb.cells[7].source = "### Exercise 9.2 (predict, then run): Guess."
    nb.cells[8].metadata.update(nb.cells[5].metadata)


def no_figure(nb):
    """No image output and no picture in the prose (the opening's picture goes too)."""
    nb.cells[2].outputs = []
    nb.cells[0].source = "# 9. Tiny\n\nA few lines."


LONG = " ".join(["Word"] + ["word"] * 28) + " end. "
WORDY = " ".join(["Word"] + ["word"] * 13) + " end. "
ERROR = new_output("error", ename="ValueError", evalue="bad", traceback=[])

# rule -> (what breaks it, its message without the "path: " prefix)
BREAKS = {
    notebooks.nothing_skipped: (
        set_meta(8, tags=["hide-input", "nbval-skip"]),
        "cell 8 is skipped by nbval: run it, and tag it nbval-ignore-output if its output "
        "cannot be stable",
    ),
    notebooks.no_stored_errors: (
        append_output(8, ERROR),
        "cell 8 has a stored error: ValueError: bad",
    ),
    notebooks.no_memory_addresses: (
        append_output(8, stream("<Foo object at 0x7f3a>\n")),
        "cell 8 stores a repr with a memory address: <Foo object at 0x7f3a>",
    ),
    notebooks.no_checks_printed_as_bools: (
        append_output(8, stream("same output: True\n")),
        "cell 8 prints a check as True/False ('same output: True'): print the measured "
        "numbers, then assert",
    ),
    notebooks.code_lines_fit: (
        set_source(8, "# Solution to exercise 9.2\nx = " + "1" * 97),
        "cell 8 line 2 has 101 characters (at most 100)",
    ),
    notebooks.no_collapsed_markdown: (
        set_meta(3, jupyter={"source_hidden": True}),
        "markdown cell 3 is collapsed (jupyter.source_hidden): JupyterLab then shows its "
        "first source line raw; a ':::{dropdown}' collapses it in both renderers",
    ),
    notebooks.versions_are_printed: (
        set_source(3, "## Summary\n\nWith torch 9.8.7."),
        "cell 3 names version 9.8.7, which no cell of the notebook prints: print it (or say "
        "which package without the number)",
    ),
    notebooks.executed_in_order: (
        lambda nb: setattr(nb.cells[8], "execution_count", 7),
        "execution counts are not 1, 2, 3, ...: re-execute it in a fresh kernel",
    ),
    notebooks.prose_about_the_lesson: (
        set_source(3, "## Summary\n\nnbval compares it."),
        "cell 3 talks about the harness ('nbval'): say what the cell shows; the introduction "
        "explains how the book checks itself",
    ),
    notebooks.no_machinery_imports: (
        set_source(8, "# Solution to exercise 9.2\nfrom helpers.repro.numerics import tolerance"),
        "cell 8 imports tolerance: call helpers.repro.numerics.assert_within_measured_spread",
    ),
    notebooks.no_record_reads: (
        set_source(8, "# Solution to exercise 9.2\nopen('data/x.json')"),
        "cell 8 reads the record 'data/x.json': cite its Experiments page instead",
    ),
    notebooks.no_maintainer_commands: (
        set_source(3, "## Summary\n\nRun tools/check/pairing.py."),
        "cell 3 shows the maintainer's command 'tools/check/pairing.py' to the reader",
    ),
    notebooks.title_is_numbered: (
        set_source(0, "# 8. Tiny\n\n![A picture](figures/09_data.png)"),
        "the first cell must be the title '# 9. ...', found '# 8. Tiny'",
    ),
    notebooks.opening_shows_its_picture: (
        set_source(0, "# 9. Tiny\n\nA few lines."),
        "the opening cell shows no picture: add '![...](figures/09_data.png)'",
    ),
    notebooks.run_time_is_recorded: (
        set_source(1, "**Run time:** about 1 s."),
        (
            "the run-time cell differs from the record: "
            "run python -m tools.bench.time_chapters --write"
        ),
    ),
    notebooks.sentences_are_short: (
        insert(3, new_markdown_cell(LONG * 40)),
        "median sentence 30.0 words (at most 20): one idea per sentence",
    ),
    notebooks.main_path_is_short: (
        insert(3, new_markdown_cell(WORDY * 200)),
        # {:,}: the 3,000 words added and the tiny chapter's own
        "{:,} words of main-path prose (at most 2,500): move digressions into 'Going "
        "deeper' dropdowns",
    ),
    notebooks.ends_with_summary_and_exercises: (
        set_source(3, "## Recap\n\nShort."),
        "the last two sections must be '## Summary' and '## Exercises', found "
        "['## Recap', '## Exercises']",
    ),
    notebooks.two_exercises_or_more: (
        lambda nb: nb.cells.__delitem__(slice(7, 9)),
        "1 exercise(s); each chapter has at least 2 ('### Exercise N.k')",
    ),
    notebooks.exercises_are_graded: (
        ungrade,
        "exercises must be graded predict, then run -> modify -> implement: found "
        "['implement', 'predict, then run']",
    ),
    notebooks.exercises_carry_the_chapter_number: (
        renumber,
        "exercise 8.2 in chapter 9: number it 9.2",
    ),
    notebooks.every_exercise_has_a_solution: (
        set_source(8, "# Answer\nx = 1"),
        "exercise 9.2 has no code cell starting '# Solution to exercise 9.2'",
    ),
    notebooks.solutions_are_collapsed: (
        set_meta(5, tags=["hide-input"], jupyter={"source_hidden": True}),
        "the solution to prediction exercise 9.1 (cell 5) shows its answer: tag it hide-cell "
        "and set jupyter.outputs_hidden",
    ),
    notebooks.answers_sit_in_dropdowns: (
        set_source(6, "Four, since two and two make four."),
        "the prose after the solution to exercise 9.1 (cell 6) gives the answer away: put it "
        "in a ':::{dropdown} Answer ...' cell",
    ),
    notebooks.shows_a_figure: (
        no_figure,
        "no figure: every chapter shows at least one (a plot, or an SVG in the prose)",
    ),
    notebooks.drawing_code_is_hidden: (
        set_meta(2, tags=["opening-figure", "figure"]),
        "cell 2 draws a figure (tag 'figure'): hide its code (source_hidden, hide-input)",
    ),
}

# A rule's other messages.
MORE_BREAKS = [
    (
        notebooks.executed_in_order,
        lambda nb: setattr(nb.cells[8], "execution_count", None),
        "1 code cell(s) never executed: re-execute the notebook",
    ),
    (
        notebooks.run_time_is_recorded,
        set_meta(1, tags=[]),
        (
            "the second cell must be the run-time cell: "
            "run python -m tools.bench.time_chapters --write"
        ),
    ),
    (
        notebooks.exercises_are_graded,
        set_source(7, "### Exercise 9.2 (write): Write it."),
        "exercise kinds must be one of ['predict, then run', 'modify', 'implement']: found "
        "['predict, then run', 'write']",
    ),
    (
        notebooks.every_exercise_has_a_solution,
        swap(7, 8),
        "the solution to exercise 9.2 comes before its statement",
    ),
    (
        notebooks.solutions_are_collapsed,
        set_meta(8, tags=[], jupyter={}),
        "the solution to exercise 9.2 (cell 8) must be collapsed: metadata "
        "jupyter.source_hidden and tag hide-input (or hide-cell)",
    ),
]
CASES = [(rule, *BREAKS[rule]) for rule in BREAKS] + MORE_BREAKS

# Breaking it also breaks the opening's picture, which is a figure.
NOT_ALONE = {notebooks.shows_a_figure}


def test_every_rule_is_shown_failing():
    assert set(BREAKS) == set(notebooks.RULES)


def test_the_tiny_chapter_keeps_every_rule(tmp_path):
    assert notebooks.check(write(tmp_path, tiny_chapter())) == []


@pytest.mark.parametrize("rule, breaks, message", CASES, ids=[rule.__name__ for rule, *_ in CASES])
def test_a_broken_rule_gives_its_message(tmp_path, rule, breaks, message):
    if rule is notebooks.main_path_is_short:
        tiny = prose_stats.stats(write(tmp_path, tiny_chapter()))["main_words"]
        message = message.format(tiny + 3000)
    nb = tiny_chapter()
    breaks(nb)
    path = write(tmp_path, nb)
    page = notebooks.Page.read(path)
    assert list(rule(page)) == [message]
    if rule in NOT_ALONE:
        assert f"{path}: {message}" in notebooks.check(path)
    else:
        assert notebooks.check(path) == [f"{path}: {message}"]
        assert [r for r in notebooks.RULES if list(r(page))] == [rule]


def test_the_real_chapters_keep_every_rule():
    chapters = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))
    pages = chapters + sorted((ROOT / "appendix").glob("*.ipynb"))
    assert len(chapters) >= 20
    assert [p for path in pages for p in notebooks.check(path)] == []


# --- tools/build/hide_solutions.py applies the exercise rules ----------------------------------

EXERCISE_RULES = (notebooks.solutions_are_collapsed, notebooks.answers_sit_in_dropdowns)


def exercise_problems(nb):
    page = notebooks.Page(ROOT / "chapters" / NAME, nb.cells)
    return [msg for rule in EXERCISE_RULES for msg in rule(page)]


FLAGS = [{}, {"source_hidden": True}, {"outputs_hidden": True}]
FLAGS.append({"source_hidden": True, "outputs_hidden": True})
TAGS = [[], ["hide-input"], ["hide-cell"], ["hide-input", "hide-cell"]]


@pytest.mark.parametrize("kind", list(notebooks.KINDS))
def test_hide_solutions_changes_exactly_what_the_check_refuses(kind):
    for tags in TAGS:
        for jupyter in FLAGS:
            nb = tiny_chapter()
            nb.cells[7].source = f"### Exercise 9.2 ({kind}): Do it."
            nb.cells[8].metadata.update(tags=list(tags), jupyter=dict(jupyter))
            refused = exercise_problems(nb)
            changes = hide_solutions.hide(nb)
            assert bool(changes) == bool(refused), (tags, jupyter, refused, changes)
            assert exercise_problems(nb) == []
            assert hide_solutions.hide(nb) == []


def test_hide_solutions_moves_a_written_answer_into_a_dropdown(tmp_path):
    nb = tiny_chapter()
    nb.cells[5].metadata = {}
    nb.cells[6].source = "Four, since two and two make four.\n\n" + nb.cells[7].source
    del nb.cells[7]
    assert hide_solutions.hide(nb) == [
        "collapsed the solution to exercise 9.1",
        "moved the answer to exercise 9.1 into a dropdown",
    ]
    assert nb.cells[6].source == (
        ":::{dropdown} Answer to exercise 9.1\nFour, since two and two make four.\n:::"
    )
    assert nb.cells[7].source == "### Exercise 9.2 (implement): Write it."
    assert notebooks.check(write(tmp_path, nb)) == []
    assert hide_solutions.hide(nb) == []


def test_hide_solutions_changes_no_chapter_today():
    chapters = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))
    assert hide_solutions.main(["--check", *map(str, chapters)]) == 0
