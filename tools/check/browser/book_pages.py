"""Part (a): every page of the built HTML book, as a reader's browser shows it."""

from __future__ import annotations

import re
from pathlib import Path

from tools.check.browser.book import EXPLORER_PAGE, HARMLESS, book_pages
from tools.check.browser.devtools import Chromium, Script, page_problems
from tools.check.browser.live_explorer import check_live_explorer
from tools.check.browser.report import log
from tools.check.browser.servers import serve

PAGE = Script(Path(__file__).with_name("book_page.js"))


def check_book(browser: Chromium, html: Path, via: str = "http") -> list[str]:
    """Proves, for every page of the book built in `html`, opened over HTTP from 127.0.0.1
    (via="http") or from disk (via="file"), that every math element holds MathJax output,
    every image has loaded, no request left the server (or the disk), nothing was logged as a
    JavaScript error, every exercise solution and answer starts closed and a solution's toggle
    opens it; and, on chapter 21's page, that the live explorer works and decodes as PyTorch
    does (live_explorer.check_live_explorer). Failures name the way the page was opened."""
    if via == "file":
        server, prefix = None, html.as_uri() + "/"
    else:
        server, port = serve(html)
        prefix = f"http://127.0.0.1:{port}/"
    failures: list[str] = []
    totals = {"pages": 0, "math": 0, "images": 0, "requests": 0, "solutions": 0, "answers": 0}
    toggled = explorer_pages = 0
    try:
        for path in book_pages(html):
            rel = path.relative_to(html).as_posix()
            page = browser.page
            page.events.clear()
            try:
                page.navigate(prefix + rel)
                follow_redirect(page, path)
                info = page.evaluate(PAGE("report"), timeout=60)
                sols = page.evaluate(PAGE("solutions"))
                explorer = (
                    check_live_explorer(page, html / "_static") if rel == EXPLORER_PAGE else []
                )
                page.pump(0.3)  # late console messages
            except Exception as err:
                failures.append(f"{via} {rel}: {type(err).__name__}: {err}")
                continue
            errors, external, n_req = page_problems(page.events, prefix, HARMLESS)
            totals["pages"] += 1
            totals["math"] += info["math"]
            totals["images"] += info["images"]
            totals["requests"] += n_req
            totals["solutions"] += sols["solutions"]
            totals["answers"] += sols["answers"]
            explorer_pages += rel == EXPLORER_PAGE
            problems = [
                *explorer,
                *content_problems(info, external, errors, via),
                *toggle_problems(sols),
            ]
            toggled += sols["expanded"] is not None and bool(solution_opened(sols["expanded"]))
            status = "ok  " if not problems else "FAIL"
            log(
                f"  {status} {rel}: {info['math']} math ({info['rendered']} rendered), "
                f"{info['images']} images, {n_req} requests"
            )
            failures += [f"{via} {rel}: {p}" for p in problems]
    finally:
        if server is not None:
            server.shutdown()
    if not totals["pages"]:
        failures.append("no page was checked")
    if not explorer_pages:
        failures.append(f"{EXPLORER_PAGE} (the HTML attention explorer) was not checked")
    if not totals["solutions"]:
        failures.append("no exercise solution found behind a toggle on any page")
    log(
        f"  book ({via}): {totals['pages']} pages, {totals['math']} math elements, "
        f"{totals['images']} images, {totals['requests']} requests; "
        f"{totals['solutions']} solutions and {totals['answers']} answer dropdowns, all closed "
        f"at load; a solution clicked open on {toggled} pages"
    )
    return failures


REFRESH = re.compile(r'<meta http-equiv="Refresh" content="0; url=([^"]+)"', re.IGNORECASE)


def follow_redirect(page, path: Path, timeout: float = 30) -> None:
    """A redirect page (Jupyter Book's index.html is one meta refresh to the intro) fires its
    load event before the browser moves on; the check must read the page it lands on, once that
    one has loaded, not the document in between."""
    found = REFRESH.search(path.read_text(encoding="utf-8")[:2000])
    if found is None:
        return
    target = found.group(1).split("#")[0]
    page.wait_for(
        f"location.href.endsWith({target!r}) && document.readyState === 'complete'", timeout
    )


def content_problems(info: dict, external: list[str], errors: list[str], via: str) -> list[str]:
    """One page's math (rendered by MathJax), images (loaded), requests (none off the server
    or the disk) and JavaScript errors (none)."""
    problems = []
    if info["rendered"] < info["math"]:
        problems.append(
            f"{info['math'] - info['rendered']} of {info['math']} math elements not "
            f"rendered by MathJax (MathJax loaded: {info['mathjax']}), e.g. {info['raw']}"
        )
    if info["broken"]:
        problems.append(f"{len(info['broken'])} image(s) did not load: {info['broken'][:3]}")
    if external:
        where = "the disk" if via == "file" else "localhost"
        problems.append(f"{len(external)} request(s) left {where}: {external[:3]}")
    if errors:
        problems.append(f"{len(errors)} JavaScript error(s): {errors[:3]}")
    return problems


def toggle_problems(sols: dict) -> list[str]:
    """One page's exercise solutions and answer dropdowns: all closed at load, and clicking the
    first solution's toggle shows its code."""
    problems = []
    if sols["open_at_load"]:
        problems.append(
            f"{sols['open_at_load']} of {sols['solutions']} exercise solution(s) visible "
            "before their toggle is clicked (tag the cell hide-input)"
        )
    if sols["answers_open"]:
        problems.append(f"{sols['answers_open']} answer dropdown(s) open at load")
    exp = sols["expanded"]
    if exp is not None and not solution_opened(exp):
        problems.append(f"clicking a solution's toggle did not show its code: {exp}")
    return problems


def solution_opened(expanded: dict) -> bool:
    """After its summary was clicked: the solution is open and its code, shown, is the
    solution's."""
    return expanded["open"] and expanded["shown"] and expanded["starts"].startswith("# Solution")
