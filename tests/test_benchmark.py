"""helpers.benchmark: the memory counter really measures, the variants agree, the records round-trip."""

import sys

import pytest
import torch

from helpers.benchmark import (
    VARIANTS,
    MiB,
    Workload,
    cpu_peak_bytes,
    cpu_peak_memory_supported,
    load_results,
    loglog_slope,
    measure,
    results_table,
    save_results,
    score_matrix_bytes,
)

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not cpu_peak_memory_supported(),
    reason="needs Linux /proc/self/clear_refs",
)


def test_score_matrix_bytes():
    assert score_matrix_bytes(8, 8, 1024, torch.float32) == 8 * 8 * 1024 * 1024 * 4
    assert score_matrix_bytes(8, 8, 1024, torch.bfloat16) == 8 * 8 * 1024 * 1024 * 2
    assert score_matrix_bytes(1, 1, 3, torch.float32, Lk=5) == 60


@linux_only
def test_cpu_peak_sees_a_100_mib_tensor():
    peak = cpu_peak_bytes(lambda: torch.ones(25 * 2**20))  # 25 Mi float32 = 100 MiB
    assert 95 * MiB <= peak <= 110 * MiB, peak / MiB


@linux_only
def test_cpu_peak_sees_a_transient_buffer():
    # ones (100 MiB) and ones + 1 (100 MiB) are alive together; only a scalar survives
    peak = cpu_peak_bytes(lambda: (torch.ones(25 * 2**20) + 1).sum())
    assert 190 * MiB <= peak <= 215 * MiB, peak / MiB


@linux_only
def test_cpu_peak_ignores_untouched_memory():
    # torch.empty reserves address space but writes nothing: no resident page, no cost
    assert cpu_peak_bytes(lambda: torch.empty(25 * 2**20)) < 5 * MiB


def test_variants_compute_the_same_attention():
    work = Workload.make(B=2, L=33, d_model=64, heads=4, seed=1)
    with torch.no_grad():
        ref, weights = work.fn("handwritten")()
        assert weights.shape == (2, 4, 33, 33)
        for v in ("sdpa", "sdpa_causal"):
            out = work.fn(v)()
            out = out[0] if isinstance(out, tuple) else out
            torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_unknown_variant():
    with pytest.raises(ValueError, match="variant"):
        Workload.make(B=1, L=4, d_model=8, heads=2).fn("flash")


@linux_only
def test_measure_a_tiny_configuration():
    rows = [measure(v, 32, B=1, d_model=32, heads=4, min_run_time=0.01) for v in VARIANTS]
    for r in rows:
        assert r["ms"] > 0 and r["peak_mib"] >= 0 and r["runs"] >= 1
        assert r["score_matrix_mib"] == pytest.approx(4 * 32 * 32 * 4 / MiB)
    assert rows[0]["sdpa_backend"] == "-"
    assert all(isinstance(r["sdpa_backend"], str) and r["sdpa_backend"] for r in rows[1:])


@linux_only
def test_handwritten_memory_grows_like_L_squared():
    lengths = [256, 512, 1024]
    peaks = [
        measure("handwritten", L, B=1, d_model=32, heads=8, min_run_time=0.01)["peak_mib"]
        for L in lengths
    ]
    assert 1.7 < loglog_slope(lengths, peaks) < 2.2, peaks


def test_handwritten_is_skipped_when_memory_is_short():
    row = measure("handwritten", 64, B=1, d_model=32, heads=4, memory_fraction=1e-9)
    assert "skipped" in row and "GiB" in row["skipped"] and "ms" not in row


def test_records_round_trip_and_table(tmp_path):
    rows = [
        {"variant": "handwritten", "L": 128, "ms": 1.5, "peak_mib": 12.0, "score_matrix_mib": 4.0},
        {"variant": "sdpa", "L": 128, "ms": 0.5, "peak_mib": 3.0, "score_matrix_mib": 4.0},
        {
            "variant": "handwritten",
            "L": 4096,
            "skipped": "needs ~12 GiB",
            "score_matrix_mib": 4096.0,
        },
        {"variant": "sdpa", "L": 4096, "ms": 50.0, "peak_mib": 100.0, "score_matrix_mib": 4096.0},
    ]
    path = tmp_path / "bench.json"
    save_results(path, {"device": "cpu"}, rows, {"B": 8})
    data = load_results(path)
    assert data["rows"] == rows
    table = results_table(data["rows"])
    assert "skipped" in table and "4096" in table and "1.5" in table
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="not a benchmark record"):
        load_results(tmp_path / "bad.json")


def test_loglog_slope():
    assert loglog_slope([1, 2, 4], [3, 12, 48]) == pytest.approx(2.0)
