"""tools/check/browser (make check-browser): the parts that need no browser, and one run of
the checker on a tiny folder of pages in headless Chromium (integration, skipped without it).
"""

import ast
import inspect
import re
import shutil
import subprocess
import sys

import pytest

from tools.check.browser import book_pages, lab_chapter, lab_markup, live_explorer
from tools.check.browser.devtools import Script, page_problems
from tools.check.browser.report import summary
from tools.common import ROOT


def event(method: str, **params) -> dict:
    return {"method": method, "params": params}


def test_page_problems_names_errors_and_requests_off_the_server():
    prefix = "http://127.0.0.1:8000/"
    events = [
        event("Network.requestWillBeSent", request={"url": prefix + "index.html"}),
        event("Network.requestWillBeSent", request={"url": "data:image/png;base64,AAAA"}),
        event("Network.requestWillBeSent", request={"url": "https://cdn.example/x.js"}),
        event("Runtime.exceptionThrown", exceptionDetails={"exception": {"description": "E1"}}),
        event("Runtime.consoleAPICalled", type="error", args=[{"value": "boom"}, {"value": 2}]),
        event("Runtime.consoleAPICalled", type="log", args=[{"value": "fine"}]),
        event("Log.entryAdded", entry={"level": "error", "source": "network", "text": "404"}),
        event("Network.loadingFailed", errorText="net::ERR_ABORTED", canceled=True),
        event("Network.loadingFailed", errorText="net::ERR_FAILED"),
    ]
    errors, external, n_requests = page_problems(events, prefix)
    assert n_requests == 3
    assert external == ["https://cdn.example/x.js"]
    assert errors == [
        "uncaught: E1",
        "console.error: boom 2",
        "network: 404 ",
        "load failed: net::ERR_FAILED",
    ]
    kept, _, _ = page_problems(events, prefix, harmless=["boom"])
    assert "console.error: boom 2" not in kept and len(kept) == 3


def test_the_live_explorer_inputs_are_the_documented_ones():
    inputs, logit_ids = live_explorer.live_inputs()
    assert inputs[0] == [7, 3, 0, 9, 5, 1, 8]  # the chapter's example first
    assert len(inputs) == 1 + 10 + 100 + 10 * live_explorer.PER_LENGTH
    assert sorted({len(d) for d in inputs}) == list(range(1, 13))
    assert {tuple(d) for d in inputs if len(d) <= 2} == {
        *((a,) for a in range(10)),
        *((a, b) for a in range(10) for b in range(10)),
    }
    # the logits of 3 inputs of each length, 36 in all, as the module's docstring says
    assert len(logit_ids) == 36
    assert sorted(len(inputs[i]) for i in logit_ids) == sorted(list(range(1, 13)) * 3)
    assert live_explorer.live_inputs() == (inputs, logit_ids)  # seeded: the same every run


def script_calls(module) -> list[tuple[Script, str]]:
    """(script, function) for every `SCRIPT("function", ...)` call in a module's source, where
    SCRIPT is one of the module's Script objects."""
    scripts = {name: v for name, v in vars(module).items() if isinstance(v, Script)}
    calls = []
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in scripts
        ):
            calls.append((scripts[node.func.id], node.args[0].value))
    return calls


@pytest.mark.parametrize("module", [book_pages, live_explorer, lab_chapter, lab_markup])
def test_every_javascript_function_the_checks_call_is_defined(module):
    calls = script_calls(module)
    assert calls, f"{module.__name__} calls no script function"
    for script, function in calls:
        defined = set(re.findall(r"^  (?:async )?(\w+)\(", script.source, flags=re.M))
        assert function in defined, f"{module.__name__} calls {script.name}.{function}"


def test_a_script_call_passes_json_arguments():
    script = Script(ROOT / "tools" / "check" / "browser" / "jupyterlab.js")
    expression = script("typeText", "digits", 'a "quoted" 1')
    assert expression.startswith("/* jupyterlab.typeText */ (\n// ")  # named for timeouts
    assert expression.endswith('\n).typeText("digits", "a \\"quoted\\" 1")')


def test_the_summary_prints_each_verdict_and_the_exit_status(capsys):
    assert summary({"one": [], "two": ["broken"]}, 12.3) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[1:] == [
        "PASS  one",
        "FAIL  two",
        "      - broken",
        "check-browser: FAIL (1 passed, 1 failed) in 12 s",
    ]
    assert summary({"one": []}, 1) == 0
    assert summary({}, 1) == 1  # no check ran: not a pass


def test_a_redirect_page_is_read_where_it_lands(tmp_path):
    """Jupyter Book's index.html is a meta refresh: its load event fires before the intro
    loads, so the check waits for the target page instead of reading the document between."""

    class Page:
        def __init__(self):
            self.waited = []

        def wait_for(self, expression, timeout):
            self.waited.append(expression)

    redirect = tmp_path / "index.html"
    redirect.write_text('<meta http-equiv="Refresh" content="0; url=chapters/intro.html" />\n')
    plain = tmp_path / "plain.html"
    plain.write_text("<html><body><p>fine</p></body></html>")
    page = Page()
    book_pages.follow_redirect(page, plain)
    assert page.waited == []
    book_pages.follow_redirect(page, redirect)
    assert page.waited == [
        "location.href.endsWith('chapters/intro.html') && document.readyState === 'complete'"
    ]


@pytest.mark.skipif(
    not (shutil.which("chromium") or shutil.which("chromium-browser")), reason="no chromium"
)
def test_the_checker_fails_a_page_with_an_error_and_a_remote_request(tmp_path):
    (tmp_path / "bad.html").write_text(
        '<html><body><p class="math">x</p><img src="https://example.invalid/x.png">'
        '<script>console.error("boom")</script></body></html>'
    )
    (tmp_path / "good.html").write_text("<html><body><p>fine</p></body></html>")
    run = subprocess.run(
        [sys.executable, "-m", "tools.check.browser", "--book-only", "--html", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    out = run.stdout
    assert "  ok   good.html" in out and "  FAIL bad.html" in out
    for via in ("http", "file"):
        assert f"{via} bad.html: 1 of 1 math elements not rendered by MathJax" in out
        assert f"{via} bad.html: 1 image(s) did not load" in out
    assert out.count("console.error: boom") == 2
    assert "1 request(s) left localhost: ['https://example.invalid/x.png']" in out
    assert "1 request(s) left the disk: ['https://example.invalid/x.png']" in out
    assert "check-browser: FAIL (0 passed, 2 failed)" in out
