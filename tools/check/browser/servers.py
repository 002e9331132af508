"""The local servers the checks open pages from: a static HTTP server for the built book and
a throwaway JupyterLab (no token, temporary settings, runtime and root folders)."""

from __future__ import annotations

import functools
import http.server
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(folder: Path):
    """Serve `folder` on 127.0.0.1 from a thread; (server, port). Stop it with .shutdown()."""
    port = free_port()
    handler = functools.partial(QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, port


def start_lab(workdir: Path):
    """JupyterLab on 127.0.0.1 serving workdir/root, its configuration in workdir;
    (process, port) once it answers."""
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
    """Stop a server started in its own session (SIGTERM, then SIGKILL after 15 s)."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
