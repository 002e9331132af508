"""Part (b): the heatmap chapter run in JupyterLab, its exercise solutions and its widget
explorer driven as a reader would."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from pathlib import Path

from helpers.repro.pin import KERNEL_NAME, PIN
from tools.check.browser.book import HARMLESS
from tools.check.browser.devtools import CDP, Chromium, Script, page_problems
from tools.check.browser.report import log
from tools.check.browser.servers import start_lab, stop

LAB = Script(Path(__file__).with_name("jupyterlab.js"))


def check_lab(
    browser: Chromium, screenshots: Path | None, run_timeout: float, notebook: Path
) -> list[str]:
    """Proves that a copy of `notebook` (the heatmap chapter), opened in a fresh JupyterLab on
    127.0.0.1, runs in the book's kernel under the pinned numerics, that every cell executes
    (Run All) without an error output, that its exercise solutions open collapsed and a click
    shows one, that switching the explorer's layer control redraws the heatmap, that an
    invalid input gets the widget's message (no heatmap, no traceback), and that the page sent
    no request off localhost. Screenshots of the explorer go to `screenshots` when given."""
    if not notebook.exists():
        return [f"{notebook} does not exist"]
    workdir = Path(tempfile.mkdtemp(prefix="check-browser-lab-"))
    (workdir / "root").mkdir()
    # copies: the repository's files stay untouched. The chapter reads its recorded runs
    # from `data/` next to it, as it does when a reader opens it from `chapters/`.
    shutil.copy2(notebook, workdir / "root" / notebook.name)
    for sub in ("data", "figures"):  # its recorded runs, and its opening picture
        if (notebook.parent / sub).is_dir():
            shutil.copytree(notebook.parent / sub, workdir / "root" / sub)
    failures: list[str] = []
    proc = None
    page = browser.page
    name = notebook.name
    page.events.clear()  # nothing from part (a) counts here
    try:
        t0 = time.monotonic()
        proc, port = start_lab(workdir)
        log(f"  JupyterLab up on 127.0.0.1:{port} in {time.monotonic() - t0:.1f} s")
        page.navigate(f"http://127.0.0.1:{port}/lab/tree/{name}", timeout=90)
        state = page.wait_for(
            LAB("state", name),
            timeout=90,
            until=lambda s: s and s["ready"] and s.get("kernel") == "idle",
        )
        log(f"  notebook open, kernel idle, {state['code_cells']} code cells")
        failures += kernel_problems(page, name)
        failures += run_all_problems(page, name, run_timeout)
        failures += solution_problems(page, name)
        before = page.wait_for(LAB("explorer"), timeout=30, until=lambda e: e and e["shown"])
        log(
            f"  explorer found: layer options {before['options']} (selected {before['selected']}); "
            f"status: {before['status']!r}"
        )
        if screenshots:
            page.evaluate(LAB("scrollToExplorer"))
            page.screenshot(screenshots / "lab_before.png")
        failures += layer_problems(page, before, screenshots)
        failures += invalid_input_problems(page, screenshots)
        failures += lab_page_problems(page, name, port)
    except Exception as err:
        failures.append(f"{type(err).__name__}: {err}")
    finally:
        with contextlib.suppress(Exception):  # leave the page before the server goes away
            page.navigate("about:blank", timeout=10)
        if proc is not None:
            stop(proc)
        shutil.rmtree(workdir, ignore_errors=True)
    return failures


def kernel_problems(page: CDP, name: str) -> list[str]:
    """The notebook's kernel is the book's (KERNEL_NAME) and sees the pinned numerics."""
    kernel = page.evaluate(LAB("kernelEnv", name))
    log(
        f"  kernel {kernel['name']!r}; it sees ATEN_CPU_CAPABILITY, MKL_CBWR, capability: "
        f"{kernel['seen']}"
    )
    expected = f"{PIN['ATEN_CPU_CAPABILITY']} {PIN['MKL_CBWR']}"
    if kernel["name"] != KERNEL_NAME or not kernel["seen"].startswith(expected):
        return [f"not the book's pinned kernel: {kernel}, expected {KERNEL_NAME}"]
    return []


def run_all_problems(page: CDP, name: str, run_timeout: float) -> list[str]:
    """Run All executes every code cell, and none leaves an error output."""
    t1 = time.monotonic()
    page.evaluate(LAB("activate", name))
    page.wait_for(LAB("hasCurrentWidget"), timeout=30)
    # the command's promise settles when the last cell has run: allow the whole run for it
    page.evaluate(LAB("execute", "runmenu:run-all", {}), timeout=run_timeout)
    state = page.wait_for(
        LAB("state", name),
        timeout=run_timeout,
        interval=1.0,
        until=lambda s: (
            s
            and s.get("kernel") == "idle"
            and s["running"] == 0
            and (s["executed"] == s["code_cells"] or s["errors"])
        ),
    )
    log(
        f"  run-all: {state['executed']} of {state['code_cells']} code cells executed in "
        f"{time.monotonic() - t1:.1f} s, {len(state['errors'])} error output(s)"
    )
    problems = []
    if state["errors"]:
        problems.append(f"notebook raised: {state['errors'][:3]}")
    if state["executed"] != state["code_cells"]:
        problems.append(f"only {state['executed']} of {state['code_cells']} code cells executed")
    return problems


def solution_problems(page: CDP, name: str) -> list[str]:
    """Every "# Solution to exercise" cell opens with its input collapsed; clicking the first
    one's placeholder shows its code."""
    sols = page.evaluate(LAB("solutions", name))
    collapsed = [x for x in sols if x["hidden"] and x["placeholder"] and not x["editor"]]
    log(f"  {len(sols)} exercise solution cell(s), {len(collapsed)} collapsed at open")
    if not sols:
        return ["no cell starting '# Solution to exercise' in the notebook"]
    if len(collapsed) != len(sols):
        return [f"solutions not collapsed in JupyterLab: {sols}"]
    exp = page.evaluate(LAB("expandSolution", name))
    log(f"  clicked the first solution's placeholder: {exp}")
    if exp["hidden"] or not exp["shown"] or not exp["text"].startswith("# Solution"):
        return [f"clicking a collapsed solution did not show its code: {exp}"]
    return []


