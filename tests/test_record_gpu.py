"""tools/record/gpu.py and helpers.gpu_results (chapter 22): the GPU run cannot fail on a typo.

- The dry run (`--device cpu --quick`) runs every part, in a subprocess whose Python sees only
  torch, numpy, pytest (and what they depend on) and the standard library: every other
  installed package is hidden, as on the GPU machine.
- Its files, relabelled as a GPU's, go through every function the chapters call on real data.
- The training loop that runs on the GPU is the book's own, step for step (same losses on CPU).
- A failing part, a time cap and SIGTERM each leave their JSON and let the run go on or end
  cleanly.
"""

import dataclasses
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from importlib.metadata import PackageNotFoundError, distribution, requires
from pathlib import Path

import pytest
import torch
from packaging.requirements import Requirement

from helpers.repro import gpu_results as gr
from helpers.training.recipes import BOOK_RECIPE, fixed_budget_recipe
from helpers.training.train import train_reversal
from tools.record import gpu as record_gpu

ROOT = Path(__file__).resolve().parents[1]
MODULE = "tools.record.gpu"  # run from the root, as on the GPU machine
PARTS = ("attention", "training", "decoding", "unit_tests")
GPU_MACHINE_HAS = ("torch", "numpy", "pytest")


def canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def dependency_closure(roots) -> set:
    """The distributions `roots` need (without extras), themselves included."""
    seen, todo = set(), [canonical(r) for r in roots]
    while todo:
        dist = todo.pop()
        if dist in seen:
            continue
        seen.add(dist)
        try:
            reqs = requires(dist) or []
        except Exception:  # not installed here
            continue
        for text in reqs:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonical(req.name))
    return seen


def gpu_machine_packages(tmp: Path) -> Path:
    """A folder holding (as links) only the installed packages the GPU machine has: torch,
    numpy, pytest and their own dependencies. Python started with -S (no site-packages) and
    PYTHONPATH=<folder>:src then sees those, the standard library and helpers, nothing else."""
    lib = tmp / "site-packages"
    lib.mkdir()
    for name in dependency_closure(GPU_MACHINE_HAS):
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue
        base = Path(dist.locate_file(""))
        for top in {Path(f).parts[0] for f in dist.files or []}:
            new, old = lib / top, base / top
            if top not in ("..", "__pycache__") and not new.exists() and old.exists():
                new.symlink_to(old)
    return lib


