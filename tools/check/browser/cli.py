"""The command line: which checks to run, on what; one browser for all of them; the verdicts."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

import tools.check.browser as package
from tools.check.browser.book import CHAPTER, HTML, chapter_notebooks, ensure_book
from tools.check.browser.book_pages import check_book
from tools.check.browser.devtools import Chromium
from tools.check.browser.lab_chapter import check_lab
from tools.check.browser.lab_markup import check_lab_markup
from tools.check.browser.report import log, summary


def parse(argv) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m tools.check.browser", description=package.__doc__.split("\n\n")[0]
    )
    ap.add_argument("--book-only", action="store_true")
    ap.add_argument("--lab-only", action="store_true")
    ap.add_argument("--markup-only", action="store_true")
    ap.add_argument(
        "--markup-chapters", nargs="*", type=Path, help="the notebooks for (c) (default: all)"
    )
    ap.add_argument(
        "--rebuild", action="store_true", help="rebuild the book even if _build/html exists"
    )
    ap.add_argument(
        "--html",
        type=Path,
        help="check this folder of HTML pages instead of the book "
        "(no build; for testing the checker itself)",
    )
    ap.add_argument("--screenshots", type=Path, help="save JupyterLab screenshots into this folder")
    ap.add_argument(
        "--notebook",
        type=Path,
        default=CHAPTER,
        help="the notebook for (b) (default: the heatmap chapter)",
    )
    ap.add_argument(
        "--run-timeout", type=float, default=240, help="seconds allowed for run-all (default 240)"
    )
    return ap.parse_args(argv)


def main(argv) -> int:
    args = parse(argv)
    # a SIGTERM (timeout, CI) unwinds like an exception, so the browser and JupyterLab stop
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.screenshots:
        args.screenshots.mkdir(parents=True, exist_ok=True)
    book = not (args.lab_only or args.markup_only)
    lab = not (args.book_only or args.markup_only)
    markup = not args.book_only

    t0 = time.monotonic()
    results: dict[str, list[str]] = {}
    browser = None
    try:
        html = args.html.resolve() if args.html else HTML
        if book and not args.html:
            ensure_book(args.rebuild)
        browser = Chromium()
        log(f"browser: {browser.version}, headless, new empty profile")
        if book:
            log("(a) the HTML book, every page from http://127.0.0.1")
            results["book over HTTP: math, images, no external request, no JS error, toggles"] = (
                check_book(browser, html, "http")
            )
            log("(a) the HTML book again, every page from disk (file://)")
            results["book from file://: the same, as a reader opening index.html sees it"] = (
                check_book(browser, html, "file")
            )
        if lab:
            log("(b) JupyterLab: run the heatmap chapter, solutions, layer change, bad input")
            results["lab: run-all, solutions collapsed, layer redraws heatmap, bad input"] = (
                check_lab(browser, args.screenshots, args.run_timeout, args.notebook.resolve())
            )
        if markup:
            log("(c) JupyterLab renders MyST: every chapter, no raw markup, dropdowns closed")
            chapters = [p.resolve() for p in args.markup_chapters or []] or chapter_notebooks()
            results["lab: MyST rendered in every chapter, no raw {cite}/{ref}/:::"] = (
                check_lab_markup(browser, chapters)
            )
    except Exception as err:
        results.setdefault("setup", []).append(f"{type(err).__name__}: {err}")
    finally:
        if browser is not None:
            browser.close()
    return summary(results, time.monotonic() - t0)
