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
#     display_name: Transformer book (pinned numerics)
#     language: python
#     name: transformer-book
# ---

# %% [markdown]
# # 22. Attention benchmark: handwritten vs SDPA
#
# Our attention layer has two paths: a handwritten one that returns the weights, and PyTorch's
# fused `scaled_dot_product_attention` (SDPA). You will check that both compute the same thing.
# Then you will measure, on your own CPU, what the handwritten path costs in time and in peak
# memory. The picture shows the ratios measured when this page was last run, on the CPU it
# names, beside those the reference chapter measured on an RTX 4090.
#
# ![Handwritten-to-SDPA ratios of time and peak memory, measured live on a CPU, and the reference chapter's RTX 4090](figures/22_attention_benchmark.png)

# %% [markdown] tags=["run-time"]
# **Run time:** about 1.3 min.

# %%
import math
import os
import tracemalloc

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from helpers import MultiHeadAttention, make_causal_mask, make_padding_mask
from helpers.benchmark import (
    VARIANTS,
    MiB,
    Workload,
    activation_bytes,
    attention_flops,
    causal_blocks,
    cpu_peak_bytes,
    cpu_peak_memory_supported,
    loglog_slope,
    measure,
    peak_memory_skip_reason,
    peak_over_count,
    record_op_outputs,
    results_table,
    score_matrix_bytes,
    spread_table,
)
from helpers.repro.gpu_results import GPU_SPECS, reference_ratios
from helpers.repro.numerics import cpu_model, timing_label

_ = torch.manual_seed(0)
TORCH = torch.__version__.split("+")[0]  # 2.13.0, without the local build suffix
PEAK_OK = cpu_peak_memory_supported()  # Linux only; elsewhere the memory cells say so and skip
TIMING = {"min_runs": 2, "min_run_time": 0.2, "warmup": 1, "timer": "blocked_autorange"}

# %% [markdown]
# ## The cost in one table
#
# [The reference chapter](intro.md#the-reference-chapter) timed both paths on an RTX 4090. Its
# setting was $B=8$, $L=1024$, $d_{model}=512$, $h=8$ heads and a causal mask. Its SDPA call
# used `is_causal=True`. We run our layer's two paths at that setting on this CPU and divide.
# Each time is the median of at least two timed blocks from `torch.utils.benchmark` (section 3).
# The range beside the time ratio runs from the fastest to the slowest combination of those
# blocks.

# %% tags=["nbval-ignore-output", "opening-figure"]
SHAPE = {"B": 8, "L": 1024, "d_model": 512, "heads": 8}  # the reference chapter's setting
PAIR = ("handwritten", "sdpa_causal")
opening_rows = {v: measure(v, 1024, **TIMING) for v in PAIR}
opening_load = os.getloadavg()[0]
for r in opening_rows.values():
    assert {k: r[k] for k in SHAPE} == SHAPE and r["dtype"] == "float32", r


def ratios(hand, sdpa):
    """handwritten / SDPA: time (ratio of medians, with the range over the timed blocks)
    and peak memory."""
    return {
        "time": hand["ms"] / sdpa["ms"],
        "time_range": (hand["min_ms"] / sdpa["max_ms"], hand["max_ms"] / sdpa["min_ms"]),
        "memory": hand["peak_mib"] / sdpa["peak_mib"],
    }


live = ratios(*opening_rows.values())
ref = reference_ratios()
threads = torch.get_num_threads()
thread_words = f"{threads} thread" + ("s" if threads > 1 else "")
low, high = live["time_range"]
print("handwritten / SDPA (is_causal=True), " + ", ".join(f"{k}={v}" for k, v in SHAPE.items()))
print(f"{'':<18}{'this CPU, live':>26}{'RTX 4090 (reference)':>24}")
time_cell = f"{live['time']:.1f}x ({low:.1f} to {high:.1f})"
print(f"{'time ratio':<18}{time_cell:>26}{ref['time']:>23.1f}x")
print(f"{'peak-memory ratio':<18}{live['memory']:>25.1f}x{ref['memory']:>23.1f}x")
print()
print(
    f"this CPU, live: {cpu_model()}, float32, {thread_words}, load average "
    f"{opening_load:.1f}; {timing_label()}; peak memory above the inputs"
)
print(
    "RTX 4090 (reference): the reference's layer, float32 weights under bfloat16 autocast, "
    "mean of 20 calls; absolute peak memory"
)

