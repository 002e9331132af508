"""Time and peak memory of attention: handwritten (materialises the scores) vs SDPA.

Used by tools/bench_attention.py (the full sweep, written to chapters/data/*.json) and by
the benchmark chapter (a small live sweep, and the plots of the recorded ones).

What is measured, per variant and sequence length L, for one self-attention call of a
MultiHeadAttention(d_model, heads) on x [B, L, d_model] with a causal mask:
- "handwritten": mha(x, x, x, mask, need_weights=True): Q K^T, softmax, weights @ V, all
  by hand; the [B, h, L, L] weights are materialised (and returned).
- "sdpa":        mha(x, x, x, mask, need_weights=False): the same module, same bool mask,
  through F.scaled_dot_product_attention.
- "sdpa_causal": the same projections, SDPA called with is_causal=True and no mask tensor
  (the form that lets CUDA pick FlashAttention).

Time: CUDA events on a GPU; torch.utils.benchmark on the CPU (median of blocks, with the
process's thread count: Timer defaults to ONE thread otherwise).

Peak memory: on CUDA, torch.cuda.max_memory_allocated() after reset_peak_memory_stats(),
minus what was allocated before the call. On the CPU there is no allocator statistic
(tracemalloc sees only Python objects, not torch's buffers), so we measure the process's
resident memory with Linux's own counters: write "5" to /proc/self/clear_refs to reset the
resident high-water mark (VmHWM) to the current resident size, run the call, read VmHWM
back. The difference is the peak extra memory the call touched, transient buffers
included. glibc's malloc is first told (mallopt) to serve every block over 64 KiB with
mmap and to give it back on free, so memory freed by earlier calls is not silently reused
and the counter stays honest. Both measurements include the call's output tensors.
"""

from __future__ import annotations

import ctypes
import datetime as _dt
import gc
import json
import math
import os
import platform
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from .attention import MultiHeadAttention
from .masks import make_causal_mask

VARIANTS = ("handwritten", "sdpa", "sdpa_causal")
MiB = 2**20


def score_matrix_bytes(
    B: int, heads: int, L: int, dtype=torch.float32, Lk: int | None = None
) -> int:
    """Bytes of one [B, h, Lq, Lk] attention-score matrix."""
    Lk = L if Lk is None else Lk
    return B * heads * L * Lk * torch.empty((), dtype=dtype).element_size()


# ------------------------------------------------------------------ CPU peak memory

_M_MMAP_THRESHOLD = -3  # glibc mallopt parameter numbers (malloc.h)
_M_TRIM_THRESHOLD = -1
_malloc_configured = False


def _configure_malloc() -> None:
    """Serve blocks > 64 KiB by mmap and return them to the OS on free (fixed threshold).

    glibc's default threshold grows after big frees (up to 32 MiB); freed memory below it
    stays resident and would be reused unseen by the high-water mark.
    """
    global _malloc_configured
    if _malloc_configured:
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, 64 * 1024)
        libc.mallopt(_M_TRIM_THRESHOLD, 128 * 1024)
        libc.malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the measurement is still valid, if looser
        pass
    _malloc_configured = True


def _read_status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not found in /proc/self/status")


def cpu_peak_memory_supported() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        _read_status_kib("VmHWM")
        return True
    except OSError:
        return False


def cpu_peak_bytes(fn) -> int:
    """Peak resident memory (bytes) that fn() adds on top of what the process held before.

    Linux only: resets the high-water mark through /proc/self/clear_refs, then reads VmHWM.
    """
    _configure_malloc()
    gc.collect()
    before = _read_status_kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS now
    result = fn()
    peak = _read_status_kib("VmHWM")
    del result
    return max(0, peak - before) * 1024


def cuda_peak_bytes(fn, device=None) -> int:
    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    result = fn()
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device)
    del result
    return peak - base


# ------------------------------------------------------------------ timing


