"""Write each chapter's opening picture from its stored outputs.

    python -m tools.build.export_opening_figures [--check] [chapters/NN_slug.ipynb ...]

A chapter opens with `![...](figures/NN_slug.png)`. That png is the first image/png output
of the chapter's code cell tagged `opening-figure`, decoded from the notebook as
tools/build/execute_notebooks.py stored it: the picture is what the chapter's own cell drew, never
drawn by hand. With --check nothing is written; the script exits 1 when a png is missing or
differs from its cell's output (tools/check/notebooks.py runs the same check).
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from pathlib import Path

from tools.common import ROOT

CHAPTERS = ROOT / "chapters"
TAG = "opening-figure"


def opening_png(nb: dict) -> bytes | None:
    """The first image/png output of the cell tagged opening-figure, or None."""
    for cell in nb["cells"]:
        if cell.get("cell_type") != "code" or TAG not in cell.get("metadata", {}).get("tags", []):
            continue
        for out in cell.get("outputs", []):
            data = out.get("data", {}).get("image/png")
            if data:
                return base64.b64decode("".join(data) if isinstance(data, list) else data)
    return None


def figure_path(notebook: Path) -> Path:
    return notebook.parent / "figures" / f"{notebook.stem}.png"


def rel(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def problems(notebook: Path) -> list[str]:
    """What is wrong with this chapter's opening picture (empty when it is right)."""
    png = opening_png(json.loads(notebook.read_text(encoding="utf-8")))
    target = figure_path(notebook)
    if png is None:
        return [f"no code cell tagged {TAG} with an image/png output"]
    if not target.exists():
        return [f"{rel(target)} is missing: run python -m tools.build.export_opening_figures"]
    if target.read_bytes() != png:
        return [
            f"{rel(target)} differs from the {TAG} cell's output: "
            "run python -m tools.build.export_opening_figures"
        ]
    return []


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    parser.add_argument("paths", nargs="*", type=Path)
    args = parser.parse_args(argv)
    paths = [p.resolve() for p in args.paths] or sorted(CHAPTERS.glob("[0-9][0-9]_*.ipynb"))
    bad = 0
    for nb_path in paths:
        nb_path = nb_path.with_suffix(".ipynb")
        if args.check:
            for p in problems(nb_path):
                print(f"{nb_path.name}: {p}")
                bad += 1
            continue
        png = opening_png(json.loads(nb_path.read_text(encoding="utf-8")))
        if png is None:
            print(f"{nb_path.name}: no code cell tagged {TAG} with an image/png output")
            bad += 1
            continue
        target = figure_path(nb_path)
        target.parent.mkdir(exist_ok=True)
        if not target.exists() or target.read_bytes() != png:
            target.write_bytes(png)
            print(f"wrote {rel(target)} ({len(png) // 1024} KiB)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
