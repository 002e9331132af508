#!/usr/bin/env python3
"""Check the book in a real browser: headless Chromium driven over the DevTools protocol.

Usage:
    python tools/check/browser.py                 # both checks
    python tools/check/browser.py --book-only     # (a) only
    python tools/check/browser.py --lab-only      # (b) and (c) only
    python tools/check/browser.py --markup-only   # (c) only
    python tools/check/browser.py --screenshots DIR   # keep screenshots of (b) in DIR

(a) The HTML book (_build/html; built first when missing) is opened twice: served from
    127.0.0.1, and from disk (file://, as a reader who opens _build/html/index.html does).
    Each time every page is opened. For each page: every math element (.math) holds MathJax
    output (an mjx-container), every <img> has loaded (naturalWidth > 0), every network
    request went to the local server, or stayed on disk under file:// (or is a data:/blob:
    URL), and nothing was logged as a JavaScript error (console.error, an uncaught exception,
    a failed load). On chapter 18's page the live explorer (book_assets/attention_explorer.js,
    running book_model.js on the weights of tools/build/export_live_models.py) must start with
    labelled controls and draw; Step and Back must move through decoding and grow the KV
    cache; a focused cell's tooltip must show its weight, its fill be matplotlib's Blues, and
    ArrowRight move the focus. In one call the page decodes, with each of the three models,
    every input of 1 and 2 digits and 200 of each length 3 to 12 (the task's lengths): the
    tokens must equal helpers.greedy_decode's and the logits of every step of 36 inputs must
    be within 1e-4 of PyTorch's (the max is printed), the reference built from the weights
    files the page loads; its erf must match math.erf. Invalid inputs must get a message.
(b) JupyterLab is started on 127.0.0.1 (free port, no token, temporary settings, runtime
    and root folders) on a COPY of chapters/18_cross_attention_heatmaps.ipynb. The check
    runs all cells (command `runmenu:run-all`), waits for the kernel, requires no error
    output, finds the explorer widget, switches its layer control and requires that the
    heatmap image changes, then types an invalid input and requires the widget's error
    message (and no traceback).

(c) JupyterLab renders the book's MyST markup (jupyterlab-myst): every chapter notebook is
    opened (all cells attached: windowing off) and, once its markdown has rendered, no
    markdown cell may show raw markup: `{cite}`, `{ref}`, `{numref}`, `:::` or "```{"; every
    `:::{dropdown}` of the source must be a collapsed <details> element, and every image in
    the prose (the opening picture) must have loaded.

Chromium is Debian's (`apt-get install chromium`; `make check-browser` installs it when
missing). The driver is websocket-client (a dependency of jupyter_server) speaking the
Chrome DevTools Protocol: no browser download, no Node. Prints PASS/FAIL per check and
exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import functools
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import websocket  # websocket-client

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src" / "helpers" / "repro"))
from pin import KERNEL_NAME, PIN  # noqa: E402  (plain data, no torch import)

HTML = ROOT / "_build" / "html"
CHAPTER = ROOT / "chapters" / "18_cross_attention_heatmaps.ipynb"
# the HTML book's page with the kernel-free attention explorer
EXPLORER_PAGE = "chapters/18_cross_attention_heatmaps.html"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--mute-audio",
    "--hide-scrollbars",
    "--window-size=1280,1000",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
]
# Console messages that are not errors of the book. Each entry: (substring, why). Empty:
# every console error on a book page fails the check. (pydata-sphinx-theme's "Got invalid
# theme mode" is fixed at its cause, html_context.default_mode in _config.yml, and the
# browser's /favicon.ico request by the book's own favicon.)
KNOWN_HARMLESS: list[tuple[str, str]] = []


def log(msg: str) -> None:
    print(msg, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- a tiny CDP client


class CDP:
    """One DevTools websocket to one page: call(method, **params) and collected events."""

    def __init__(self, ws_url: str):
        # suppress_origin: Chromium refuses websocket clients that send an Origin header
        # unless started with --remote-allow-origins
        self.ws = websocket.create_connection(ws_url, timeout=60, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict] = []

    def call(self, method: str, timeout: float = 60, **params):
        self.next_id += 1
        my_id = self.next_id
        self.ws.send(json.dumps({"id": my_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            self.ws.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                raw = self.ws.recv()
            except websocket.WebSocketTimeoutException:
                raise TimeoutError(f"no answer to {method} within {timeout} s") from None
            if self._noise(raw):
                continue
            msg = json.loads(raw)
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def pump(self, seconds: float) -> None:
        """Collect events for a while (no call pending)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self.ws.settimeout(left)
            try:
                raw = self.ws.recv()
            except websocket.WebSocketTimeoutException:
                return
            if self._noise(raw):
                continue
            msg = json.loads(raw)
            if "method" in msg:
                self.events.append(msg)

    @staticmethod
    def _noise(raw: str) -> bool:
        """Websocket frame events (every kernel message, PNGs included): skipped unparsed."""
        return raw.startswith('{"method":"Network.webSocketFrame')

    def evaluate(self, expression: str, timeout: float = 60):
        """Run JavaScript in the page (promises awaited) and return its JSON value."""
        res = self.call(
            "Runtime.evaluate",
            timeout=timeout,
            expression=expression,
            awaitPromise=True,
            returnByValue=True,
        )
        if "exceptionDetails" in res:
            d = res["exceptionDetails"]
            raise RuntimeError(
                f"JavaScript error: {d.get('exception', {}).get('description') or d.get('text')}"
            )
        return res.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float, interval: float = 0.25):
        """Poll a JavaScript expression until it is truthy; return its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout} s waiting for: {expression[:120]}")
            self.pump(interval)

    def navigate(self, url: str, timeout: float = 60) -> None:
        self.events = [e for e in self.events if e["method"] != "Page.loadEventFired"]
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        while not any(e["method"] == "Page.loadEventFired" for e in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not finish loading within {timeout} s")
            self.pump(0.2)

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.ws.close()


class Chromium:
    """Debian's chromium, headless, with a new empty profile; .page is a CDP connection."""

    def __init__(self):
        exe = shutil.which("chromium") or shutil.which("chromium-browser")
        if exe is None:
            raise RuntimeError(
                "chromium not found: install it with "
                "`apt-get update && apt-get install -y chromium` (make check-browser does)"
            )
        self.profile = Path(tempfile.mkdtemp(prefix="check-browser-profile-"))
        self.proc = subprocess.Popen(
            [exe, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("chromium did not start (no DevToolsActivePort)")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        pages = []
        while not pages:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
                pages = [t for t in json.load(r) if t.get("type") == "page"]
            time.sleep(0.1)
        self.version = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/version"))[
            "Browser"
        ]
        self.page = CDP(pages[0]["webSocketDebuggerUrl"])
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.page.call(f"{domain}.enable")
        # a headless window never has the OS focus; JupyterLab tracks its "current" notebook
        # by focus, and commands such as runmenu:run-all act on the current one
        self.page.call("Emulation.setFocusEmulationEnabled", enabled=True)

    def close(self) -> None:
        self.page.close()
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        shutil.rmtree(self.profile, ignore_errors=True)


def page_problems(events: list[dict], allowed_prefix: str) -> tuple[list[str], list[str], int]:
    """(errors, external requests, number of requests) from the events of one page load."""
    errors, external, n_requests = [], [], 0
    for e in events:
        m, p = e["method"], e.get("params", {})
        if m == "Network.requestWillBeSent":
            n_requests += 1
            url = p["request"]["url"]
            if not url.startswith((allowed_prefix, "data:", "blob:", "about:")):
                external.append(url)
        elif m == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            errors.append(
                "uncaught: " + (d.get("exception", {}).get("description") or d.get("text", ""))
            )
        elif m == "Runtime.consoleAPICalled" and p.get("type") == "error":
            text = " ".join(
                str(a.get("value", a.get("description", ""))) for a in p.get("args", [])
            )
            errors.append("console.error: " + text)
        elif m == "Log.entryAdded" and p["entry"].get("level") == "error":
            errors.append(
                f"{p['entry'].get('source')}: {p['entry'].get('text')} {p['entry'].get('url', '')}"
            )
        elif m == "Network.loadingFailed" and not p.get("canceled"):
            errors.append(f"load failed: {p.get('errorText')}")
    kept = [x for x in errors if not any(s in x for s, _ in KNOWN_HARMLESS)]
    return kept, external, n_requests


# ---------------------------------------------------------------- (a) the HTML book

PAGE_REPORT_JS = r"""
(async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
    if (MathJax.typesetPromise) { await MathJax.typesetPromise(); }
  }
  const imgs = [...document.images];
  await Promise.all(imgs.map(img => {
    img.loading = 'eager';
    if (img.complete) return null;
    return new Promise(r => { img.onload = img.onerror = r; setTimeout(r, 10000); });
  }));
  const math = [...document.querySelectorAll('.math')];
  return {
    title: document.title,
    math: math.length,
    rendered: math.filter(el => el.querySelector('mjx-container')).length,
    raw: math.filter(el => !el.querySelector('mjx-container')).slice(0, 3)
             .map(el => el.textContent.slice(0, 60)),
    mathjax: !!window.MathJax,
    images: imgs.length,
    broken: imgs.filter(i => !(i.complete && i.naturalWidth > 0))
                .map(i => i.getAttribute('src').slice(0, 80)),
  };
})()
"""


# Exercise solutions: a code cell tagged hide-input becomes <details class="hide
# above-input"> around the cell's source. Every solution must start closed (its code not
# rendered); for the first one, clicking its summary must show the code.
SOLUTIONS_JS = r"""
(() => {
  const sols = [...document.querySelectorAll('details.above-input')]
      .filter(d => d.textContent.includes('# Solution to exercise'));
  // checkVisibility: the content of a closed <details> keeps its layout boxes in Chromium
  // (content-visibility: hidden), so getClientRects alone would call it visible
  const visible = el => !!el && el.checkVisibility() && el.offsetHeight > 0;
  const open = sols.filter(d => d.open || visible(d.querySelector('pre')));
  // written-out answers to predictions: sphinx-design dropdowns, closed at load
  const answers = [...document.querySelectorAll('details.sd-dropdown')]
      .filter(d => d.querySelector('summary').textContent.includes('Answer to exercise'));
  const answers_open = answers.filter(d => d.open).length;
  let expanded = null;
  if (sols.length) {
    const d = sols[0];
    d.querySelector('summary').click();
    const pre = d.querySelector('pre');
    expanded = {open: d.open, shown: visible(pre),
                starts: pre ? pre.innerText.trim().slice(0, 40) : ''};
  }
  return {solutions: sols.length, open_at_load: open.length, expanded: expanded,
          answers: answers.length, answers_open: answers_open};
})()
"""


# Chapter 18's live explorer (book_assets/attention_explorer.js; the model in
# book_assets/book_model.js; weights from tools/build/export_live_models.py): its drawn state.
LIVE_STATE_JS = r"""
(() => {
  const root = document.querySelector('.html-attention-explorer');
  if (!root) return {found: false};
  const state = root.dataset.state || null;
  const q = s => root.querySelector(s);
  const controls = [...root.querySelectorAll('.bme-controls input, .bme-controls select')];
  const labels = controls.map(c => {
    const l = root.querySelector('label[for="' + c.id + '"]');
    return [c.dataset.control, !!l && l.textContent.replace(c.textContent, '').trim().length > 0];
  });
  const buttons = [...root.querySelectorAll('button')].map(b => b.textContent.trim());
  const svgs = [...root.querySelectorAll('svg.bme-svg')];
  return {found: true, state: state, labels: labels, buttons: buttons,
          status: q('.bme-status') ? q('.bme-status').textContent : null,
          message: q('.bme-message') ? q('.bme-message').textContent : null,
          output: q('.bme-output') ? q('.bme-output').textContent : null,
          bars: root.querySelectorAll('.bme-bar').length,
          step_cells: svgs[0] ? svgs[0].querySelectorAll('rect.bme-cell').length : 0,
          map_cells: svgs[1] ? svgs[1].querySelectorAll('rect.bme-cell').length : 0,
          mirrors: root.querySelectorAll('rect.bme-mirror').length,
          kv: [...root.querySelectorAll('.bme-kv')].map(p => p.textContent),
          model: q('select[data-control="model"]') ? q('select[data-control="model"]').value : null,
          text: state === 'failed' ? root.textContent.slice(0, 200) : ''};
})()
"""


def live_wait_js(condition: str) -> str:
    """A promise-free expression: the explorer's state once `condition` (JS, on s) holds."""
    return f"(() => {{ const s = {LIVE_STATE_JS.strip()}; return ({condition}) ? s : null; }})()"


def live_set_js(control: str, value: str, event: str = "input") -> str:
    return f"""
(() => {{
  const c = document.querySelector(
      '.html-attention-explorer [data-control="{control}"]');
  c.value = {json.dumps(value)};
  c.dispatchEvent(new Event({json.dumps(event)}, {{bubbles: true}}));
  return c.value;
}})()"""


def live_click_js(control: str) -> str:
    return (
        "(() => { document.querySelector('.html-attention-explorer "
        f'button[data-control="{control}"]\').click(); return true; }})()'
    )


# Focus one cell of the step heatmap (as the keyboard does): its weight, fill and tooltip;
# then ArrowRight, and which cell has the focus.
LIVE_CELL_JS = r"""
(() => {
  const root = document.querySelector('.html-attention-explorer');
  const cell = root.querySelector('svg.bme-svg rect.bme-cell[data-row="ROW"][data-col="COL"]');
  cell.focus();
  const tip = root.querySelector('.bme-tip');
  const out = {weight: cell.dataset.weight, fill: cell.getAttribute('fill'),
               tip: tip.textContent, tip_shown: getComputedStyle(tip).display !== 'none',
               focused: document.activeElement === cell};
  cell.dispatchEvent(new KeyboardEvent('keydown', {key: 'ArrowRight', bubbles: true}));
  const now = document.activeElement;
  out.after_right = now && now.dataset ? [now.dataset.row, now.dataset.col].join(',') : null;
  return out;
})()
"""

# Every model loaded, then every input decoded in the page, in one call: the tokens of each,
# the logits of every step for the inputs in LOGITS, the time per decode; and erf on a grid.
LIVE_DECODE_JS = r"""
(async () => {
  const src = document.querySelector('script[src$="attention_explorer.js"]').src;
  const base = src.slice(0, src.lastIndexOf('/') + 1);
  const inputs = INPUTS, logitsFor = new Set(LOGITS), out = {};
  for (const id of MODELS) {
    await window.BookModel.load(id, base);
    const t0 = performance.now();
    const runs = inputs.map(d => window.BookModel.decode(id, d));
    const ms = (performance.now() - t0) / inputs.length;
    out[id] = {ms: ms, tokens: runs.map(r => r.tokens),
               logits: runs.map((r, i) => logitsFor.has(i) ? r.logits : null)};
  }
  out.erf = GRID.map(x => window.BookModel.erf(x));
  return out;
})()
"""


def blues_rgb(v: float) -> tuple[int, int, int]:
    """matplotlib's Blues at v (what helpers.plot_attention draws), as 0-255 integers."""
    from matplotlib import colormaps

    return tuple(round(255 * c) for c in colormaps["Blues"](v)[:3])


LIVE_MODELS = ("book", "sharp", "twin")
LIVE_PER_LENGTH = 200  # inputs of each length 3..12 (the task's lengths); all of 1 and 2 digits
LIVE_LOGIT_TOL = 1e-4


def live_inputs() -> tuple[list[list[int]], list[int]]:
    """(inputs, indices of those whose logits are compared): every input of 1 and 2 digits
    and 200 random ones (seeded) of each length 3 to 12; logits for 3 of each length."""
    import numpy as np

    rng = np.random.default_rng(29)
    inputs = [[d] for d in range(10)] + [[a, b] for a in range(10) for b in range(10)]
    for n in range(3, 13):
        inputs += [rng.integers(0, 10, n).tolist() for _ in range(LIVE_PER_LENGTH)]
    inputs.insert(0, [7, 3, 0, 9, 5, 1, 8])  # the chapter's example first
    logits, seen = [], {}
    for i, d in enumerate(inputs):
        if seen.get(len(d), 0) < 3:
            logits.append(i)
            seen[len(d)] = seen.get(len(d), 0) + 1
    return inputs, logits


@functools.cache
def live_reference(static: Path) -> dict:
    """PyTorch's greedy tokens (helpers.greedy_decode) and the logits of every step, for every
    input of live_inputs, from the weights files the page loads (the exporter's unit test
    proves those files hold the checkpoints bit for bit): no model is trained here."""
    import torch

    sys.path.insert(0, str(ROOT / "src"))
    sys.path.insert(0, str(ROOT / "tools"))
    from export_live_models import model_from_file

    from helpers import encode_digits, greedy_decode
    from helpers.core.vocab import EOS_ID

    inputs, logit_ids = live_inputs()
    ref = {}
    with torch.no_grad():
        for mid in LIVE_MODELS:
            model = model_from_file(static / f"weights_{mid}.js")
            tokens: list = [None] * len(inputs)
            for n in sorted({len(d) for d in inputs}):  # a batch per length: no padding
                rows = [i for i, d in enumerate(inputs) if len(d) == n]
                src = torch.cat([encode_digits(inputs[i]) for i in rows])
                for i, row in zip(rows, greedy_decode(model, src).tolist()):
                    # a finished row is padded while others decode: cut after its <eos>
                    tokens[i] = row[: row.index(EOS_ID) + 1] if EOS_ID in row else row
            logits = {}
            for i in logit_ids:
                memory, mask = model.encode(encode_digits(inputs[i]))
                tgt_in = torch.tensor([tokens[i][:-1]])
                logits[i] = model.decode(tgt_in, memory, mask, need_weights=False)[0][0]
            ref[mid] = {"tokens": tokens, "logits": logits}
    return ref


def check_live_explorer(page: CDP, static: Path) -> list[str]:
    """The live explorer starts, labels its controls, draws the step and the map, steps, shows
    a cell's value on focus; it decodes as PyTorch does (tokens of every input, logits of every
    step of some); an invalid input gets a plain message."""
    import math

    problems: list[str] = []
    try:
        state = page.wait_for(
            live_wait_js("s.found === false || s.state === 'ready' || s.state === 'failed'"),
            timeout=30,
        )
    except TimeoutError as err:
        return [f"live explorer: not ready ({err})"]
    if not state.get("found"):
        return ["no live explorer (.html-attention-explorer) on the page"]
    if state["state"] != "ready":
        return [f"live explorer did not start: {state}"]
    bad = [name for name, ok in state["labels"] if not ok]
    if len(state["labels"]) != 4 or bad:
        problems.append(f"explorer controls not all labelled: {state['labels']}")
    if not all(state["buttons"]):
        problems.append(f"a button without text: {state['buttons']}")
    if state["bars"] != 13 or not state["step_cells"] or not state["map_cells"]:
        problems.append(f"explorer did not draw bars and heatmaps: {state}")
    first = state
    page.evaluate(live_click_js("step"))
    page.evaluate(live_click_js("step"))
    stepped = page.evaluate(LIVE_STATE_JS)
    if stepped["status"] == first["status"] or stepped["map_cells"] <= first["map_cells"]:
        problems.append(f"Step did not advance: {first['status']!r} -> {stepped['status']!r}")
    if stepped["kv"] == first["kv"]:
        problems.append("the KV cache did not grow with a step")
    page.evaluate(live_click_js("back"))
    back = page.evaluate(LIVE_STATE_JS)
    if back["map_cells"] >= stepped["map_cells"]:
        problems.append("Back did not go back a step")
    cell = page.evaluate(LIVE_CELL_JS.replace("ROW", "0").replace("COL", "1"))
    drawn = tuple(int(x) for x in cell["fill"][4:-1].split(","))
    want = blues_rgb(float(cell["weight"]))
    if max(abs(a - b) for a, b in zip(drawn, want)) > 3:
        problems.append(f"cell fill {drawn}, matplotlib's Blues {want}")
    if not (
        cell["focused"] and cell["tip_shown"] and f"{float(cell['weight']):.3f}" in cell["tip"]
    ):
        problems.append(f"focused cell's tooltip {cell['tip']!r} lacks its weight")
    if cell["after_right"] != "0,2":
        problems.append(f"ArrowRight from (0, 1) focused {cell['after_right']}")

    # the same model: every input, every model, tokens; the logits of every step of some
    inputs, logit_ids = live_inputs()
    grid = [round(-7 + 0.005 * k, 3) for k in range(2801)]
    js = (
        LIVE_DECODE_JS.replace("INPUTS", json.dumps(inputs))
        .replace("LOGITS", json.dumps(logit_ids))
        .replace("MODELS", json.dumps(list(LIVE_MODELS)))
        .replace("GRID", json.dumps(grid))
    )
    got = page.evaluate(js, timeout=300)
    ref = live_reference(static)
    erf_gap = max(abs(a - math.erf(x)) for a, x in zip(got["erf"], grid))
    if erf_gap > 1e-14:
        problems.append(f"the page's erf differs from math.erf by {erf_gap:.1e}")
    worst = 0.0
    for mid in LIVE_MODELS:
        same = sum(a == b for a, b in zip(got[mid]["tokens"], ref[mid]["tokens"]))
        if same != len(inputs):
            i = next(
                k for k, (a, b) in enumerate(zip(got[mid]["tokens"], ref[mid]["tokens"])) if a != b
            )
            problems.append(
                f"{mid}: {len(inputs) - same} of {len(inputs)} inputs decode otherwise than "
                f"greedy_decode, e.g. {inputs[i]}: page {got[mid]['tokens'][i]}, "
                f"PyTorch {ref[mid]['tokens'][i]}"
            )
        gap = 0.0
        for i in logit_ids:
            mine, theirs = got[mid]["logits"][i], ref[mid]["logits"][i]
            if len(mine) != theirs.shape[0]:
                gap = math.inf
                continue
            gap = max(
                gap, max(abs(a - b) for r, s in zip(mine, theirs.tolist()) for a, b in zip(r, s))
            )
        worst = max(worst, gap)
        log(
            f"  live explorer, {mid}: {same} of {len(inputs)} inputs (all of 1 and 2 digits, "
            f"{LIVE_PER_LENGTH} of each length 3-12) decode to greedy_decode's tokens; logits "
            f"of every step of {len(logit_ids)} inputs: max abs difference {gap:.2e}; "
            f"{got[mid]['ms']:.2f} ms per decode in the page"
        )
    if worst > LIVE_LOGIT_TOL:
        problems.append(f"logits differ from PyTorch's by {worst:.2e} > {LIVE_LOGIT_TOL}")
    log(f"  live explorer: erf against math.erf on {len(grid)} points: max gap {erf_gap:.1e}")

    # the UI: another model, then an invalid input and a plain message, then a valid one again
    page.evaluate(live_set_js("model", "sharp", "change"))
    sharp = page.wait_for(live_wait_js("s.state === 'ready' && s.model === 'sharp'"), timeout=30)
    for bad_text in ("12a", "1234567890123", ""):
        page.evaluate(live_set_js("digits", bad_text))
        try:
            msg = page.wait_for(live_wait_js("s.state === 'invalid' && s.message"), timeout=10)
        except TimeoutError:
            problems.append(f"invalid input {bad_text!r}: no message")
            continue
        if msg["step_cells"] or msg["bars"]:
            problems.append(f"invalid input {bad_text!r} left a heatmap drawn")
        log(f"  invalid input {bad_text!r} -> {msg['message']!r}")
    page.evaluate(live_set_js("digits", "5281"))
    again = page.wait_for(live_wait_js("s.state === 'ready' && !s.message"), timeout=10)
    log(
        f"  explorer: {sharp['model']} model drawn ({sharp['step_cells']} cells at a step); "
        f"after the invalid inputs, 5281 -> {again['status']!r}"
    )
    if not again["status"] or not again["step_cells"]:
        problems.append(f"a valid input after the invalid ones did not draw: {again}")
    return problems


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(folder: Path):
    port = free_port()
    handler = functools.partial(QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, port


def ensure_book(rebuild: bool) -> None:
    if (HTML / "index.html").exists() and not rebuild:
        return
    jb = Path(sys.executable).with_name("jupyter-book")
    log(f"building the book: {jb.name} build . (no _build/html/index.html yet)")
    subprocess.run(
        [str(jb), "build", "--keep-going", "."], cwd=ROOT, check=True, stdout=subprocess.DEVNULL
    )
    if not (HTML / "index.html").exists():
        raise RuntimeError("the book build produced no _build/html/index.html")


def book_pages() -> list[Path]:
    skip = {"_static", "_sources", "_images", "_downloads"}
    return sorted(p for p in HTML.rglob("*.html") if not skip & set(p.relative_to(HTML).parts))


def check_book(browser: Chromium, via: str = "http") -> list[str]:
    """Every page of the built book, over HTTP from 127.0.0.1 (via="http") or from disk
    (via="file"); failures name the way the page was opened."""
    if via == "file":
        server, prefix = None, HTML.as_uri() + "/"
    else:
        server, port = serve(HTML)
        prefix = f"http://127.0.0.1:{port}/"
    failures: list[str] = []
    totals = {"pages": 0, "math": 0, "images": 0, "requests": 0, "solutions": 0, "answers": 0}
    toggled = explorer_pages = 0
    try:
        for path in book_pages():
            rel = path.relative_to(HTML).as_posix()
            page = browser.page
            page.events.clear()
            try:
                page.navigate(prefix + rel)
                info = page.evaluate(PAGE_REPORT_JS, timeout=60)
                sols = page.evaluate(SOLUTIONS_JS)
                explorer = (
                    check_live_explorer(page, HTML / "_static") if rel == EXPLORER_PAGE else []
                )
                page.pump(0.3)  # late console messages
            except Exception as err:
                failures.append(f"{via} {rel}: {type(err).__name__}: {err}")
                continue
            errors, external, n_req = page_problems(page.events, prefix)
            totals["pages"] += 1
            totals["math"] += info["math"]
            totals["images"] += info["images"]
            totals["requests"] += n_req
            problems = list(explorer)
            explorer_pages += rel == EXPLORER_PAGE
            if info["rendered"] < info["math"]:
                problems.append(
                    f"{info['math'] - info['rendered']} of {info['math']} math elements not "
                    f"rendered by MathJax (MathJax loaded: {info['mathjax']}), e.g. {info['raw']}"
                )
            if info["broken"]:
                problems.append(
                    f"{len(info['broken'])} image(s) did not load: {info['broken'][:3]}"
                )
            if external:
                where = "the disk" if via == "file" else "localhost"
                problems.append(f"{len(external)} request(s) left {where}: {external[:3]}")
            if errors:
                problems.append(f"{len(errors)} JavaScript error(s): {errors[:3]}")
            totals["solutions"] += sols["solutions"]
            if sols["open_at_load"]:
                problems.append(
                    f"{sols['open_at_load']} of {sols['solutions']} exercise solution(s) visible "
                    "before their toggle is clicked (tag the cell hide-input)"
                )
            totals["answers"] += sols["answers"]
            if sols["answers_open"]:
                problems.append(f"{sols['answers_open']} answer dropdown(s) open at load")
            exp = sols["expanded"]
            if exp is not None:
                if exp["open"] and exp["shown"] and exp["starts"].startswith("# Solution"):
                    toggled += 1
                else:
                    problems.append(f"clicking a solution's toggle did not show its code: {exp}")
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


# ---------------------------------------------------------------- (b) JupyterLab

LAB_STATE_TEMPLATE = r"""
(() => {
  const app = window.jupyterapp;
  if (!app) return null;
  const panel = [...app.shell.widgets('main')]
      .find(w => w.context && w.context.path === NOTEBOOK_PATH);
  if (!panel || !panel.content || !panel.sessionContext) return {ready: false};
  const s = panel.sessionContext;
  const cells = panel.content.widgets.filter(c => c.model.type === 'code');
  const outputs = cells.flatMap(c => c.model.outputs.toJSON());
  return {
    ready: s.isReady && !!s.session && !!s.session.kernel,
    kernel: s.session && s.session.kernel ? s.session.kernel.status : 'none',
    code_cells: cells.length,
    executed: cells.filter(c => c.model.executionCount !== null).length,
    running: document.querySelectorAll('.jp-InputPrompt').length
             ? [...document.querySelectorAll('.jp-InputPrompt')]
                 .filter(p => p.textContent.includes('*')).length : 0,
    errors: outputs.filter(o => o.output_type === 'error').map(o => o.ename + ': ' + o.evalue),
  };
})()
"""

# The kernel the notebook runs in, and what that kernel sees: its name must be the book's
# (the notebook's metadata names it) and its environment must hold the pinned numerics.
KERNEL_ENV_JS = r"""
(async () => {
  const panel = [...window.jupyterapp.shell.widgets('main')]
      .find(w => w.context && w.context.path === NOTEBOOK_PATH);
  const kernel = panel.sessionContext.session.kernel;
  let text = '';
  const future = kernel.requestExecute({
    code: "import os, torch; print(os.environ.get('ATEN_CPU_CAPABILITY'), "
        + "os.environ.get('MKL_CBWR'), torch.backends.cpu.get_cpu_capability())",
    silent: false, store_history: false});
  future.onIOPub = msg => { if (msg.header.msg_type === 'stream') text += msg.content.text; };
  await future.done;
  return {name: kernel.name, seen: text.trim()};
})()
"""

# The explorer: the widget box with class attention-explorer (the last one on the page).
# Its heatmap is an ipywidgets Image (an <img> with a blob: URL, replaced on every change):
# we hash the PNG bytes behind it, so "the heatmap changed" means different image data.
EXPLORER_JS = r"""
(async () => {
  const boxes = document.querySelectorAll('.attention-explorer');
  if (!boxes.length) return null;
  const box = boxes[boxes.length - 1];
  const select = [...box.querySelectorAll('.widget-dropdown')]
      .find(d => d.querySelector('label').textContent.trim() === 'layer').querySelector('select');
  const img = box.querySelector('img');
  const shown = !!img && getComputedStyle(img).display !== 'none' && img.naturalWidth > 0;
  let hash = null, bytes = 0;
  if (shown) {
    const data = new Uint8Array(await (await fetch(img.src)).arrayBuffer());
    let h = 0x811c9dc5;
    for (const b of data) { h ^= b; h = Math.imul(h, 0x01000193) >>> 0; }
    hash = h.toString(16); bytes = data.length;
  }
  const status = box.querySelector('.explorer-status');
  return {
    options: [...select.options].map(o => o.textContent.replace(/\u00a0/g, ' ')),
    selected: select.selectedIndex,
    shown: shown, hash: hash, bytes: bytes, width: shown ? img.naturalWidth : 0,
    status: status ? status.textContent : null,
    tracebacks: box.querySelectorAll('[data-mime-type="application/vnd.jupyter.stderr"]').length,
  };
})()
"""


def select_option_js(label: str, index: int) -> str:
    return f"""
(() => {{
  const boxes = document.querySelectorAll('.attention-explorer');
  const select = [...boxes[boxes.length - 1].querySelectorAll('.widget-dropdown')]
      .find(d => d.querySelector('label').textContent.trim() === {json.dumps(label)})
      .querySelector('select');
  select.selectedIndex = {index};
  select.dispatchEvent(new Event('change', {{bubbles: true}}));
  return select.options[{index}].textContent.replace(/\u00a0/g, ' ');
}})()"""


def type_text_js(label: str, text: str) -> str:
    return f"""
(() => {{
  const boxes = document.querySelectorAll('.attention-explorer');
  const input = [...boxes[boxes.length - 1].querySelectorAll('.widget-text')]
      .find(d => d.querySelector('label').textContent.trim() === {json.dumps(label)})
      .querySelector('input');
  input.value = {json.dumps(text)};
  input.dispatchEvent(new Event('input', {{bubbles: true}}));
  input.dispatchEvent(new KeyboardEvent('keydown', {{key: 'Enter', bubbles: true}}));
  return input.value;
}})()"""


# Exercise solutions in JupyterLab: cells whose source starts "# Solution to exercise" must
# open with their input collapsed (cell metadata jupyter.source_hidden: JupyterLab shows a
# placeholder instead of the editor); clicking the placeholder must show the code.
LAB_SOLUTIONS_JS = r"""
(() => {
  const app = window.jupyterapp;
  const panel = [...app.shell.widgets('main')]
      .find(w => w.context && w.context.path === NOTEBOOK_PATH);
  const visible = el => !!el && el.checkVisibility() && el.offsetHeight > 0;
  const sols = panel.content.widgets.filter(
      c => c.model.sharedModel.getSource().startsWith('# Solution to exercise'));
  return sols.map(c => ({
    hidden: c.inputHidden,
    placeholder: visible(c.node.querySelector('.jp-InputPlaceholder')),
    editor: visible(c.node.querySelector('.jp-InputArea-editor')),
  }));
})()
"""

EXPAND_SOLUTION_JS = r"""
(async () => {
  const app = window.jupyterapp;
  const panel = [...app.shell.widgets('main')]
      .find(w => w.context && w.context.path === NOTEBOOK_PATH);
  const c = panel.content.widgets.find(
      c => c.model.sharedModel.getSource().startsWith('# Solution to exercise'));
  c.node.scrollIntoView();
  c.node.querySelector('.jp-InputPlaceholder').click();
  await new Promise(r => setTimeout(r, 500));
  const editor = c.node.querySelector('.jp-InputArea-editor');
  const shown = !!editor && editor.checkVisibility() && editor.offsetHeight > 0;
  return {hidden: c.inputHidden, shown: shown,
          text: editor ? editor.innerText.trim().slice(0, 40) : ''};
})()
"""

ACTIVATE_JS = r"""
(() => {
  const app = window.jupyterapp;
  const panel = [...app.shell.widgets('main')]
      .find(w => w.context && w.context.path === NOTEBOOK_PATH);
  app.shell.activateById(panel.id);
  panel.content.activate();
  return panel.id;
})()
"""


def lab_state_js(notebook_name: str) -> str:
    return LAB_STATE_TEMPLATE.replace("NOTEBOOK_PATH", json.dumps(notebook_name))


def start_lab(workdir: Path):
    port = free_port()
    env = dict(os.environ)
    for var, sub in (
        ("JUPYTER_CONFIG_DIR", "config"),
        ("JUPYTER_DATA_DIR", "data"),
        ("JUPYTER_RUNTIME_DIR", "runtime"),
        ("JUPYTERLAB_SETTINGS_DIR", "settings"),
        ("JUPYTERLAB_WORKSPACES_DIR", "workspaces"),
        ("IPYTHONDIR", "ipython"),
    ):
        (workdir / sub).mkdir()
        env[var] = str(workdir / sub)
    # no "get notified about Jupyter news?" toast over the screenshots
    news = workdir / "settings" / "@jupyterlab" / "apputils-extension"
    news.mkdir(parents=True)
    (news / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    env["PYTHONHASHSEED"] = "0"
    env.pop("MPLBACKEND", None)
    # stays open for the server's lifetime; the temporary folder goes with it
    logfile = open(workdir / "jupyterlab.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0",
            "--IdentityProvider.token=",
            "--ServerApp.password=",
            f"--ServerApp.root_dir={workdir / 'root'}",
            "--ServerApp.allow_root=True",  # CI runs as root; JupyterLab refuses root otherwise
            "--LabApp.expose_app_in_browser=True",
            "--LabApp.news_url=",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ],
        cwd=workdir / "root",
        env=env,
        stdout=logfile,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 90
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=5) as r:
                if r.status == 200:
                    return proc, port
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(
                "JupyterLab did not start; see its log:\n"
                + (workdir / "jupyterlab.log").read_text()[-2000:]
            )
        time.sleep(0.3)


def stop(proc) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def check_lab(
    browser: Chromium, screenshots: Path | None, run_timeout: float, notebook: Path = CHAPTER
) -> list[str]:
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
    LAB_STATE_JS = lab_state_js(notebook.name)
    page.events.clear()  # nothing from part (a) counts here
    try:
        t0 = time.monotonic()
        proc, port = start_lab(workdir)
        log(f"  JupyterLab up on 127.0.0.1:{port} in {time.monotonic() - t0:.1f} s")
        page.navigate(f"http://127.0.0.1:{port}/lab/tree/{notebook.name}", timeout=90)
        state = page.wait_for(
            f"(() => {{ const s = {LAB_STATE_JS}; "
            "return s && s.ready && s.kernel === 'idle' && s; })()",
            timeout=90,
        )
        log(f"  notebook open, kernel idle, {state['code_cells']} code cells")
        kernel = page.evaluate(KERNEL_ENV_JS.replace("NOTEBOOK_PATH", json.dumps(notebook.name)))
        log(
            f"  kernel {kernel['name']!r}; it sees ATEN_CPU_CAPABILITY, MKL_CBWR, capability: "
            f"{kernel['seen']}"
        )
        expected = f"{PIN['ATEN_CPU_CAPABILITY']} {PIN['MKL_CBWR']}"
        if kernel["name"] != KERNEL_NAME or not kernel["seen"].startswith(expected):
            failures.append(f"not the book's pinned kernel: {kernel}, expected {KERNEL_NAME}")
        t1 = time.monotonic()
        page.evaluate(ACTIVATE_JS.replace("NOTEBOOK_PATH", json.dumps(notebook.name)))
        page.wait_for("!!window.jupyterapp.shell.currentWidget", timeout=30)
        # the command's promise settles when the last cell has run: allow the whole run for it
        page.evaluate(
            "window.jupyterapp.commands.execute('runmenu:run-all').then(() => true)",
            timeout=run_timeout,
        )
        state = page.wait_for(
            f"(() => {{ const s = {LAB_STATE_JS}; "
            "return s && s.kernel === 'idle' && s.running === 0 && "
            f"(s.executed === s.code_cells || s.errors.length) && s; }})()",
            timeout=run_timeout,
            interval=1.0,
        )
        log(
            f"  run-all: {state['executed']} of {state['code_cells']} code cells executed in "
            f"{time.monotonic() - t1:.1f} s, {len(state['errors'])} error output(s)"
        )
        if state["errors"]:
            failures.append(f"notebook raised: {state['errors'][:3]}")
        if state["executed"] != state["code_cells"]:
            failures.append(
                f"only {state['executed']} of {state['code_cells']} code cells executed"
            )

        sols_js = LAB_SOLUTIONS_JS.replace("NOTEBOOK_PATH", json.dumps(notebook.name))
        sols = page.evaluate(sols_js)
        collapsed = [x for x in sols if x["hidden"] and x["placeholder"] and not x["editor"]]
        log(f"  {len(sols)} exercise solution cell(s), {len(collapsed)} collapsed at open")
        if not sols:
            failures.append("no cell starting '# Solution to exercise' in the notebook")
        elif len(collapsed) != len(sols):
            failures.append(f"solutions not collapsed in JupyterLab: {sols}")
        else:
            exp = page.evaluate(
                EXPAND_SOLUTION_JS.replace("NOTEBOOK_PATH", json.dumps(notebook.name))
            )
            log(f"  clicked the first solution's placeholder: {exp}")
            if exp["hidden"] or not exp["shown"] or not exp["text"].startswith("# Solution"):
                failures.append(f"clicking a collapsed solution did not show its code: {exp}")

        before = page.wait_for(
            f"(async () => {{ const e = await {EXPLORER_JS}; return e && e.shown && e; }})()",
            timeout=30,
        )
        log(
            f"  explorer found: layer options {before['options']} (selected {before['selected']}); "
            f"status: {before['status']!r}"
        )
        if screenshots:
            page.evaluate("document.querySelector('.attention-explorer').scrollIntoView()")
            page.screenshot(screenshots / "lab_before.png")
        target = 0 if before["selected"] != 0 else len(before["options"]) - 1
        chosen = page.evaluate(select_option_js("layer", target))
        try:
            after = page.wait_for(
                f"(async () => {{ const e = await {EXPLORER_JS}; return e && e.shown && "
                f"e.hash !== {json.dumps(before['hash'])} && e; }})()",
                timeout=30,
            )
            log(
                f"  layer -> {chosen!r}: the heatmap image changed (PNG {before['bytes']} "
                f"bytes, hash {before['hash']} -> {after['bytes']} bytes, hash {after['hash']}); "
                f"status: {after['status']!r}"
            )
            if screenshots:
                page.screenshot(screenshots / "lab_after_layer.png")
        except TimeoutError:
            failures.append(f"changing the layer control to {chosen!r} did not change the heatmap")

        page.evaluate(type_text_js("digits", "12a"))
        try:
            bad = page.wait_for(
                f"(async () => {{ const e = await {EXPLORER_JS}; return e && e.status && "
                f"e.status.startsWith('error:') && !e.shown && e; }})()",
                timeout=30,
            )
            log(f"  invalid input '12a' -> {bad['status']!r}, heatmap hidden: {not bad['shown']}")
            if bad["shown"] or bad["tracebacks"]:
                failures.append("invalid input left a heatmap or printed a traceback")
            if screenshots:
                page.screenshot(screenshots / "lab_invalid_input.png")
        except TimeoutError:
            e = page.evaluate(EXPLORER_JS)
            failures.append(
                f"typing an invalid input did not show the widget's error message and hide "
                f"the heatmap: status {e['status']!r}, heatmap shown: {e['shown']}"
            )
        errors, external, _ = page_problems(page.events, f"http://127.0.0.1:{port}/")
        if external:
            failures.append(
                f"JupyterLab page sent {len(external)} request(s) off localhost: {external[:3]}"
            )
        if errors:  # JupyterLab itself logs some; reported, not failed
            log(
                f"  note: {len(errors)} console message(s) at error level in JupyterLab; "
                f"distinct: {sorted(set(e[:120] for e in errors))[:8]}"
            )
        state = page.evaluate(LAB_STATE_JS)
        if state and state["errors"]:
            failures.append(f"error outputs after interacting: {state['errors'][:3]}")
    except Exception as err:
        failures.append(f"{type(err).__name__}: {err}")
    finally:
        with contextlib.suppress(Exception):  # leave the page before the server goes away
            page.navigate("about:blank", timeout=10)
        if proc is not None:
            stop(proc)
        shutil.rmtree(workdir, ignore_errors=True)
    return failures


# ---------------------------------------------------------------- (c) MyST in JupyterLab

RAW_MARKUP = ("{cite}", "{ref}", "{numref}", "{doc}", ":::", "```{")

MARKUP_STATE_JS = r"""
(() => {
  const app = window.jupyterapp;
  const panel = app && [...app.shell.widgets('main')]
      .find(w => w.context && w.context.path === NOTEBOOK_PATH);
  if (!panel || !panel.content || !panel.content.widgets.length) return null;
  const md = panel.content.widgets.filter(c => c.model.type === 'markdown');
  const nodes = md.map(c => c.node);
  const texts = nodes.map(n => n.innerText);
  const imgs = nodes.flatMap(n => [...n.querySelectorAll('img')]);
  return {
    markdown_cells: md.length,
    rendered: texts.filter(t => t.trim().length > 0).length,
    myst_nodes: nodes.reduce((k, n) => k + n.querySelectorAll('[class*=myst]').length, 0),
    details: nodes.reduce((k, n) => k + n.querySelectorAll('details').length, 0),
    open_details: nodes.reduce((k, n) => k + n.querySelectorAll('details[open]').length, 0),
    images: imgs.length,
    images_loaded: imgs.filter(i => i.complete && i.naturalWidth > 0).length,
    texts: texts,
  };
})()
"""


def check_lab_markup(browser: Chromium, notebooks: list[Path]) -> list[str]:
    """Part (c): open each notebook in one JupyterLab page and look at its rendered markdown."""
    workdir = Path(tempfile.mkdtemp(prefix="check-browser-markup-"))
    root = workdir / "root"
    root.mkdir()
    for nb in notebooks:  # copies: the repository's files stay untouched
        shutil.copy2(nb, root / nb.name)
    for sub in ("figures", "data"):
        if (CHAPTER.parent / sub).is_dir():
            shutil.copytree(CHAPTER.parent / sub, root / sub)
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
            source = json.loads(nb.read_text(encoding="utf-8"))
            dropdowns = sum(
                "".join(c["source"]).count("{dropdown}")
                for c in source["cells"]
                if c["cell_type"] == "markdown"
            )
            if nb == notebooks[0]:
                page.navigate(f"http://127.0.0.1:{port}/lab/tree/{nb.name}", timeout=90)
            else:  # the same page: open the next notebook, close the one before
                page.evaluate(
                    "window.jupyterapp.commands.execute('docmanager:open', "
                    f"{{path: {json.dumps(nb.name)}}}).then(() => true)",
                    timeout=90,
                )
            state_js = MARKUP_STATE_JS.replace("NOTEBOOK_PATH", json.dumps(nb.name))
            try:
                state = page.wait_for(
                    f"(() => {{ const s = {state_js}; return s && s.markdown_cells > 0 && "
                    "s.rendered === s.markdown_cells && s.myst_nodes > 0 && "
                    "s.images_loaded === s.images && s; })()",
                    timeout=120,
                    interval=1.0,
                )
            except TimeoutError:
                state = page.evaluate(state_js) or {}
                failures.append(
                    f"{nb.name}: markdown not rendered by MyST within 120 s "
                    f"({ {k: v for k, v in state.items() if k != 'texts'} })"
                )
                continue
            raw = sorted(
                {(i, m) for i, t in enumerate(state["texts"]) for m in RAW_MARKUP if m in t}
            )
            log(
                f"  {nb.name}: {state['markdown_cells']} markdown cells rendered, "
                f"{state['details']} of {dropdowns} dropdown(s) as <details> "
                f"({state['open_details']} open), {state['images_loaded']} image(s), "
                f"raw markup in {len(raw)} cell(s)"
            )
            found = len(failures)
            for i, m in raw[:5]:
                text = state["texts"][i]
                at = text.index(m)
                failures.append(
                    f"{nb.name}: markdown cell {i} shows {text[max(0, at - 40) : at + 40]!r}"
                )
            if state["details"] != dropdowns or state["open_details"]:
                failures.append(
                    f"{nb.name}: {dropdowns} dropdown(s) in the source, {state['details']} "
                    f"<details> in JupyterLab, {state['open_details']} of them open"
                )
            for f in failures[found:]:
                log(f"    - {f}")
            page.evaluate(
                "(() => { const w = [...window.jupyterapp.shell.widgets('main')]"
                f".find(w => w.context && w.context.path === {json.dumps(nb.name)}); "
                "if (w) { w.context.sessionContext.shutdown(); w.dispose(); } return true; })()"
            )
    except Exception as err:
        failures.append(f"{type(err).__name__}: {err}")
    finally:
        with contextlib.suppress(Exception):
            page.navigate("about:blank", timeout=10)
        if proc is not None:
            stop(proc)
        shutil.rmtree(workdir, ignore_errors=True)
    return failures


# ---------------------------------------------------------------- main


def main(argv) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
    args = ap.parse_args(argv)
    # a SIGTERM (timeout, CI) unwinds like an exception, so the browser and JupyterLab stop
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.screenshots:
        args.screenshots.mkdir(parents=True, exist_ok=True)

    t0 = time.monotonic()
    results: dict[str, list[str]] = {}
    browser = None
    try:
        global HTML
        if args.html:
            HTML = args.html.resolve()
        elif not (args.lab_only or args.markup_only):
            ensure_book(args.rebuild)
        browser = Chromium()
        log(f"browser: {browser.version}, headless, new empty profile")
        if not (args.lab_only or args.markup_only):
            log("(a) the HTML book, every page from http://127.0.0.1")
            results["book over HTTP: math, images, no external request, no JS error, toggles"] = (
                check_book(browser, "http")
            )
            log("(a) the HTML book again, every page from disk (file://)")
            results["book from file://: the same, as a reader opening index.html sees it"] = (
                check_book(browser, "file")
            )
        if not args.book_only and not args.markup_only:
            log("(b) JupyterLab: run the heatmap chapter, solutions, layer change, bad input")
            results["lab: run-all, solutions collapsed, layer redraws heatmap, bad input"] = (
                check_lab(browser, args.screenshots, args.run_timeout, args.notebook.resolve())
            )
        if not args.book_only:
            log("(c) JupyterLab renders MyST: every chapter, no raw markup, dropdowns closed")
            chapters = [p.resolve() for p in args.markup_chapters or []] or sorted(
                (ROOT / "chapters").glob("[0-9][0-9]_*.ipynb")
            )
            results["lab: MyST rendered in every chapter, no raw {cite}/{ref}/:::"] = (
                check_lab_markup(browser, chapters)
            )
    except Exception as err:
        results.setdefault("setup", []).append(f"{type(err).__name__}: {err}")
    finally:
        if browser is not None:
            browser.close()

    log("")
    failed = 0
    for name, failures in results.items():
        log(f"{'PASS' if not failures else 'FAIL'}  {name}")
        for f in failures[:20]:
            log(f"      - {f}")
        failed += bool(failures)
    log(
        f"check-browser: {'PASS' if not failed else 'FAIL'} "
        f"({len(results) - failed} passed, {failed} failed) "
        f"in {time.monotonic() - t0:.0f} s"
    )
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
