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
# # 19. Attention benchmark: handwritten vs SDPA
#
# Our attention layer has two paths: a handwritten one that returns the weights, and PyTorch's
# fused `scaled_dot_product_attention` (SDPA). You will check that both compute the same thing.
# Then you will measure what the handwritten path costs, in time and in peak memory.
# The picture sets this CPU's ratios beside those of the reference chapter's RTX 4090.
#
# ![Handwritten-to-SDPA ratios of time and peak memory, on this CPU and on GPUs](figures/19_attention_benchmark.png)

# %% [markdown] tags=["run-time"]
# **Run time:** about 1.5 min.

# %%
import math
import os
import tracemalloc

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from helpers import MultiHeadAttention, device, make_causal_mask, make_padding_mask
from helpers.benchmark import (
    VARIANTS,
    MiB,
    Workload,
    activation_bytes,
    attention_flops,
    cpu_peak_bytes,
    cpu_peak_memory_supported,
    load_results,
    loglog_slope,
    measure,
    peak_memory_skip_reason,
    record_op_outputs,
    results_table,
    score_matrix_bytes,
    series,
    spread_table,
)
from helpers.gpu_results import (
    GPU_SPECS,
    REFERENCE_RTX4090,
    gpu_attention_summary,
    load_gpu_record,
    plot_cpu_and_gpu,
    recorded_gpu_ratios,
    reference_ratios,
)

_ = torch.manual_seed(0)
DATA = "data"  # chapters/data, relative to this notebook
TORCH = torch.__version__.split("+")[0]  # 2.13.0, without the local build suffix
PEAK_OK = cpu_peak_memory_supported()  # Linux only; elsewhere the memory cells say so and skip

# %% [markdown]
# ## The cost in one table
#
# [The reference chapter](intro.md#the-reference-chapter) timed both paths on an RTX 4090. Its
# setting was $B=8$, $L=1024$, $d_{model}=512$, $h=8$ heads and a causal mask. Its SDPA call
# used `is_causal=True`. We run our layer's two paths at that setting on this CPU and divide.
# The same ratios also come from a longer sweep, recorded on the CPU it names (section 5), and,
# when one exists, from a recorded GPU run (section 6).

# %% tags=["nbval-ignore-output", "opening-figure"]
PAIR = ("handwritten", "sdpa_causal")
opening_rows = {v: measure(v, 1024, min_runs=2, min_run_time=0.0) for v in PAIR}
opening_load = os.getloadavg()[0]
recorded_cpu = load_results(f"{DATA}/attention_benchmark_cpu.json")
recorded_1024 = {
    r["variant"]: r for r in recorded_cpu["rows"] if r["L"] == 1024 and r["variant"] in PAIR
}
SHAPE = {"B": 8, "L": 1024, "d_model": 512, "heads": 8}  # the reference chapter's setting
for r in [*opening_rows.values(), *recorded_1024.values()]:
    assert {k: r[k] for k in SHAPE} == SHAPE and r["dtype"] == "float32", r
assert REFERENCE_RTX4090["L"] == SHAPE["L"]


def path_ratios(rows):
    hand, sdpa = rows["handwritten"], rows["sdpa_causal"]
    return {"time": hand["ms"] / sdpa["ms"], "memory": hand["peak_mib"] / sdpa["peak_mib"]}


gpu_ratios = recorded_gpu_ratios(DATA)
if gpu_ratios and "shape" in gpu_ratios:
    assert gpu_ratios["shape"] == SHAPE, gpu_ratios
columns = {
    "this CPU, live": path_ratios(opening_rows),
    "CPU, recorded": path_ratios(recorded_1024),
    "RTX 4090 (reference)": reference_ratios(),
    "GPU, recorded": gpu_ratios or {},
}
rec_env = recorded_cpu["environment"]
what_ran = {
    "this CPU, live": f"float32, the book's pinned numerics, {torch.get_num_threads()} thread(s), "
    f"median of 2 calls, load average {opening_load:.1f}; peak memory above the inputs",
    "CPU, recorded": f"{rec_env['cpu']}, {rec_env['threads']} threads, float32, PyTorch's default "
    "kernels, median of at least 5 calls; peak memory above the inputs",
    "RTX 4090 (reference)": "the reference's layer, float32 weights under bfloat16 autocast, "
    "mean of 20 calls; absolute peak memory",
    "GPU, recorded": "the reference's protocol with this book's layer, autograd off, on "
    + (gpu_ratios["gpu"] if gpu_ratios else "a GPU, once tools/record_gpu.py has run"),
}


def cell(ratio):
    if ratio is None:
        return "not recorded"
    return "not measured" if math.isnan(ratio) else f"{ratio:.1f}x"


print("handwritten / SDPA (is_causal=True), " + ", ".join(f"{k}={v}" for k, v in SHAPE.items()))
print(f"{'':<18}" + "".join(f"{name:>22}" for name in columns))
for key, label in (("time", "time ratio"), ("memory", "peak-memory ratio")):
    print(f"{label:<18}" + "".join(f"{cell(c.get(key)):>22}" for c in columns.values()))
print()
for name, text in what_ran.items():
    print(f"{name:<21}: {text}")