fig, ax = plt.subplots(figsize=(8, 3.4))
width = 0.35
for i, (name, c) in enumerate((("this CPU, live", live), ("RTX 4090 (reference)", ref))):
    xs = [j + (i - 0.5) * width for j in range(2)]
    values = [c["time"], c["memory"]]
    ax.bar(xs, values, width, color=f"C{i}", label=name)
    tops = list(values)
    if "time_range" in c:
        lo, hi = c["time_range"]
        ax.errorbar(xs[0], c["time"], [[c["time"] - lo], [hi - c["time"]]], color="k", capsize=4)
        tops[0] = hi
    for x, value, top in zip(xs, values, tops):
        ax.text(x, top, f"{value:.1f}x", ha="center", va="bottom", fontsize=8)
ax.set_xticks([0, 1], ["time", "peak memory"])
ax.set_ylabel("handwritten / SDPA")
ax.set_title(
    f"Attention at B=8, L=1024, live on {cpu_model()} ({thread_words}),\n"
    "and the reference chapter's RTX 4090",
    fontsize=10,
)
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# three score matrices plus Q, K, V over five activations (sections 2 and 4) is 10.2
if PEAK_OK:
    assert 9 < live["memory"] < 11.5

# %% [markdown]
# The memory ratios are close: about ten here, nine on the RTX 4090. But they are not like for
# like. Our handwritten layer has one step more than the reference's: a `masked_fill` that zeroes
# fully masked rows. In float32 that step holds one more score matrix (section 2). The RTX 4090's
# peak also counts the inputs and the weights, and it ran under bfloat16 autocast.
#
# The time ratio is not derived from the code, as the memory ratio is (section 2). It depends on
# the CPU, the threads, the kernels and the load, which the line under the table names. So it
# holds for this run only, within its range.
#
# ## The two paths
#
# Our `MultiHeadAttention` (chapter 3) has two paths through the same layer:
#
# - `need_weights=True` computes $\operatorname{softmax}(QK^\top/\sqrt{d_k})\,V$ by hand. It
#   builds the full score matrix, of shape $[B, h, L_q, L_k]$, and returns the weights. The
#   heatmaps of chapter 21 need them.
# - `need_weights=False` calls `torch.nn.functional.scaled_dot_product_attention`. PyTorch
#   picks a kernel for the call. The GPU's fused kernels are FlashAttention {cite}`dao2022`
#   {cite}`dao2024` and memory-efficient attention {cite}`rabe2021`. They go through the keys
#   block by block, with a running maximum and a running sum for the softmax
#   {cite}`milakov2018`. So they never store the $L_q \times L_k$ matrix (exercise 22.3 builds
#   that loop). On the CPU, PyTorch calls its fused kernel "flash" too. A plain "math"
#   fallback computes the whole matrix.
#
# The score matrix alone has $B \cdot h \cdot L^2$ entries. So the handwritten path's memory
# should grow like $L^2$, and the fused kernels' like $L$. We first check that both paths agree
# under every mask the model uses. Then we measure time and peak memory as $L$ grows.

# %% [markdown]
# ## 1. Equivalence first
#
# A small layer ($d_{model}=64$, 4 heads, no dropout) runs in evaluation mode. For each mask we
# compare three computations:
#
# 1. `mha(..., need_weights=True)`: the handwritten path;
# 2. `mha(..., need_weights=False)`: the same module through SDPA;
# 3. a direct `F.scaled_dot_product_attention` call on the module's own projections. Its mask is
#    converted to SDPA's convention, where `True` means *may attend*: the opposite of ours.
#
# The helper below runs all three. It returns the largest absolute difference to the handwritten
# output.

# %%
mha = MultiHeadAttention(d_model=64, num_heads=4, dropout=0.0).eval()


def direct_sdpa(mha, q, k, v, mask=None, is_causal=False):
    """SDPA called by hand on the module's projections; mask: ours (True = blocked)."""
    Q, K, V = mha.split_heads(mha.W_q(q)), mha.split_heads(mha.W_k(k)), mha.split_heads(mha.W_v(v))
    allowed = None if mask is None else ~mask
    out = F.scaled_dot_product_attention(Q, K, V, attn_mask=allowed, is_causal=is_causal)
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
# **Padding.** Three sequences of length 7; the second and third end in padding. The padding mask
# $[B, 1, 1, L]$ blocks padded *keys*, for every head and every query.

