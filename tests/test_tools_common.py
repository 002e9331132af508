"""tools/common.py: the pin without torch, the pin environments, run_fresh, the records'
provenance and their atomic writing."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.repro import pin as package_pin
from tools import common
from tools.common import pin, pin_env, run_fresh


def test_the_pin_is_the_packages():
    assert pin.PIN == package_pin.PIN and pin.BROKEN_PIN == package_pin.BROKEN_PIN
    assert pin.KERNEL_NAME == package_pin.KERNEL_NAME and pin.PIN_VARS == package_pin.PIN_VARS


def test_tools_common_imports_no_torch():
    """tools.common (as the GPU recorder and the kernel installer load it) imports only the
    standard library: -X importtime lists every module the child imports."""
    cmd = [sys.executable, "-X", "importtime", "-m", "tools.common"]
    cmd += ["tools.common", "pin_env", '["pinned"]']
    proc = subprocess.run(cmd, cwd=common.ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines()}
    assert "tools" in imported and not {"torch", "numpy", "helpers"} & imported


def test_pin_env_modes(monkeypatch):
    monkeypatch.setenv("MKL_CBWR", "AUTO")
    monkeypatch.setenv("SOMETHING_ELSE", "kept")
    pinned, broken, default = pin_env("pinned"), pin_env("broken"), pin_env("default")
    assert {k: pinned[k] for k in pin.PIN} == pin.PIN
    assert {k: broken[k] for k in pin.BROKEN_PIN} == pin.BROKEN_PIN
    assert not set(pin.PIN_VARS) & set(default)  # PyTorch chooses its kernels
    assert pinned["SOMETHING_ELSE"] == default["SOMETHING_ELSE"] == "kept"
    with pytest.raises(KeyError):
        pin_env("pinnned")


def test_run_fresh_returns_the_result_from_a_process_with_env():
    assert run_fresh(os.getenv, "MKL_CBWR", env=pin_env("broken")) == "AUTO"
    assert run_fresh(os.getenv, "MKL_CBWR", env=pin_env("default")) is None
    assert run_fresh(os.getpid) != os.getpid()


def test_run_fresh_says_which_function_failed_and_why():
    with pytest.raises(RuntimeError, match=r"json\.loads failed(.|\n)*JSONDecodeError"):
        run_fresh(json.loads, "not JSON")


def test_command_line_says_how_this_process_was_started(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["/anywhere/ch05_norm_sweep.py", "--seeds", "2"])
    for key in pin.PIN:
        monkeypatch.delenv(key, raising=False)
    assert common.command_line().endswith(" --seeds 2")
    assert not common.command_line().startswith(common.PIN_PREFIX)
    for key, value in pin.PIN.items():
        monkeypatch.setenv(key, value)
    assert common.command_line().startswith(common.PIN_PREFIX + " ")


def test_provenance_opens_a_record():
    block = common.provenance("python -m tools.record.x --seeds 2")
    assert list(block) == ["command", "date", "numerics"]
    assert block["command"] == "python -m tools.record.x --seeds 2"
    assert {"cpu", "aten_capability", "mkl_cbwr", "threads", "torch"} <= set(block["numerics"])


def test_write_record_writes_whole_files(tmp_path):
    path = tmp_path / "new" / "record.json"
    common.write_record(path, {"out": Path("chapters/data"), "runs": [1, 2]})
    assert path.read_text() == '{\n "out": "chapters/data",\n "runs": [\n  1,\n  2\n ]\n}\n'
    loop: dict = {"runs": [3]}
    loop["self"] = loop
    with pytest.raises(ValueError, match="Circular"):  # the old file stays whole
        common.write_record(path, loop)
    assert json.loads(path.read_text())["runs"] == [1, 2]
    assert [p.name for p in path.parent.iterdir()] == ["record.json"]
