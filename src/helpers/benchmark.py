"""Time and peak memory of attention: handwritten (materialises the scores) vs SDPA. Chapter 22.

Used by tools/bench/attention.py (the CPU sweep, written to chapters/data/*.json), by
tools/record/gpu.py (the GPU sweep) and by the benchmark chapter (a small live sweep, and
the tables and plots of the recorded ones).

What is measured, per variant and sequence length L, for one self-attention call of a
MultiHeadAttention(d_model, heads) on x [B, L, d_model] with a causal mask:
- "handwritten":  mha(x, x, x, mask, need_weights=True): Q K^T, softmax, weights @ V, all by
  hand; the [B, h, L, L] weights are materialised (and returned).
- "sdpa":         mha(x, x, x, mask, need_weights=False): the same module, same bool mask,
  through F.scaled_dot_product_attention. The module inverts the mask on every call
  (~mask: SDPA's convention is True = may attend), an [L, L] bool tensor each time.
- "sdpa_premask": the same projections, SDPA with a mask inverted once, ahead of time.
- "sdpa_causal":  the same projections, SDPA with is_causal=True and no mask tensor at all
  (the form that lets CUDA pick FlashAttention).
- "sdpa_flash", "sdpa_efficient", "sdpa_math", "sdpa_cudnn": sdpa_causal with SDPA forced
  to one backend (torch.nn.attention.sdpa_kernel); "sdpa_flash_masked": FlashAttention forced
  with the (pre-inverted) boolean mask instead. A backend that cannot run the call
  (FlashAttention in float32, the memory-efficient kernel on a CPU, ...) is recorded as
  "unsupported", with PyTorch's reason.

Time. After `warmup` calls (2 by default) and one call that measures the peak memory: on the
CPU, at least `min_runs` calls (and at least `min_run_time` seconds), each timed with
time.perf_counter; on CUDA, `cuda_repeats` calls, each between two CUDA events. Every run is
stored; the median and the spread (interquartile range, minimum, maximum) are derived from them.

Peak memory. CUDA: torch.cuda.max_memory_allocated() after reset_peak_memory_stats(), both
absolute and minus what was allocated before the call (the inputs and the weights): "extra".
CPU: there is no allocator statistic (tracemalloc sees only Python objects, not torch's
buffers), so we measure the process's resident memory with Linux's own counters: write "5" to
/proc/self/clear_refs to reset the resident high-water mark (VmHWM) to the current resident
size, run the call, read VmHWM back. The difference is the peak extra memory the call touched,
transient buffers included. glibc's malloc is first told (mallopt) to serve every block over
64 KiB with mmap and to give it back on free, and before each measurement malloc_trim hands the
heap's free pages back to the OS, so memory freed by earlier calls is not silently reused and
the counter stays honest. Both measurements include the call's output tensors.

An out-of-memory error is caught and recorded ("oom"), and the sweep goes on.

"The reference chapter" in this module is the textbook chapter this book reproduces and measures
itself against; the book's introduction describes it (chapters/intro.md, "The reference
chapter").
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime as _dt
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from helpers.core.attention import MultiHeadAttention
from helpers.core.masks import make_causal_mask

VARIANTS = ("handwritten", "sdpa", "sdpa_causal")  # the default sweep
FORCED_BACKENDS = {  # variant -> torch.nn.attention.SDPBackend member
    "sdpa_flash": "FLASH_ATTENTION",
    "sdpa_efficient": "EFFICIENT_ATTENTION",
    "sdpa_math": "MATH",
    "sdpa_cudnn": "CUDNN_ATTENTION",
    "sdpa_flash_masked": "FLASH_ATTENTION",  # with our boolean mask instead of is_causal
}
ALL_VARIANTS = (*VARIANTS, "sdpa_premask", *FORCED_BACKENDS)
OUTCOMES = ("skipped", "oom", "unsupported", "error")  # a row without "ms" has one of these
MiB = 2**20


def score_matrix_bytes(
    B: int, heads: int, L: int, dtype=torch.float32, Lk: int | None = None
) -> int:
    """Used in chapter 22. Bytes of one [B, h, Lq, Lk] attention-score matrix."""
    Lk = L if Lk is None else Lk
    return B * heads * L * Lk * torch.empty((), dtype=dtype).element_size()


def activation_bytes(B: int, L: int, d_model: int, dtype=torch.float32) -> int:
    """Used in chapter 22. Bytes of one [B, L, d_model] activation (Q, K, V, an output...)."""
    return B * L * d_model * torch.empty((), dtype=dtype).element_size()


def peak_over_count(rows, min_L: int = 512) -> dict[tuple[str, int], float]:
    """Used in chapter 22 and on its Experiments page. Each sweep row's measured peak memory
    over the count chapter 22 reads off the code: three score matrices plus Q, K and V for the
    handwritten path, five [B, L, d_model] activations for SDPA. Rows below min_L (where fixed
    costs dominate) are left out. Keys: (variant, L)."""
    counted = {}
    for r in rows:
        if r["L"] < min_L:
            continue
        act = activation_bytes(r["B"], r["L"], r["d_model"]) / MiB
        if r["variant"] == "handwritten":
            counted[r["variant"], r["L"]] = r["peak_mib"] / (3 * r["score_matrix_mib"] + 3 * act)
        else:
            counted[r["variant"], r["L"]] = r["peak_mib"] / (5 * act)
    return counted


def attention_flops(B: int, heads: int, L: int, d_model: int, causal: bool = True) -> float:
    """Used in chapter 22. Floating-point operations of one self-attention call.

    Four d_model x d_model projections (2 * B * L * d_model^2 each), plus Q K^T and
    weights @ V (2 * B * h * L^2 * d_k each); causal=True counts exactly half of the L^2
    work. A kernel that works in tiles computes the tiles on the diagonal whole, so it does a
    little more than half (causal_blocks counts its tiles).
    """
    d_k = d_model // heads
    proj = 4 * 2 * B * L * d_model * d_model
    attn = 2 * 2 * B * heads * L * L * d_k
    return proj + (attn / 2 if causal else attn)


# ------------------------------------------------------------------ which tensors a call makes


@dataclass(frozen=True)
class OpOutput:
    """One tensor an ATen operator returned: its name, shape and dtype, and the number of
    elements of every tensor it read. Views and in-place results (which share an input's
    memory) are not recorded: they allocate nothing."""

    op: str
    shape: tuple
    dtype: torch.dtype
    input_numels: tuple

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def record_op_outputs(fn, *args, **kwargs) -> tuple[object, list[OpOutput]]:
    """Used in chapter 22 and by check_blocked_attention. Run fn(*args, **kwargs) under a
    TorchDispatchMode that sees every ATen operator call (below autograd and Python, so
    `@`, `.softmax()` and functional calls alike) and records each new tensor it returns.
    Returns (fn's result, the records in call order)."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    records: list[OpOutput] = []

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
            shared = {t.untyped_storage().data_ptr() for t in inputs}
            reads = tuple(t.numel() for t in inputs)
            for t in tree_flatten(out)[0]:
                # a view, an in-place result or _unsafe_view shares an input's storage
                if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in shared:
                    name = func.overloadpacket.__name__
                    records.append(OpOutput(name, tuple(t.shape), t.dtype, reads))
            return out

    with Recorder():
        result = fn(*args, **kwargs)
    return result, records


# ------------------------------------------------------------------ CPU peak memory

_M_MMAP_THRESHOLD = -3  # glibc mallopt parameter numbers (malloc.h)
_M_TRIM_THRESHOLD = -1
_malloc_configured = False
_libc = None  # glibc, once _configure_malloc has found it


def _configure_malloc() -> None:
    """Serve blocks > 64 KiB by mmap and return them to the OS on free (fixed threshold).

    glibc's default threshold grows after big frees (up to 32 MiB); freed memory below it
    stays resident and would be reused unseen by the high-water mark.
    """
    global _malloc_configured, _libc
    if _malloc_configured:
        return
    try:
        _libc = ctypes.CDLL("libc.so.6")
        _libc.mallopt(_M_MMAP_THRESHOLD, 64 * 1024)
        _libc.mallopt(_M_TRIM_THRESHOLD, 128 * 1024)
    except (OSError, AttributeError):  # not glibc: the measurement is still valid, if looser
        _libc = None
    _malloc_configured = True


def _release_free_heap() -> None:
    """Hand the heap's free pages back to the OS (malloc_trim), before each measurement.

    Many small frees coalesce into large free chunks in the heap; a big buffer served from one
    would reuse pages that are already resident, and the high-water mark would not see it.
    After the trim those pages are no longer resident: touching them again counts.
    """
    if _libc is not None:
        _libc.malloc_trim(0)


def _read_status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not found in /proc/self/status")


def cpu_peak_memory_supported() -> bool:
    """Used in chapter 22. True where /proc/self/clear_refs can reset the high-water mark."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        _read_status_kib("VmHWM")
        return True
    except OSError:
        return False


def peak_memory_skip_reason() -> str:
    """Used in chapter 22. What a memory cell prints where cpu_peak_memory_supported() is False."""
    return (
        "Peak memory is read from Linux's /proc/self/status (VmHWM, reset through "
        "/proc/self/clear_refs), which this system lacks, so this cell measures nothing here."
    )


def cpu_peak_bytes(fn) -> int:
    """Used in chapter 22. Peak resident memory (bytes) that fn() adds to the process's.

    Linux only: resets the high-water mark through /proc/self/clear_refs, then reads VmHWM.
    """
    _configure_malloc()
    gc.collect()
    _release_free_heap()
    before = _read_status_kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS now
    result = fn()
    peak = _read_status_kib("VmHWM")
    del result
    return max(0, peak - before) * 1024


def cuda_peak_bytes(fn, device=None) -> tuple[int, int]:
    """Used in chapter 22. (absolute peak, peak extra over what was allocated before), bytes."""
    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    result = fn()
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device)
    del result
    return peak, peak - base


# ------------------------------------------------------------------ timing


def spread(times_s: list[float]) -> dict:
    """Used in chapter 22. Median, interquartile range, min and max (ms) of per-run times (s)."""
    ms = sorted(t * 1000 for t in times_s)
    if len(ms) >= 2:
        q1, _, q3 = statistics.quantiles(ms, n=4, method="inclusive")
    else:
        q1 = q3 = ms[0]
    return {
        "ms": statistics.median(ms),
        "iqr_ms": q3 - q1,
        "min_ms": ms[0],
        "max_ms": ms[-1],
        "runs": len(ms),
    }


def cpu_times_s(fn, min_runs: int = 5, min_run_time: float = 1.0) -> list[float]:
    """Per-call seconds of fn() on the CPU: at least min_runs calls and min_run_time seconds.

    Each call is timed on its own with time.perf_counter, so every run is kept (a blocked
    timer would keep only block means).
    """
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_runs or time.perf_counter() - start < min_run_time:
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return times


def benchmark_times_s(fn, min_runs: int = 2, min_run_time: float = 0.2) -> list[float]:
    """Used in chapter 22. Per-call seconds of fn() from torch.utils.benchmark.Timer.

    Timer.blocked_autorange (the timer of PyTorch's own SDPA tutorial) times blocks of calls
    for at least min_run_time seconds and keeps each block's time per call; it is called again
    until at least min_runs blocks are kept, so that the spread of the blocks can be shown.
    Each blocked_autorange first makes untimed calls to choose its block size.
    """
    from torch.utils import benchmark as tbench

    timer = tbench.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    times: list[float] = []
    while len(times) < min_runs:
        times += timer.blocked_autorange(min_run_time=min_run_time).times
    return times


def causal_blocks(L: int, block_q: int, block_k: int | None = None) -> tuple[int, int]:
    """Used in chapter 22. (blocks computed, blocks in all) of an L x L score matrix cut into
    block_q x block_k tiles, by a kernel that skips only the tiles wholly above the diagonal.

    A tile of queries [i0, i1) and keys [j0, j1) is wholly above the diagonal when its first
    key comes after its last query, j0 > i1 - 1. The tiles on the diagonal are computed whole.
    """
    block_k = block_q if block_k is None else block_k
    starts_q, starts_k = range(0, L, block_q), range(0, L, block_k)
    computed = sum(j0 <= min(i0 + block_q, L) - 1 for i0 in starts_q for j0 in starts_k)
    return computed, len(starts_q) * len(starts_k)


def cuda_times_s(fn, repeats: int = 20) -> list[float]:
    """Per-call seconds of fn() on CUDA, each call between two CUDA events."""
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(repeats)
    ]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) / 1000 for start, end in events]


# ------------------------------------------------------------------ the workload


def sdpa_backend_context(name: str):
    """A context manager that lets SDPA use only the backend `name` (an SDPBackend member).

    torch >= 2.3 has torch.nn.attention.sdpa_kernel; older versions only the CUDA flags.
    """
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # torch < 2.3
        flags = {k: False for k in ("enable_flash", "enable_mem_efficient", "enable_math")}
        key = {
            "FLASH_ATTENTION": "enable_flash",
            "EFFICIENT_ATTENTION": "enable_mem_efficient",
            "MATH": "enable_math",
        }.get(name)
        if key is None:
            raise RuntimeError(f"this torch cannot select the SDPA backend {name}") from None
        flags[key] = True
        return torch.backends.cuda.sdp_kernel(**flags)
    if name not in SDPBackend.__members__:
        raise RuntimeError(f"this torch has no SDPA backend {name}")
    return sdpa_kernel([SDPBackend.__members__[name]])


@dataclass
class Workload:
    """Used in chapter 22. One self-attention call: a MultiHeadAttention and its input."""

    mha: MultiHeadAttention
    x: torch.Tensor
    mask: torch.Tensor  # ours: True = blocked
    allowed: torch.Tensor  # the same mask in SDPA's convention (True = may attend), made once

    @classmethod
    def make(cls, B=8, L=1024, d_model=512, heads=8, dtype=torch.float32, device="cpu", seed=0):
        torch.manual_seed(seed)
        mha = MultiHeadAttention(d_model, heads, dropout=0.0).to(device=device, dtype=dtype).eval()
        x = torch.randn(B, L, d_model, device=device, dtype=dtype)
        mask = make_causal_mask(L, device=device)
        return cls(mha, x, mask, ~mask)

    def _projected(self, **sdpa_kwargs):
        mha, x = self.mha, self.x
        Q = mha.split_heads(mha.W_q(x))
        K, V = mha.split_heads(mha.W_k(x)), mha.split_heads(mha.W_v(x))
        return mha.W_o(mha.merge_heads(F.scaled_dot_product_attention(Q, K, V, **sdpa_kwargs)))

    def fn(self, variant: str):
        """A function of no arguments that makes the call `variant` (see the module doc)."""
        mha, x, mask = self.mha, self.x, self.mask
        if variant == "handwritten":
            return lambda: mha(x, x, x, attn_mask=mask, need_weights=True)
        if variant == "sdpa":
            return lambda: mha(x, x, x, attn_mask=mask, need_weights=False)
        if variant == "sdpa_premask":
            return lambda: self._projected(attn_mask=self.allowed)
        if variant == "sdpa_causal":
            return lambda: self._projected(is_causal=True)
        if variant in FORCED_BACKENDS:
            backend = FORCED_BACKENDS[variant]

            kwargs = {"attn_mask": self.allowed} if variant.endswith("_masked") else {}
            kwargs = kwargs or {"is_causal": True}

            def forced():
                with sdpa_backend_context(backend):
                    return self._projected(**kwargs)

            return forced
        raise ValueError(f"variant must be one of {ALL_VARIANTS}, got {variant!r}")

    def sdpa_backend(self, variant: str) -> str:
        """Which SDPA kernel PyTorch picks for this call ('-' for the handwritten path)."""
        if variant == "handwritten":
            return "-"
        if variant in FORCED_BACKENDS:
            return FORCED_BACKENDS[variant].lower() + " (forced)"
        try:
            from torch.nn.attention import SDPBackend

            Q = self.mha.split_heads(self.x)  # only shape, dtype and device matter
            kwargs = (
                {"is_causal": True} if variant == "sdpa_causal" else {"attn_mask": self.allowed}
            )
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
    """Free memory now: the GPU's (cudaMemGetInfo) or the machine's (MemAvailable)."""
    if str(device).startswith("cuda"):
        free, _total = torch.cuda.mem_get_info(device)
        return free
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:  # not Linux: no cheap way to ask, so do not refuse the workload
        pass
    return 2**62


def is_out_of_memory(err: BaseException) -> bool:
    """True for CUDA's OutOfMemoryError and the CPU allocator's 'can't allocate memory'."""
    oom_type = getattr(torch.cuda, "OutOfMemoryError", ())
    if oom_type and isinstance(err, oom_type):
        return True
    text = str(err).lower()
    return isinstance(err, RuntimeError) and (
        "out of memory" in text or "can't allocate memory" in text
    )


def _first_line(err: BaseException, limit: int = 300) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:limit]


def _free(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def measure(
    variant: str,
    L: int,
    B=8,
    d_model=512,
    heads=8,
    dtype=torch.float32,
    device="cpu",
    min_run_time=1.0,
    min_runs=5,
    cuda_repeats=20,
    warmup=2,
    memory_fraction=0.6,
    timer="perf_counter",
) -> dict:
    """Used in chapter 22. One row of the sweep: time and peak memory of `variant` at length L.

    A row that was measured has "ms" (median), "iqr_ms", "min_ms", "max_ms", "runs",
    "times_ms" (every run) and "peak_mib" (extra over the inputs; on CUDA also
    "peak_abs_mib" and "inputs_mib"). Otherwise it has one of OUTCOMES with the reason.
    On the CPU, the handwritten path and the math backend (which also builds the [L, L]
    scores) are skipped when their estimated peak exceeds `memory_fraction` of the memory
    available now; on CUDA they are attempted and an out-of-memory error is recorded.
    timer (CPU only): "perf_counter" times each call on its own (tools/bench/attention.py);
    "blocked_autorange" uses torch.utils.benchmark (benchmark_times_s: min_runs blocks of at
    least min_run_time seconds each).
    """
    if timer not in ("perf_counter", "blocked_autorange"):
        raise ValueError(f"timer must be 'perf_counter' or 'blocked_autorange', got {timer!r}")
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    device = str(device)
    on_cuda = device.startswith("cuda")
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
    if variant not in ALL_VARIANTS:
        raise ValueError(f"variant must be one of {ALL_VARIANTS}, got {variant!r}")
    if not on_cuda and variant in ("handwritten", "sdpa_math"):
        need, have = predicted_handwritten_peak(B, heads, L, dtype), available_memory_bytes(device)
        if need > memory_fraction * have:
            row.update(skipped=f"needs ~{need / 2**30:.1f} GiB, {have / 2**30:.1f} GiB available")
            return row
    work = fn = None
    try:
        work = Workload.make(B, L, d_model, heads, dtype, device)
        fn = work.fn(variant)
        row["sdpa_backend"] = work.sdpa_backend(variant)
        with torch.inference_mode(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                for _ in range(max(1, warmup)):  # lazy initialisation, kernel choice, caches
                    fn()
            except RuntimeError as err:
                if variant in FORCED_BACKENDS and not is_out_of_memory(err):
                    reasons = [str(w.message).strip() for w in caught][:4]
                    row.update(unsupported=_first_line(err), reasons=reasons)
                    return row
                raise
            if on_cuda:
                torch.cuda.synchronize()
                peak_abs, peak = cuda_peak_bytes(fn)
                row.update(
                    peak_mib=peak / MiB,
                    peak_abs_mib=peak_abs / MiB,
                    inputs_mib=(peak_abs - peak) / MiB,
                )
                times = cuda_times_s(fn, cuda_repeats)
                row["timer"] = f"CUDA events, {warmup} warm-up calls"
            else:
                row["peak_mib"] = (
                    cpu_peak_bytes(fn) / MiB if cpu_peak_memory_supported() else float("nan")
                )
                threads = torch.get_num_threads()
                if timer == "blocked_autorange":
                    times = benchmark_times_s(fn, min_runs, min_run_time)
                    row["timer"] = f"torch.utils.benchmark blocked_autorange, {threads} threads"
                else:
                    times = cpu_times_s(fn, min_runs, min_run_time)
                    row["timer"] = f"time.perf_counter per call, {threads} threads"
        row.update(spread(times), times_ms=[round(t * 1000, 4) for t in times])
    except Exception as err:  # one row's failure is recorded; the sweep goes on
        key = "oom" if is_out_of_memory(err) else "error"
        row[key] = _first_line(err)
    finally:
        del work, fn
        _free(device)
    return row


def sweep(lengths, variants=VARIANTS, progress=None, **kwargs) -> list[dict]:
    """Used in chapter 22. measure() for every L and variant; progress(row) after each row."""
    rows = []
    for L in lengths:
        for v in variants:
            row = measure(v, L, **kwargs)
            rows.append(row)
            if progress is not None:
                progress(row)
    return rows


# ------------------------------------------------------------------ the reference's protocol


def measure_like_reference(L=1024, B=8, d_model=512, heads=8, device="cuda", grad=False) -> list:
    """Used in chapter 22. The reference chapter's own GPU measurement, reproduced.

    Its script keeps the module and the input in float32 and runs each call under
    torch.autocast(bfloat16); the handwritten call builds the causal mask inside the timed
    call, SDPA uses is_causal=True. One warm-up call, reset_peak_memory_stats, 20 calls
    timed together by time.perf_counter with one synchronize at the end (a mean), and the
    absolute torch.cuda.max_memory_allocated(). Its listing does not show whether the timed
    loop ran under no_grad: `grad` chooses. Returns one dict per path.
    """
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model, heads, dropout=0.0).to(device).eval()
    x = torch.randn(B, L, d_model, device=device)

    def sdpa():
        split = lambda t: t.view(B, L, heads, d_model // heads).transpose(1, 2)  # noqa: E731
        y = F.scaled_dot_product_attention(
            split(mha.W_q(x)), split(mha.W_k(x)), split(mha.W_v(x)), is_causal=True
        )
        return mha.W_o(y.transpose(1, 2).reshape(B, L, d_model))

    calls = {
        "handwritten": lambda: mha(x, x, x, attn_mask=make_causal_mask(L, device)),
        "sdpa_causal": sdpa,
    }
    on_cuda = str(device).startswith("cuda")
    sync = torch.cuda.synchronize if on_cuda else (lambda: None)
    rows = []
    for name, fn in calls.items():
        row = {"variant": name, "L": L, "B": B, "d_model": d_model, "heads": heads}
        row.update(dtype="float32 weights, autocast bfloat16", grad=grad)
        try:
            grad_mode = contextlib.nullcontext() if grad else torch.no_grad()
            with grad_mode, torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
                fn()
                sync()
                if on_cuda:
                    torch.cuda.reset_peak_memory_stats()
                t = time.perf_counter()
                for _ in range(20):
                    fn()
                sync()
                row["mean_ms"] = (time.perf_counter() - t) / 20 * 1000
                if on_cuda:
                    row["peak_abs_mib"] = torch.cuda.max_memory_allocated() / MiB
        except Exception as err:
            row["oom" if is_out_of_memory(err) else "error"] = _first_line(err)
        rows.append(row)
        _free(str(device))
    return rows


# ------------------------------------------------------------------ records


def environment(device="cpu") -> dict:
    """Used in chapter 22. Hardware and software the numbers were measured on."""
    info = {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "numerics": _numerics_provenance(),
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
            compute_capability=f"{props.major}.{props.minor}",
            multiprocessors=props.multi_processor_count,
            cuda=torch.version.cuda,
            cudnn=torch.backends.cudnn.version(),
            driver=_nvidia_driver(),
            tf32_matmul=_tf32_setting(),
        )
    with contextlib.suppress(OSError):
        info["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return info


def _tf32_setting() -> str:
    """Whether float32 matmuls on CUDA may use TF32 (they do not by default)."""
    matmul = torch.backends.cuda.matmul
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # newer torch prefers fp32_precision and says so
        try:
            precision = getattr(matmul, "fp32_precision", None)
            return f"allow_tf32={matmul.allow_tf32}" + (
                f", fp32_precision={precision}" if precision is not None else ""
            )
        except Exception as err:
            return f"unknown ({type(err).__name__})"


def _nvidia_driver() -> str:
    """The NVIDIA kernel driver's version, from /proc or nvidia-smi; 'unknown' otherwise."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
        for word in text.split():
            if word.count(".") >= 1 and word.replace(".", "").isdigit():
                return word
    except OSError:
        pass
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def _numerics_provenance() -> dict:
    from helpers.repro.numerics import (
        provenance,  # late: benchmark is imported by record_gpu on bare torch
    )

    return provenance()


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def save_results(path, env: dict, rows: list[dict], config: dict, **extra) -> None:
    """Used in chapter 22. Write a record atomically: {environment, config, rows, **extra}."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    record = {"environment": env, "config": config, "rows": rows, **extra}
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(tmp, path)


def load_results(path) -> dict:
    """Used in chapter 22. Read a record written by save_results (checks its keys)."""
    data = json.loads(Path(path).read_text())
    for key in ("environment", "config", "rows"):
        if key not in data:
            raise ValueError(f"{path}: not a benchmark record (no {key!r})")
    return data


def outcome(row: dict) -> str | None:
    """None for a measured row, else which of OUTCOMES it has."""
    if "ms" in row:
        return None
    return next((k for k in OUTCOMES if k in row), "missing")


def results_table(rows: list[dict], variants=("handwritten", "sdpa")) -> str:
    """Used in chapter 22. A plain-text table, about 80 columns: L, then time (median ms) and
    peak extra memory (MiB) per variant, then the size of one [B, h, L, L] score matrix."""
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
            if r is None:
                line += f" | {'-':>17}"
            elif outcome(r) is not None:
                line += f" | {outcome(r):>17}"
            else:
                line += f" | {r['ms']:>8.{1 if r['ms'] >= 1 else 3}f} {r['peak_mib']:>8.1f}"
            if r is not None:
                score = r["score_matrix_mib"]
        line += f" | {score:>7.0f}" if score is not None else f" | {'-':>7}"
        lines.append(line)
    return "\n".join(lines)


def spread_table(rows: list[dict], variants=VARIANTS) -> str:
    """Used in chapter 22. Per row: runs, median, IQR and min-max of the timed runs (ms)."""
    lines = [f"{'L':>5} {'variant':<14} {'runs':>4} {'median':>9} {'IQR':>8} {'min-max':>19}"]
    for r in sorted(rows, key=lambda r: (r["L"], variants.index(r["variant"]))):
        if r["variant"] not in variants:
            continue
        if outcome(r) is not None:
            lines.append(f"{r['L']:>5} {r['variant']:<14} {outcome(r)}")
            continue
        lo_hi = f"{r.get('min_ms', r['ms']):.2f}-{r.get('max_ms', r['ms']):.2f}"
        lines.append(
            f"{r['L']:>5} {r['variant']:<14} {r['runs']:>4} {r['ms']:>9.2f} "
            f"{r['iqr_ms']:>8.2f} {lo_hi:>19}"
        )
    return "\n".join(lines)


def loglog_slope(xs, ys) -> float:
    """Used in chapter 22. Least-squares slope of log(y) on log(x): 2 means y grows like x^2."""
    lx = [math.log(x) for x in xs]
    ly = [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def series(rows: list[dict], variant: str, key: str, **match) -> tuple[list, list]:
    """Used in chapter 22. (lengths, values of `key`) of the measured rows of one variant."""
    pts = [
        (r["L"], r[key])
        for r in rows
        if r["variant"] == variant and key in r and all(r.get(k) == v for k, v in match.items())
    ]
    pts.sort()
    return [p[0] for p in pts], [p[1] for p in pts]


def plot_sweep(rows: list[dict], title: str, variants=VARIANTS, axes=None):
    """Used in chapter 22. Time and peak memory against L on log-log axes; returns the figure.

    The dotted line in the memory plot is the size of one [B, h, L, L] score matrix.
    """
    import matplotlib.pyplot as plt  # only the plots need matplotlib

    if axes is None:
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    else:
        fig = axes[0].figure
    ax_t, ax_m = axes
    styles = ["o-", "s-", "^--", "v:", "d-.", "x-", "+-", "*-"]
    for v, style in zip(variants, styles):
        if series(rows, v, "ms")[0]:
            ax_t.plot(*series(rows, v, "ms"), style, label=v)
            ax_m.plot(*series(rows, v, "peak_mib"), style, label=v)
    Ls = sorted({r["L"] for r in rows})
    score = [next(r["score_matrix_mib"] for r in rows if r["L"] == L) for L in Ls]
    ax_m.plot(Ls, score, "k:", label="one [B,h,L,L] score matrix")
    for ax, ylabel in ((ax_t, "time per call (ms)"), (ax_m, "peak extra memory (MiB)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length L")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    ax_t.set_title("time (median)")
    ax_m.set_title("peak memory")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