# %%
ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11], [5, 6, 7, 8, 0, 0, 0], [5, 6, 0, 0, 0, 0, 0]])
x = torch.randn(3, 7, 64)
pad_mask = make_padding_mask(ids)
print("x:", tuple(x.shape), " padding mask:", tuple(pad_mask.shape))
out, weights, diffs = compare(x, x, x, pad_mask)
report("padding", diffs)
print("weights:", tuple(weights.shape))
assert weights[pad_mask.expand_as(weights)].abs().max() == 0  # blocked keys get exactly 0
torch.testing.assert_close(weights.sum(-1), torch.ones(3, 4, 7))

# %% [markdown]
# **Causal (decoder self-attention).** Our causal mask is `True` above the diagonal. Combined with
# padding by OR, it becomes $[B, 1, L, L]$. Without padding, SDPA can also build the causal mask
# itself (`is_causal=True`). That is a fourth computation, with no mask tensor at all.

# %%
causal = make_causal_mask(7)
self_mask = causal | pad_mask
print("causal:", tuple(causal.shape), " causal | padding:", tuple(self_mask.shape))
out, weights, diffs = compare(x, x, x, self_mask)
report("causal", diffs)
assert torch.equal(causal[0, 0], torch.ones(7, 7, dtype=torch.bool).triu(1))  # above the diagonal
assert (weights[..., 0, 1:] == 0).all()  # the first query sees only the first key

with torch.no_grad():
    by_hand, _ = mha(x, x, x, attn_mask=causal)
    flag = (direct_sdpa(mha, x, x, x, is_causal=True) - by_hand).abs().max().item()
assert flag < 1e-5
print("is_causal=True: direct SDPA call max |difference| < 1e-05")

# %% [markdown]
# **Cross-attention.** Queries come from the decoder (5 positions), keys and values from the
# encoder's memory (7 positions). The mask is the *source* padding mask, so the weights are
# $[B, h, 5, 7]$.

# %%
tgt = torch.randn(3, 5, 64)
out, weights, diffs = compare(tgt, x, x, pad_mask)
report("cross", diffs)
print("cross weights:", tuple(weights.shape))
assert weights.shape == (3, 4, 5, 7)

# %% [markdown]
# **A fully masked row.** Suppose every key of a query is blocked. A plain softmax over
# `finfo.min` scores then spreads uniformly over keys the query may not see. With `-inf` it
# returns NaN; chapter 3 shows both. Our handwritten path zeroes such rows. In torch 2.13.0 on the
# CPU, SDPA returns zeros there too. (Chapter 3 shows it for each backend, and cites the PyTorch
# issue where earlier releases returned NaN.) So the two paths agree even here. The attention
# output is 0, and the layer returns just the output projection's bias.

# %%
mask = torch.zeros(3, 1, 7, 7, dtype=torch.bool)
mask[0, 0, 2, :] = True  # query 2 of sequence 0 may see nothing
out, weights, diffs = compare(x, x, x, mask)
print(f"torch {torch.__version__.split('+')[0]}")
report("no keys", diffs)
assert (weights[0, :, 2] == 0).all()
torch.testing.assert_close(out[0, 2], mha.W_o.bias.detach())

# %% [markdown]
# Four masks, three ways of computing attention, the same outputs to within $10^{-5}$ on these
# inputs. The only thing the SDPA path cannot give back is the weights themselves. That is what
# the handwritten path is for.
#
# ## 2. What each path allocates
#
# The benchmark uses the configuration of the reference chapter: $B=8$, $d_{model}=512$, $h=8$
# heads and a causal mask. One score matrix holds $B \cdot h \cdot L^2$ numbers:

# %%
for L in (128, 1024, 4096):
    print(
        f"L={L:5d}: [8, 8, {L}, {L}] = {8 * 8 * L * L:>13,d} numbers = "
        f"{score_matrix_bytes(8, 8, L, torch.float32) / MiB:7.0f} MiB in float32, "
        f"{score_matrix_bytes(8, 8, L, torch.bfloat16) / MiB:6.0f} MiB in bfloat16"
    )
assert score_matrix_bytes(8, 8, 4096, torch.float32) == 4 * 2**30