fig, ax = plt.subplots(figsize=(8, 3.4))
width, labelled = 0.2, set()
for i, (name, c) in enumerate(columns.items()):
    for j, key in enumerate(("time", "memory")):
        x = j + (i - 1.5) * width
        value = c.get(key)
        if value is None or math.isnan(value):
            text = f"{name}: {cell(value)}"
            ax.text(x, 0.3, text, rotation=90, ha="center", va="bottom", fontsize=8)
            continue
        ax.bar(x, value, width, color=f"C{i}", label=name if name not in labelled else None)
        labelled.add(name)
        ax.text(x, value, f"{value:.1f}x", ha="center", va="bottom", fontsize=8)
ax.set_xticks([0, 1], ["time", "peak memory"])
ax.set_ylabel("handwritten / SDPA")
ax.set_title("Attention at B=8, L=1024: how much more the handwritten path costs", fontsize=10)
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# three score matrices plus Q, K, V over five activations (sections 2 and 5) is 10.2
if PEAK_OK:
    assert 9 < columns["this CPU, live"]["memory"] < 11.5
assert 9.5 < columns["CPU, recorded"]["memory"] < 11
assert columns["CPU, recorded"]["time"] < columns["RTX 4090 (reference)"]["time"]

# %% [markdown]
# The memory ratios are close: about ten on the CPUs, nine on the RTX 4090. But they are not like
# for like. Our handwritten layer has one step more than the reference's: a `masked_fill` that
# zeroes fully masked rows. In float32 that step holds one more score matrix, about a third of the
# handwritten peak (section 2). The RTX 4090's peak also counts the inputs and the weights. And
# under its bfloat16 autocast, softmax runs in float32 (section 6).
#
# The time ratios differ more: 11.9 on the RTX 4090, 4.6 in the recorded CPU sweep. Time depends
# on the hardware, its kernels and its threads. The live column runs the book's pinned numerics
# on one thread, so its time ratio is not PyTorch's default speed (section 4). Both CPU
# columns run float32, not the reference's bfloat16 autocast: CPU autocast keeps softmax in
# bfloat16, where CUDA's runs it in float32 (section 6).
#
# ## The two paths
#
# Our `MultiHeadAttention` (chapter 3) has two paths through the same layer:
#
# - `need_weights=True` computes $\operatorname{softmax}(QK^\top/\sqrt{d_k})\,V$ by hand. It
#   builds the full score matrix, of shape $[B, h, L_q, L_k]$, and returns the weights. The
#   heatmaps of chapter 18 need them.
# - `need_weights=False` calls `torch.nn.functional.scaled_dot_product_attention`. PyTorch
#   picks a kernel for the call. The GPU's fused kernels are FlashAttention {cite}`dao2022`
#   {cite}`dao2024` and memory-efficient attention {cite}`rabe2021`. They go through the keys
#   block by block, with a running maximum and a running sum for the softmax
#   {cite}`milakov2018`. So they never store the $L_q \times L_k$ matrix (exercise 19.3 builds
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
# CPU, SDPA returns zeros there too. (Chapter 3 shows it for each backend; earlier PyTorch releases
# returned NaN.) So the two paths agree even here. The attention output is 0, and the layer
# returns just the output projection's bias.

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
# Read `_attention_by_hand` (in `helpers/attention.py`) line by line. Several score-sized matrices
# are made:
#
# - `Q @ K^T`, and its division by $\sqrt{d_k}$;
# - the masked copy that `masked_fill` makes, which stays bound to `scores` until the function
#   returns;
# - the softmax weights;
# - one more copy that zeroes the fully masked rows, which is returned to the caller.
#
# While that last one is made, three are alive: the masked scores, the softmax output and the
# re-masked weights. So we expect a peak of three score matrices. Add the activations alive with
# them: the projections $Q$, $K$ and $V$, $[B, L, d_{model}]$ each. This count holds when every
# tensor has one dtype; section 6 shows what changes under autocast.
#
# A fused kernel's peak should be a few $[B, L, d_{model}]$ tensors. These are $Q$, $K$, $V$, the
# attention output and the projected output. That is about $5 \cdot 8 \cdot L \cdot 512 \cdot 4$
# bytes in float32, linear in $L$. Section 5 checks both counts against the recorded sweep.
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
# :::{dropdown} Going deeper: what the mask costs, and the benchmark's three SDPA variants
# In torch 2.13.0 on the CPU, SDPA given a boolean mask allocated about four bytes per mask entry.
# That is as much as a float32 copy of the mask, on top of the $L^2$ bytes of `~attn_mask`. With
# `is_causal=True` neither appeared: that call allocated well under one score matrix. The same call
# forced to the math fallback allocated more than one. So the mask is an $L^2$ term on the
# "linear" path, in every attention call that passes one. At the benchmark's sizes it is small
# next to the activations. At $L=4096$ it is 16 + 64 MiB, against the 320 MiB of five
# activations. But it grows like $L^2$, not $L$.
#
# On a GPU, the form of the call may also decide which kernel runs. A recorded GPU run prints the
# kernel PyTorch chose for each variant. It also forces FlashAttention once with our mask
# (`flash+mask`), to record whether it accepts one, or PyTorch's reason for refusing (section 6).
# The model itself cannot simply switch to `is_causal`. Its decoder mask also blocks padding,
# which `is_causal` does not describe.
# :::
#
# The benchmark therefore times SDPA three ways. `sdpa` is the module, with our mask inverted on
# every call. `sdpa_premask`, on the GPU only, uses a mask inverted once, ahead of time.
# `sdpa_causal` passes `is_causal=True` and no mask tensor.
#
# ## 3. How we measure on the CPU
#
# **Time.** Each row builds a fresh layer and input. It makes two warm-up calls and one call that
# measures the peak memory. Then it times at least `min_runs` calls, each on its own with
# `time.perf_counter`, for at least `min_run_time` seconds. The recorded sweep of section 5 uses
# five runs, the live one of section 4 two. Every run is kept, so the tables can show the median
# and the spread, not just one number.
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
# `is_causal=True`. Here we stop at $L=1024$, with two timed runs per row. This small sweep runs
# in the book's pinned numerics, so its times are not PyTorch's default speed. The checks are on
# memory. The handwritten path's peak must grow about like $L^2$, a slope near 2 on a log-log
# scale, and exceed the score matrix it returns. SDPA's peak must only double from $L=512$ to
# $L=1024$, and stay below the score matrix it never builds.
#
# :::{dropdown} Going deeper: why the slope is below 2, and why the SDPA checks start at 512
# The linear terms still pull the handwritten slope a little below 2 at these sizes. The SDPA
# checks start at $L=512$. Five $[B, L, d_{model}]$ activations hold $5 B L d_{model}$ numbers,
# one score matrix $B h L^2$. The activations outweigh the score matrix while
# $L < 5 d_{model} / h = 320$.
# :::

