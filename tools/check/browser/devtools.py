"""A small client for the Chrome DevTools Protocol: Debian's Chromium started headless with a
new empty profile, one websocket to its page, and what the page did (console errors, uncaught
exceptions, failed loads, every request). It knows nothing about the book.

The driver is websocket-client (a dependency of jupyter_server): no browser download, no Node.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path

import websocket  # websocket-client

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

    def wait_for(
        self,
        expression: str,
        timeout: float,
        interval: float = 0.25,
        until: Callable[[object], object] = bool,
    ):
        """Evaluate `expression` until `until` holds for its value (by default: until it is
        truthy); return that value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if until(value):
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


class Script:
    """A .js file that holds one object of functions. script("name", *args) is the expression
    that calls one of them with JSON arguments (`this` is the object), for CDP.evaluate."""

    def __init__(self, path: Path):
        self.name = path.stem
        self.source = path.read_text(encoding="utf-8").strip()

    def __call__(self, function: str, *args) -> str:
        arguments = ", ".join(json.dumps(a) for a in args)
        # the comment names the call in a timeout's message; the newlines end any // comment
        return f"/* {self.name}.{function} */ (\n{self.source}\n).{function}({arguments})"


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


def page_problems(
    events: list[dict], allowed_prefix: str, harmless: Iterable[str] = ()
) -> tuple[list[str], list[str], int]:
    """(errors, external requests, number of requests) from the events of one page load.
    Errors: console.error, uncaught exceptions, error log entries and failed loads, less
    those that contain one of the `harmless` substrings. External: requests whose URL does not
    start with `allowed_prefix` (data:, blob: and about: URLs never count)."""
    harmless = tuple(harmless)
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
    kept = [x for x in errors if not any(s in x for s in harmless)]
    return kept, external, n_requests
