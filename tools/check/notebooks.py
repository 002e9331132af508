#!/usr/bin/env python3
"""Check that every chapter notebook keeps the book's conventions (part of `make test`).

Usage:
    python tools/check/notebooks.py                  # chapters/NN_*.ipynb, appendix/*.ipynb
    python tools/check/notebooks.py chapters/03_x.ipynb ...

It reads the stored notebooks (it runs nothing, so it takes well under a second) and fails
on what nbval cannot see (appendix pages: the first group only):

- a code cell never executed, one with a stored error, execution counts not 1, 2, 3, ...,
  or a cell that nbval would skip (`nbval-skip`, `# NBVAL_SKIP`);
- a stored output holding a repr with a memory address (`<... at 0x7f...>`);
- an output line that is only `True` or `False`, or a check printed as one
  ("a == b: True", "same output: True"): print the measured numbers, then assert;
- a code line over 100 characters (it scrolls sideways in the HTML book);
- a title that is not numbered like the file (`# 7. ...` for `07_*.ipynb`);
- no `## Summary` followed by `## Exercises` as the chapter's last two sections, fewer than
  two exercises (`### Exercise N.k (kind): ...`), exercises not graded from "predict, then
  run" over "modify" to "implement", or an exercise without a solution cell after it; a
  solution cell must be collapsed in JupyterLab (`jupyter.source_hidden`) and behind a
  toggle in the HTML (tag `hide-input`); a prediction's solution hides its output too (tag
  `hide-cell`, `jupyter.outputs_hidden`), and prose right after a solution sits in a
  `:::{dropdown}` cell, so that no answer shows before the reader asks for it; no markdown
  cell is collapsed with `jupyter.source_hidden` (JupyterLab would show its first line raw:
  jupyterlab-myst renders the dropdown collapsed instead);
- an opening that is not: the title, a few lines, and the picture `figures/NN_slug.png`,
  which must be the stored png of the code cell tagged `opening-figure`
  (tools/build/export_opening_figures.py writes it); then a cell tagged `run-time` that says what
  chapters/data/run_times.json recorded (tools/bench/time_chapters.py measures and writes it);
- prose that is hard to read: a median sentence over 20 words, or over 2,500 words of
  main-path prose (outside `:::{dropdown}` blocks), as tools/check/prose_stats.py counts them; the
  table of both is printed for every chapter checked;
- no figure (an image output, or an image or figure directive in the prose);
- drawing code (a cell tagged `figure`) not hidden in the same two ways.

It prints one line per problem and exits 1 if there is any.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = ROOT / "chapters"
sys.path.insert(0, str(ROOT / "tools"))
import export_opening_figures  # noqa: E402
import prose_stats  # noqa: E402
import time_chapters  # noqa: E402

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
EXERCISE = re.compile(r"^### Exercise (\d+)\.(\d+) \(([^)]*)\)", re.M)
KINDS = {"predict, then run": 0, "modify": 1, "implement": 2}  # the order exercises come in
SOLUTION_MARK = re.compile(r"^# Solution to exercise (\d+)\.(\d+)\b")
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
# a maintainer's command (a script under tools/) in a chapter's prose or output
# (chapter 20 launches its own training script, tools/train_ddp.py: that one is the lesson)
TOOL_COMMAND = re.compile(
    r"\btools/(?!train_ddp\.py)[\w-]+\.py\b|\bmake (?:record-gpu|doctor|test-portable)\b"
)
# a version number such as 2.13.0 in prose (not "section 3.2.1"): the notebook must print it
VERSION = re.compile(r"(?<![\w.])(?<!section )(\d+\.\d+\.\d+)(?![\w.]*\d)", re.I)


def source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def output_text(out) -> str:
    """A stream's text, or a display's text/plain."""
    text = out.get("text") if out.get("output_type") == "stream" else None
    if text is None:
        text = out.get("data", {}).get("text/plain", "")
    return "".join(text) if isinstance(text, list) else text


def hidden(cell) -> bool:
    meta = cell.get("metadata", {})
    tags = meta.get("tags", [])
    return meta.get("jupyter", {}).get("source_hidden") is True and (
        "hide-input" in tags or "hide-cell" in tags
    )


def hides_output(cell) -> bool:
    meta = cell.get("metadata", {})
    return "hide-cell" in meta.get("tags", []) and meta.get("jupyter", {}).get("outputs_hidden")


def hidden_markdown(cell) -> bool:
    return cell.get("metadata", {}).get("jupyter", {}).get("source_hidden") is True


def dropdown_start(text: str) -> bool:
    return bool(re.match(r":{3,}\{dropdown\}", text.lstrip()))


def reader_path_problems(cells) -> list[tuple[int, str]]:
    """What keeps the reproducibility machinery and recorded research out of a chapter."""
    found = []
    for i, cell in enumerate(cells):
        text = source(cell)
        if cell.get("cell_type") == "code":
            for imp in MACHINERY_IMPORT.findall(text):
                for name in dict.fromkeys(MACHINERY.findall(imp)):
                    found.append(
                        (
                            i,
                            f"imports {name}: call "
                            "helpers.repro.numerics.assert_within_measured_spread",
                        )
                    )
            for match in dict.fromkeys(RECORD_READ.findall(text)):
                found.append((i, f"reads the record {match}: cite its Experiments page instead"))
            shown = "".join(output_text(o) for o in cell.get("outputs", []))
        else:
            shown = text
        for match in dict.fromkeys(m.group(0) for m in TOOL_COMMAND.finditer(shown)):
            found.append((i, f"shows the maintainer's command {match!r} to the reader"))
    return found


def check(path: Path) -> list[str]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    cells = nb.get("cells", [])
    problems: list[str] = []

    def problem(msg: str) -> None:
        where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        problems.append(f"{where}: {msg}")

    # execution and nbval
    counts = []
    for i, cell in enumerate(cells):
        if cell.get("cell_type") != "code" or not source(cell).strip():
            continue
        tags = cell.get("metadata", {}).get("tags", [])
        if "nbval-skip" in tags or "NBVAL_SKIP" in source(cell):
            problem(
                f"cell {i} is skipped by nbval: run it, and tag it nbval-ignore-output if "
                "its output cannot be stable"
            )
        counts.append(cell.get("execution_count"))
        texts = []  # consecutive stream writes joined (print(a, b) may write twice)
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                problem(f"cell {i} has a stored error: {out.get('ename')}: {out.get('evalue')}")
            elif out.get("output_type") == "stream" and texts and texts[-1][0] == out.get("name"):
                texts[-1] = (out.get("name"), texts[-1][1] + output_text(out))
            else:
                texts.append((out.get("name"), output_text(out)))
        for _, text in texts:
            match = ADDRESS.search(text)
            if match:
                problem(f"cell {i} stores a repr with a memory address: {match.group(0)}")
            for line in text.splitlines():
                if BARE_BOOL.match(line) or CHECK_BOOL.search(line):
                    problem(
                        f"cell {i} prints a check as True/False ({line.strip()[:60]!r}): "
                        "print the measured numbers, then assert"
                    )
                    break
        for n, line in enumerate(source(cell).splitlines(), 1):
            if len(line) > MAX_LINE:
                problem(f"cell {i} line {n} has {len(line)} characters (at most {MAX_LINE})")
    for i, cell in enumerate(cells):
        if cell.get("cell_type") == "markdown" and hidden_markdown(cell):
            problem(
                f"markdown cell {i} is collapsed (jupyter.source_hidden): JupyterLab then shows "
                "its first source line raw; a ':::{dropdown}' collapses it in both renderers"
            )
        if cell.get("cell_type") == "markdown" and path.name[:2].isdigit():
            for match in dict.fromkeys(m.group(0) for m in HARNESS.finditer(source(cell))):
                problem(
                    f"cell {i} talks about the harness ({match!r}): say what the cell shows; "
                    "the introduction explains how the book checks itself"
                )
    # versions named in prose are printed by a cell (code or output) of the same notebook
    shown = "\n".join(
        source(c) + "".join(output_text(o) for o in c.get("outputs", []))
        for c in cells
        if c.get("cell_type") == "code"
    )
    for i, cell in enumerate(cells):
        if cell.get("cell_type") == "markdown":
            for version in dict.fromkeys(VERSION.findall(source(cell))):
                if version not in shown:
                    problem(
                        f"cell {i} names version {version}, which no cell of the notebook "
                        "prints: print it (or say which package without the number)"
                    )
    if None in counts:
        problem(f"{counts.count(None)} code cell(s) never executed: re-execute the notebook")
    elif counts != list(range(1, len(counts) + 1)):
        problem("execution counts are not 1, 2, 3, ...: re-execute it in a fresh kernel")

    if not path.name[:2].isdigit():
        return problems  # an appendix page: no chapter number, summary, exercises or figure

    for i, msg in reader_path_problems(cells):
        problem(f"cell {i} {msg}")

    # title
    number = int(path.name[:2])
    first = source(cells[0]).lstrip().splitlines()[0] if cells and source(cells[0]).strip() else ""
    if cells[0].get("cell_type") != "markdown" or not first.startswith(f"# {number}. "):
        problem(f"the first cell must be the title '# {number}. ...', found {first[:40]!r}")

    # the opening: title, a few lines, the picture; then the measured run time
    picture = f"](figures/{path.stem}.png)"
    if picture not in source(cells[0]):
        problem(f"the opening cell shows no picture: add '![...](figures/{path.stem}.png)'")
    for msg in export_opening_figures.problems(path):
        problem(msg)
    record = json.loads(time_chapters.RECORD.read_text()) if time_chapters.RECORD.exists() else {}
    rec = record.get("chapters", {}).get(path.name[:2])
    second = cells[1] if len(cells) > 1 else {}
    if rec is None or rec.get("notebook") != path.name:
        problem("no run time recorded for this chapter: run tools/bench/time_chapters.py NN")
    elif time_chapters.TAG not in second.get("metadata", {}).get("tags", []):
        problem(
            "the second cell must be the run-time cell: run tools/bench/time_chapters.py --write"
        )
    elif source(second) != time_chapters.run_time_text(rec):
        problem(
            "the run-time cell differs from the record: run tools/bench/time_chapters.py --write"
        )

    # plain prose
    stats = prose_stats.stats(path)
    if stats["median_sentence"] > MAX_MEDIAN_SENTENCE:
        problem(
            f"median sentence {stats['median_sentence']:.1f} words (at most "
            f"{MAX_MEDIAN_SENTENCE}): one idea per sentence"
        )
    if stats["main_words"] > MAX_MAIN_PATH_WORDS:
        problem(
            f"{stats['main_words']:,} words of main-path prose (at most "
            f"{MAX_MAIN_PATH_WORDS:,}): move digressions into 'Going deeper' dropdowns"
        )

    # summary, exercises, solutions
    headings = [
        (i, line)
        for i, cell in enumerate(cells)
        if cell.get("cell_type") == "markdown"
        for line in source(cell).splitlines()
        if line.startswith("## ")
    ]
    tail = [line.strip() for _, line in headings[-2:]]
    if tail != ["## Summary", "## Exercises"]:
        problem(f"the last two sections must be '## Summary' and '## Exercises', found {tail}")
    exercises = []
    for i, cell in enumerate(cells):
        if cell.get("cell_type") == "markdown":
            exercises += [
                (i, m.group(1), m.group(2), m.group(3)) for m in EXERCISE.finditer(source(cell))
            ]
    if len(exercises) < 2:
        problem(f"{len(exercises)} exercise(s); each chapter has at least 2 ('### Exercise N.k')")
    ranks = [KINDS.get(kind, -1) for *_, kind in exercises]
    if -1 in ranks:
        problem(f"exercise kinds must be one of {list(KINDS)}: found {[e[3] for e in exercises]}")
    elif ranks != sorted(ranks):
        problem(f"exercises must be graded {' -> '.join(KINDS)}: found {[e[3] for e in exercises]}")
    for i, chap, k, kind in exercises:
        if int(chap) != number:
            problem(f"exercise {chap}.{k} in chapter {number}: number it {number}.{k}")
        solutions = [
            j
            for j, cell in enumerate(cells)
            if cell.get("cell_type") == "code"
            and (m := SOLUTION_MARK.match(source(cell).lstrip()))
            and (m.group(1), m.group(2)) == (chap, k)
        ]
        if not solutions:
            problem(
                f"exercise {chap}.{k} has no code cell starting '# Solution to exercise {chap}.{k}'"
            )
        for j in solutions:
            if j < i:
                problem(f"the solution to exercise {chap}.{k} comes before its statement")
            if not hidden(cells[j]):
                problem(
                    f"the solution to exercise {chap}.{k} (cell {j}) must be collapsed: "
                    "metadata jupyter.source_hidden and tag hide-input (or hide-cell)"
                )
            if kind.startswith("predict") and not hides_output(cells[j]):
                problem(
                    f"the solution to prediction exercise {chap}.{k} (cell {j}) shows its answer: "
                    "tag it hide-cell and set jupyter.outputs_hidden"
                )
            after = cells[j + 1] if j + 1 < len(cells) else None
            if (
                after is not None
                and after.get("cell_type") == "markdown"
                and not re.match(r"(### Exercise|## )", source(after))
                and not dropdown_start(source(after))
            ):
                problem(
                    f"the prose after the solution to exercise {chap}.{k} (cell {j + 1}) gives "
                    "the answer away: put it in a ':::{dropdown} Answer ...' cell"
                )

    # figures
    has_image = any(
        any(k.startswith("image/") for k in out.get("data", {}))
        for cell in cells
        for out in cell.get("outputs", [])
    )
    has_md_figure = any(
        FIGURE_MD.search(source(c)) for c in cells if c.get("cell_type") == "markdown"
    )
    if not (has_image or has_md_figure):
        problem("no figure: every chapter shows at least one (a plot, or an SVG in the prose)")
    for i, cell in enumerate(cells):
        if "figure" in cell.get("metadata", {}).get("tags", []) and not hidden(cell):
            problem(
                f"cell {i} draws a figure (tag 'figure'): hide its code (source_hidden, hide-input)"
            )
    return problems


def main(argv: list[str]) -> int:
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
        print(f"check_notebooks: {len(problems)} problem(s) in {n} notebook(s)")
        return 1
    print(f"check_notebooks: {n} notebook(s) keep the conventions")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
