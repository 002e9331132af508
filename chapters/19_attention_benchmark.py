# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Attention benchmark: handwritten vs `F.scaled_dot_product_attention`
#
# Our `MultiHeadAttention` (chapter 03) has two paths through the same layer:
#
# - `need_weights=True` computes $\operatorname{softmax}(QK^\top/\sqrt{d_k})\,V$ by hand. It
#   builds the full score matrix of shape $[B, h, L_q, L_k]$, and returns the weights: the
#   heatmap chapter (chapter 18) needs them.
# - `need_weights=False` calls `torch.nn.functional.scaled_dot_product_attention` (SDPA).
#   PyTorch then picks a fused kernel (FlashAttention, memory-efficient attention, cuDNN, or
#   a C++ "flash" kernel on the CPU) that works through the keys block by block, keeps a
#   running maximum and a running sum for the softmax, and never stores the $L_q \times L_k$
#   matrix.
#
# This chapter proves first that the two paths compute the same function, under every mask
# the model uses. Then it measures what the difference costs: time and peak memory as the
# sequence length $L$ grows. The score matrix alone has $B \cdot h \cdot L^2$ entries, so the
# handwritten path's memory should grow like $L^2$ and SDPA's like $L$.

# %%
import glob
import math
import os

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from helpers import MultiHeadAttention, make_causal_mask, make_padding_mask
from helpers.benchmark import (
    MiB,
    Workload,
    cpu_peak_bytes,
    load_results,
    loglog_slope,
    measure,
    results_table,
    score_matrix_bytes,
)

torch.manual_seed(0)
DATA = "data"  # chapters/data, relative to this notebook

# %% [markdown]
# ## 1. Equivalence first
#
# A small layer ($d_{model}=64$, 4 heads, no dropout) in evaluation mode. For each mask we
# compare three computations:
#
# 1. `mha(..., need_weights=True)`: the handwritten path;
# 2. `mha(..., need_weights=False)`: the same module through SDPA;
# 3. a direct `F.scaled_dot_product_attention` call on the module's own projections, with
#    the mask converted to SDPA's convention (`True` = *may attend*, the opposite of ours).
#
# The helper below runs all three and returns the largest absolute difference to the
# handwritten output.

# %%
mha = MultiHeadAttention(d_model=64, num_heads=4, dropout=0.0).eval()


def direct_sdpa(mha, q, k, v, mask=None, is_causal=False):
    """SDPA called by hand on the module's projections; mask: ours (True = blocked)."""
    Q, K, V = mha.split_heads(mha.W_q(q)), mha.split_heads(mha.W_k(k)), mha.split_heads(mha.W_v(v))
    out = F.scaled_dot_product_attention(Q, K, V, attn_mask=None if mask is None else ~mask,
                                         is_causal=is_causal)
    return mha.W_o(mha.merge_heads(out))


@torch.no_grad()
def compare(q, k, v, mask):
    by_hand, weights = mha(q, k, v, attn_mask=mask, need_weights=True)
    module_sdpa, none = mha(q, k, v, attn_mask=mask, need_weights=False)
    assert none is None  # SDPA gives no weights back
    diffs = {
        "module SDPA path": (module_sdpa - by_hand).abs().max().item(),
        "direct SDPA call": (direct_sdpa(mha, q, k, v, mask) - by_hand).abs().max().item(),
    }
    return by_hand, weights, diffs


def report(name, diffs, tol=1e-5):
    for path, d in diffs.items():
        assert d < tol, (name, path, d)
        print(f"{name:>8}: {path:<17} max |difference| < {tol:g}")

# %% [markdown]
# **Padding.** Three sequences of length 7; the second and third end in padding. The padding
# mask $[B, 1, 1, L]$ blocks padded *keys* for every head and every query.

# %%
ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11],
                    [5, 6, 7, 8, 0, 0, 0],
                    [5, 6, 0, 0, 0, 0, 0]])
x = torch.randn(3, 7, 64)
pad_mask = make_padding_mask(ids)
print("x:", tuple(x.shape), " padding mask:", tuple(pad_mask.shape))
out, weights, diffs = compare(x, x, x, pad_mask)
report("padding", diffs)
print("weights:", tuple(weights.shape))
assert weights[pad_mask.expand_as(weights)].abs().max() == 0  # blocked keys get exactly 0
torch.testing.assert_close(weights.sum(-1), torch.ones(3, 4, 7))

