#!/usr/bin/env python3
"""Collapse exercise solutions the way tools/check/notebooks.py wants them (idempotent).

Usage: python tools/build/hide_solutions.py chapters/NN_x.ipynb ...

- a solution cell (`# Solution to exercise N.k`) gets jupyter.source_hidden and the tag
  hide-input; the solution of a prediction exercise also hides its output (tag hide-cell,
  jupyter.outputs_hidden), since what it prints is the answer;
- prose right after a solution (the written-out answer) moves into its own markdown cell,
  a `:::{dropdown} Answer to exercise N.k` with jupyter.source_hidden.

It rewrites the notebook and its .py twin; outputs are kept. Re-execute the chapter after.
"""

import re
import sys
from pathlib import Path

import jupytext
import nbformat

EX = re.compile(r"^### Exercise (\d+\.\d+) \(([^)]*)\)", re.M)
STOP = re.compile(r"^(### Exercise|## )", re.M)

for arg in sys.argv[1:]:
    path = Path(arg)
    nb = nbformat.read(path, as_version=4)
    out, kind, number = [], None, None
    cells = nb.cells
    i = 0
    changed = 0
    while i < len(cells):
        c = cells[i]
        out.append(c)
        if c.cell_type == "markdown":
            for m in EX.finditer(c.source):
                number, kind = m.group(1), m.group(2)
        if c.cell_type == "code" and c.source.startswith("# Solution to exercise"):
            tags = [t for t in c.metadata.get("tags", []) if t not in ("hide-input", "hide-cell")]
            jup = dict(c.metadata.get("jupyter", {}))
            jup["source_hidden"] = True
            if kind and kind.startswith("predict"):
                tags.append("hide-cell")
                jup["outputs_hidden"] = True
            else:
                tags.append("hide-input")
                jup.pop("outputs_hidden", None)
            c.metadata["tags"] = tags
            c.metadata["jupyter"] = jup
            nxt = cells[i + 1] if i + 1 < len(cells) else None
            if (
                nxt is not None
                and nxt.cell_type == "markdown"
                and not STOP.match(nxt.source)
                and not nxt.source.startswith(":::{dropdown}")
            ):
                m = STOP.search(nxt.source)
                answer = (nxt.source[: m.start()] if m else nxt.source).strip()
                rest = nxt.source[m.start() :] if m else ""
                drop = nbformat.v4.new_markdown_cell(
                    f":::{{dropdown}} Answer to exercise {number}\n{answer}\n:::"
                )
                drop.metadata["jupyter"] = {"source_hidden": True}
                out.append(drop)
                changed += 1
                if rest.strip():
                    nxt.source = rest
                    out.append(nxt)
                    for m2 in EX.finditer(rest):
                        number, kind = m2.group(1), m2.group(2)
                i += 2
                continue
        i += 1
    nb.cells = out
    nbformat.validate(nb)
    nbformat.write(nb, path)
    Path(path.with_suffix(".py")).write_text(jupytext.writes(nb, fmt="py:percent"))
    print(path, "answers moved into dropdowns:", changed)
