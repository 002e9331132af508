"""helpers.benchmark (chapter 22): the memory counter really measures, the variants agree, the
records round-trip, and the CUDA branches run (against a fake torch.cuda) before a GPU sees them."""

import sys
from types import SimpleNamespace

import pytest
import torch

from helpers.benchmark import (
    ALL_VARIANTS,
    FORCED_BACKENDS,
    VARIANTS,
    MiB,
    Workload,
    attention_flops,
    benchmark_times_s,
    causal_blocks,
    cpu_peak_bytes,
    cpu_peak_memory_supported,
    cpu_times_s,
    environment,
    load_results,
    loglog_slope,
    measure,
    measure_like_reference,
    outcome,
    record_op_outputs,
    results_table,
    save_results,
    score_matrix_bytes,
    spread,
    spread_table,
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
    rows = [
        measure(v, 32, B=1, d_model=32, heads=4, min_run_time=0.01, min_runs=1) for v in VARIANTS
    ]
    for r in rows:
        assert r["ms"] > 0 and r["peak_mib"] >= 0 and r["runs"] >= 1
        assert r["score_matrix_mib"] == pytest.approx(4 * 32 * 32 * 4 / MiB)
    assert rows[0]["sdpa_backend"] == "-"
    assert all(isinstance(r["sdpa_backend"], str) and r["sdpa_backend"] for r in rows[1:])


@linux_only
def test_handwritten_memory_grows_like_L_squared():
    # The worker's own memory traffic (this runs in a pytest worker after other tests) can add
    # to one reading: 40 MiB at L = 512 where the scores need 24, and once 80 MiB at L = 1024
    # where they need 48 (make test-slow, fresh clones, slopes 1.63). Such extras only add, so
    # each length is measured twice and the smaller peak kept.
    lengths = [1024, 2048, 4096]
    peaks = [
        min(
            measure("handwritten", L, B=1, d_model=32, heads=4, min_run_time=0.01, min_runs=1)[
                "peak_mib"
            ]
            for _ in range(2)
        )
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


# ---------------------------------------------------------------- the variants record_gpu adds


def test_every_variant_computes_the_same_attention():
    work = Workload.make(B=2, L=17, d_model=32, heads=4, seed=2)
    with torch.no_grad():
        ref, _ = work.fn("handwritten")()
        for v in ALL_VARIANTS[1:]:
            try:
                out = work.fn(v)()
            except RuntimeError as err:  # a forced backend this machine lacks
                assert v in FORCED_BACKENDS, (v, err)
                continue
            out = out[0] if isinstance(out, tuple) else out
            torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5, msg=v)


def test_a_backend_that_cannot_run_is_recorded_as_unsupported():
    # the memory-efficient and cuDNN kernels exist only on CUDA
    row = measure("sdpa_efficient", 16, B=1, d_model=16, heads=2, device="cpu", min_runs=1)
    if "ms" not in row:
        assert outcome(row) == "unsupported" and "RuntimeError" in row["unsupported"]
    with pytest.raises(ValueError, match="variant"):
        measure("flash", 16)


def test_out_of_memory_is_recorded_and_not_raised(monkeypatch):
    def oom(self, variant):
        def run():
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 32.00 GiB")

        return run

    monkeypatch.setattr(Workload, "fn", oom)
    row = measure("handwritten", 16, B=1, d_model=16, heads=2, min_runs=1)
    assert outcome(row) == "oom" and "32.00 GiB" in row["oom"] and "ms" not in row
    monkeypatch.setattr(Workload, "fn", lambda self, v: lambda: 1 / 0)
    row = measure("sdpa", 16, B=1, d_model=16, heads=2, min_runs=1)
    assert outcome(row) == "error" and "ZeroDivisionError" in row["error"]


def test_spread_of_runs():
    s = spread([0.004, 0.001, 0.002, 0.003, 0.100])
    assert s["ms"] == pytest.approx(3.0) and s["runs"] == 5
    assert s["min_ms"] == pytest.approx(1.0) and s["max_ms"] == pytest.approx(100.0)
    assert s["iqr_ms"] == pytest.approx(2.0)
    assert spread([0.002])["iqr_ms"] == 0


def test_cpu_times_keeps_every_run():
    calls = []
    times = cpu_times_s(lambda: calls.append(1), min_runs=7, min_run_time=0.0)
    assert len(times) == len(calls) == 7 and all(t >= 0 for t in times)


def test_benchmark_times_are_per_call_and_at_least_min_runs(monkeypatch):
    """A fake clock: each call of fn costs exactly 1 us, each clock read 1 ns. The Timer then
    runs blocks of 1,000 calls (1 ms each), so a time per block would read 1e-3, not 1e-6; no
    wall clock is involved, so a loaded machine cannot make it fail."""
    import functools

    from torch.utils import benchmark as tbench

    state = {"calls": 0, "reads": 0}

    def clock():
        state["reads"] += 1
        return state["calls"] * 1e-6 + state["reads"] * 1e-9

    def fn():
        state["calls"] += 1

    monkeypatch.setattr(tbench, "Timer", functools.partial(tbench.Timer, timer=clock))
    times = benchmark_times_s(fn, min_runs=3, min_run_time=0.2)
    assert len(times) >= 3
    assert state["calls"] > 100 * len(times)  # several calls per block
    assert all(abs(t - 1e-6) < 1e-8 for t in times)  # seconds per call, not per block


def test_measure_with_blocked_autorange():
    row = measure("sdpa_causal", 32, B=1, d_model=16, heads=2, min_runs=2, min_run_time=0.001,
                  timer="blocked_autorange")  # fmt: skip
    assert row["runs"] >= 2 and "blocked_autorange" in row["timer"]
    with pytest.raises(ValueError, match="timer"):
        measure("sdpa", 32, B=1, d_model=16, heads=2, timer="wall clock")


def test_causal_blocks_counts_the_diagonal_tiles():
    assert causal_blocks(1024, 128) == (36, 64)  # 8 tiles a side: 8 * 9 / 2
    assert causal_blocks(1024, 1) == (1024 * 1025 // 2, 1024 * 1024)  # the exact triangle
    assert causal_blocks(1024, 1024) == (1, 1)  # one tile holds the diagonal
    assert causal_blocks(1024, 256, 512) == (6, 8)  # query tiles 0, 1 need 1 key tile; 2, 3 two
    assert causal_blocks(100, 64) == (3, 4)  # a ragged last tile: only the top-right one skipped
    # a brute force over the entries agrees for a few shapes
    for L, bq, bk in ((10, 3, 4), (17, 5, 5), (8, 8, 2)):
        m = torch.ones(L, L, dtype=torch.bool).tril()
        tiles = [
            bool(m[i : i + bq, j : j + bk].any()) for i in range(0, L, bq) for j in range(0, L, bk)
        ]
        assert causal_blocks(L, bq, bk) == (sum(tiles), len(tiles))


def test_attention_flops():
    # B=1, h=1, L=2, d=2: projections 4 * 2 * 1 * 2 * 2 * 2 = 64; scores and weights @ V
    # 2 * 2 * 1 * 1 * 2 * 2 * 2 = 32, halved when causal
    assert attention_flops(1, 1, 2, 2, causal=False) == 96
    assert attention_flops(1, 1, 2, 2, causal=True) == 80


def test_tables_show_outcomes():
    rows = [
        {"variant": "handwritten", "L": 64, "oom": "CUDA out of memory", "score_matrix_mib": 1},
        {"variant": "sdpa", "L": 64, "ms": 0.25, "peak_mib": 3.0, "score_matrix_mib": 1},
        {"variant": "sdpa_causal", "L": 64, "unsupported": "No kernel", "score_matrix_mib": 1},
    ]
    table = results_table(rows, VARIANTS)
    assert "oom" in table and "unsupported" in table and "0.250" in table
    rows[1].update(iqr_ms=0.01, min_ms=0.2, max_ms=0.3, runs=20)
    text = spread_table(rows, VARIANTS)
    assert "0.20-0.30" in text and "oom" in text


def test_reference_protocol_runs_on_the_cpu():
    rows = measure_like_reference(L=16, B=1, d_model=16, heads=2, device="cpu")
    assert [r["variant"] for r in rows] == ["handwritten", "sdpa_causal"]
    assert all(r["mean_ms"] > 0 for r in rows)


@pytest.fixture
def fake_cuda(monkeypatch):
    """Just enough of torch.cuda for the CUDA branches of measure() to run on the CPU: the
    tensors stay on the CPU, the allocator reports 100 MiB before and 250 MiB at the peak,
    and every CUDA event pair measures 1.5 ms."""

    class Event:
        clock = 0.0

        def __init__(self, enable_timing=False):
            self.t = None

        def record(self):
            Event.clock += 1.5
            self.t = Event.clock

        def elapsed_time(self, end):
            return 1.5

    props = SimpleNamespace(
        name="NVIDIA H200", total_memory=140 * 2**30, major=9, minor=0, multi_processor_count=132
    )
    cuda = torch.cuda
    monkeypatch.setattr(cuda, "Event", Event)
    monkeypatch.setattr(cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(cuda, "memory_allocated", lambda device=None: 100 * MiB)
    monkeypatch.setattr(cuda, "reset_peak_memory_stats", lambda device=None: None)
    monkeypatch.setattr(cuda, "max_memory_allocated", lambda device=None: 250 * MiB)
    monkeypatch.setattr(cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(cuda, "mem_get_info", lambda device=None: (10 * 2**30, 140 * 2**30))
    monkeypatch.setattr(cuda, "get_device_properties", lambda device=None: props)
    make = Workload.make.__func__
    monkeypatch.setattr(
        Workload, "make", classmethod(lambda cls, *a, **k: make(cls, *a[:5], device="cpu"))
    )


def test_the_cuda_branch_of_measure(fake_cuda):
    row = measure("handwritten", 16, B=1, d_model=16, heads=2, device="cuda", cuda_repeats=20)
    assert row["peak_abs_mib"] == 250 and row["peak_mib"] == 150 and row["inputs_mib"] == 100
    assert row["runs"] == 20 and len(row["times_ms"]) == 20 and row["ms"] == pytest.approx(1.5)
    assert row["timer"].startswith("CUDA events")
    # on CUDA nothing is skipped by estimate: a row is attempted and an OOM would be recorded
    big = measure("handwritten", 16, B=1, d_model=16, heads=2, device="cuda", memory_fraction=0)
    assert "skipped" not in big and "ms" in big


def test_environment_on_cuda(fake_cuda):
    env = environment("cuda")
    assert env["gpu"] == "NVIDIA H200" and env["compute_capability"] == "9.0"
    assert {"driver", "cuda", "cudnn", "tf32_matmul", "date", "torch"} <= set(env)


def test_record_op_outputs_sees_new_tensors_not_views():
    a, b = torch.randn(3, 4), torch.randn(4, 5)

    def f(a, b):
        c = a @ b  # a new [3, 5] tensor
        d = c.t()  # a view: no new memory
        e = d.contiguous()  # a copy
        e.mul_(2)  # in place: no new memory
        return e.softmax(-1)

    result, ops = record_op_outputs(f, a, b)
    torch.testing.assert_close(result, ((a @ b).t() * 2).softmax(-1))
    assert [r.op for r in ops] == ["mm", "clone", "_softmax"]
    assert [r.shape for r in ops] == [(3, 5), (5, 3), (5, 3)]
    assert ops[0].input_numels == (12, 20) and ops[0].numel == 15


def test_record_op_outputs_sees_the_handwritten_score_matrices():
    """The passes chapter 22 counts: every [B, h, L, L] tensor the handwritten path makes."""
    from helpers import MultiHeadAttention, make_causal_mask

    mha = MultiHeadAttention(16, 2, dropout=0.0).eval()
    x, L = torch.randn(1, 6, 16), 6
    with torch.no_grad():
        _, ops = record_op_outputs(mha, x, x, x, attn_mask=make_causal_mask(L), need_weights=True)
    square = [r.op for r in ops if r.shape[-2:] == (L, L) and r.dtype.is_floating_point]
    assert square == ["bmm", "div", "masked_fill", "_softmax", "masked_fill"]
    with torch.no_grad():
        _, ops = record_op_outputs(mha, x, x, x, attn_mask=make_causal_mask(L), need_weights=False)
    square = [(r.op, r.shape) for r in ops if r.shape[-2:] == (L, L) and r.dtype.is_floating_point]
    assert square == [("where", (1, 1, L, L))]  # SDPA's float copy of the mask, no score matrix


def test_peak_over_count_divides_by_the_counts_of_chapter_19():
    from helpers.benchmark import MiB, activation_bytes, peak_over_count

    act = activation_bytes(2, 512, 64) / MiB
    rows = [
        dict(variant="handwritten", L=512, B=2, d_model=64, score_matrix_mib=4.0, peak_mib=0.0),
        dict(variant="sdpa", L=512, B=2, d_model=64, score_matrix_mib=4.0, peak_mib=5 * act),
        dict(variant="sdpa", L=256, B=2, d_model=64, score_matrix_mib=1.0, peak_mib=1.0),
    ]
    rows[0]["peak_mib"] = 2 * (3 * 4.0 + 3 * act)
    got = peak_over_count(rows, min_L=512)
    assert got == {("handwritten", 512): 2.0, ("sdpa", 512): 1.0}  # L=256 left out
