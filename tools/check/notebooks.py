"""Check that every chapter notebook keeps the book's conventions (part of `make test`).

Usage:
    python -m tools.check.notebooks                   # chapters/NN_*.ipynb, appendix/*.ipynb
    python -m tools.check.notebooks chapters/03_x.ipynb ...

It reads the stored notebooks (it runs nothing, so it takes well under a second) and fails
on what nbval cannot see. Each convention is one rule below, a function that takes the page
and yields its problems; `RULES` lists them, and `PAGE_RULES` are the ones an appendix page
keeps too (it has no chapter number, summary, exercises or figure). The exercise convention
(`solution_shows`, `collapse_solution`, `gives_answer_away`, `answer_dropdown`) is shared with
tools/build/hide_solutions.py, which applies what the check requires.

It prints the prose table (tools/check/prose_stats.py) for every chapter checked, then one
line per problem, and exits 1 if there is any.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import NamedTuple

from tools.bench import time_chapters
from tools.build import export_opening_figures
from tools.check import prose_stats
from tools.common import ROOT

CHAPTERS = ROOT / "chapters"
MAX_LINE = 100
MAX_MEDIAN_SENTENCE = 20  # words
MAX_MAIN_PATH_WORDS = 2500
ADDRESS = re.compile(r"<[^<>]* at 0x[0-9a-fA-F]+>")
BARE_BOOL = re.compile(r"^\s*(True|False)\s*$")
# "a == b: True", "same output: True", "unchanged (< 1e-5): True": a check printed as a bool
CHECK_BOOL = re.compile(
    r"(==|!=|<|>|\bsame\b|\bequal|\bunchanged\b|\bchanged\b|\bwithin\b|\bmatch|"
    r"\bidentical\b|\bagree)[^:;|]*:\s*(True|False)\b",
    re.I,
)
FIGURE_MD = re.compile(r"```\{(figure|image)\}|!\[[^\]]*\]\(")
# words about the test harness or this project's machines: the introduction explains the
# convention once, chapter prose teaches the Transformer
HARNESS = re.compile(r"\bnbval\b|stored outputs?\b|\bmake test\b|\bthis project\b", re.I)
# the reproducibility machinery stays off the reader's path (the appendix page "How the book
# checks itself" explains it): chapters import none of it; a trained-model bound goes through
# helpers.repro.numerics.assert_within_measured_spread
MACHINERY = re.compile(r"\b(kernel_spread|tolerance|path_label|largest_gap)\b")
MACHINERY_IMPORT = re.compile(
    r"^\s*(from\s+helpers[\w.]*\s+import\s+[^\n]*|import\s+helpers[\w.]*)", re.M
)
# a chapter argues from its own cells: a recorded experiment is cited from its Experiments page
RECORD_READ = re.compile(r"""["'](?:\.\./chapters/)?data/[\w.-]+\.json["']""")
# a maintainer's command (a tool under tools/, by path or as a module) in a chapter's prose or
# output (chapter 23 launches its own training script, tools/train_ddp.py: that one is the lesson)
TOOL_COMMAND = re.compile(
    r"\btools/(?!train_ddp\.py)[\w/-]+\.py\b|(?<![\w.])tools\.(?:build|check|bench|record)\.\w+"
    r"|\bmake (?:record-gpu|doctor|test-portable)\b"
)
# a version number such as 2.13.0 in prose (not "section 3.2.1"): the notebook must print it
VERSION = re.compile(r"(?<![\w.])(?<!section )(\d+\.\d+\.\d+)(?![\w.]*\d)", re.I)


# --- cells -----------------------------------------------------------------------------------


def source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def output_text(out) -> str:
    """A stream's text, or a display's text/plain."""
    text = out.get("text") if out.get("output_type") == "stream" else None
    if text is None:
        text = out.get("data", {}).get("text/plain", "")
    return "".join(text) if isinstance(text, list) else text


def tags(cell) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def hides_code(cell) -> bool:
    """Collapsed in JupyterLab (jupyter.source_hidden) and behind a toggle in the HTML."""
    hidden = cell.get("metadata", {}).get("jupyter", {}).get("source_hidden") is True
    return hidden and ("hide-input" in tags(cell) or "hide-cell" in tags(cell))


def hides_output(cell) -> bool:
    """The output hidden too, in JupyterLab (jupyter.outputs_hidden) and the HTML (hide-cell)."""
    outputs_hidden = cell.get("metadata", {}).get("jupyter", {}).get("outputs_hidden")
    return "hide-cell" in tags(cell) and bool(outputs_hidden)


def starts_dropdown(text: str) -> bool:
    return bool(re.match(r":{3,}\{dropdown\}", text.lstrip()))


# --- the exercise convention (tools/build/hide_solutions.py applies it) ------------------------

EXERCISE = re.compile(r"^### Exercise (\d+)\.(\d+) \(([^)]*)\)", re.M)
KINDS = {"predict, then run": 0, "modify": 1, "implement": 2}  # the order exercises come in
SOLUTION_MARK = re.compile(r"^# Solution to exercise (\d+)\.(\d+)\b")
NEXT_SECTION = re.compile(r"^(### Exercise|## )", re.M)


class Exercise(NamedTuple):
    cell: int
    chapter: str
    k: str
    kind: str

    @property
    def number(self) -> str:
        return f"{self.chapter}.{self.k}"


def exercises(cells) -> list[Exercise]:
    """The `### Exercise N.k (kind)` headings, in order."""
    return [
        Exercise(i, *m.groups())
        for i, cell in enumerate(cells)
        if cell.get("cell_type") == "markdown"
        for m in EXERCISE.finditer(source(cell))
    ]


def solution_number(cell) -> tuple[str, str] | None:
    """(N, k) for a code cell starting `# Solution to exercise N.k`, else None."""
    m = cell.get("cell_type") == "code" and SOLUTION_MARK.match(source(cell).lstrip())
    return m.groups() if m else None


def solution_shows(cell, kind: str | None) -> list[str]:
    """What a solution cell shows before the reader asks: "code" and/or "output" (a
    prediction's output is its answer). Empty when it is collapsed as the book wants."""
    shown = [] if hides_code(cell) else ["code"]
    if kind and kind.startswith("predict") and not hides_output(cell):
        shown.append("output")
    return shown


def collapse_solution(cell, kind: str | None) -> None:
    """Collapse a solution cell in place: code hidden (source_hidden, hide-input); a
    prediction's output hidden too (hide-cell, outputs_hidden)."""
    predict = bool(kind and kind.startswith("predict"))
    meta = cell.setdefault("metadata", {})
    meta["tags"] = [t for t in tags(cell) if t not in ("hide-input", "hide-cell")]
    meta["tags"].append("hide-cell" if predict else "hide-input")
    jupyter = dict(meta.get("jupyter", {}), source_hidden=True)
    if predict:
        jupyter["outputs_hidden"] = True
    else:
        jupyter.pop("outputs_hidden", None)
    meta["jupyter"] = jupyter


def gives_answer_away(after) -> bool:
    """Prose right after a solution is its written answer unless it opens a dropdown or the
    next exercise or section."""
    text = source(after)
    return (
        after.get("cell_type") == "markdown"
        and not NEXT_SECTION.match(text)
        and not starts_dropdown(text)
    )


def answer_dropdown(number: str, answer: str) -> str:
    """The markdown of a written answer's cell: a dropdown, collapsed in JupyterLab and the
    HTML alike (never jupyter.source_hidden, which JupyterLab shows as a raw first line)."""
    return f":::{{dropdown}} Answer to exercise {number}\n{answer}\n:::"


# --- the page ------------------------------------------------------------------------------


@dataclass
class Page:
    """A stored notebook as the rules read it."""

    path: Path
    cells: list[dict] = field(repr=False)

    @classmethod
    def read(cls, path: Path) -> Page:
        return cls(path, json.loads(path.read_text(encoding="utf-8")).get("cells", []))

    @property
    def is_chapter(self) -> bool:
        return self.path.name[:2].isdigit()

    @property
    def number(self) -> int:
        return int(self.path.name[:2])

    def executed(self) -> Iterator[tuple[int, dict]]:
        """The code cells nbval runs (an empty one is skipped)."""
        for i, cell in enumerate(self.cells):
            if cell.get("cell_type") == "code" and source(cell).strip():
                yield i, cell

    def markdown(self) -> Iterator[tuple[int, dict]]:
        for i, cell in enumerate(self.cells):
            if cell.get("cell_type") == "markdown":
                yield i, cell

    @cached_property
    def prose(self) -> dict:
        return prose_stats.stats(self.path)

    @cached_property
    def exercises(self) -> list[Exercise]:
        return exercises(self.cells)

    def solutions(self, ex: Exercise) -> list[int]:
        return [
            j for j, cell in enumerate(self.cells) if solution_number(cell) == (ex.chapter, ex.k)
        ]


Rule = Callable[[Page], Iterator[str]]


# --- rules for every page: what nbval cannot see --------------------------------------------


def nothing_skipped(page: Page) -> Iterator[str]:
    """Every code cell runs under nbval: a skipped one could rot unnoticed."""
    for i, cell in page.executed():
        if "nbval-skip" in tags(cell) or "NBVAL_SKIP" in source(cell):
            yield (
                f"cell {i} is skipped by nbval: run it, and tag it nbval-ignore-output if "
                "its output cannot be stable"
            )


def no_stored_errors(page: Page) -> Iterator[str]:
    """No stored error: the reader would see a traceback where the lesson should be."""
    for i, cell in page.executed():
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                yield f"cell {i} has a stored error: {out.get('ename')}: {out.get('evalue')}"


def printed_texts(cell) -> list[str]:
    """A cell's printed texts, consecutive writes to one stream joined (print(a, b) may write
    twice)."""
    texts: list[tuple[str | None, str]] = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            continue
        if out.get("output_type") == "stream" and texts and texts[-1][0] == out.get("name"):
            texts[-1] = (out.get("name"), texts[-1][1] + output_text(out))
        else:
            texts.append((out.get("name"), output_text(out)))
    return [text for _, text in texts]


def no_memory_addresses(page: Page) -> Iterator[str]:
    """No repr with a memory address (`<... at 0x7f...>`): it changes on every run."""
    for i, cell in page.executed():
        for text in printed_texts(cell):
            if match := ADDRESS.search(text):
                yield f"cell {i} stores a repr with a memory address: {match.group(0)}"


def no_checks_printed_as_bools(page: Page) -> Iterator[str]:
    """A check is not printed as True/False: the reader learns from the numbers, and an
    assert fails loudly where a printed False would pass nbval once stored."""
    for i, cell in page.executed():
        for text in printed_texts(cell):
            for line in text.splitlines():
                if BARE_BOOL.match(line) or CHECK_BOOL.search(line):
                    yield (
                        f"cell {i} prints a check as True/False ({line.strip()[:60]!r}): "
                        "print the measured numbers, then assert"
                    )
                    break


def code_lines_fit(page: Page) -> Iterator[str]:
    """Code lines of at most 100 characters: a longer one scrolls sideways in the HTML book."""
    for i, cell in page.executed():
        for n, line in enumerate(source(cell).splitlines(), 1):
            if len(line) > MAX_LINE:
                yield f"cell {i} line {n} has {len(line)} characters (at most {MAX_LINE})"


def no_collapsed_markdown(page: Page) -> Iterator[str]:
    """No markdown cell collapsed with source_hidden: JupyterLab would show its first line
    raw; a dropdown collapses it in both renderers."""
    for i, cell in page.markdown():
        if cell.get("metadata", {}).get("jupyter", {}).get("source_hidden") is True:
            yield (
                f"markdown cell {i} is collapsed (jupyter.source_hidden): JupyterLab then shows "
                "its first source line raw; a ':::{dropdown}' collapses it in both renderers"
            )


def versions_are_printed(page: Page) -> Iterator[str]:
    """A version named in the prose is printed by the notebook, so it cannot go stale."""
    shown = "\n".join(
        source(c) + "".join(output_text(o) for o in c.get("outputs", []))
        for c in page.cells
        if c.get("cell_type") == "code"
    )
    for i, cell in page.markdown():
        for version in dict.fromkeys(VERSION.findall(source(cell))):
            if version not in shown:
                yield (
                    f"cell {i} names version {version}, which no cell of the notebook "
                    "prints: print it (or say which package without the number)"
                )


def executed_in_order(page: Page) -> Iterator[str]:
    """Every code cell executed, in one fresh kernel from the top: the outputs are what a
    reader running it gets."""
    counts = [cell.get("execution_count") for _, cell in page.executed()]
    if None in counts:
        yield f"{counts.count(None)} code cell(s) never executed: re-execute the notebook"
    elif counts != list(range(1, len(counts) + 1)):
        yield "execution counts are not 1, 2, 3, ...: re-execute it in a fresh kernel"


# --- rules for chapters: the reader's path ---------------------------------------------------


def prose_about_the_lesson(page: Page) -> Iterator[str]:
    """Chapter prose says what the cell shows, not how the book tests itself (the
    introduction explains that once)."""
    for i, cell in page.markdown():
        for match in dict.fromkeys(m.group(0) for m in HARNESS.finditer(source(cell))):
            yield (
                f"cell {i} talks about the harness ({match!r}): say what the cell shows; "
                "the introduction explains how the book checks itself"
            )


def no_machinery_imports(page: Page) -> Iterator[str]:
    """A chapter imports none of the reproducibility machinery: a trained-model bound goes
    through one call."""
    for i, cell in enumerate(page.cells):
        if cell.get("cell_type") != "code":
            continue
        for imp in MACHINERY_IMPORT.findall(source(cell)):
            for name in dict.fromkeys(MACHINERY.findall(imp)):
                yield (
                    f"cell {i} imports {name}: call "
                    "helpers.repro.numerics.assert_within_measured_spread"
                )


def no_record_reads(page: Page) -> Iterator[str]:
    """A chapter argues from its own cells: a recorded experiment is cited from its page."""
    for i, cell in enumerate(page.cells):
        if cell.get("cell_type") != "code":
            continue
        for match in dict.fromkeys(RECORD_READ.findall(source(cell))):
            yield f"cell {i} reads the record {match}: cite its Experiments page instead"


def no_maintainer_commands(page: Page) -> Iterator[str]:
    """A chapter shows the reader no maintainer's command (a tool, make doctor, ...)."""
    for i, cell in enumerate(page.cells):
        if cell.get("cell_type") == "code":
            shown = "".join(output_text(o) for o in cell.get("outputs", []))
        else:
            shown = source(cell)
        for match in dict.fromkeys(m.group(0) for m in TOOL_COMMAND.finditer(shown)):
            yield f"cell {i} shows the maintainer's command {match!r} to the reader"


def title_is_numbered(page: Page) -> Iterator[str]:
    """The first cell is the title, numbered like the file (`# 7. ...` for 07_*.ipynb)."""
    head = page.cells[0] if page.cells else {}
    first = source(head).lstrip().splitlines()[0] if source(head).strip() else ""
    if head.get("cell_type") != "markdown" or not first.startswith(f"# {page.number}. "):
        yield f"the first cell must be the title '# {page.number}. ...', found {first[:40]!r}"


def opening_shows_its_picture(page: Page) -> Iterator[str]:
    """The opening shows figures/NN_slug.png, the stored png of the cell tagged
    opening-figure (tools/build/export_opening_figures.py writes it): drawn by the chapter."""
    if f"](figures/{page.path.stem}.png)" not in source(page.cells[0] if page.cells else {}):
        yield f"the opening cell shows no picture: add '![...](figures/{page.path.stem}.png)'"
    yield from export_opening_figures.problems(page.path)


def run_time_is_recorded(page: Page) -> Iterator[str]:
    """The second cell, tagged run-time, says what chapters/data/run_times.json measured, so
    the reader knows what opening the chapter costs."""
    record = json.loads(time_chapters.RECORD.read_text()) if time_chapters.RECORD.exists() else {}
    rec = record.get("chapters", {}).get(page.path.name[:2])
    second = page.cells[1] if len(page.cells) > 1 else {}
    if rec is None or rec.get("notebook") != page.path.name:
        yield "no run time recorded for this chapter: run python -m tools.bench.time_chapters NN"
    elif time_chapters.TAG not in tags(second):
        yield (
            "the second cell must be the run-time cell: "
            "run python -m tools.bench.time_chapters --write"
        )
    elif source(second) != time_chapters.run_time_text(rec):
        yield (
            "the run-time cell differs from the record: "
            "run python -m tools.bench.time_chapters --write"
        )


def sentences_are_short(page: Page) -> Iterator[str]:
    """A median sentence of at most 20 words (tools/check/prose_stats.py): one idea each."""
    if page.prose["median_sentence"] > MAX_MEDIAN_SENTENCE:
        yield (
            f"median sentence {page.prose['median_sentence']:.1f} words (at most "
            f"{MAX_MEDIAN_SENTENCE}): one idea per sentence"
        )


def main_path_is_short(page: Page) -> Iterator[str]:
    """At most 2,500 words of prose outside dropdowns: a chapter reads in one sitting."""
    if page.prose["main_words"] > MAX_MAIN_PATH_WORDS:
        yield (
            f"{page.prose['main_words']:,} words of main-path prose (at most "
            f"{MAX_MAIN_PATH_WORDS:,}): move digressions into 'Going deeper' dropdowns"
        )


def ends_with_summary_and_exercises(page: Page) -> Iterator[str]:
    """The last two sections are `## Summary` and `## Exercises`, as in every chapter."""
    headings = [
        line.strip()
        for _, cell in page.markdown()
        for line in source(cell).splitlines()
        if line.startswith("## ")
    ]
    if headings[-2:] != ["## Summary", "## Exercises"]:
        yield (
            f"the last two sections must be '## Summary' and '## Exercises', found {headings[-2:]}"
        )


def two_exercises_or_more(page: Page) -> Iterator[str]:
    """At least two exercises (`### Exercise N.k (kind): ...`): the reader practises."""
    if len(page.exercises) < 2:
        n = len(page.exercises)
        yield f"{n} exercise(s); each chapter has at least 2 ('### Exercise N.k')"


def exercises_are_graded(page: Page) -> Iterator[str]:
    """Exercises go from "predict, then run" over "modify" to "implement": easy ones first."""
    kinds = [ex.kind for ex in page.exercises]
    ranks = [KINDS.get(kind, -1) for kind in kinds]
    if -1 in ranks:
        yield f"exercise kinds must be one of {list(KINDS)}: found {kinds}"
    elif ranks != sorted(ranks):
        yield f"exercises must be graded {' -> '.join(KINDS)}: found {kinds}"


def exercises_carry_the_chapter_number(page: Page) -> Iterator[str]:
    """Exercise N.k sits in chapter N, so a reference to it is unambiguous."""
    for ex in page.exercises:
        if int(ex.chapter) != page.number:
            yield f"exercise {ex.number} in chapter {page.number}: number it {page.number}.{ex.k}"


def every_exercise_has_a_solution(page: Page) -> Iterator[str]:
    """Each exercise has a solution cell (`# Solution to exercise N.k`) after its statement."""
    for ex in page.exercises:
        solutions = page.solutions(ex)
        if not solutions:
            yield (
                f"exercise {ex.number} has no code cell starting "
                f"'# Solution to exercise {ex.number}'"
            )
        for j in solutions:
            if j < ex.cell:
                yield f"the solution to exercise {ex.number} comes before its statement"


def solutions_are_collapsed(page: Page) -> Iterator[str]:
    """A solution shows nothing before the reader asks: its code collapsed, and a
    prediction's output (the answer) too (`solution_shows`)."""
    for ex in page.exercises:
        for j in page.solutions(ex):
            shown = solution_shows(page.cells[j], ex.kind)
            if "code" in shown:
                yield (
                    f"the solution to exercise {ex.number} (cell {j}) must be collapsed: "
                    "metadata jupyter.source_hidden and tag hide-input (or hide-cell)"
                )
            if "output" in shown:
                yield (
                    f"the solution to prediction exercise {ex.number} (cell {j}) shows its "
                    "answer: tag it hide-cell and set jupyter.outputs_hidden"
                )


def answers_sit_in_dropdowns(page: Page) -> Iterator[str]:
    """Prose right after a solution is a written answer: it sits in a dropdown
    (`gives_answer_away`)."""
    for ex in page.exercises:
        for j in page.solutions(ex):
            if j + 1 < len(page.cells) and gives_answer_away(page.cells[j + 1]):
                yield (
                    f"the prose after the solution to exercise {ex.number} (cell {j + 1}) "
                    "gives the answer away: put it in a ':::{dropdown} Answer ...' cell"
                )


def shows_a_figure(page: Page) -> Iterator[str]:
    """At least one figure (a plot, or an image or figure directive in the prose)."""
    has_image = any(
        any(k.startswith("image/") for k in out.get("data", {}))
        for cell in page.cells
        for out in cell.get("outputs", [])
    )
    has_md_figure = any(FIGURE_MD.search(source(cell)) for _, cell in page.markdown())
    if not (has_image or has_md_figure):
        yield "no figure: every chapter shows at least one (a plot, or an SVG in the prose)"


def drawing_code_is_hidden(page: Page) -> Iterator[str]:
    """Drawing code (a cell tagged `figure`) is hidden: the picture is the lesson, not its
    matplotlib."""
    for i, cell in enumerate(page.cells):
        if "figure" in tags(cell) and not hides_code(cell):
            yield (
                f"cell {i} draws a figure (tag 'figure'): hide its code (source_hidden, hide-input)"
            )


PAGE_RULES: list[Rule] = [
    nothing_skipped,
    no_stored_errors,
    no_memory_addresses,
    no_checks_printed_as_bools,
    code_lines_fit,
    no_collapsed_markdown,
    versions_are_printed,
    executed_in_order,
]
CHAPTER_RULES: list[Rule] = [
    prose_about_the_lesson,
    no_machinery_imports,
    no_record_reads,
    no_maintainer_commands,
    title_is_numbered,
    opening_shows_its_picture,
    run_time_is_recorded,
    sentences_are_short,
    main_path_is_short,
    ends_with_summary_and_exercises,
    two_exercises_or_more,
    exercises_are_graded,
    exercises_carry_the_chapter_number,
    every_exercise_has_a_solution,
    solutions_are_collapsed,
    answers_sit_in_dropdowns,
    shows_a_figure,
    drawing_code_is_hidden,
]
RULES: list[Rule] = PAGE_RULES + CHAPTER_RULES


def check(path: Path) -> list[str]:
    """Every problem of one notebook, as `path: problem` lines, rule by rule."""
    page = Page.read(path)
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    rules = RULES if page.is_chapter else PAGE_RULES
    return [f"{where}: {msg}" for rule in rules for msg in rule(page)]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "paths", nargs="*", help="notebooks (.ipynb); default: every chapter and appendix page"
    )
    argv = parser.parse_args(argv).paths
    paths = [Path(a).resolve() for a in argv] or (
        sorted(CHAPTERS.glob("[0-9][0-9]_*.ipynb")) + sorted((ROOT / "appendix").glob("*.ipynb"))
    )
    problems = [p for path in paths for p in check(path)]
    chapters = [p for p in paths if p.name[:2].isdigit()]
    if chapters:
        print(f"{'chapter':>7s} {'words':>6s} {'main path':>9s} {'median sentence':>15s}")
        for path in chapters:
            r = prose_stats.stats(path)
            print(
                f"{r['chapter']:>7s} {r['words']:6,d} {r['main_words']:9,d} "
                f"{r['median_sentence']:15.1f}"
            )
    for p in problems:
        print(p)
    n = len(paths)
    if problems:
        print(f"tools.check.notebooks: {len(problems)} problem(s) in {n} notebook(s)")
        return 1
    print(f"tools.check.notebooks: {n} notebook(s) keep the conventions")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