# %% tags=["nbval-ignore-output"]
from helpers.numerics import timing_label

lengths = [256, 512, 1024]
live = []
for L in lengths:
    for v in VARIANTS:
        if L == 1024 and v in opening_rows:  # measured for the opening table
            live.append(opening_rows[v])
        else:
            live.append(measure(v, L, min_runs=2, min_run_time=0.0))
print(results_table(live, VARIANTS))
kernels = sorted({r["sdpa_backend"] for r in live if r["variant"] != "handwritten"})
print("SDPA kernel chosen:", kernels)
print("load average:", [round(x, 1) for x in os.getloadavg()])
print(timing_label())

if not PEAK_OK:
    print(peak_memory_skip_reason())
else:
    peak = {v: {r["L"]: r["peak_mib"] for r in live if r["variant"] == v} for v in VARIANTS}
    slope = loglog_slope(lengths, [peak["handwritten"][L] for L in lengths])
    growth = {v: peak[v][1024] / peak[v][512] for v in ("sdpa", "sdpa_causal")}
    print(f"handwritten: log-log slope of peak memory {slope:.2f}")
    print("SDPA: peak at L=1024 / peak at L=512:", {v: round(g, 2) for v, g in growth.items()})
    assert 1.6 < slope < 2.2
    assert all(1.6 < g < 2.5 for g in growth.values())
    for r in live:
        if r["variant"] == "handwritten":
            assert r["peak_mib"] > r["score_matrix_mib"]
        elif r["L"] >= 512:
            assert r["peak_mib"] < r["score_matrix_mib"]


# %% [markdown]
# With a CUDA GPU (`TRANSFORMER_BOOK_DEVICE=cuda`, chapter 1's `helpers.device()`), the same live
# sweep runs there too, in bfloat16, to longer lengths. Without one, the cell says that it skips:

# %% tags=["nbval-ignore-output"]
dev = device()
if dev.type == "cuda":
    gpu_live = [
        measure(v, L, dtype="bfloat16", device=dev) for L in (1024, 2048, 4096) for v in VARIANTS
    ]
    print(torch.cuda.get_device_name(dev), "bfloat16, CUDA events, 20 runs per row")
    print(results_table(gpu_live, VARIANTS))
else:
    print(
        f"helpers.device() is {dev}: the live GPU sweep is skipped (section 6 shows the "
        "recorded one)."
    )

# %% [markdown]
# The benchmark's three SDPA variants compute the same thing as its handwritten path too, at
# $L=512$ on the full-size layer:

# %%
work = Workload.make(L=512)
with torch.no_grad():
    ref, w = work.fn("handwritten")()
    for v in ("sdpa", "sdpa_premask", "sdpa_causal"):
        out = work.fn(v)()
        diff = (out[0] if isinstance(out, tuple) else out) - ref
        assert diff.abs().max() < 1e-4
        print(f"{v:<12} vs handwritten at L=512: max |difference| < 1e-4")
print("weights returned by the handwritten path:", tuple(w.shape))
del work, ref, w

# %% [markdown]
# ## 5. The recorded sweep: $L$ = 128 ... 4096 on a CPU
#
# `tools/bench_attention.py` ran the full sweep, with PyTorch's default kernels. It wrote
# `chapters/data/attention_benchmark_cpu.json`: the command, the hardware, the date, the torch
# version, the load average, and one row per variant and length with every timed run. The cells
# below read that file. The first one prints how the record was made.
#
# :::{dropdown} Going deeper: the load average
# The load average is the average number of processes running or waiting to run. Linux also
# counts those waiting for the disk. Above the number of cores (printed too), other work competed
# with the benchmark for the CPU. That can make its times slower and noisier than on an idle
# machine; the spread table shows how much the runs of each row vary. The memory counter counts
# this process's own pages, so other processes do not enter it.
# :::

