"""The CPU attention sweep (appendix/experiment_attention_cpu.py) and chapter 22's citation of
it: every number their prose quotes agrees with the records in chapters/data."""

from pathlib import Path

import pytest
from twin_prose import prose

from helpers.analysis.experiments import load_record
from helpers.benchmark import MiB, activation_bytes, loglog_slope, series

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "appendix" / "experiment_attention_cpu.py").read_text()
CHAPTER = (ROOT / "chapters" / "22_attention_benchmark.py").read_text()


@pytest.fixture(scope="module")
def f32():
    rec = load_record("attention_benchmark_cpu")
    return rec, {(r["variant"], r["L"]): r for r in rec["rows"] if "ms" in r}


@pytest.fixture(scope="module")
def bf16():
    rec = load_record("attention_benchmark_cpu_bfloat16")
    return rec, {(r["variant"], r["L"]): r for r in rec["rows"] if "ms" in r}


def time_range(a: dict, b: dict) -> tuple[float, float, float]:
    """a / b: ratio of the medians, and the range from fastest / slowest to slowest / fastest."""
    return a["ms"] / b["ms"], a["min_ms"] / b["max_ms"], a["max_ms"] / b["min_ms"]


def counted(row: dict) -> float:
    act = activation_bytes(row["B"], row["L"], row["d_model"]) / MiB
    if row["variant"] == "handwritten":
        return row["peak_mib"] / (3 * row["score_matrix_mib"] + 3 * act)
    return row["peak_mib"] / (5 * act)


def test_chapter_cites_the_page_with_the_records_numbers(f32):
    rec, by = f32
    text = prose(CHAPTER)
    assert "../appendix/experiment_attention_cpu.ipynb" in text
    env = rec["environment"]
    assert env["cpu"].startswith("Intel(R) Xeon(R)") and "on an Intel Xeon" in text
    assert env["threads"] == 2 and "with 2 threads and PyTorch's default kernels" in text
    assert env["numerics"]["pinned"] is False and env["numerics"]["mkl_cbwr"] == "unset"
    hand, causal = by["handwritten", 4096], by["sdpa_causal", 4096]
    assert f"{hand['peak_mib']:,.0f} MiB" == "12,480 MiB" and "needed 12,480 MiB" in text
    assert hand["runs"] == 5
    quoted = f"{hand['ms'] / 1e3:.1f} s ({hand['min_ms'] / 1e3:.1f} to {hand['max_ms'] / 1e3:.1f} s"
    assert quoted == "13.2 s (12.7 to 13.3 s" and "13.2 s (12.7 to 13.3 s over 5 runs)" in text
    assert f"{causal['peak_mib']:.0f} MiB" == "320 MiB"
    s = {k: causal[k] / 1e3 for k in ("ms", "min_ms", "max_ms")}
    quoted = f"{s['ms']:.2f} s ({s['min_ms']:.2f} to {s['max_ms']:.2f} s)"
    assert quoted == "1.07 s (1.01 to 1.10 s)" and "320 MiB and 1.07 s (1.01 to 1.10 s)" in text


def test_memory_conclusion(f32):
    rec, by = f32
    text = prose(PAGE)
    for (v, L), row in by.items():
        if L >= 512 and (v, L) != ("sdpa", 4096):
            assert f"{counted(row):.2f}" == "1.00", (v, L)
    assert (
        f"{counted(by['sdpa', 4096]) - 1:.0%}" == "6%" and "except at $L = 4096$, 6 % above" in text
    )
    slopes = {}
    for v in ("handwritten", "sdpa", "sdpa_causal"):
        Ls, mib = series(rec["rows"], v, "peak_mib")
        big = [i for i, L in enumerate(Ls) if L >= 512]
        slopes[v] = f"{loglog_slope([Ls[i] for i in big], [mib[i] for i in big]):.2f}"
    assert slopes == {"handwritten": "1.95", "sdpa": "1.02", "sdpa_causal": "1.00"}
    assert "slope of 1.95" in text and "slope of 1.00" in text and "(slope 1.02)" in text
    assert "handwritten path needed 12,480 MiB, SDPA with `is_causal=True` 320 MiB" in text
    assert f"{by['sdpa_causal', 4096]['peak_mib']:.0f}" == "320"


def test_handwritten_against_sdpa(f32):
    rec, by = f32
    text = prose(PAGE)
    apart = [
        L
        for L in rec["config"]["lengths"]
        if max(by[v, L]["max_ms"] for v in ("sdpa", "sdpa_causal")) < by["handwritten", L]["min_ms"]
    ]
    assert apart == [256, 512, 1024, 2048, 4096]
    assert "From $L = 256$ on, every SDPA run, in either form, was faster" in text
    assert "At $L = 128$ the ranges overlap" in text
    mid, lo, hi = time_range(by["handwritten", 4096], by["sdpa_causal", 4096])
    assert f"{mid:.1f} times that of `is_causal` ({lo:.1f} to {hi:.1f} over the runs)" in text


def test_mask_against_is_causal(f32):
    rec, by = f32
    text = prose(PAGE)
    ranges = {L: time_range(by["sdpa", L], by["sdpa_causal", L]) for L in rec["config"]["lengths"]}
    assert all(ranges[L][1] > 1 for L in (2048, 4096))
    assert "At $L = 2048$ and $4096$ every run with our mask was slower" in text
    mid, lo, hi = ranges[1024]
    assert (
        lo < 1 < mid
        and f"differ ({mid:.2f}) but the range reaches below 1 ({lo:.2f} to {hi:.2f})" in text
    )
    assert all(ranges[L][1] < 1 < ranges[L][2] for L in (128, 256, 512))


def test_bfloat16_conclusion(f32, bf16):
    _, by32 = f32
    _, by16 = bf16
    text = prose(PAGE)
    mem = {k: by16[k]["peak_mib"] / by32[k]["peak_mib"] for k in by16 if k[1] >= 1024}
    time = {k: by16[k]["ms"] / by32[k]["ms"] for k in by16 if k[1] >= 1024}
    assert {k: f"{m:.2f}" for k, m in mem.items() if f"{m:.2f}" != "0.50"} == {
        ("sdpa", 4096): "0.53"
    }
    assert "half the float32 memory (0.53 for SDPA with our mask at $L = 4096$)" in text
    assert all(t < 1 for (v, _), t in time.items() if v == "handwritten")
    assert all(t > 1 for (v, _), t in time.items() if v != "handwritten")
    assert "the bfloat16 medians of the handwritten path were lower than float32's" in text
    assert "and those of both SDPA calls higher" in text
    overlap = [
        k
        for k in time
        if not (by16[k]["max_ms"] < by32[k]["min_ms"] or by16[k]["min_ms"] > by32[k]["max_ms"])
    ]
    assert overlap == [("sdpa", 4096)] and "every row but one: SDPA with our mask at" in text
    r = by32["sdpa", 4096]
    assert f"float32 runs spread from {r['min_ms'] / 1e3:.2f} to {r['max_ms'] / 1e3:.2f} s" in text


def test_load_and_provenance(f32, bf16):
    text = prose(PAGE)
    before = f32[0]["environment"]["load_average_before"][0]
    assert f"it was already {before:.2f} on 2 cores" in text
    assert f32[0]["environment"]["cpu_count"] == 2 and f32[0]["environment"]["threads"] == 2
    assert f32[0]["environment"]["numerics"]["pinned"] is False
    assert bf16[0]["environment"]["numerics"]["pinned"] is False