# %% [markdown]
# Read `_attention_by_hand` (in `helpers.core.attention`) line by line. Several score-sized matrices
# are made:
#
# - `Q @ K^T`, and its division by $\sqrt{d_k}$;
# - the masked copy that `masked_fill` makes, which stays bound to `scores` until the function
#   returns;
# - the softmax weights;
# - one more copy that zeroes the fully masked rows, which is returned to the caller.
#
# The cell below checks that reading on a small layer. `helpers.benchmark.record_op_outputs`
# runs a call under a dispatch mode that sees each operator's output. It lists every
# floating-point output of the score matrix's shape, in order.

# %%
small = MultiHeadAttention(d_model=16, num_heads=2, dropout=0.0).eval()
xs = torch.randn(1, 6, 16)
with torch.no_grad():
    _, ops = record_op_outputs(small, xs, xs, xs, attn_mask=make_causal_mask(6), need_weights=True)
made = [r.op for r in ops if r.shape[-2:] == (6, 6) and r.dtype.is_floating_point]
print("score-sized tensors of the handwritten path, in order:", made)
assert made == ["bmm", "div", "masked_fill", "_softmax", "masked_fill"]

# %% [markdown]
# While the last one is made, three are alive: the masked scores, the softmax output and the
# re-masked weights. So we expect a peak of three score matrices. Add the activations alive with
# them: the projections $Q$, $K$ and $V$, $[B, L, d_{model}]$ each. This count holds when every
# tensor has one dtype.
#
# A fused kernel's peak should be a few $[B, L, d_{model}]$ tensors. These are $Q$, $K$, $V$, the
# attention output and the projected output. That is about $5 \cdot 8 \cdot L \cdot 512 \cdot 4$
# bytes in float32, linear in $L$. Section 4 checks both counts on this CPU.
#
# :::{dropdown} Going deeper: the mask costs memory too
# The module's SDPA path receives our boolean mask. It inverts it on every call (`~attn_mask`,
# SDPA's convention), which allocates a new $[1, 1, L, L]$ boolean tensor: $L^2$ bytes. And SDPA
# itself, given a boolean mask, may turn it into an additive float mask. The cell below measures
# both on one head with 8 dimensions. There the activations are tiny, so what remains is the mask.
# It also forces the math fallback, to see whether it stores the score matrix. It uses the
# peak-memory counter of section 3.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["nbval-ignore-output", "hide-cell"]
if not PEAK_OK:
    print(peak_memory_skip_reason())
else:
    L = 4096
    q1 = torch.randn(1, 1, L, 8)
    blocked = make_causal_mask(L)
    allowed = ~blocked
    _ = F.scaled_dot_product_attention(q1, q1, q1, attn_mask=allowed)  # warm-up
    invert = cpu_peak_bytes(lambda: ~blocked) / MiB
    with_mask = cpu_peak_bytes(
        lambda: F.scaled_dot_product_attention(q1, q1, q1, attn_mask=allowed)
    )
    no_mask = cpu_peak_bytes(lambda: F.scaled_dot_product_attention(q1, q1, q1, is_causal=True))

    def math_backend():
        with sdpa_kernel([SDPBackend.MATH]):
            return F.scaled_dot_product_attention(q1, q1, q1, is_causal=True)

    _ = math_backend()  # warm-up
    with_math = cpu_peak_bytes(math_backend)
    print(
        f"torch {TORCH}, L={L}: one [L, L] mask is {L * L / MiB:.0f} MiB as bool, "
        f"{4 * L * L / MiB:.0f} MiB as float32 (as is the [1, 1, L, L] score matrix); "
        f"q1 is {activation_bytes(1, L, 8) / 2**10:.0f} KiB; "
        f"five [8, L, 512] float32 activations: {5 * activation_bytes(8, L, 512) / MiB:.0f} MiB"
    )
    print(f"~mask (the module's SDPA path, every call): {invert:6.1f} MiB")
    print(f"SDPA with a boolean mask                  : {with_mask / MiB:6.1f} MiB")
    print(f"SDPA with is_causal=True and no mask      : {no_mask / MiB:6.1f} MiB")
    print(f"the same, forced to the math backend      : {with_math / MiB:6.1f} MiB")
    assert 0.9 * L * L / MiB < invert < 1.2 * L * L / MiB
    assert 0.9 * 4 * L * L < with_mask < 1.2 * 4 * L * L  # a float32 copy of the mask
    assert no_mask < 0.1 * L * L
    assert with_math > 4 * L * L  # at least one float32 score matrix

