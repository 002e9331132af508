"""What the checks know about the book: where its HTML is built and how, its pages, the
chapter whose widgets they drive, and the console messages that are not the book's errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tools.check.browser.report import log
from tools.common import ROOT

HTML = ROOT / "_build" / "html"
CHAPTERS = ROOT / "chapters"
# the heatmap chapter: its widget explorer in JupyterLab, its live explorer in the HTML book
CHAPTER = CHAPTERS / "21_cross_attention_heatmaps.ipynb"
EXPLORER_PAGE = "chapters/21_cross_attention_heatmaps.html"
# Console messages that are not errors of the book. Each entry: (substring, why). Empty:
# every console error on a book page fails the check. (pydata-sphinx-theme's "Got invalid
# theme mode" is fixed at its cause, html_context.default_mode in _config.yml, and the
# browser's /favicon.ico request by the book's own favicon.)
KNOWN_HARMLESS: list[tuple[str, str]] = []
HARMLESS = [substring for substring, _ in KNOWN_HARMLESS]


def ensure_book(rebuild: bool) -> None:
    """Build the HTML book into _build/html unless it is there (or `rebuild`)."""
    if (HTML / "index.html").exists() and not rebuild:
        return
    jb = Path(sys.executable).with_name("jupyter-book")
    log(f"building the book: {jb.name} build . (no _build/html/index.html yet)")
    subprocess.run(
        [str(jb), "build", "--keep-going", "."], cwd=ROOT, check=True, stdout=subprocess.DEVNULL
    )
    if not (HTML / "index.html").exists():
        raise RuntimeError("the book build produced no _build/html/index.html")


def book_pages(html: Path) -> list[Path]:
    """Every HTML page of a built book, not Sphinx's copies of sources and assets."""
    skip = {"_static", "_sources", "_images", "_downloads"}
    return sorted(p for p in html.rglob("*.html") if not skip & set(p.relative_to(html).parts))


def chapter_notebooks() -> list[Path]:
    return sorted(CHAPTERS.glob("[0-9][0-9]_*.ipynb"))
