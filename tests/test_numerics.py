"""The pinned numerics (helpers.repro.numerics and .pin), the book's kernel and `make doctor`."""

import importlib.util
import json
import platform
import sys
from pathlib import Path

import nbformat
import pytest
import torch

from helpers.repro import numerics, pin
from tools.build import install_kernel
from tools.check import doctor
from tools.common import pin_env, run_fresh

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "chapters").glob("*.ipynb")) + sorted(
    (ROOT / "appendix").glob("*.ipynb")
)


GOOD = {
    "cpu": "Some CPU",
    "machine": "x86_64",
    "aten_capability": "AVX2",
    "blas": "MKL",
    "mkl_cbwr": "COMPATIBLE",
    "onednn_max_cpu_isa": "AVX2",
    "threads": 1,
    "torch": numerics.torch_version(),
    "python": "3.11.7",
}


def test_a_pinned_x86_machine_has_no_problem():
    assert numerics.pin_problems(GOOD, {"avx2", "fma"}) == []


@pytest.mark.parametrize(
    "change, flags, words",
    [
        ({"machine": "arm64", "aten_capability": "DEFAULT"}, set(), "not x86-64"),
        ({}, {"sse4_2"}, "no AVX2"),
        ({"aten_capability": "AVX512"}, {"avx2"}, "AVX512 kernels"),
        ({"blas": "OpenBLAS"}, {"avx2"}, "OpenBLAS"),
        ({"mkl_cbwr": "unset"}, {"avx2"}, "MKL_CBWR is unset"),
        ({"threads": 2}, {"avx2"}, "2 threads"),
        ({"torch": "2.11.0"}, {"avx2"}, "torch is 2.11.0"),
    ],
)
def test_each_broken_part_of_the_pin_is_named(change, flags, words):
    problems = numerics.pin_problems({**GOOD, **change}, flags)
    assert problems and any(words in p for p in problems), problems
    assert words in numerics.pin_sentence(problems)


def test_the_pin_sentence_is_one_sentence_either_way():
    for problems in ([], ["the CPU has no AVX2"]):
        sentence = numerics.pin_sentence(problems)
        assert sentence.count(". ") == 0 and sentence.endswith(".")


def test_compare_fingerprint_names_what_differs_or_is_missing():
    book = {"randn": "a", "mm": "b", "softmax": "c"}
    assert numerics.compare_fingerprint(dict(book), book) == []
    assert numerics.compare_fingerprint({**book, "mm": "x"}, book) == ["mm"]
    assert numerics.compare_fingerprint({"randn": "a", "mm": "b"}, book) == ["softmax"]
    assert numerics.compare_fingerprint({**book, "extra": "e"}, book) == ["extra"]


def test_the_fingerprint_is_repeatable_and_sees_one_bit():
    first = numerics.fingerprint()
    assert numerics.fingerprint() == first
    assert set(first) == set(numerics.book_fingerprint())
    x = torch.randn(16)
    y = x.clone()
    y.view(torch.int32)[3] ^= 1  # the lowest mantissa bit of one element
    assert numerics._digest(x) != numerics._digest(y)


CAN_PIN = numerics.blas() == "MKL" and platform.machine().lower() in ("x86_64", "amd64")


@pytest.mark.skipif(not CAN_PIN or "avx2" not in numerics.cpu_flags(), reason="no MKL on AVX2")
def test_under_the_pin_the_fingerprint_is_the_books():
    """In a fresh process with the book kernel's environment, the bits are the record's."""
    problems = run_fresh(numerics.pin_problems, env=pin_env("pinned"))
    mine = run_fresh(numerics.fingerprint, env=pin_env("pinned"))
    differing = numerics.compare_fingerprint(mine, numerics.book_fingerprint())
    assert problems == [] and differing == [], (problems, differing)


def test_doctor_verdicts():
    assert "exact digits" in doctor.verdict([], [])
    assert "still passes" in doctor.verdict(["MKL_CBWR is unset, not COMPATIBLE"], ["mm"])
    assert "mm" in doctor.verdict([], ["mm"])
    assert "does not hold" in doctor.verdict(["torch uses 2 threads, not 1"], [])


