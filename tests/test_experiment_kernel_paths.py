"""The numbers the kernel-path page and chapter 10 quote agree with the kernel_spread record."""

from pathlib import Path

import pytest
from twin_prose import prose

from helpers import wilson_interval
from helpers.analysis.experiments import load_record

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def results():
    return load_record("kernel_spread")["results"]


def book_range(results):
    steps = [r["book"]["stop_step"] for r in results.values()]
    shares = [r["book"]["test_correct"] / 100 for r in results.values()]
    return min(steps), max(steps), min(shares), max(shares)


def test_four_paths_one_run_each(results):
    assert list(results) == ["pinned", "broken", "native", "avx512_earlier"]
    page = prose("appendix/experiment_kernel_paths.py")
    assert "Four CPU kernel paths, one run each" in page


def test_the_book_models_range_as_quoted(results):
    lo_step, hi_step, lo, hi = book_range(results)
    quoted = f"between steps {lo_step} and {hi_step} and scored {lo:.2f} % to {hi:.2f} %"
    assert quoted in prose("appendix/experiment_kernel_paths.py")
    assert quoted in prose("chapters/10_training.py")
    assert f"test scores from {lo:.2f} % to {hi:.2f} %" in prose(
        "appendix/experiment_kernel_paths.py"
    )


def test_the_range_is_wider_than_one_models_interval(results):
    _, _, lo, hi = book_range(results)
    for r in results.values():
        low, high = wilson_interval(r["book"]["test_correct"], 10_000)
        assert (hi - lo) / 100 > high - low


def test_the_sharp_models_range_as_quoted(results):
    shares = [r["sharp"]["test_correct"] / 100 for r in results.values()]
    quoted = f"The sharp model moved less: {min(shares):.2f} % to {max(shares):.2f} %"
    assert quoted in prose("appendix/experiment_kernel_paths.py")
    _, _, lo, hi = book_range(results)
    assert max(shares) - min(shares) < hi - lo


def test_the_allowed_distance_as_quoted(results):
    ref = results["pinned"]["book"]["test_correct"]
    gap = max(abs(r["book"]["test_correct"] - ref) for r in results.values()) / 10_000
    allowed = max(2 * gap, 0.005)
    quoted = f"within {allowed * 100:.2f} points of the book's {ref / 100:.2f} %"
    assert quoted in prose("appendix/experiment_kernel_paths.py")