def cpu_time_s(fn, min_run_time: float = 1.0) -> tuple[float, float, int]:
    """(median, IQR, number of runs) in seconds, with torch.utils.benchmark on all threads."""
    from torch.utils import benchmark

    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    m = timer.blocked_autorange(min_run_time=min_run_time)
    return m.median, m.iqr, m.number_per_run * len(m.times)


def cuda_time_s(fn, repeats: int = 20) -> tuple[float, float, int]:
    """(median, IQR, repeats) in seconds, each call timed by a pair of CUDA events."""
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    times.sort()
    q = lambda p: times[min(len(times) - 1, int(p * len(times)))]  # noqa: E731
    return q(0.5), q(0.75) - q(0.25), repeats


# ------------------------------------------------------------------ the workload


@dataclass
class Workload:
    """One self-attention call: a MultiHeadAttention and its input, ready to run."""

    mha: MultiHeadAttention
    x: torch.Tensor
    mask: torch.Tensor

    @classmethod
    def make(cls, B=8, L=1024, d_model=512, heads=8, dtype=torch.float32, device="cpu", seed=0):
        torch.manual_seed(seed)
        mha = MultiHeadAttention(d_model, heads, dropout=0.0).to(device=device, dtype=dtype).eval()
        x = torch.randn(B, L, d_model, device=device, dtype=dtype)
        return cls(mha, x, make_causal_mask(L, device=device))

    def fn(self, variant: str):
        mha, x, mask = self.mha, self.x, self.mask
        if variant == "handwritten":
            return lambda: mha(x, x, x, attn_mask=mask, need_weights=True)
        if variant == "sdpa":
            return lambda: mha(x, x, x, attn_mask=mask, need_weights=False)
        if variant == "sdpa_causal":

            def run():
                Q, K, V = (
                    mha.split_heads(mha.W_q(x)),
                    mha.split_heads(mha.W_k(x)),
                    mha.split_heads(mha.W_v(x)),
                )
                return mha.W_o(
                    mha.merge_heads(F.scaled_dot_product_attention(Q, K, V, is_causal=True))
                )

            return run
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")

    def sdpa_backend(self, variant: str) -> str:
        """Which SDPA kernel PyTorch picks for this call ('-' for the handwritten path)."""
        if variant == "handwritten":
            return "-"
        try:
            from torch.nn.attention import SDPBackend

            Q = self.mha.split_heads(self.x)  # only shape, dtype and device matter
            kwargs = {"is_causal": True} if variant == "sdpa_causal" else {"attn_mask": ~self.mask}
            code = torch._fused_sdp_choice(Q, Q, Q, **kwargs)
            names = {int(v.value): k for k, v in SDPBackend.__members__.items()}
            return names.get(int(code), str(code)).lower()
        except Exception as err:  # private API: report rather than fail
            return f"unknown ({type(err).__name__})"


# ------------------------------------------------------------------ one measurement, a sweep


def predicted_handwritten_peak(B, heads, L, dtype) -> int:
    """A conservative estimate for the handwritten path: about three [B,h,L,L] buffers at once
    (scores, masked scores / softmax output, the re-masked weights) plus slack."""
    return 3 * score_matrix_bytes(B, heads, L, dtype) + 64 * MiB


def available_memory_bytes(device) -> int:
    if str(device).startswith("cuda"):
        free, _total = torch.cuda.mem_get_info(device)
        return free
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 2**62