# %% [markdown]
# :::{dropdown} Going deeper: what the mask costs
# In torch 2.13.0 on the CPU, SDPA given a boolean mask allocated about four bytes per mask entry.
# That is as much as a float32 copy of the mask, on top of the $L^2$ bytes of `~attn_mask`. With
# `is_causal=True` neither appeared: that call allocated well under one score matrix. The same call
# forced to the math fallback allocated more than one. So the mask is an $L^2$ term on the
# "linear" path, in every attention call that passes one. At the benchmark's sizes it is small
# next to the activations. At $L=4096$ it is 16 + 64 MiB, against the 320 MiB of five
# activations. But it grows like $L^2$, not $L$.
# :::
#
# The model itself cannot simply switch to `is_causal`. Its decoder mask also blocks padding,
# which `is_causal` does not describe. So the benchmark times SDPA two ways. `sdpa` is the module,
# with our mask inverted on every call. `sdpa_causal` passes `is_causal=True` and no mask tensor.
#
# ## 3. How we measure on the CPU
#
# **Time.** Each row builds a fresh layer and input. It makes one warm-up call and one call that
# measures the peak memory. Then it times the call with `torch.utils.benchmark.Timer`, as
# PyTorch's own SDPA tutorial does. `Timer.blocked_autorange` runs the call in blocks for at
# least `min_run_time` seconds and reports the time per call of each block. We ask for at least
# two blocks, so that the tables can show the median and the spread, not just one number.
#
# **Peak memory.** On a GPU, `torch.cuda.max_memory_allocated()` answers directly. On the CPU we
# read the Linux kernel's count of the process's resident memory, before and during the call.
#
# :::{dropdown} Going deeper: a peak-memory counter for the CPU
# `torch.cpu` has no memory counter in torch 2.13.0. `tracemalloc` traces only what Python's own
# allocator hands out, not the buffers torch allocates in C++. The cell below shows both. So we
# use the Linux kernel's own bookkeeping instead. Writing `5` to `/proc/self/clear_refs` resets
# the process's resident-memory high-water mark (`VmHWM` in `/proc/self/status`) to its current
# resident size. After the call, `VmHWM` minus the resident size before is the peak extra memory
# the call touched, transient buffers included. Before that, `mallopt` tells glibc to hand every
# block above 64 KiB straight back to the operating system when freed. So freed memory is not
# silently reused.
#
# The cell checks that the counter measures what it should. It allocates a 100 MiB tensor, then a
# transient 200 MiB (two such tensors alive at once, only a scalar kept). Last, `torch.empty`
# reserves 100 MiB that is never written: the kernel gives out pages only when they are touched.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["nbval-ignore-output", "hide-cell"]
if not PEAK_OK:
    print(peak_memory_skip_reason())
else:
    memory_functions = [name for name in dir(torch.cpu) if "memory" in name]
    tracemalloc.start()
    big = torch.ones(25 * 2**20)
    traced = tracemalloc.get_traced_memory()[1] / MiB
    tracemalloc.stop()
    del big
    ones = cpu_peak_bytes(lambda: torch.ones(25 * 2**20)) / MiB
    transient = cpu_peak_bytes(lambda: (torch.ones(25 * 2**20) + 1).sum()) / MiB
    untouched = cpu_peak_bytes(lambda: torch.empty(25 * 2**20)) / MiB
    print(f"torch {TORCH}: names in torch.cpu containing 'memory': {memory_functions}")
    print(f"tracemalloc's peak around torch.ones (100 MiB): {traced:6.1f} MiB")
    print(f"VmHWM counter, torch.ones (100 MiB)           : {ones:6.1f} MiB")
    print(f"VmHWM counter, (ones + 1).sum()               : {transient:6.1f} MiB")
    print(f"VmHWM counter, torch.empty (100 MiB)          : {untouched:6.1f} MiB")
    assert not memory_functions and traced < 1
    assert 95 < ones < 110 and 190 < transient < 215 and untouched < 5