# %%
cpu = load_results(f"{DATA}/attention_benchmark_cpu.json")
env, cfg, rows = cpu["environment"], cpu["config"], cpu["rows"]
timed = [r for r in rows if "ms" in r]
print(f"recorded {env['date']} by `{cfg['command'].strip()}`")
print(
    f"on {env['cpu']} ({env['cpu_count']} cores, {env['threads']} torch threads), "
    f"torch {env['torch'].split('+')[0]}, PyTorch's default kernels (MKL_CBWR "
    f"{env['numerics']['mkl_cbwr']}, not the book's pin)"
)
print(f"load average before / after: {env['load_average_before']} / {env['load_average_after']}")
runs = sorted({r["runs"] for r in timed})
print(
    f"B={cfg['B']}, d_model={cfg['d_model']}, heads={cfg['heads']}, {cfg['dtype']}, "
    f"{cfg['mask']} mask; timed runs per row: {runs[0]}"
    + (f" to {runs[-1]}" if runs[-1] != runs[0] else "")
    + "\n"
)
print(results_table(rows, VARIANTS))
for r in rows:
    if "skipped" in r:
        print(f"\nL={r['L']} {r['variant']}: skipped, {r['skipped']}")
assert runs[0] >= 5

# %% [markdown]
# The times above are medians. Their spread, in milliseconds:

# %%
print(spread_table(rows, VARIANTS))

# %% [markdown]
# Figure 19.1 plots both quantities on log-log axes. The recorded CPU sweep is in the top row.
# Once a GPU run has been recorded (section 6), the GPU sweep in bfloat16 is beneath it. In the
# memory plots, the dotted line is the size of one score matrix (slope 2). The handwritten path
# runs above it, by a factor that approaches three as $L$ grows. SDPA's line has slope about 1. So
# it crosses the dotted line near $L = 5 d_{model} / h = 320$ and falls further below it with every
# doubling of $L$.

# %% jupyter={"source_hidden": true} tags=["figure", "hide-input"]
fig = plot_cpu_and_gpu(cpu, DATA)
fig.suptitle(
    f"Figure 19.1: attention, B={cfg['B']}, d_model={cfg['d_model']}, h={cfg['heads']}, causal",
    fontsize=10,
)
fig.tight_layout()
plt.show()

# %% [markdown]
# The recorded numbers, as ratios and slopes:


# %%
def ratio_table(rows):
    for L in sorted({r["L"] for r in rows}):
        hw = next(
            (r for r in rows if r["L"] == L and r["variant"] == "handwritten" and "ms" in r), None
        )
        sd = next(r for r in rows if r["L"] == L and r["variant"] == "sdpa")
        if hw is None:
            print(
                f"L={L:5d}: handwritten skipped; SDPA {sd['peak_mib']:7.1f} MiB "
                f"= {sd['peak_mib'] / sd['score_matrix_mib']:.3f} x score matrix"
            )
        else:
            print(
                f"L={L:5d}: handwritten/SDPA time {hw['ms'] / sd['ms']:5.1f}x, memory "
                f"{hw['peak_mib'] / sd['peak_mib']:6.1f}x; handwritten peak = "
                f"{hw['peak_mib'] / hw['score_matrix_mib']:.1f} x score matrix"
            )


ratio_table(rows)
hw_L, hw_mem = series(rows, "handwritten", "peak_mib")
sd_L, sd_mem = series(rows, "sdpa", "peak_mib")
big = [i for i, L in enumerate(hw_L) if L >= 512]
hw_slope = loglog_slope([hw_L[i] for i in big], [hw_mem[i] for i in big])
sd_big = [i for i, L in enumerate(sd_L) if L >= 512]
sd_slope = loglog_slope([sd_L[i] for i in sd_big], [sd_mem[i] for i in sd_big])
print(f"memory slope (log-log, L >= 512): handwritten {hw_slope:.2f}, SDPA {sd_slope:.2f}")
assert 1.8 < hw_slope < 2.2 and 0.8 < sd_slope < 1.2
# the handwritten peak: three score matrices plus Q, K and V, as read off the code (section 2)
cfg_dtype = getattr(torch, cfg["dtype"])
counted = {
    r["L"]: r["peak_mib"]
    / (
        3 * r["score_matrix_mib"]
        + 3 * activation_bytes(r["B"], r["L"], r["d_model"], cfg_dtype) / MiB
    )
    for r in timed
    if r["variant"] == "handwritten" and r["L"] >= 512
}
print(
    "handwritten peak / (3 score matrices + Q, K, V):",
    {L: round(x, 2) for L, x in counted.items()},
)
assert counted and all(0.95 < x < 1.05 for x in counted.values())
for r in timed:  # from L=512 on, SDPA's peak is about five [B, L, d_model] activations
    if r["variant"] != "handwritten" and r["L"] >= 512:
        activations = 5 * activation_bytes(r["B"], r["L"], r["d_model"]) / MiB
        assert 0.8 < r["peak_mib"] / activations < 1.3, r