def measure(
    variant: str,
    L: int,
    B=8,
    d_model=512,
    heads=8,
    dtype=torch.float32,
    device="cpu",
    min_run_time=1.0,
    cuda_repeats=20,
    memory_fraction=0.6,
) -> dict:
    """One row of the sweep: time and peak memory of `variant` at sequence length L."""
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    device = str(device)
    row = {
        "variant": variant,
        "L": L,
        "B": B,
        "d_model": d_model,
        "heads": heads,
        "dtype": str(dtype).replace("torch.", ""),
        "device": device,
        "score_matrix_mib": score_matrix_bytes(B, heads, L, dtype) / MiB,
    }
    if variant == "handwritten":
        need, have = predicted_handwritten_peak(B, heads, L, dtype), available_memory_bytes(device)
        if need > memory_fraction * have:
            row.update(skipped=f"needs ~{need / 2**30:.1f} GiB, {have / 2**30:.1f} GiB available")
            return row
    work = Workload.make(B, L, d_model, heads, dtype, device)
    fn = work.fn(variant)
    row["sdpa_backend"] = work.sdpa_backend(variant)
    with torch.inference_mode():
        fn()  # warm-up: lazy initialisation, kernel selection, thread pools
        if device.startswith("cuda"):
            torch.cuda.synchronize()
            row["peak_mib"] = cuda_peak_bytes(fn) / MiB
            t, iqr, n = cuda_time_s(fn, cuda_repeats)
            row["timer"] = "cuda events"
        else:
            row["peak_mib"] = cpu_peak_bytes(fn) / MiB
            t, iqr, n = cpu_time_s(fn, min_run_time)
            row["timer"] = f"torch.utils.benchmark, {torch.get_num_threads()} threads"
    row.update(ms=t * 1000, iqr_ms=iqr * 1000, runs=n)
    del work, fn
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return row


def sweep(lengths, variants=VARIANTS, progress=None, **kwargs) -> list[dict]:
    """measure() for every L and variant; progress(row) is called after each row."""
    rows = []
    for L in lengths:
        for v in variants:
            row = measure(v, L, **kwargs)
            rows.append(row)
            if progress is not None:
                progress(row)
    return rows


# ------------------------------------------------------------------ records


def environment(device="cpu") -> dict:
    """Hardware and software the numbers were measured on."""
    info = {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": str(device),
        "threads": torch.get_num_threads(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
    }
    if str(device).startswith("cuda"):
        props = torch.cuda.get_device_properties(device)
        info.update(
            gpu=props.name,
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            cuda=torch.version.cuda,
        )
    try:
        info["load_average"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    return info


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def save_results(path, env: dict, rows: list[dict], config: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(
        json.dumps({"environment": env, "config": config, "rows": rows}, indent=1) + "\n"
    )
    os.replace(tmp, path)


def load_results(path) -> dict:
    data = json.loads(Path(path).read_text())
    for key in ("environment", "config", "rows"):
        if key not in data:
            raise ValueError(f"{path}: not a benchmark record (no {key!r})")
    return data


def results_table(rows: list[dict], variants=("handwritten", "sdpa")) -> str:
    """A plain-text table, about 80 columns: L, then time (ms) and peak memory (MiB) per
    variant, then the size of one [B, h, L, L] score matrix (MiB)."""
    by = {(r["L"], r["variant"]): r for r in rows}
    lengths = sorted({r["L"] for r in rows})
    top = f"{'':>5}" + "".join(f" | {v:<17}" for v in variants) + f" | {'scores':>7}"
    sub = f"{'L':>5}" + "".join(f" | {'ms':>8} {'MiB':>8}" for _ in variants) + f" | {'MiB':>7}"
    lines = [top, sub, "-" * len(sub)]
    for L in lengths:
        line = f"{L:>5}"
        score = None
        for v in variants:
            r = by.get((L, v))
            if r is None or "skipped" in r:
                line += f" | {'skipped' if r else '-':>17}"
            else:
                line += f" | {r['ms']:>8.1f} {r['peak_mib']:>8.1f}"
            if r is not None:
                score = r["score_matrix_mib"]
        line += f" | {score:>7.0f}" if score is not None else f" | {'-':>7}"
        lines.append(line)
    return "\n".join(lines)


def loglog_slope(xs, ys) -> float:
    """Least-squares slope of log(y) against log(x): 2 means y grows like x^2."""
    lx = [math.log(x) for x in xs]
    ly = [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)