def layer_problems(page: CDP, before: dict, screenshots: Path | None) -> list[str]:
    """Switching the explorer's layer control (from its state `before`) changes the heatmap's
    image data."""
    target = 0 if before["selected"] != 0 else len(before["options"]) - 1
    chosen = page.evaluate(LAB("selectOption", "layer", target))
    try:
        after = page.wait_for(
            LAB("explorer"),
            timeout=30,
            until=lambda e: e and e["shown"] and e["hash"] != before["hash"],
        )
    except TimeoutError:
        return [f"changing the layer control to {chosen!r} did not change the heatmap"]
    log(
        f"  layer -> {chosen!r}: the heatmap image changed (PNG {before['bytes']} "
        f"bytes, hash {before['hash']} -> {after['bytes']} bytes, hash {after['hash']}); "
        f"status: {after['status']!r}"
    )
    if screenshots:
        page.screenshot(screenshots / "lab_after_layer.png")
    return []


def invalid_input_problems(page: CDP, screenshots: Path | None) -> list[str]:
    """Typing an invalid input ('12a') shows the widget's error message, hides the heatmap and
    prints no traceback."""
    page.evaluate(LAB("typeText", "digits", "12a"))
    try:
        bad = page.wait_for(
            LAB("explorer"),
            timeout=30,
            until=lambda e: e and (e["status"] or "").startswith("error:") and not e["shown"],
        )
    except TimeoutError:
        e = page.evaluate(LAB("explorer"))
        return [
            f"typing an invalid input did not show the widget's error message and hide "
            f"the heatmap: status {e['status']!r}, heatmap shown: {e['shown']}"
        ]
    log(f"  invalid input '12a' -> {bad['status']!r}, heatmap hidden: {not bad['shown']}")
    problems = []
    if bad["shown"] or bad["tracebacks"]:
        problems.append("invalid input left a heatmap or printed a traceback")
    if screenshots:
        page.screenshot(screenshots / "lab_invalid_input.png")
    return problems


def lab_page_problems(page: CDP, name: str, port: int) -> list[str]:
    """After all that: no request left localhost and no cell holds an error output.
    JupyterLab's own console errors are reported, not failed (it logs some)."""
    problems = []
    errors, external, _ = page_problems(page.events, f"http://127.0.0.1:{port}/", HARMLESS)
    if external:
        problems.append(
            f"JupyterLab page sent {len(external)} request(s) off localhost: {external[:3]}"
        )
    if errors:
        log(
            f"  note: {len(errors)} console message(s) at error level in JupyterLab; "
            f"distinct: {sorted(set(e[:120] for e in errors))[:8]}"
        )
    state = page.evaluate(LAB("state", name))
    if state and state["errors"]:
        problems.append(f"error outputs after interacting: {state['errors'][:3]}")
    return problems