long = [r for r in timed if r["L"] >= 1024]
for L in sorted({r["L"] for r in long}):  # at long sequences SDPA is faster, in every run
    by = {r["variant"]: r for r in long if r["L"] == L}
    if "handwritten" in by:
        print(
            f"L={L}: slowest run of sdpa {by['sdpa']['max_ms']:.0f} ms, of sdpa_causal "
            f"{by['sdpa_causal']['max_ms']:.0f} ms; fastest handwritten run "
            f"{by['handwritten']['min_ms']:.0f} ms"
        )
        assert max(by[v]["max_ms"] for v in ("sdpa", "sdpa_causal")) < by["handwritten"]["min_ms"]

# %% [markdown]
# From $L = 1024$ on, SDPA with our mask is slower than SDPA with `is_causal=True`. Both compute
# the same outputs (section 4), but not the same work.
#
# :::{dropdown} Going deeper: the blocks above the diagonal
# Given `is_causal=True`, a fused kernel knows that every key block wholly above the diagonal is
# blocked, and skips it: about half of the $L^2$ work {cite}`dao2024`. Given a mask tensor, it
# cannot know that. So it computes every block and then applies the mask. `attention_flops` counts
# both cases; the four projections are the same in both. If that is the whole difference, the
# time ratio should follow the ratio of the two counts. The cell below compares them.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
for L in sorted({r["L"] for r in long}):
    by = {r["variant"]: r for r in long if r["L"] == L}
    measured = by["sdpa"]["ms"] / by["sdpa_causal"]["ms"]
    counted = attention_flops(cfg["B"], cfg["heads"], L, cfg["d_model"], causal=False)
    counted /= attention_flops(cfg["B"], cfg["heads"], L, cfg["d_model"], causal=True)
    explained = (counted - 1) / (measured - 1)  # the share of the extra time
    print(
        f"L={L}: sdpa / sdpa_causal, median time {measured:.2f}; "
        f"work with every block / work without the blocks above the diagonal {counted:.2f}; "
        f"share of the extra time the skipped blocks account for {explained:.0%}"
    )
    assert measured > 1.3 and 0.6 < explained <= 1

# %% [markdown]
# :::{dropdown} Going deeper: what the count leaves out
# The skipped blocks account for nearly all of the extra time at $L = 2048$. At 1024 and 4096
# they account for more than three fifths of it. The count leaves out the mask itself: the masked
# call also builds a float32 copy of it (section 2) and reads it.
# :::

# %% [markdown]
# :::{dropdown} Going deeper: bfloat16 on the CPU
# The same sweep ran with `--dtype bfloat16`, recorded in
# `chapters/data/attention_benchmark_cpu_bfloat16.json`. Every buffer holds 2 bytes per number
# instead of 4. So both paths should need half the memory at long sequences, and the $L^2$ term
# stays. Whether bfloat16 is also faster may depend on the CPU's bfloat16 support. The time ratios
# below are for that machine only, and carry the load printed with them. A row whose peak is below
# one activation shows that the counter missed pages there: the call must hold the output it
# returns. The cell lists such rows, and the comparison uses only $L \ge 1024$.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
bf = load_results(f"{DATA}/attention_benchmark_cpu_bfloat16.json")
benv = bf["environment"]
print(
    f"recorded {benv['date']} by `{bf['config']['command'].strip()}` on {benv['cpu']}, "
    f"{bf['config']['dtype']}"
)
print(
    f"load average before / after: {benv['load_average_before']} / {benv['load_average_after']}\n"
)
print(results_table(bf["rows"], VARIANTS))
missed = [
    f"L={r['L']} {r['variant']}"
    for r in bf["rows"]
    if "ms" in r
    and r["peak_mib"] < activation_bytes(r["B"], r["L"], r["d_model"], torch.bfloat16) / MiB
]
print("\nrows whose peak is below their own output:", ", ".join(missed) or "none")
f32 = {(r["variant"], r["L"]): r for r in timed}
print()
for r in bf["rows"]:
    ref = f32.get((r["variant"], r["L"]))
    if "ms" in r and ref is not None and r["L"] >= 1024:
        mem, t = r["peak_mib"] / ref["peak_mib"], r["ms"] / ref["ms"]
        print(
            f"L={r['L']:5d} {r['variant']:<12}: bfloat16 / float32 memory {mem:.2f}, time {t:.2f}"
        )
        assert 0.4 < mem < 0.6

# %% [markdown]
# ## 6. On a GPU
#
# Everything the book shows about GPUs is measured by one prepared script, `tools/record_gpu.py`,
# in a single run. It needs only torch and numpy (and pytest for its last part). It runs each part
# under its own time cap, and writes one JSON file per part as soon as the part is done. Its
# attention part measures two things. One is the reference chapter's protocol. The other is this
# book's own sweep: the layer itself in bfloat16 and in float32, each call timed on its own, and
# only the memory above the inputs counted.
#
# **The reference chapter's protocol, reproduced.** The reference chapter's script keeps the layer
# and the input in float32, and runs each call under `torch.autocast(bfloat16)`. It times 20 calls
# together with `time.perf_counter` and one synchronisation at the end: a mean. It reports the
# *absolute* `torch.cuda.max_memory_allocated()`, which includes the input and the weights. Its
# results, on an RTX 4090 at $L=1024$:

