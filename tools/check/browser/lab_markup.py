"""Part (c): the book's MyST markup as JupyterLab (jupyterlab-myst) renders it."""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from pathlib import Path

from tools.check.browser.book import CHAPTERS
from tools.check.browser.devtools import CDP, Chromium, Script
from tools.check.browser.report import log
from tools.check.browser.servers import start_lab, stop

LAB = Script(Path(__file__).with_name("jupyterlab.js"))
# what a markdown cell shows when MyST did not render a role or a directive
RAW_MARKUP = ("{cite}", "{ref}", "{numref}", "{doc}", ":::", "```{")


def check_lab_markup(browser: Chromium, notebooks: list[Path]) -> list[str]:
    """Proves, for every notebook (copies, opened one after the other in one JupyterLab page
    with every cell attached), that its markdown is rendered by MyST with no raw markup left
    ({cite}, {ref}, {numref}, {doc}, ::: or a ```{ fence), that every {dropdown} of the source
    is a collapsed <details>, and that every image in the prose has loaded."""
    workdir = Path(tempfile.mkdtemp(prefix="check-browser-markup-"))
    root = workdir / "root"
    root.mkdir()
    for nb in notebooks:  # copies: the repository's files stay untouched
        shutil.copy2(nb, root / nb.name)
    for sub in ("figures", "data"):
        if (CHAPTERS / sub).is_dir():
            shutil.copytree(CHAPTERS / sub, root / sub)
    failures: list[str] = []
    proc = None
    page = browser.page
    try:
        proc, port = start_lab(workdir)
        # every cell attached to the page, not only those scrolled into view
        tracker = workdir / "settings" / "@jupyterlab" / "notebook-extension"
        tracker.mkdir(parents=True, exist_ok=True)
        (tracker / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')
        for nb in notebooks:
            if nb == notebooks[0]:
                page.navigate(f"http://127.0.0.1:{port}/lab/tree/{nb.name}", timeout=90)
            else:  # the same page: open the next notebook, close the one before
                page.evaluate(LAB("execute", "docmanager:open", {"path": nb.name}), timeout=90)
            failures += notebook_problems(page, nb)
            page.evaluate(LAB("close", nb.name))
    except Exception as err:
        failures.append(f"{type(err).__name__}: {err}")
    finally:
        with contextlib.suppress(Exception):
            page.navigate("about:blank", timeout=10)
        if proc is not None:
            stop(proc)
        shutil.rmtree(workdir, ignore_errors=True)
    return failures


def dropdowns_in(notebook: Path) -> int:
    """How many {dropdown} directives the notebook's markdown cells hold."""
    source = json.loads(notebook.read_text(encoding="utf-8"))
    return sum(
        "".join(c["source"]).count("{dropdown}")
        for c in source["cells"]
        if c["cell_type"] == "markdown"
    )


def notebook_problems(page: CDP, nb: Path) -> list[str]:
    """One open notebook: once every markdown cell has rendered (within 120 s), no raw markup,
    its dropdowns closed <details>."""
    dropdowns = dropdowns_in(nb)
    try:
        state = page.wait_for(
            LAB("markup", nb.name),
            timeout=120,
            interval=1.0,
            until=lambda s: (
                s
                and s["markdown_cells"] > 0
                and s["rendered"] == s["markdown_cells"]
                and s["myst_nodes"] > 0
                and s["images_loaded"] == s["images"]
            ),
        )
    except TimeoutError:
        state = page.evaluate(LAB("markup", nb.name)) or {}
        return [
            f"{nb.name}: markdown not rendered by MyST within 120 s "
            f"({ {k: v for k, v in state.items() if k != 'texts'} })"
        ]
    raw = sorted({(i, m) for i, t in enumerate(state["texts"]) for m in RAW_MARKUP if m in t})
    log(
        f"  {nb.name}: {state['markdown_cells']} markdown cells rendered, "
        f"{state['details']} of {dropdowns} dropdown(s) as <details> "
        f"({state['open_details']} open), {state['images_loaded']} image(s), "
        f"raw markup in {len(raw)} cell(s)"
    )
    problems = []
    for i, m in raw[:5]:
        text = state["texts"][i]
        at = text.index(m)
        problems.append(f"{nb.name}: markdown cell {i} shows {text[max(0, at - 40) : at + 40]!r}")
    if state["details"] != dropdowns or state["open_details"]:
        problems.append(
            f"{nb.name}: {dropdowns} dropdown(s) in the source, {state['details']} "
            f"<details> in JupyterLab, {state['open_details']} of them open"
        )
    for f in problems:
        log(f"    - {f}")
    return problems