# %% [markdown]
# **Causal (decoder self-attention).** Our causal mask is `True` above the diagonal. Combined
# with padding by OR it becomes $[B, 1, L, L]$. Without padding, SDPA can also build the
# causal mask itself (`is_causal=True`): a fourth computation, no mask tensor at all.

# %%
causal = make_causal_mask(7)
self_mask = causal | pad_mask
print("causal:", tuple(causal.shape), " causal | padding:", tuple(self_mask.shape))
out, weights, diffs = compare(x, x, x, self_mask)
report("causal", diffs)
assert (weights[..., 0, 1:] == 0).all()  # the first query sees only the first key

with torch.no_grad():
    by_hand, _ = mha(x, x, x, attn_mask=causal)
    flag = (direct_sdpa(mha, x, x, x, is_causal=True) - by_hand).abs().max().item()
assert flag < 1e-5
print(f"is_causal=True: direct SDPA call max |difference| < 1e-05")

# %% [markdown]
# **Cross-attention.** Queries come from the decoder (5 positions), keys and values from
# the encoder's memory (7 positions); the mask is the *source* padding mask, so the weights
# are $[B, h, 5, 7]$.

# %%
tgt = torch.randn(3, 5, 64)
out, weights, diffs = compare(tgt, x, x, pad_mask)
report("cross", diffs)
print("cross weights:", tuple(weights.shape))
assert weights.shape == (3, 4, 5, 7)

# %% [markdown]
# **A fully masked row.** If every key of a query is blocked, a plain softmax over
# `finfo.min` scores spreads uniformly over keys the query may not see (and with `-inf` it
# returns NaN). Our handwritten path zeroes such rows, the way SDPA does, so even here the two
# paths agree: the attention output is 0 and the layer returns just the output projection's
# bias.

# %%
mask = torch.zeros(3, 1, 7, 7, dtype=torch.bool)
mask[0, 0, 2, :] = True  # query 2 of sequence 0 may see nothing
out, weights, diffs = compare(x, x, x, mask)
report("no keys", diffs)
assert (weights[0, :, 2] == 0).all()
torch.testing.assert_close(out[0, 2], mha.W_o.bias.detach())

# %% [markdown]
# Four masks, three ways of computing attention, one function. The only thing the SDPA path
# cannot give back is the weights themselves: that is what the handwritten path is for.
#
# ## 2. What the handwritten path allocates
#
# The benchmark uses the configuration of the reference chapter: $B=8$, $d_{model}=512$,
# $h=8$ heads, a causal mask. One score matrix holds $B \cdot h \cdot L^2$ numbers:

# %%
for L in (128, 1024, 4096):
    print(f"L={L:5d}: [8, 8, {L}, {L}] = {8 * 8 * L * L:>13,d} numbers = "
          f"{score_matrix_bytes(8, 8, L, torch.float32) / MiB:7.0f} MiB in float32, "
          f"{score_matrix_bytes(8, 8, L, torch.bfloat16) / MiB:6.0f} MiB in bfloat16")
assert score_matrix_bytes(8, 8, 4096, torch.float32) == 4 * 2**30

# %% [markdown]
# Reading `_attention_by_hand` (in `helpers/attention.py`) line by line, several such
# matrices are alive at once: `Q @ K^T / sqrt(d_k)` creates the scores (the product is a
# temporary of the same size), `masked_fill` returns a masked copy, `softmax` a third, and
# zeroing fully masked rows one more, which is returned to the caller. So we expect a peak
# of about three to four score matrices, plus the $[B, L, d_{model}]$ activations. SDPA's peak
# should be a few $[B, L, d_{model}]$ tensors: $Q$, $K$, $V$, the attention output and the
# projected output, about $5 \cdot 8 \cdot L \cdot 512 \cdot 4$ bytes, linear in $L$.
#
# ## 3. How we measure on the CPU
#
# **Time.** `torch.utils.benchmark.Timer` runs the call after a warm-up, in blocks, and we
# report the median. One trap: `Timer` runs with **one thread** unless told otherwise, so we
# pass `num_threads=torch.get_num_threads()`.
#
# **Peak memory.** On a GPU, `torch.cuda.max_memory_allocated()` answers directly. On the
# CPU there is no such counter, and `tracemalloc` sees only Python objects, not the buffers
# torch allocates in C++. We use the kernel's own bookkeeping instead: writing `5` to
# `/proc/self/clear_refs` resets the process's resident-memory high-water mark (`VmHWM` in
# `/proc/self/status`) to its current resident size; after the call, `VmHWM` minus the
# resident size before is the peak extra memory the call touched, transient buffers
# included. Before that, `mallopt` tells glibc to hand every block above 64 KiB straight
# back to the operating system when freed, so freed memory is not silently reused.
#
# First, a check that the counter measures what it should: a 100 MiB tensor, a transient
# 200 MiB (two such tensors alive at once, only a scalar kept), and 100 MiB reserved by
# `torch.empty` but never written (the kernel gives out pages only when they are touched).