# %% [markdown]
# ## 4. A small live sweep
#
# Each row builds a fresh `MultiHeadAttention(512, 8)` and an input `[8, L, 512]`. It measures
# three calls: the handwritten path, the module's SDPA path with our causal mask, and SDPA with
# `is_causal=True`. Here we stop at $L=1024$, with at least two timed blocks per row (the
# `runs` column of the spread table counts them). The rows at
# $L=1024$ of the handwritten path and of `is_causal` are the ones of the opening table. The
# checks are on memory. The handwritten path's peak must grow about like $L^2$, a slope near 2 on
# a log-log scale, and exceed the score matrix it returns. SDPA's peak must only double from
# $L=512$ to $L=1024$, and stay below the score matrix it never builds. Both peaks must match
# the counts of section 2.
#
# :::{dropdown} Going deeper: why the slope is below 2, and why the SDPA checks start at 512
# The linear terms still pull the handwritten slope a little below 2 at these sizes. The SDPA
# checks start at $L=512$. Five $[B, L, d_{model}]$ activations hold $5 B L d_{model}$ numbers,
# one score matrix $B h L^2$. The activations outweigh the score matrix while
# $L < 5 d_{model} / h = 320$.
# :::

# %% tags=["nbval-ignore-output"]
lengths = [256, 512, 1024]
sweep = []
for L in lengths:
    for v in VARIANTS:
        if L == 1024 and v in opening_rows:  # measured for the opening table
            sweep.append(opening_rows[v])
        else:
            sweep.append(measure(v, L, **TIMING))
print(results_table(sweep, VARIANTS))
print()
print(spread_table(sweep, VARIANTS))
kernels = sorted({r["sdpa_backend"] for r in sweep if r["variant"] != "handwritten"})
print("SDPA kernel chosen:", kernels)
print("load average:", [round(x, 1) for x in os.getloadavg()])
print(timing_label())

if not PEAK_OK:
    print(peak_memory_skip_reason())
else:
    peak = {v: {r["L"]: r["peak_mib"] for r in sweep if r["variant"] == v} for v in VARIANTS}
    slope = loglog_slope(lengths, [peak["handwritten"][L] for L in lengths])
    growth = {v: peak[v][1024] / peak[v][512] for v in ("sdpa", "sdpa_causal")}
    print(f"handwritten: log-log slope of peak memory {slope:.2f}")
    print("SDPA: peak at L=1024 / peak at L=512:", {v: round(g, 2) for v, g in growth.items()})
    assert 1.6 < slope < 2.2
    assert all(1.6 < g < 2.5 for g in growth.values())
    for r in sweep:
        if r["variant"] == "handwritten":
            assert r["peak_mib"] > r["score_matrix_mib"]
        elif r["L"] >= 512:
            assert r["peak_mib"] < r["score_matrix_mib"]
    # section 2's counts: three score matrices plus Q, K and V; five activations for SDPA
    counted = peak_over_count(sweep, min_L=512)
    print("measured peak / section 2's count:")
    for (v, L), x in counted.items():
        print(f"  L={L:5d} {v:<12}: {x:.2f}")
    assert all(0.9 < x < 1.1 for (v, _), x in counted.items() if v == "handwritten")
    assert all(0.8 < x < 1.3 for (v, _), x in counted.items() if v != "handwritten")

# %% [markdown]
# The spread table shows how far the timed blocks of each row lie apart. A time ratio is no
# sharper than that spread.
#
# **Our mask or `is_causal`?** The two SDPA calls compute the same outputs (section 1). But a
# kernel told `is_causal=True` knows that every key above the diagonal is blocked, and may skip
# that work. Given a mask tensor, it cannot know that. The cell divides the two medians, with
# the range of their blocks:

# %% tags=["nbval-ignore-output"]
by = {(r["variant"], r["L"]): r for r in sweep}
for L in lengths:
    mask_row, causal_row = by["sdpa", L], by["sdpa_causal", L]
    mid = mask_row["ms"] / causal_row["ms"]
    lo = mask_row["min_ms"] / causal_row["max_ms"]
    hi = mask_row["max_ms"] / causal_row["min_ms"]
    print(f"L={L:5d}: sdpa / sdpa_causal, median {mid:.2f} (blocks: {lo:.2f} to {hi:.2f})")
print(timing_label())

# %% [markdown]
# A ratio above 1 means our mask was slower. Where the range spans 1, this run cannot tell the two
# apart. Where it does not, that holds for this run: a few blocks, on one machine, at its load.
#
# How much could skipping save? A kernel that works in square tiles skips only the tiles
# wholly above the diagonal. It computes the tiles on the diagonal whole. The cell counts the
# tiles at $L=1024$ for a few tile sizes; a tile of one entry gives the exact triangle.

