"""The ratio table of chapter 22: the reference's RTX 4090 ratios and a recorded GPU's."""

import json

import pytest

from helpers.repro import gpu_results as gr


def test_reference_ratios_are_the_reference_chapters_numbers():
    r = gr.reference_ratios()
    assert r["time"] == pytest.approx(2.97 / 0.25) and round(r["time"], 1) == 11.9
    assert r["memory"] == pytest.approx(712 / 79) and round(r["memory"], 1) == 9.0


SHAPE = {"B": 8, "L": 1024, "d_model": 512, "heads": 8}


def _write(tmp_path, protocol):
    record = {
        "part": "attention",
        "status": "ok",
        "environment": {"device": "cuda", "gpu": "NVIDIA H200"},
        "reference_protocol": protocol,
    }
    (tmp_path / "attention_cuda.json").write_text(json.dumps(record))


def test_recorded_gpu_ratios_absent_without_a_record(tmp_path):
    assert gr.recorded_gpu_ratios(tmp_path) is None


def test_recorded_gpu_ratios_from_the_reference_protocol(tmp_path):
    _write(
        tmp_path,
        [
            {"variant": "handwritten", **SHAPE, "mean_ms": 1.2, "peak_abs_mib": 800.0},
            {"variant": "sdpa_causal", **SHAPE, "mean_ms": 0.1, "peak_abs_mib": 80.0},
            # autograd on: a different row, not used for the ratios
            {"variant": "handwritten", **SHAPE, "grad": True, "mean_ms": 9.0},
        ],
    )
    r = gr.recorded_gpu_ratios(tmp_path)
    assert r["gpu"] == "NVIDIA H200" and r["L"] == 1024 and r["shape"] == SHAPE
    assert r["time"] == pytest.approx(12.0) and r["memory"] == pytest.approx(10.0)


def test_recorded_gpu_ratios_refuse_rows_of_different_shapes(tmp_path):
    _write(
        tmp_path,
        [
            {"variant": "handwritten", **SHAPE, "mean_ms": 1.2, "peak_abs_mib": 800.0},
            {"variant": "sdpa_causal", **SHAPE, "B": 4, "mean_ms": 0.1, "peak_abs_mib": 80.0},
        ],
    )
    r = gr.recorded_gpu_ratios(tmp_path)
    assert "time" not in r and "memory" not in r and "shape" not in r


def test_the_recorder_writes_the_fields_read_here():
    # measure_like_reference (what tools/record/gpu.py runs) on a tiny CPU case: its rows carry
    # the shape and the mean time that recorded_gpu_ratios reads (peak_abs_mib only on CUDA)
    from helpers.benchmark import measure_like_reference

    rows = measure_like_reference(L=16, B=2, d_model=16, heads=2, device="cpu")
    assert [r["variant"] for r in rows] == ["handwritten", "sdpa_causal"]
    for r in rows:
        assert (r["B"], r["L"], r["d_model"], r["heads"]) == (2, 16, 16, 2)
        assert r["mean_ms"] > 0 and not r["grad"]


def test_recorded_gpu_ratios_leave_out_what_was_not_measured(tmp_path):
    _write(
        tmp_path,
        [
            {"variant": "handwritten", **SHAPE, "oom": "CUDA out of memory"},
            {"variant": "sdpa_causal", **SHAPE, "mean_ms": 0.1, "peak_abs_mib": 80.0},
        ],
    )
    r = gr.recorded_gpu_ratios(tmp_path)
    assert r["gpu"] == "NVIDIA H200" and "time" not in r and "memory" not in r