# %% tags=["nbval-ignore-output"]
ones = cpu_peak_bytes(lambda: torch.ones(25 * 2**20)) / MiB
transient = cpu_peak_bytes(lambda: (torch.ones(25 * 2**20) + 1).sum()) / MiB
untouched = cpu_peak_bytes(lambda: torch.empty(25 * 2**20)) / MiB
print(f"torch.ones (100 MiB): {ones:6.1f} MiB")
print(f"(ones + 1).sum()    : {transient:6.1f} MiB")
print(f"torch.empty         : {untouched:6.1f} MiB")
assert 95 < ones < 110 and 190 < transient < 215 and untouched < 5

# %% [markdown]
# ## 4. A small live sweep
#
# Each row builds a fresh `MultiHeadAttention(512, 8)` and input `[8, L, 512]`, then measures
# three calls: the handwritten path, the module's SDPA path with our boolean causal mask, and
# SDPA with `is_causal=True` and no mask tensor. The full sweep up to $L=4096$ takes minutes,
# so here we stop at $L=512$; `tools/bench_attention.py` runs the long one (section 5).
# Timings depend on the machine and its load, so this cell's output is not compared; what it
# asserts is not timing but memory: the handwritten path's peak must grow about like $L^2$
# (slope near 2 on a log-log scale; the linear terms still pull it a little below 2 at these
# sizes) and exceed the score matrix it returns, while SDPA's grows like $L$ (slope near 1)
# and stays below the score matrix it never builds.

# %% tags=["nbval-ignore-output"]
lengths = [128, 256, 512]
live = [measure(v, L, min_run_time=0.1) for L in lengths for v in ("handwritten", "sdpa", "sdpa_causal")]
print(results_table(live, ("handwritten", "sdpa", "sdpa_causal")))
print("SDPA kernel chosen:", sorted({r["sdpa_backend"] for r in live if r["variant"] != "handwritten"}))
print("load average:", [round(x, 1) for x in os.getloadavg()])

peak = {v: [r["peak_mib"] for r in live if r["variant"] == v] for v in ("handwritten", "sdpa", "sdpa_causal")}
slopes = {v: loglog_slope(lengths, p) for v, p in peak.items()}
print("log-log slope of peak memory:", {v: round(s, 2) for v, s in slopes.items()})
assert 1.6 < slopes["handwritten"] < 2.2
assert 0.8 < slopes["sdpa"] < 1.3 and 0.8 < slopes["sdpa_causal"] < 1.3
for r in live:
    if r["variant"] == "handwritten":
        assert r["peak_mib"] > r["score_matrix_mib"]
    elif r["L"] == 512:
        assert r["peak_mib"] < r["score_matrix_mib"]

# %% [markdown]
# The benchmark's workload computes the same thing on all three paths too (at $L=512$, on the
# full-size layer):

# %%
work = Workload.make(L=512)
with torch.no_grad():
    ref, w = work.fn("handwritten")()
    for v in ("sdpa", "sdpa_causal"):
        diff = (work.fn(v)() if v == "sdpa_causal" else work.fn(v)()[0]) - ref
        assert diff.abs().max() < 1e-4
        print(f"{v:<12} vs handwritten at L=512: max |difference| < 1e-4")
print("weights returned by the handwritten path:", tuple(w.shape))
del work, ref, w