# %%
for variant in ("handwritten", "sdpa_causal"):
    r = REFERENCE_RTX4090[variant]
    print(
        f"{REFERENCE_RTX4090['gpu']}, L={REFERENCE_RTX4090['L']}, {variant:<12}: "
        f"{r['ms']:.2f} ms, {r['mib']} MiB"
    )

# %% [markdown]
# `record_gpu.py` repeats that protocol on a GPU, with this book's layer in place of the
# reference's. For SDPA the two layers make the same calls. Their handwritten paths differ by one
# step: ours zeroes fully masked rows with one more `masked_fill`, on the weights. Under this
# protocol, that step makes a float32 tensor, as large as two bfloat16 score matrices.
#
# :::{dropdown} Going deeper: softmax in float32 under CUDA autocast
# CUDA autocast runs matrix products in bfloat16 but `softmax` in float32. PyTorch's automatic
# mixed precision documentation lists softmax among the "CUDA Ops that can autocast to float32".
# CPU autocast has its own list, without softmax. So this CPU cannot show the CUDA behaviour; the
# cell below shows the CPU's. On CUDA, then, the weights and the copy that our extra `masked_fill`
# makes are float32. That is 4 bytes per entry, as much as two bfloat16 score matrices each.
# Section 2's count of three score matrices assumed one dtype, so it does not carry over either.
#
# Autocast gets a float32 softmax by calling `softmax` with `dtype=float32` (its source,
# `autocast_mode.h`, lists softmax under the policy `fp32_set_opt_dtype`). On bfloat16 scores,
# that call first makes a float32 copy of them. Only float16 inputs on CUDA skip the copy. The
# CPU runs the same call, so the cell can show it.
#
# The cell lists every score-sized tensor the handwritten path makes, with the dtype CUDA autocast
# gives it, at the reference's $L = 1024$. They were recorded on this CPU by a dispatch mode that
# sees each operator's output: `helpers.benchmark.record_op_outputs`.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
with torch.autocast("cpu", dtype=torch.bfloat16):
    s_cpu = torch.randn(2, 3) @ torch.randn(3, 3)
    print(
        f"torch {TORCH}, CPU autocast: matmul gives {s_cpu.dtype}, "
        f"softmax of it {s_cpu.softmax(-1).dtype}"
    )
small = MultiHeadAttention(d_model=16, num_heads=2, dropout=0.0).eval()
xs = torch.randn(1, 6, 16)
with torch.no_grad():
    _, ops = record_op_outputs(small, xs, xs, xs, attn_mask=make_causal_mask(6), need_weights=True)
made = [r.op for r in ops if r.shape[-2:] == (6, 6) and r.dtype.is_floating_point]
print("score-sized tensors of the handwritten path, in order:", made)
assert made == ["bmm", "div", "masked_fill", "_softmax", "masked_fill"]
# CUDA autocast calls softmax(scores, dim, dtype=float32); on bfloat16 scores that call first
# makes a float32 copy (only float16 on CUDA skips it), as it does here on the CPU
_, soft_ops = record_op_outputs(torch.softmax, s_cpu, -1, dtype=torch.float32)
soft_made = [(r.op, str(r.dtype).replace("torch.", "")) for r in soft_ops]
print("softmax(bfloat16 scores, dtype=float32) makes:", soft_made)
assert soft_made == [("_to_copy", "float32"), ("_softmax", "float32")]
# under CUDA autocast (the documented lists): matmul -> bfloat16, softmax -> float32, elementwise
# ops keep their input's dtype, and the matmul weights @ V first casts the weights to bfloat16
cuda_bytes = {
    "Q @ K^T (bmm)": 2,
    "/ sqrt(d_k) (div)": 2,
    "masked_fill on the scores": 2,
    "autocast's float32 copy of the scores for softmax": 4,
    "softmax": 4,
    "our extra masked_fill on the weights": 4,
    "autocast's bfloat16 copy of the weights for @ V": 2,
}
assert len(cuda_bytes) == len(made) + 2  # the five recorded, plus autocast's two copies
entries = 8 * 8 * 1024 * 1024  # one [8, 8, 1024, 1024] score matrix
bf16_matrix = score_matrix_bytes(8, 8, 1024, torch.bfloat16) / MiB
for name, size in cuda_bytes.items():
    print(f"  {name:<50}: {size} bytes per entry, {size * entries / MiB:4.0f} MiB")
alive = {  # the tensors bound to a name while each step runs (helpers/attention.py)
    "softmax": (
        "masked_fill on the scores",
        "autocast's float32 copy of the scores for softmax",
        "softmax",
    ),
    "our extra masked_fill": (
        "masked_fill on the scores",
        "softmax",
        "our extra masked_fill on the weights",
    ),
}
alive_mib = {
    step: sum(cuda_bytes[k] for k in names) * entries / MiB for step, names in alive.items()
}
for step, mib in alive_mib.items():
    print(
        f"alive during {step}: {mib:.0f} MiB = {mib / bf16_matrix:.0f} "
        f"bfloat16 score matrices of {bf16_matrix:.0f} MiB, not 3"
    )
assert alive_mib["softmax"] == alive_mib["our extra masked_fill"]
assert s_cpu.softmax(-1).dtype == torch.bfloat16  # CPU autocast keeps softmax in bfloat16

