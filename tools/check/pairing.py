"""Check that every chapter notebook and its jupytext twin say the same thing.

Each ``chapters/NN_slug.ipynb`` is paired with ``chapters/NN_slug.py`` (py:percent).
This check fails (exit 1) when

- a notebook has no twin, or a twin has no notebook;
- a notebook lacks the pairing metadata ``jupytext: {formats: "ipynb,py:percent"}``
  (without it JupyterLab, launched from any folder, would not keep the twin in sync);
- the twin and the notebook differ in any cell: source, type, tags and other cell
  metadata, or number of cells. Outputs are not compared: the twin has none.

`jupytext --diff` exits 0 even when files differ, so it cannot serve as this check.

Usage: python -m tools.check.pairing [NOTEBOOK.ipynb ...]   (default: chapters/*.ipynb)
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

import jupytext
import nbformat
from jupytext.compare import compare_notebooks

from tools.common import ROOT

CHAPTERS = ROOT / "chapters"
NOTEBOOK_FOLDERS = (CHAPTERS, ROOT / "appendix")  # every notebook of the book lives in one
FORMATS = "ipynb,py:percent"
TWIN_FMT = "py:percent"


def pairing_problems(notebook: Path) -> list[str]:
    """Everything wrong with the pairing of one notebook; an empty list if nothing."""
    problems = []
    twin = notebook.with_suffix(".py")
    nb = nbformat.read(notebook, as_version=4)

    formats = nb.metadata.get("jupytext", {}).get("formats")
    if formats != FORMATS:
        problems.append(
            f"notebook metadata jupytext.formats is {formats!r}, expected {FORMATS!r} "
            f"(fix: jupytext --set-formats {FORMATS} {notebook.name})"
        )

    if not twin.exists():
        problems.append(f"missing twin {twin.name}")
        return problems

    try:
        compare_notebooks(
            jupytext.read(twin, fmt=TWIN_FMT),
            nb,
            fmt=TWIN_FMT,
            raise_on_first_difference=False,
        )
    except Exception as err:  # jupytext raises NotebookDifference, or AssertionError
        problems.append(f"{twin.name} differs from {notebook.name}: {err}\n" + text_diff(nb, twin))
    return problems


def text_diff(nb, twin: Path, max_lines: int = 60) -> str:
    """A unified diff between the twin as it is and the twin the notebook implies."""
    expected = jupytext.writes(nb, fmt=TWIN_FMT).splitlines()
    actual = twin.read_text(encoding="utf-8").splitlines()
    diff = list(
        difflib.unified_diff(
            expected,
            actual,
            f"{twin.name} (as written from the notebook)",
            f"{twin.name} (on disk)",
            n=1,
            lineterm="",
        )
    )
    if len(diff) > max_lines:
        diff = diff[:max_lines] + [f"... ({len(diff) - max_lines} more diff lines)"]
    return "\n".join(diff)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every notebook")
    args = parser.parse_args(argv)
    if args.notebooks:
        notebooks = [p.resolve() for p in args.notebooks]
        orphans = []
    else:
        notebooks = sorted(nb for d in NOTEBOOK_FOLDERS for nb in d.glob("*.ipynb"))
        orphans = sorted(
            p
            for d in NOTEBOOK_FOLDERS
            for p in d.glob("*.py")
            if not p.with_suffix(".ipynb").exists()
        )

    failed = 0
    for notebook in notebooks:
        problems = pairing_problems(notebook)
        if problems:
            failed += 1
            print(
                f"FAIL {notebook.relative_to(ROOT) if notebook.is_relative_to(ROOT) else notebook}"
            )
            for problem in problems:
                print("  " + problem.replace("\n", "\n  "))
    for twin in orphans:
        failed += 1
        print(
            f"FAIL {twin.relative_to(ROOT)}: twin without a notebook "
            f"(create it: python -m tools.build.execute_notebooks {twin.relative_to(ROOT)})"
        )

    total = len(notebooks) + len(orphans)
    if failed:
        print(
            f"check_pairing: {failed} of {total} file(s) out of sync. Re-execute from the "
            "file you edited, which rewrites the other one: python "
            "-m tools.build.execute_notebooks chapters/NN_slug.py (or .ipynb)"
        )
        return 1
    print(f"check_pairing: {len(notebooks)} notebook(s) paired and in sync")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