# %%
L = 1024
for tile in (1, 64, 128, 256):
    computed, total = causal_blocks(L, tile)
    share = computed / total
    print(f"tiles of {tile:3d} x {tile:<3d}: {computed:7,d} of {total:9,d} computed = {share:.1%}")
assert causal_blocks(L, 128) == (36, 64)
full = attention_flops(8, 8, L, 512, causal=False)
half = attention_flops(8, 8, L, 512, causal=True)
print(f"whole call at L={L}, projections included: causal work / full work = {half / full:.2f}")

# %% [markdown]
# A kernel with tiles of 128 still computes 36 of the 64 tiles, not 32. The projections
# cost the same in both calls. So even a perfect skip saves well under half of the call's work.
# PyTorch's CPU kernel picks its own tile sizes, which this page does not read. [The CPU
# attention sweep](../appendix/experiment_attention_cpu.ipynb) compares the two calls on
# longer sequences.
#
# The benchmark's SDPA variants compute the same thing as its handwritten path too, at
# $L=512$ on the full-size layer. (`sdpa_premask` passes our mask inverted once, ahead of time.)

# %%
work = Workload.make(L=512)
with torch.no_grad():
    ref_out, w = work.fn("handwritten")()
    for v in ("sdpa", "sdpa_premask", "sdpa_causal"):
        out = work.fn(v)()
        diff = (out[0] if isinstance(out, tuple) else out) - ref_out
        assert diff.abs().max() < 1e-4
        print(f"{v:<12} vs handwritten at L=512: max |difference| < 1e-4")
print("weights returned by the handwritten path:", tuple(w.shape))
del work, ref_out, w

# %% [markdown]
# ## 5. A longer sweep, recorded
#
# [The CPU attention sweep](../appendix/experiment_attention_cpu.ipynb) ran the same three calls
# from $L=128$ to $4096$, on an Intel Xeon with 2 threads and PyTorch's default kernels. At
# $L=4096$ the handwritten call needed 12,480 MiB and a median of 13.2 s (12.7 to 13.3 s over 5
# runs); SDPA with `is_causal=True` needed 320 MiB and 1.07 s (1.01 to 1.10 s).
#
# ## 6. On a GPU
#
# This book has not measured a GPU yet: the only GPU numbers in this chapter are the reference
# chapter's, in the opening table.
#
# ## Summary
#
# - The handwritten path and SDPA give the same outputs, to within $10^{-5}$, under padding,
#   causal, cross and fully masked rows (section 1). The only thing SDPA withholds is the weights.
# - At $B=8$ and $L=1024$, the handwritten path needed about ten times SDPA's peak memory on this
#   CPU, and nine times on the reference's RTX 4090. The two are not like for like: our layer has
#   one more step, and the RTX 4090's peak counts the inputs. The opening table prints the time
#   ratio with its range, for the CPU, threads and kernels that ran it.
# - In one dtype, the handwritten path's peak memory is three score matrices plus $Q$, $K$ and
#   $V$. We read that off the code (section 2) and checked it on this CPU (section 4). It is
#   quadratic in $L$: at $L=4096$ one score matrix is 4 GiB in float32. SDPA's peak is about five
#   $[B, L, d_{model}]$ activations, linear in $L$ (from $L=512$ on).
# - A boolean mask is an $L^2$ term on the SDPA path too. It costs the module's `~attn_mask` and,
#   in torch 2.13.0 on the CPU, a float32 copy inside SDPA. `is_causal=True` needs neither.
# - `is_causal=True` lets a kernel skip the tiles above the diagonal. With tiles of 128 at
#   $L=1024$ it still computes 36 of 64. The live table gives one run's ratio of the two calls,
#   with its range; the recorded sweep compares them on one Xeon.
#
# ## Exercises
#
# ### Exercise 22.1 (predict, then run): does the handwritten path fit at $L=8192$?
#
# In bfloat16, with the benchmark's $B=8$, $d_{model}=512$ and $h=8$: how many GiB is one score
# matrix at $L=8192$? Section 2 counted the handwritten path's peak as three score matrices plus
# $Q$, $K$ and $V$. Would that fit in the 24 GB of the reference chapter's RTX 4090? Does it fit
# even reading 24 GB as $24 \cdot 2^{30}$ bytes (24 GiB)? Predict, then compute with
# `score_matrix_bytes` and `activation_bytes`.

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
# Solution to exercise 22.1
one = score_matrix_bytes(8, 8, 8192, torch.bfloat16)
needed = 3 * one + 3 * activation_bytes(8, 8192, 512, torch.bfloat16)
print(
    f"one score matrix: {one / 2**30:.0f} GiB; three of them plus Q, K and V: "
    f"{needed / 2**30:.2f} GiB; 24 GB is {24e9 / 2**30:.1f} GiB, or 24 GiB read as binary"
)
assert one == 8 * 2**30 and needed > 24 * 2**30  # it does not fit, either way