# %% [markdown]
# ## 5. The recorded sweep: $L$ = 128 ... 4096 on this book's CPU
#
# `python tools/bench_attention.py` ran the full sweep once and wrote
# `chapters/data/attention_benchmark_cpu.json`: the hardware, the date, the torch version, the
# load average of the (shared, busy) machine, and one row per variant and length. The cells
# below read that file, so their output is the same on every machine.

# %%
cpu = load_results(f"{DATA}/attention_benchmark_cpu.json")
env, cfg, rows = cpu["environment"], cpu["config"], cpu["rows"]
print(f"recorded {env['date']} on {env['cpu']} ({env['threads']} threads), torch {env['torch']}")
print(f"load average before/after: {env['load_average_before']} / {env['load_average_after']}")
print(f"B={cfg['B']}, d_model={cfg['d_model']}, heads={cfg['heads']}, {cfg['dtype']}, {cfg['mask']} mask\n")
print(results_table(rows, ("handwritten", "sdpa", "sdpa_causal")))
for r in rows:
    if "skipped" in r:
        print(f"\nL={r['L']} {r['variant']}: skipped, {r['skipped']}")

# %% [markdown]
# Both quantities on log-log axes. In the memory plot, the dotted line is the size of one
# score matrix: the handwritten path sits a constant factor above it (slope 2), SDPA falls
# further below it with every doubling of $L$ (slope 1).

# %%
def series(rows, variant, key):
    pts = [(r["L"], r[key]) for r in rows if r["variant"] == variant and key in r]
    return [p[0] for p in pts], [p[1] for p in pts]


def plot_sweep(rows, title):
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(10, 3.8))
    for v, style in (("handwritten", "o-"), ("sdpa", "s-"), ("sdpa_causal", "^--")):
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
        ax.legend(fontsize=8)
    ax_t.set_title("time")
    ax_m.set_title("peak memory")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    plt.show()


plot_sweep(rows, f"{env['cpu']}, {cfg['dtype']}, B={cfg['B']}, d_model={cfg['d_model']}, h={cfg['heads']}")

# %% [markdown]
# The recorded numbers, as ratios and slopes:

# %%
def ratio_table(rows):
    for L in sorted({r["L"] for r in rows}):
        hw = next((r for r in rows if r["L"] == L and r["variant"] == "handwritten" and "ms" in r), None)
        sd = next(r for r in rows if r["L"] == L and r["variant"] == "sdpa")
        if hw is None:
            print(f"L={L:5d}: handwritten skipped; SDPA {sd['peak_mib']:7.1f} MiB "
                  f"= {sd['peak_mib'] / sd['score_matrix_mib']:.3f} x score matrix")
        else:
            print(f"L={L:5d}: handwritten/SDPA time {hw['ms'] / sd['ms']:5.1f}x, memory "
                  f"{hw['peak_mib'] / sd['peak_mib']:6.1f}x; handwritten peak = "
                  f"{hw['peak_mib'] / hw['score_matrix_mib']:.1f} x score matrix")


ratio_table(rows)
hw_L, hw_mem = series(rows, "handwritten", "peak_mib")
sd_L, sd_mem = series(rows, "sdpa", "peak_mib")
big = [i for i, L in enumerate(hw_L) if L >= 512]
hw_slope = loglog_slope([hw_L[i] for i in big], [hw_mem[i] for i in big])
sd_slope = loglog_slope(sd_L, sd_mem)
print(f"memory slope (log-log): handwritten {hw_slope:.2f} (L >= 512), SDPA {sd_slope:.2f}")
assert 1.8 < hw_slope < 2.2 and 0.8 < sd_slope < 1.2
long = [r for r in rows if r["L"] >= 1024 and "ms" in r]
for r in long:  # the handwritten peak is about three score matrices, as read off the code
    if r["variant"] == "handwritten":
        assert 2.5 < r["peak_mib"] / r["score_matrix_mib"] < 4
for r in rows:  # SDPA's peak is about five [B, L, d_model] activations (section 2), nothing L x L
    if r["variant"] != "handwritten":
        activations = 5 * r["B"] * r["L"] * r["d_model"] * 4 / 2**20
        assert 0.8 < r["peak_mib"] / activations < 1.3, r
