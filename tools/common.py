"""What the tools share: the repository root, the book kernel's numerics pin, a fresh Python
process for one function, and the provenance and writing of the records in chapters/data/.

Every tool runs as a module from the repository root (`.venv/bin/python -m tools.check.pairing`)
and imports another as a module (`from tools.bench import training`). This module imports only
the standard library at the top: tools/record/gpu.py runs where only torch, numpy and pytest are.
"""

from __future__ import annotations

import datetime as dt
import importlib
import json
import os
import runpy
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "chapters" / "data"
PIN_FILE = ROOT / "src" / "helpers" / "repro" / "pin.py"
# How a record's command runs the recorder under the pin (the Makefile reads the same file).
PIN_PREFIX = "env $(python src/helpers/repro/pin.py pinned)"


def read_pin() -> SimpleNamespace:
    """helpers.repro.pin (KERNEL_NAME, PIN, BROKEN_PIN, MODES, PIN_VARS) read as the plain data
    it is: importing it through the helpers package would import torch first."""
    names = runpy.run_path(str(PIN_FILE))
    return SimpleNamespace(**{k: v for k, v in names.items() if k.isupper()})


pin = read_pin()


def pin_env(mode: str = "pinned") -> dict[str, str]:
    """This process's environment for a child with the numerics of `mode`: "pinned" (the book
    kernel's), "broken" (`make test-portable`'s) or "default" (PyTorch's own kernel choice: the
    variables that choose kernels removed, threads and hashing as they are here)."""
    env = {k: v for k, v in os.environ.items() if k not in pin.PIN_VARS}
    if mode != "default":
        env.update(pin.MODES[mode])
    return env


def run_fresh(function, *args, env: dict[str, str] | None = None):
    """function(*args) called in a new Python process, its JSON result returned.

    For what must start clean: torch reads the numerics pin once, when it loads, and
    torch.compile keeps caches. `function` is a module-level function of an importable module
    (a tool run with `python -m` counts); `args` and the result travel as JSON. The child runs
    from the repository root with `env` (default: this process's environment)."""
    module = function.__module__
    if module == "__main__":  # the tool itself, run with -m: the child imports it by name
        spec = sys.modules["__main__"].__spec__
        if spec is None:
            raise RuntimeError("run the tool as a module from the root: python -m tools.x.y")
        module = spec.name
    name = function.__qualname__
    cmd = [sys.executable, "-m", "tools.common", module, name, json.dumps(args)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{module}.{name} failed in a fresh process:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.splitlines()[-1])


def call_and_print(module: str, name: str, args: str) -> None:
    """The child's side of run_fresh: the result is the last line of its output."""
    result = getattr(importlib.import_module(module), name)(*json.loads(args))
    print(json.dumps(result), flush=True)


def command_line() -> str:
    """How this process was started, as a reader re-runs it from the root: `python -m tools.x.y
    ARGS`, after the pin prefix when it runs under the pin and `nice -n N` when it is niced."""
    spec = sys.modules["__main__"].__spec__
    words = ["python", "-m", spec.name] if spec else ["python", sys.argv[0]]
    words += sys.argv[1:]
    niceness = os.nice(0)
    if niceness:
        words = ["nice", "-n", str(niceness), *words]
    if all(os.environ.get(k) == v for k, v in pin.PIN.items()):
        words = [PIN_PREFIX, *words]
    return " ".join(words)


def command_and_date(command: str | None = None) -> dict:
    """How and when a record was made: the command (default: this process's) and the date."""
    return {
        "command": command or command_line(),
        "date": dt.datetime.now().isoformat(timespec="seconds"),
    }


def provenance(command: str | None = None) -> dict:
    """What a record in chapters/data/ states about how it was made: command_and_date() and the
    numerics it ran under (helpers.repro.numerics.provenance(): CPU, kernels, threads, torch,
    whether pinned)."""
    from helpers.repro.numerics import provenance as numerics  # imports torch: recorders only

    return {**command_and_date(command), "numerics": numerics()}


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, then rename it over `path`: an
    interrupted writer leaves the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_record(path: Path, record: dict) -> None:
    """A record as every file in chapters/data/ is written: JSON indented by one, a final
    newline (values JSON does not know, such as a Path, as their text)."""
    write_atomic(path, json.dumps(record, indent=1, default=str) + "\n")


if __name__ == "__main__":
    call_and_print(*sys.argv[1:])
