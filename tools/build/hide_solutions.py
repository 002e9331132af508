"""Collapse exercise solutions the way tools/check/notebooks.py wants them (idempotent).

Usage:
    python -m tools.build.hide_solutions chapters/NN_x.ipynb ...
    python -m tools.build.hide_solutions --check [chapters/NN_x.ipynb ...]   # write nothing

- a solution cell (`# Solution to exercise N.k`) that the check finds showing something gets
  jupyter.source_hidden and the tag hide-input; the solution of a prediction exercise also
  hides its output (tag hide-cell, jupyter.outputs_hidden), since what it prints is the answer;
- prose right after a solution (the written-out answer) moves into its own markdown cell,
  a `:::{dropdown} Answer to exercise N.k`.

Both rules are the check's own functions (`solution_shows`, `collapse_solution`,
`gives_answer_away`, `answer_dropdown`), so the two cannot disagree: this tool changes exactly
what the check refuses. A notebook it changes is rewritten with its .py twin, outputs kept;
re-execute the chapter after. With --check it only says what it would change, and exits 1 if
anything. Without paths: every chapter.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jupytext
import nbformat

from tools.check.notebooks import (
    CHAPTERS,
    NEXT_SECTION,
    answer_dropdown,
    collapse_solution,
    exercises,
    gives_answer_away,
    solution_number,
    solution_shows,
)


def hide(nb) -> list[str]:
    """Collapse nb's solutions and move their written answers into dropdowns, in place.
    Returns what it changed, one line each (empty when nb already keeps the convention)."""
    kinds = {(ex.chapter, ex.k): ex.kind for ex in exercises(nb.cells)}
    changes = []
    out = []
    cells = list(nb.cells)
    i = 0
    while i < len(cells):
        cell = cells[i]
        out.append(cell)
        i += 1
        number = solution_number(cell)
        if number is None:
            continue
        label = ".".join(number)
        kind = kinds.get(number)
        if solution_shows(cell, kind):
            collapse_solution(cell, kind)
            changes.append(f"collapsed the solution to exercise {label}")
        if i < len(cells) and gives_answer_away(cells[i]):
            prose = cells[i]
            m = NEXT_SECTION.search(prose.source)
            answer = (prose.source[: m.start()] if m else prose.source).strip()
            out.append(nbformat.v4.new_markdown_cell(answer_dropdown(label, answer)))
            changes.append(f"moved the answer to exercise {label} into a dropdown")
            rest = prose.source[m.start() :] if m else ""
            if rest.strip():
                prose.source = rest
                out.append(prose)
            i += 1
    nb.cells = out
    return changes


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 on a change")
    parser.add_argument("paths", nargs="*", type=Path)
    args = parser.parse_args(argv)
    paths = args.paths or sorted(CHAPTERS.glob("[0-9][0-9]_*.ipynb"))
    changed = 0
    for path in paths:
        path = path.with_suffix(".ipynb")
        nb = nbformat.read(path, as_version=4)
        changes = hide(nb)
        for change in changes:
            print(f"{path}: {change}")
        if changes:
            changed += 1
            if not args.check:
                nbformat.validate(nb)
                nbformat.write(nb, path)
                path.with_suffix(".py").write_text(jupytext.writes(nb, fmt="py:percent"))
    verb = "would change" if args.check else "changed"
    print(f"hide_solutions: {verb} {changed} of {len(paths)} notebook(s)")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