# %% [markdown]
# :::{dropdown} Going deeper: this book's GPU sweep, and how close to the hardware
# The extra step alone is a 256 MiB float32 tensor at $L = 1024$. While it is made, 640 MiB of
# score-sized tensors are alive. That is as much as during the softmax, which both layers run. So
# by this count the step costs a pass over the scores, not peak memory. Still, for the
# handwritten path the ratios to the RTX 4090 compare two different layers. For SDPA they compare
# the same calls. Even there, what else is held differs a little. While it measured, the
# reference's script still held the output of its equivalence check, a float32
# $[B, L, d_{model}]$ tensor. The repeat holds only the layer and its input. An absolute peak
# counts whatever is held.
#
# The reference listing, as we have it, has lost its indentation. It does not show whether the
# timed calls ran under `torch.no_grad()`, so the script measures both. The ratio table at the
# top of the chapter uses the run without autograd.
#
# **This book's sweep.** The layer and input are themselves bfloat16, and float32 in a second
# pass. Each call is timed on its own between two CUDA events, after warm-up calls. At least 20
# runs per row give the median and spread. Memory is the peak *extra* over what was allocated
# before the call, so the inputs and weights are not counted. It covers $L$ = 128 ... 16384 and
# the variants of section 2. It adds SDPA forced to each of its backends (flash,
# memory-efficient, math, cuDNN) where that backend can run the call. An out-of-memory error is
# recorded as such. The two protocols answer different questions, so their numbers are not
# compared with each other.
#
# **How close to the hardware.** A vendor's datasheet gives two limits: the peak bfloat16 rate of
# the tensor cores, and the memory bandwidth. `attention_flops` counts one call's work. That is
# four $d_{model} \times d_{model}$ projections, plus $QK^\top$ and the weights times $V$. These
# two are halved for the causal mask: a fused kernel can skip the blocks that lie wholly above the
# diagonal {cite}`dao2024`. Dividing by the measured time gives the rate a kernel reached.
#
# For the handwritten path, the bandwidth gives a floor: the bytes its score-sized tensors must
# move. The reference's layer makes seven passes over the $L^2$ entries under its protocol. It
# writes $QK^\top$. It reads and writes it for the division, and again for `masked_fill`. It reads
# it and writes the float32 copy for `softmax`, which reads that and writes float32 weights. It
# reads those for autocast's bfloat16 copy and writes that. Last, it reads the copy for the
# product with $V$. The cell below adds the bytes up from
# the table above; ours adds one more float32 read and write. It prints the limits used, and what
# they say about the reference chapter's own numbers.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
for name in ("NVIDIA H200", "NVIDIA GeForce RTX 4090"):
    s = GPU_SPECS[name]
    print(
        f"{name:<24}: {s['bf16_tflops']:6.1f} TFLOP/s bfloat16, {s['bandwidth_tb_s']:5.3f} TB/s"
        f"  ({s['source']})"
    )
L, spec = REFERENCE_RTX4090["L"], GPU_SPECS["NVIDIA GeForce RTX 4090"]
tflop = attention_flops(8, 8, L, 512, causal=True) / 1e12
rate = tflop / (REFERENCE_RTX4090["sdpa_causal"]["ms"] / 1000)
share = rate / spec["bf16_tflops"]
print(
    f"\nL={L}: one causal call is {tflop * 1000:.1f} GFLOP; the reference's SDPA time "
    f"({REFERENCE_RTX4090['sdpa_causal']['ms']} ms) is {rate:.0f} TFLOP/s = "
    f"{100 * share:.0f} % of the 4090's peak"
)
# bytes per score entry: (written, read) by each pass of the reference's layer under autocast
passes = {
    "Q @ K^T": (2, 0),
    "division": (2, 2),
    "masked_fill": (2, 2),
    "float32 copy of the scores": (4, 2),
    "softmax": (4, 4),
    "bfloat16 copy of the weights": (2, 4),
    "weights @ V": (0, 2),
}
per_entry = sum(w + r for w, r in passes.values())
floor_ms = per_entry * entries / (spec["bandwidth_tb_s"] * 1e12) * 1e3
one_pass_ms = 2 * score_matrix_bytes(8, 8, L, torch.bfloat16) / (spec["bandwidth_tb_s"] * 1e12)
hand_ms = REFERENCE_RTX4090["handwritten"]["ms"]
print(
    f"the reference's handwritten path moves {per_entry} bytes per score entry in "
    f"{len(passes)} passes: {per_entry * entries / 2**30:.2f} GiB, {floor_ms:.2f} ms at "
    f"{spec['bandwidth_tb_s']} TB/s (one write and one read of a bfloat16 score matrix alone: "
    f"{one_pass_ms * 1e3:.2f} ms)"
)
print(f"its measured call took {hand_ms} ms = {hand_ms / floor_ms:.1f}x that floor")
assert 0.55 < share < 0.65 and 1.3 < hand_ms / floor_ms < 1.5  # the prose's 3/5 and 1.4