# %% [markdown]
# ### Exercise 22.2 (predict, then run): the fastest an H200 could be
#
# Take $L=16384$ in bfloat16 ($B=8$, $d_{model}=512$, $h=8$, causal). How many TFLOP is one such
# call, by `attention_flops`? How many milliseconds would it take at the peak bfloat16 rate of an
# H200 SXM (`GPU_SPECS["NVIDIA H200"]`)? Predict the order of magnitude, then compute.

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
# Solution to exercise 22.2
flops = attention_flops(8, 8, 16384, 512, causal=True)
peak = GPU_SPECS["NVIDIA H200"]["bf16_tflops"] * 1e12
print(
    f"{flops / 1e12:.2f} TFLOP per call; at {peak / 1e12:.1f} TFLOP/s at least "
    f"{flops / peak * 1e3:.2f} ms"
)
assert 2 < flops / 1e12 < 3 and 2 < flops / peak * 1e3 < 3

# %% [markdown]
# ### Exercise 22.3 (implement): attention one block of keys at a time
#
# Write `blocked_attention(Q, K, V, mask=None, block_size=64)` for `Q` $[B, h, L_q, d_k]$, `K`
# $[B, h, L_k, d_k]$, `V` $[B, h, L_k, d_v]$ and our mask (`True` = blocked, last dimension
# $L_k$). It must return what `softmax(Q K^T / sqrt(d_k)) V` returns. But it may look at only
# `block_size` keys at a time, so that it never holds the $L_q \times L_k$ score matrix. Keep, for
# every query, a running maximum $m$ of the scores seen so far, a running sum
# $s = \sum e^{x - m}$ and a running output $o = \sum e^{x - m} v$ {cite}`milakov2018`. When a new
# block raises the maximum to $m'$, first multiply $s$ and $o$ by $e^{m - m'}$. At the end, return
# $o / s$. A query whose keys are all blocked must give 0, as our handwritten path does. This is
# the idea of memory-efficient attention {cite}`rabe2021`. FlashAttention does it in the GPU's
# on-chip memory {cite}`dao2022`. `check_blocked_attention` compares your function with full
# attention for several block sizes and masks, including scores too large for a plain `exp()`.

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 22.3
from helpers.exercises import check_blocked_attention


def blocked_attention(Q, K, V, mask=None, block_size=64):
    B, h, Lq, d_k = Q.shape
    m = Q.new_full((B, h, Lq, 1), float("-inf"))  # running maximum of the scores
    s = Q.new_zeros((B, h, Lq, 1))  # running sum of exp(score - m)
    o = Q.new_zeros((B, h, Lq, V.size(-1)))  # running sum of exp(score - m) * v
    for start in range(0, K.size(-2), block_size):
        k = K[..., start : start + block_size, :]
        v = V[..., start : start + block_size, :]
        scores = Q @ k.transpose(-2, -1) / math.sqrt(d_k)  # [B, h, Lq, block]: one block only
        if mask is not None:
            scores = scores.masked_fill(mask[..., start : start + block_size], float("-inf"))
        m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
        safe = m_new.masked_fill(m_new == float("-inf"), 0.0)  # no key seen yet: no NaN
        p = torch.exp(scores - safe)
        rescale = torch.exp(m - safe)
        s = s * rescale + p.sum(-1, keepdim=True)
        o = o * rescale + p @ v
        m = m_new
    return o / s.clamp_min(torch.finfo(s.dtype).tiny)  # a row that saw no key stays 0


check_blocked_attention(blocked_attention)
