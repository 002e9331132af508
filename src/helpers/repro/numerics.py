"""The book's pinned numerics: the same float32 bits on any x86-64 CPU with AVX2.

Introduced in the introduction ("How this book checks itself") and chapter 1.

Two things make a seeded float32 run differ between CPUs:
- ATen picks its vectorised kernels (used by `torch.randn`, softmax, layer norm, ...) by the
  CPU's instruction set: AVX-512, AVX2 or scalar code round differently in the last bits.
- MKL, which serves `mm`, `bmm` and `nn.Linear` in PyTorch's x86 wheels, picks its code
  path by CPU model unless its conditional numerical reproducibility mode is set.

The book's Jupyter kernel (installed by `make venv`, see tools/build/install_kernel.py) sets
`PIN` in its environment. `MKL_CBWR=COMPATIBLE` is the one mode that Intel documents as
giving the same results on Intel and non-Intel CPUs; `AVX2` falls back to `AUTO` off Intel.
The variables take effect only when set before torch starts, so a running kernel can only
report them, never change them.

`make doctor` (tools/check/doctor.py) prints `describe_machine()` and compares `fingerprint()`
with the book's recorded one (src/helpers/data/fingerprint.json).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path

import torch

from helpers.repro.paths import PACKAGE_DATA, records_dir
from helpers.repro.pin import BROKEN_PIN, KERNEL_DISPLAY_NAME, KERNEL_NAME, PIN, PIN_VARS  # noqa: F401

FINGERPRINT_FILE = PACKAGE_DATA / "fingerprint.json"


def torch_version() -> str:
    """torch's version without the local build suffix: 2.13.0, not 2.13.0+cpu."""
    return torch.__version__.split("+")[0]


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what `platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def cpu_flags() -> set[str]:
    """The instruction-set flags from /proc/cpuinfo; empty where there is none (not Linux)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def blas() -> str:
    """The BLAS torch was built with, as its build configuration names it."""
    config = torch.__config__.show()
    if "Math Kernel Library" in config:
        return "MKL"
    for line in config.splitlines():
        if "BLAS_INFO=" in line:
            return line.split("BLAS_INFO=", 1)[1].split(",", 1)[0].strip()
    return "unknown"


def describe_machine(env: dict | None = None) -> dict:
    """What decides the reader's float32 bits: CPU, kernels, BLAS mode, threads, versions."""
    env = os.environ if env is None else env
    return {
        "cpu": cpu_model(),
        "machine": platform.machine(),
        "aten_capability": torch.backends.cpu.get_cpu_capability(),
        "blas": blas(),
        "mkl_cbwr": env.get("MKL_CBWR", "unset"),
        "onednn_max_cpu_isa": env.get("ONEDNN_MAX_CPU_ISA", "unset"),
        "threads": torch.get_num_threads(),
        "torch": torch_version(),
        "python": platform.python_version(),
    }


def pin_problems(info: dict | None = None, flags: set[str] | None = None) -> list[str]:
    """Why this process will not reproduce the book's bits; an empty list when it will.

    `info` is `describe_machine()`'s dict and `flags` the CPU flags (both read from this machine
    when not given, so that the logic can be tested with made-up machines).
    """
    info = describe_machine() if info is None else info
    flags = cpu_flags() if flags is None else flags
    problems = []
    if info["machine"].lower() not in ("x86_64", "amd64"):
        problems.append(f"the CPU is {info['machine']}, not x86-64")
    elif flags and "avx2" not in flags:
        problems.append("the CPU has no AVX2")
    if info["aten_capability"] != "AVX2":
        problems.append(f"PyTorch runs its {info['aten_capability']} kernels, not AVX2")
    if info["blas"] != "MKL":
        problems.append(f"PyTorch's BLAS is {info['blas']}, not MKL")
    elif info["mkl_cbwr"] != PIN["MKL_CBWR"]:
        problems.append(f"MKL_CBWR is {info['mkl_cbwr']}, not {PIN['MKL_CBWR']}")
    if info["threads"] != int(PIN["OMP_NUM_THREADS"]):
        problems.append(f"torch uses {info['threads']} threads, not {PIN['OMP_NUM_THREADS']}")
    if info["torch"] != _recorded().get("torch", info["torch"]):
        problems.append(f"torch is {info['torch']}, not {_recorded()['torch']}")
    return problems


def pin_sentence(problems: list[str] | None = None) -> str:
    """One plain sentence for the reader: will their printed numbers be the book's?"""
    problems = pin_problems() if problems is None else problems
    if not problems:
        return "Your numbers will match the book's digits: the pinned numerics hold here."
    return (
        "Some printed numbers will differ from the book's in their last digits, and models "
        f"trained here will differ slightly, because {'; '.join(problems)}; every check still "
        "passes."
    )


def _digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().contiguous().cpu().numpy().tobytes()).hexdigest()[:16]


def fingerprint() -> dict[str, str]:
    """Hashes of the bits of a few seeded float32 computations (well under a second).

    randn covers ATen's random kernels, mm and linear MKL's sgemm, softmax and layer_norm
    ATen's vectorised reductions. Equal hashes mean bit-identical results.
    """
    g = torch.Generator().manual_seed(0)
    a = torch.randn(257, 129, generator=g)
    b = torch.randn(129, 65, generator=g)
    x = torch.randn(8, 33, 129, generator=g)
    torch.manual_seed(0)
    linear = torch.nn.Linear(129, 65)
    return {
        "randn": _digest(a),
        "mm": _digest(a @ b),
        "linear": _digest(linear(x)),
        "softmax": _digest(torch.softmax(a, dim=-1)),
        "layer_norm": _digest(torch.nn.functional.layer_norm(a, (129,))),
    }


def compare_fingerprint(mine: dict[str, str], book: dict[str, str]) -> list[str]:
    """The names whose hashes differ (or that one side lacks), in the book's order."""
    names = list(book) + [k for k in mine if k not in book]
    return [k for k in names if mine.get(k) != book.get(k)]


def _recorded() -> dict:
    try:
        return json.loads(FINGERPRINT_FILE.read_text())
    except (OSError, ValueError):
        return {}


def book_fingerprint() -> dict[str, str]:
    """The fingerprint recorded under the pin when the book's outputs were made."""
    return _recorded().get("fingerprint", {})


def provenance() -> dict:
    """What a record in chapters/data/ stores about how it was made."""
    info = describe_machine()
    return {
        "cpu": info["cpu"],
        "aten_capability": info["aten_capability"],
        "mkl_cbwr": info["mkl_cbwr"],
        "threads": info["threads"],
        "torch": info["torch"],
        "pinned": not pin_problems(info),
    }


def timing_label(env: dict | None = None) -> str:
    """Which kernels a live timing measured: printed beside every timing a chapter makes.

    The pin trades speed for bits (MKL_CBWR=COMPATIBLE gives up MKL's fastest matrix-product
    code), so a time measured in the book's kernel is not PyTorch's default speed.
    """
    env = os.environ if env is None else env
    if env.get("MKL_CBWR") == PIN["MKL_CBWR"] or env.get("ATEN_CPU_CAPABILITY"):
        return "timed with the book's pinned numerics, not PyTorch's default kernels"
    return "timed with PyTorch's default kernels on this CPU"


SPREAD_FILE = records_dir() / "kernel_spread.json"


def kernel_spread(path: Path | None = None) -> dict:
    """tools/record/kernel_spread.py's record: the book's trained models under the pinned,
    the broken and the unpinned numerics (chapters 10, 11, 12 and 21 read their bounds from it).
    """
    return json.loads(Path(path or SPREAD_FILE).read_text())


def largest_gap(
    results: dict, part: str, key: str, reference: str = "pinned", index: int | None = None
) -> float:
    """The largest |difference| of results[mode][part][key] from the reference mode's, over
    every mode that measured it and every element (a number or a list of per-layer numbers);
    index picks one element of a per-layer list."""

    def as_list(v):
        if index is not None:
            return [v[index]]
        return list(v) if isinstance(v, (list, tuple)) else [v]

    ref = as_list(results[reference][part][key])
    return max(
        abs(a - b)
        for mode in results
        if part in results[mode]
        for a, b in zip(as_list(results[mode][part][key]), ref, strict=True)
    )


def tolerance(
    measured_gap: float, margin: float = 2.0, pinned_atol: float = 1e-4, one_probe: float = 0.005
) -> float:
    """How far a live number from a trained model may sit from the book's record.

    Where the pin holds and the fingerprint matches the book's, the run is the record's, bit
    for bit, so only the record's rounding to 4 decimals is allowed. Elsewhere: `margin` times
    the largest gap measured over kernel paths, and at least `one_probe`, one sequence of
    chapter 21's 200 probe sequences (the resolution of a share such as eos_peak): a gap
    measured as 0 on four paths may still be one sequence on a fifth.
    """
    same_bits = not pin_problems() and not compare_fingerprint(fingerprint(), book_fingerprint())
    return pinned_atol if same_bits else max(margin * measured_gap, one_probe)


def assert_within_measured_spread(
    name: str, value, index: int | None = None, scale: float = 1.0, margin: float = 2.0
) -> float:
    """Assert that a live number from a trained model is as close to the book's as the kernel
    paths the book measured allow, and return the allowed distance.

    name is "part.key" in `kernel_spread()`'s results (for example "sharp_loaded.mirror" or
    "book.test_correct"); index picks one layer of a per-layer list; scale converts the
    record's unit to value's (1 / 10_000 turns a count of test sequences into a share).
    Where this machine runs the book's pinned numerics bit for bit, the allowed distance is the
    record's rounding; elsewhere `margin` times the largest gap seen between kernel paths.
    """
    part, _, key = name.partition(".")
    results = kernel_spread()["results"]
    if part not in results["pinned"] or key not in results["pinned"][part]:
        pinned = results["pinned"]
        known = sorted(f"{p}.{k}" for p, v in pinned.items() if p != "numerics" for k in v)
        raise KeyError(f"{name!r} is not a measured number; known: {', '.join(known)}")

    paths = [m for m, r in results.items() if part in r]
    pinned = results["pinned"][part][key]
    ref = (pinned if index is None else pinned[index]) * scale
    gap = largest_gap(results, part, key, index=index) * scale
    allowed = tolerance(gap, margin=margin)
    if abs(value - ref) > allowed:
        raise AssertionError(
            f"{name}{'' if index is None else f'[{index}]'} = {value:.4g}, the book's is "
            f"{ref:.4g}: off by {abs(value - ref):.3g}, more than the {allowed:.3g} that "
            f"{len(paths)} measured kernel paths allow"
        )
    return allowed