def gpu_machine_command(tmp: Path, *args) -> tuple[list, dict]:
    lib = gpu_machine_packages(tmp)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(lib), str(ROOT / "src")]))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return [sys.executable, "-S", *args], env


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """Run the dry run once: (output folder, wall seconds, CPU seconds, stdout)."""
    tmp = tmp_path_factory.mktemp("record_gpu")
    out = tmp / "out"
    cmd, env = gpu_machine_command(tmp, "-m", MODULE, "--device", "cpu", "--quick", "--out", out)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(
        [str(c) for c in cmd],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, wall, cpu, proc.stdout, (cmd[:2], env)


def test_only_torch_numpy_pytest_are_importable_there(dry_run):
    python, env = dry_run[4]
    # torch and helpers imported in the dry run itself; here only what must not be there
    probe = (
        "import importlib.util as u, numpy, pytest\n"
        "print(*[m for m in ('tqdm', 'matplotlib', 'IPython', 'nbval', 'jupytext', 'packaging',"
        " 'transformers') if u.find_spec(m) is None])"
    )
    out = subprocess.run(
        [*python, "-c", probe], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    missing = set(out.stdout.split())
    assert missing >= {"tqdm", "matplotlib", "IPython", "nbval", "jupytext", "transformers"}


def test_dry_run_writes_every_part(dry_run):
    out, wall, cpu, stdout, _ = dry_run
    print(f"dry run: {wall:.1f} s wall, {cpu:.1f} s CPU")
    summary = json.loads((out / "record_gpu_cpu_quick.json").read_text())
    assert [p["part"] for p in summary["parts"]] == list(PARTS)
    for p in summary["parts"]:
        assert p["status"] == "ok", p
        record = json.loads((out / p["file"]).read_text())
        env = record["environment"]
        assert {"date", "torch", "device", "command"} <= set(env)
        assert record["quick"] is True and record["status"] == "ok"
    # the issue asks for < 60 s; CPU time does not grow with the load of a shared machine
    assert cpu < 60, f"the dry run used {cpu:.0f} s of CPU ({wall:.0f} s wall)"


def test_dry_run_attention_has_every_variant_and_dtype(dry_run):
    out = dry_run[0]
    record = json.loads((out / "attention_cpu_quick.json").read_text())
    rows = record["rows"]
    assert {r["variant"] for r in rows} == set(record["config"]["variants"])
    assert {r["dtype"] for r in rows} == {"bfloat16", "float32"}
    measured = [r for r in rows if "ms" in r]
    assert all(r["runs"] >= 3 and len(r["times_ms"]) == r["runs"] for r in measured)
    # on a CPU the memory-efficient and cuDNN kernels cannot run: recorded, not raised
    assert {r["variant"] for r in rows if "unsupported" in r} >= {"sdpa_efficient"}
    assert len(record["reference_protocol"]) == 4


def test_dry_run_training_decoding_and_tests(dry_run):
    out = dry_run[0]
    training = json.loads((out / "training_cpu_quick.json").read_text())
    runs = {r["recipe"]: r for r in training["runs"]}
    assert runs["book"]["reached_target"] and not runs["reference"]["reached_target"]
    for run in runs.values():
        assert run["test"]["n"] == 300 and 0 <= run["test"]["low"] <= run["test"]["high"] <= 1
    decoding = json.loads((out / "decoding_cpu_quick.json").read_text())
    assert [r["identical"] for r in decoding["rows"]] == [True, True]
    tests = json.loads((out / "unit_tests_cpu_quick.json").read_text())
    assert tests["returncode"] == 0 and tests["counts"].get("passed", 0) >= 2
    assert all("cpu" in t["name"] for t in tests["tests"])


@pytest.fixture(scope="module")
def fake_gpu_data(dry_run, tmp_path_factory):
    """The dry run's files renamed and relabelled as an H200's: what chapters/data will hold."""
    data = tmp_path_factory.mktemp("data")
    for part in (*PARTS, "record_gpu"):
        record = json.loads((dry_run[0] / f"{part}_cpu_quick.json").read_text())
        record["environment"].update(
            device="cuda", gpu="NVIDIA H200", driver="570.00", cuda="12.8", cudnn=90100
        )
        record["quick"] = False
        (data / f"{part}_cuda.json").write_text(json.dumps(record))
    return data


def test_chapter_10_and_13_texts_on_recorded_data(fake_gpu_data):
    text = gr.gpu_training_summary(fake_gpu_data)
    assert "NVIDIA H200" in text and "book recipe" in text and "reference recipe" in text
    assert "test set:" in text and "of 300" in text and "not recorded" not in text
    text = gr.gpu_decoding_summary(fake_gpu_data)
    assert "new tokens" in text and "yes" in text and "NO" not in text


def test_chapter_19_text_and_plot_on_recorded_data(fake_gpu_data):
    import matplotlib

    matplotlib.use("Agg")
    text = gr.gpu_attention_summary(fake_gpu_data)
    assert "RTX 4090" in text and "handwritten" in text and "flash" in text
    assert "bfloat16" in text and "float32" in text and "Roofline" in text
    record = gr.load_gpu_record("attention", fake_gpu_data)
    comp = gr.reference_comparison(record)
    assert [c["variant"] for c in comp] == ["handwritten", "sdpa_causal"]
    roof = gr.roofline(record)
    assert roof["spec"] is gr.GPU_SPECS["NVIDIA H200"] and 0 < roof["share_of_peak"] < 1
    cpu = json.loads((ROOT / "chapters" / "data" / "attention_benchmark_cpu.json").read_text())
    fig = gr.plot_cpu_and_gpu(cpu, fake_gpu_data)
    assert len(fig.axes) == 4
    fig = gr.plot_cpu_and_gpu(cpu, fake_gpu_data / "missing")
    assert len(fig.axes) == 2


def test_missing_records_say_so_with_the_command(tmp_path):
    for text in (
        gr.gpu_training_summary(tmp_path),
        gr.gpu_decoding_summary(tmp_path),
        gr.gpu_attention_summary(tmp_path),
    ):
        assert "not recorded yet" in text and gr.RECORD_COMMAND in text
    assert gr.load_gpu_record("training", tmp_path) is None


def test_a_partial_or_dry_record_is_labelled(fake_gpu_data, tmp_path):
    for part in ("training", "decoding"):
        shutil.copy(fake_gpu_data / f"{part}_cuda.json", tmp_path)
    record = json.loads((tmp_path / "training_cuda.json").read_text())
    record.update(status="partial (time cap)", error="stopped before reference run 1", quick=True)
    (tmp_path / "training_cuda.json").write_text(json.dumps(record))
    text = gr.gpu_training_summary(tmp_path)
    assert "partial (time cap)" in text and "dry run" in text
    (tmp_path / "decoding_cuda.json").write_text("{}")
    with pytest.raises(ValueError, match="not a record"):
        gr.gpu_decoding_summary(tmp_path)


def test_gpu_spec_lookup():
    assert gr.gpu_spec("NVIDIA H200 NVL")["bf16_tflops"] == 835.5
    assert gr.gpu_spec("NVIDIA H200")["bf16_tflops"] == 989.5
    assert gr.gpu_spec("Tesla T4") is None


def test_the_recorded_training_is_the_books_training_reversal():
    """record_gpu trains with helpers.train_reversal itself (device and deadline arguments):
    on the CPU, the same losses, scores and weights as a plain call."""
    cfg = fixed_budget_recipe(BOOK_RECIPE, steps=12)
    cfg = dataclasses.replace(cfg, eval_every=6, train_size=1536, val_size=200, eval_size=200)
    book = train_reversal(cfg, progress=False)
    ours = record_gpu.train_on(cfg, "cpu")
    assert ours["history"]["loss"] == book.history["loss"]
    assert ours["history"]["exact_match"] == book.history["exact_match"]
    assert ours["steps"] == 12 and ours["stopped"] is None
    for a, b in zip(ours["model"].parameters(), book.model.parameters()):
        assert torch.equal(a, b)


def test_a_deadline_stops_training_and_says_so():
    import time

    cfg = dataclasses.replace(fixed_budget_recipe(BOOK_RECIPE, steps=12), train_size=1536)
    out = record_gpu.train_on(cfg, "cpu", deadline=time.monotonic() - 1)
    assert out["steps"] == 0 and "deadline" in out["stopped"] and not out["reached_target"]


def test_a_failing_part_is_recorded_and_the_next_part_runs(monkeypatch, tmp_path):
    def broken(args, deadline, save):
        save({"rows": [1]})
        raise ZeroDivisionError("a typo")

    def capped(args, deadline, save):
        save({"rows": [2]})
        raise record_gpu.TimeCap("stopped before row 3")

    def fine(args, deadline, save):
        return {"rows": [3]}

    parts = {"attention": broken, "training": capped, "decoding": fine}
    monkeypatch.setattr(record_gpu, "PART_FUNCTIONS", parts)
    argv = ["--device", "cpu", "--quick", "--out", str(tmp_path), "--parts", *parts]
    assert record_gpu.main(argv) == 1
    summary = json.loads((tmp_path / "record_gpu_cpu_quick.json").read_text())
    status = {p["part"]: p["status"] for p in summary["parts"]}
    assert status == {"attention": "failed", "training": "partial (time cap)", "decoding": "ok"}
    failed = json.loads((tmp_path / "attention_cpu_quick.json").read_text())
    assert failed["rows"] == [1] and "ZeroDivisionError: a typo" in failed["error"]
    capped_record = json.loads((tmp_path / "training_cpu_quick.json").read_text())
    assert capped_record["rows"] == [2] and "row 3" in capped_record["error"]


def test_sigterm_keeps_what_the_part_recorded(tmp_path):
    """`timeout` sends SIGTERM: the part in progress writes its file and the summary says so."""

    def interrupted(args, deadline, save):
        save({"rows": [1]})
        os.kill(os.getpid(), signal.SIGTERM)  # what `timeout 470` does when time runs out
        time.sleep(5)  # the handler interrupts this
        return {"rows": [1, 2]}

    parts = {"attention": interrupted, "training": lambda *a: {}}
    argv = ["--device", "cpu", "--quick", "--out", str(tmp_path), "--parts", *parts]
    handler = signal.getsignal(signal.SIGTERM)
    old = dict(record_gpu.PART_FUNCTIONS)
    record_gpu.PART_FUNCTIONS.update(parts)
    try:
        assert record_gpu.main(argv) == 1
    finally:
        record_gpu.PART_FUNCTIONS.update(old)
    assert signal.getsignal(signal.SIGTERM) == handler  # restored
    record = json.loads((tmp_path / "attention_cpu_quick.json").read_text())
    assert record["status"] == "partial (terminated)" and "SIGTERM" in record["error"]
    assert record["rows"] == [1]
    summary = json.loads((tmp_path / "record_gpu_cpu_quick.json").read_text())
    assert summary["terminated"] and [p["part"] for p in summary["parts"]] == ["attention"]


def test_arguments():
    args = record_gpu.parse_args(["--out", "x", "--caps", "training=30"])
    assert args.caps["training"] == 30 and args.caps["attention"] == record_gpu.CAPS["attention"]
    with pytest.raises(SystemExit):
        record_gpu.parse_args(["--out", "x", "--caps", "nonsense=3"])
    with pytest.raises(SystemExit):
        record_gpu.parse_args(["--out", "x", "--device", "cuda", "--cuda-repeats", "5"])
    assert gr.RECORD_COMMAND.replace("OUT_DIR", "$OUT/gpu") == record_gpu.DEVICE_COMMAND