def test_the_installed_kernel_holds_the_pin():
    assert install_kernel.problems() == []
    spec = json.loads((install_kernel.kernel_dir() / "kernel.json").read_text())
    assert {k: spec["env"][k] for k in pin.PIN} == pin.PIN
    assert Path(spec["argv"][0]).resolve() == Path(sys.executable).resolve()


def test_the_broken_pin_breaks_both_kernels_paths():
    assert pin.BROKEN_PIN["ATEN_CPU_CAPABILITY"] != pin.PIN["ATEN_CPU_CAPABILITY"]
    assert pin.BROKEN_PIN["MKL_CBWR"] != pin.PIN["MKL_CBWR"]


def test_conftest_names_the_same_kernel():
    spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.KERNEL_NAME == pin.KERNEL_NAME


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_notebook_names_the_books_kernel(path):
    nb = nbformat.read(path, as_version=4)
    assert nb.metadata["kernelspec"]["name"] == pin.KERNEL_NAME


PROVENANCE_KEYS = {"cpu", "aten_capability", "mkl_cbwr", "threads", "torch", "pinned"}


@pytest.mark.parametrize(
    "path", sorted((ROOT / "chapters" / "data").glob("*.json")), ids=lambda p: p.name
)
def test_every_record_says_how_it_was_computed(path):
    """Top level, in its environment block, per run (ch21_sharpness) or per mode (kernel_spread)."""
    data = json.loads(path.read_text())
    blocks = [data.get("numerics") or data.get("environment", {}).get("numerics")]
    if blocks[0] is None and "runs" in data:
        blocks = [run.get("numerics") for run in data["runs"]]
    if blocks[0] is None and "results" in data:  # kernel_spread.json: one block per mode
        blocks = [result.get("numerics") for result in data["results"].values()]
    for block in blocks:
        assert block is not None and set(block) >= PROVENANCE_KEYS, (path.name, block)


def test_provenance_of_this_process():
    block = numerics.provenance()
    assert set(block) >= PROVENANCE_KEYS and block["torch"] == numerics.torch_version()
    assert "+" not in block["torch"]


def test_a_model_trained_without_the_pin_gets_its_own_checkpoint(monkeypatch, tmp_path):
    from helpers import BOOK_RECIPE
    from helpers.training import checkpoints

    monkeypatch.setattr(checkpoints, "pin_problems", lambda: [])
    pinned = checkpoints.checkpoint_path(BOOK_RECIPE, tmp_path)
    monkeypatch.setattr(checkpoints, "pin_problems", lambda: ["MKL_CBWR is unset"])
    unpinned = checkpoints.checkpoint_path(BOOK_RECIPE, tmp_path)
    assert pinned.name == f"reversal-{BOOK_RECIPE.key()}.pt"
    assert unpinned.name == f"reversal-{BOOK_RECIPE.key()}-unpinned.pt"
    assert checkpoints.checkpoint_path(BOOK_RECIPE, tmp_path, "cuda").name.endswith("-cuda.pt")


def test_largest_gap_and_tolerance(monkeypatch):
    results = {
        "pinned": {"twin": {"mirror": [0.10, 0.20], "steps": 300}},
        "broken": {"twin": {"mirror": [0.13, 0.18], "steps": 330}},
        "native": {"twin": {"mirror": [0.09, 0.26], "steps": 280}},
    }
    assert numerics.largest_gap(results, "twin", "mirror") == pytest.approx(0.06)
    assert numerics.largest_gap(results, "twin", "steps") == 30
    monkeypatch.setattr(numerics, "pin_problems", lambda: [])
    monkeypatch.setattr(numerics, "book_fingerprint", numerics.fingerprint)
    assert numerics.tolerance(0.06) == 1e-4
    monkeypatch.setattr(numerics, "book_fingerprint", lambda: {"randn": "other bits"})
    assert numerics.tolerance(0.06) == pytest.approx(0.12)  # same settings, other bits
    assert numerics.tolerance(0.0) == 0.005  # never below one probe sequence of 200
    monkeypatch.setattr(numerics, "pin_problems", lambda: ["MKL_CBWR is unset"])
    assert numerics.tolerance(0.06) == pytest.approx(0.12)