# %% [markdown]
# :::{dropdown} Going deeper: what the limits say about the reference's numbers
# Take the one mean of 20 calls the reference chapter reports for each path, at $L=1024$. Its SDPA
# call ran at about three fifths of the RTX 4090's peak bfloat16 rate. Its handwritten call took
# about 1.4 times as long as its seven passes over the score entries need at full bandwidth.
# Counting only one write and one read of the score matrix would make that look like eleven times. A
# recorded GPU run adds the rate and a bandwidth line for the largest $L$ it measured ("Roofline"
# at the end of its summary). That line counts one write and one read of the score matrix only.
# :::
#
# The run recorded for this book, read from `chapters/data/attention_cuda.json` when it exists:

# %%
print(gpu_attention_summary(DATA))
gpu = load_gpu_record("attention", DATA)
if gpu is not None:
    assert gpu["environment"]["device"].startswith("cuda") and not gpu.get("quick")
    assert {r["dtype"] for r in gpu["rows"]} >= {"bfloat16"}

# %% [markdown]
# ## Summary
#
# - The handwritten path and SDPA give the same outputs, to within $10^{-5}$, under padding,
#   causal, cross and fully masked rows (section 1). The only thing SDPA withholds is the weights.
# - At $B=8$ and $L=1024$, the handwritten path needs about ten times SDPA's peak memory on this
#   CPU, and nine times on the reference's RTX 4090. The two are not like for like: our layer has
#   one more step, and the RTX 4090's peak counts the inputs. The time ratio depends on the
#   hardware.
# - In one dtype, the handwritten path's peak memory is three score matrices plus $Q$, $K$ and
#   $V$. We read that off the code (section 2) and checked it against the recorded sweep (section
#   5). It is quadratic in $L$: at $L=4096$ one score matrix is 4 GiB in float32. SDPA's peak in
#   the recorded CPU sweep is about five $[B, L, d_{model}]$ activations, linear in $L$ (from
#   $L=512$ on).
# - A boolean mask is an $L^2$ term on the SDPA path too. It costs the module's `~attn_mask` and,
#   in torch 2.13.0 on the CPU, a float32 copy inside SDPA. `is_causal=True` needs neither.
# - Time: in the recorded CPU sweep, at every $L$ from 1024 on where the handwritten path ran,
#   even the slowest SDPA run was faster than the fastest handwritten run. SDPA with
#   `is_causal=True` was faster than SDPA with our mask. The blocks above the diagonal, which it
#   skips, account for most of the difference.
# - Under CUDA autocast, softmax runs in float32, on a float32 copy of the scores. So our layer's
#   extra `masked_fill` makes a float32 tensor too. By the count of section 6 it adds a pass over
#   the scores, not peak memory. The reference's handwritten call took about 1.4 times what its
#   seven passes over the score entries need at full bandwidth.
# - GPU numbers come from one prepared script, `tools/record_gpu.py`. It repeats the reference
#   chapter's protocol and measures the book's own sweep. Section 6 prints the run, or the command
#   that records it.
#
# ## Exercises
#
# ### Exercise 19.1 (predict, then run): does the handwritten path fit at $L=8192$?
#
# In bfloat16, with the benchmark's $B=8$, $d_{model}=512$ and $h=8$: how many GiB is one score
# matrix at $L=8192$? Section 5 found the handwritten path's peak to be three score matrices plus
# $Q$, $K$ and $V$. Would that fit in the 24 GB of the reference chapter's RTX 4090? Does it fit
# even reading 24 GB as $24 \cdot 2^{30}$ bytes (24 GiB)? Predict, then compute with
# `score_matrix_bytes` and `activation_bytes`.

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
# Solution to exercise 19.1
one = score_matrix_bytes(8, 8, 8192, torch.bfloat16)
needed = 3 * one + 3 * activation_bytes(8, 8192, 512, torch.bfloat16)
print(
    f"one score matrix: {one / 2**30:.0f} GiB; three of them plus Q, K and V: "
    f"{needed / 2**30:.2f} GiB; 24 GB is {24e9 / 2**30:.1f} GiB, or 24 GiB read as binary"
)
assert one == 8 * 2**30 and needed > 24 * 2**30  # it does not fit, either way

# %% [markdown]
# ### Exercise 19.2 (predict, then run): the fastest an H200 could be
#
# The GPU sweep's longest rows are at $L=16384$ in bfloat16 ($B=8$, $d_{model}=512$, $h=8$,
# causal). How many TFLOP is one such call, by `attention_flops`? How many milliseconds would it
# take at the peak bfloat16 rate of an H200 SXM (`GPU_SPECS["NVIDIA H200"]`)? Predict the order of
# magnitude, then compute. Once a run is recorded, section 6 prints the measured time next to the
# limit of the GPU it ran on.

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
# Solution to exercise 19.2
flops = attention_flops(8, 8, 16384, 512, causal=True)
peak = GPU_SPECS["NVIDIA H200"]["bf16_tflops"] * 1e12
print(
    f"{flops / 1e12:.2f} TFLOP per call; at {peak / 1e12:.1f} TFLOP/s at least "
    f"{flops / peak * 1e3:.2f} ms"
)
assert 2 < flops / 1e12 < 3 and 2 < flops / peak * 1e3 < 3

# %% [markdown]
# ### Exercise 19.3 (implement): attention one block of keys at a time
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
# Solution to exercise 19.3
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