for L in sorted({r["L"] for r in long}):  # and at long sequences SDPA is faster as well
    by = {r["variant"]: r["ms"] for r in long if r["L"] == L}
    if "handwritten" in by:
        assert by["sdpa"] < by["handwritten"] and by["sdpa_causal"] < by["handwritten"]

# %% [markdown]
# **bfloat16 on the CPU.** The same sweep with `--dtype bfloat16` (recorded in
# `chapters/data/attention_benchmark_cpu_bfloat16.json`): every buffer holds 2 bytes per
# number instead of 4, so both paths should need half the memory at long sequences, and the
# $L^2$ term stays. Whether bfloat16 is also faster depends on the CPU's bfloat16 support
# (the time ratios below are for this machine only).

# %%
bf = load_results(f"{DATA}/attention_benchmark_cpu_bfloat16.json")
benv = bf["environment"]
print(f"recorded {benv['date']} on {benv['cpu']}, {bf['config']['dtype']}, "
      f"load average before/after: {benv['load_average_before']} / {benv['load_average_after']}\n")
print(results_table(bf["rows"], ("handwritten", "sdpa", "sdpa_causal")))
f32 = {(r["variant"], r["L"]): r for r in rows if "ms" in r}
print()
for r in bf["rows"]:
    ref = f32.get((r["variant"], r["L"]))
    if "ms" in r and ref is not None and r["L"] >= 1024:
        mem, t = r["peak_mib"] / ref["peak_mib"], r["ms"] / ref["ms"]
        print(f"L={r['L']:5d} {r['variant']:<12}: bfloat16 / float32 memory {mem:.2f}, time {t:.2f}")
        assert 0.4 < mem < 0.6

# %% [markdown]
# ## 6. On a GPU
#
# On CUDA the same tool times with CUDA events, reads `torch.cuda.max_memory_allocated()`,
# uses bfloat16, and records which SDPA kernel ran: with `is_causal=True` that is normally
# FlashAttention; with an explicit boolean mask, FlashAttention is not eligible and PyTorch
# falls back to the memory-efficient kernel. For reference, the source chapter reports, on an
# RTX 4090 at $L=1024$ in bfloat16, 2.97 ms and 712 MB for the handwritten layer against
# 0.25 ms and 79 MB for SDPA. Results measured for this book, when there are any, are read
# from `chapters/data/attention_benchmark_cuda*.json`:

# %%
gpu_files = sorted(glob.glob(f"{DATA}/attention_benchmark_cuda*.json"))
if not gpu_files:
    print("No GPU results recorded yet. On a machine with CUDA, run:\n"
          "    python tools/bench_attention.py --device cuda\n"
          "and re-execute this chapter.")
for path in gpu_files:
    gpu = load_results(path)
    genv, grows = gpu["environment"], gpu["rows"]
    print(f"{os.path.basename(path)}: {genv['gpu']}, torch {genv['torch']}, CUDA {genv['cuda']}, "
          f"{gpu['config']['dtype']}, recorded {genv['date']}")
    print(results_table(grows, ("handwritten", "sdpa", "sdpa_causal")))
    print("SDPA kernels:", sorted({(r["variant"], r["sdpa_backend"]) for r in grows if r["variant"] != "handwritten"}))
    plot_sweep(grows, f"{genv['gpu']}, {gpu['config']['dtype']}")

# %% [markdown]
# ## 7. What to take away
#
# - The handwritten path and SDPA compute the same function under padding, causal, cross
#   and fully masked rows (section 1); the only thing SDPA withholds is the weights.
# - The handwritten path's peak memory is about three score matrices: quadratic in $L$. At
#   $L=4096$ one score matrix is 4 GiB in float32 (section 2), so a single call needs a
#   good half of this 24 GiB machine; `tools/bench_attention.py` records such a row as
#   skipped when the machine cannot spare it. SDPA's memory is linear in $L$: a few
#   $[B, L, d_{model}]$ activations.
# - Time follows: at short lengths the four $d_{model} \times d_{model}$ projections
#   dominate and the paths are close; as $L$ grows, writing and re-reading the score
#   matrices costs the handwritten path more and more (the ratios in section 5).
# - So the model trains and decodes with `need_weights=False` (`Transformer.forward` and the
#   KV cache use SDPA), and asks for the weights only where a person wants to look at them:
#   the heatmaps of chapter 18.
