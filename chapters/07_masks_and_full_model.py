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
# # 7. Masks and the full model
#
# We build the three masks an encoder-decoder Transformer needs, then the whole model.
# Most mask bugs do not crash, so each one is reproduced first and fixed after.
# The picture shows the decoder's mask and its two parts (dark = blocked).
#
# ![The decoder self-attention mask: padding, causal, and their OR](figures/07_masks_and_full_model.png)

# %% [markdown] tags=["run-time"]
# **Run time:** about 10 s.

# %% [markdown]
# The model runs attention in three places, and each needs its own mask:
#
# | attention | queries from | keys from | blocked keys |
# | --- | --- | --- | --- |
# | encoder self-attention | source | source | source padding |
# | decoder self-attention | target | target | the future **or** target padding |
# | cross-attention | target | source (the encoder's memory) | source padding only |
#
# A mask answers one question per (query, key) pair: may this query look at this key? In this
# book a mask is a `bool` tensor in which **True means blocked**. It broadcasts to the attention
# scores `[B, h, Lq, Lk]` (chapter 03 built masked attention). One slip, the causal mask handed
# to cross-attention, gets its own section. Figure 7.2 shows the three conventions libraries use
# for the same mask. At the end we check that `helpers.Transformer` builds exactly our masks and
# logits, and list how the model differs from the paper.

# %%
import dataclasses
import inspect
import math

import matplotlib.pyplot as plt
import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers import (
    BOS_ID,
    PAD_ID,
    VOCAB_SIZE,
    Decoder,
    DecoderLayer,
    Encoder,
    MultiHeadAttention,
    describe,
    encode_digits,
    from_hf_attention_mask,
    to_hf_attention_mask,
    to_sdpa_mask,
    xavier_init_linears,
)

_ = torch.manual_seed(0)

# %% [markdown]
# ## A small padded batch
#
# Two reversal examples of different lengths. The source is the digits, then `<eos>`, then
# padding. The decoder input (`tgt_in`) is `<bos>`, the reversed digits, and `<eos>` where there
# is room; it is padded too. The source is one column wider than the target, so $L_s \ne L_t$.
# The full-width tensors of `make_reversal_dataset` differ the same way: $L_s = 14$, $L_t = 13$
# (chapter 06).


# %%
def reversal_pair(digits: str, src_width: int, tgt_width: int):
    """src: digits <eos> <pad>...; tgt_in: <bos> reversed digits <eos> <pad>... (tgt_width)."""
    src = encode_digits(digits, width=src_width)
    reversed_ids = encode_digits(digits[::-1], width=tgt_width)
    tgt = torch.cat([torch.tensor([[BOS_ID]]), reversed_ids], dim=1)
    return src, tgt[:, :tgt_width]


pairs = [reversal_pair("31415", 7, 6), reversal_pair("926", 7, 6)]
src = torch.cat([s for s, _ in pairs])
tgt_in = torch.cat([t for _, t in pairs])
print("src   ", tuple(src.shape))
print("tgt_in", tuple(tgt_in.shape))
for i in range(2):
    print(f"  src[{i}]    = {describe(src[i])}")
    print(f"  tgt_in[{i}] = {describe(tgt_in[i])}")

# %% [markdown]
# ## The padding mask: `[B, 1, 1, L]`
#
# A padding mask marks the keys that are `<pad>`. The two singleton dimensions are for the heads
# and the queries. Broadcasting stretches them, so *no head and no query* may look at a padded
# key.


# %%
def padding_mask(ids: torch.Tensor) -> torch.Tensor:
    return (ids == PAD_ID)[:, None, None, :]  # [B, L] -> [B, 1, 1, L]


src_pad = padding_mask(src)
print("src_pad", tuple(src_pad.shape), src_pad.dtype)
print(src_pad[:, 0, 0].int())

scores_shape = (2, 4, 6, 7)  # [B, h, Lt, Ls]: cross-attention scores with 4 heads
print(
    "broadcast against",
    scores_shape,
    "->",
    tuple(torch.broadcast_shapes(src_pad.shape, scores_shape)),
)
assert src_pad.shape == (2, 1, 1, 7) and src_pad[1, 0, 0].tolist() == [False] * 4 + [True] * 3

# %% [markdown]
# Why not keep the mask as `[B, L]`? Broadcasting aligns shapes **from the right**. A `[B, L]`
# mask lines `L` up with `Lk` (right) but `B` with `Lq` (wrong). It often runs anyway.
#
# :::{dropdown} Going deeper: what a `[B, L]` mask does, size by size
# When $B = L_q$ by coincidence, it runs, and query $i$ of *every* sequence gets the padding of
# sequence $i$. When $B = 1$, it runs and is even right: the `1` broadcasts over the queries, as
# in `[1, 1, 1, L]`. So a check on one sequence cannot find the bug. When $L_q = 1$ (one query
# per sequence), it runs too, and the scores grow from `[B, h, 1, L_k]` to `[B, h, B, L_k]`.
# When $B \ne L_q$ and neither is 1, it is an error. The cell below tries all four.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
flat = src == PAD_ID  # [B, Ls], the two singleton dims forgotten
scores = torch.zeros(2, 4, 6, 7)  # Lq = 6 != B = 2
try:
    scores.masked_fill(flat, float("-inf"))
    raise AssertionError("expected a broadcasting error")
except RuntimeError as e:
    print("B = 2, Lq = 6:", type(e).__name__, "|", e)

scores_lq2 = torch.zeros(2, 4, 2, 7)  # Lq = 2 == B = 2: runs
# (-inf is harmless here: no row has every key blocked)
wrong = scores_lq2.masked_fill(flat, float("-inf")).softmax(-1)
print(
    "B = 2, Lq = 2: sequence 0 (only key 6 is padding), query 1 attends to:",
    [f"{x:.2f}" for x in wrong[0, 0, 1].tolist()],
)
assert not flat[0, 4:6].any() and (wrong[0, 0, 1, 4:6] == 0).all()  # real keys 4 and 5 lost

scores_b1 = torch.randn(1, 4, 6, 7, generator=torch.Generator().manual_seed(0))  # B = 1
got = scores_b1.masked_fill(flat[:1], float("-inf")).softmax(-1)  # mask [1, Ls]
want = scores_b1.masked_fill(padding_mask(src[:1]), float("-inf")).softmax(-1)  # [1, 1, 1, Ls]
print(
    "B = 1, Lq = 6: runs; largest |difference| from the weights of the [1, 1, 1, Ls] mask:",
    (got - want).abs().max().item(),
)
assert torch.equal(got, want) and (got[..., 6] == 0).all()

grown = torch.zeros(2, 4, 1, 7).masked_fill(flat, float("-inf"))  # B = 2, Lq = 1
print("B = 2, Lq = 1: runs; scores (2, 4, 1, 7) come out as", tuple(grown.shape))
assert grown.shape == (2, 4, 2, 7)

# %% [markdown]
# ## The causal mask: `[1, 1, L, L]`
#
# In the decoder, position $i$ predicts token $i+1$, so it may look at positions $\le i$ only.
# The blocked pairs lie *above* the diagonal: `torch.triu(..., diagonal=1)`. With `diagonal=0`
# every position would also be blind to itself (chapter 08 shows what that does).


# %%
def causal_mask(L: int, device=None) -> torch.Tensor:
    return torch.triu(torch.ones(L, L, dtype=torch.bool, device=device), diagonal=1)[None, None]


causal = causal_mask(tgt_in.size(1))
print("causal", tuple(causal.shape))
print(causal[0, 0].int())
pos = torch.arange(6)
assert torch.equal(causal[0, 0], pos[None, :] > pos[:, None])  # blocked exactly where key > query

# %% [markdown]
# ## Combining them: OR, and the shape `[B, 1, L, L]`
#
# The decoder's self-attention blocks a key when it is in the future **or** it is padding. With
# `True = blocked`, combining two masks is a logical OR. The shapes `[B, 1, 1, Lt]` and
# `[1, 1, Lt, Lt]` broadcast to `[B, 1, Lt, Lt]`. That is one mask per sequence, shared by all
# heads.

# %%
tgt_pad = padding_mask(tgt_in)
self_mask = causal | tgt_pad
print(
    "tgt_pad", tuple(tgt_pad.shape), "| causal", tuple(causal.shape), "->", tuple(self_mask.shape)
)


def show_mask(mask2d: torch.Tensor, q_ids: torch.Tensor, k_ids: torch.Tensor) -> None:
    """Rows are queries, columns keys; x = blocked, . = may attend."""
    k_names, q_names = describe(k_ids).split(), describe(q_ids).split()
    print(" " * 7 + " ".join(f"{n:>5}" for n in k_names))
    for name, row in zip(q_names, mask2d.tolist()):
        print(f"{name:>6} " + " ".join(f"{'x' if b else '.':>5}" for b in row))


print("\ndecoder self-attention mask for the padded example:", describe(tgt_in[1]))
show_mask(self_mask[1, 0], tgt_in[1], tgt_in[1])
assert self_mask.shape == (2, 1, 6, 6)
assert torch.equal(self_mask[0, 0], causal[0, 0])  # no padding in sequence 0: causal only
assert self_mask[1, 0, :, 5].all()  # the <pad> key is blocked for every query

# %% [markdown]
# Figure 7.1 draws the same three masks as grids, for the padded example. Dark cells are
# blocked.

# %% jupyter={"source_hidden": true} tags=["figure", "hide-input", "opening-figure"]
fig, axes = plt.subplots(1, 3, figsize=(10, 3.4))
names = describe(tgt_in[1]).split()
panels = [
    (tgt_pad[1, 0].expand(6, 6), "padding [B,1,1,L] broadcast"),
    (causal[0, 0], "causal [1,1,L,L]"),
    (self_mask[1, 0], "causal | padding [B,1,L,L]"),
]
for ax, (m, title) in zip(axes, panels):
    ax.imshow(m.int(), cmap="Greys", vmin=0, vmax=1.4)
    ax.set_title(title, fontsize=10)
    ax.set_xticks(range(6), names, rotation=90)
    ax.set_yticks(range(6), names)
    ax.set_xlabel("key")
axes[0].set_ylabel("query")
fig.suptitle("Figure 7.1: the decoder self-attention mask and its two parts", fontsize=11)
plt.tight_layout()
plt.show()

# %% [markdown]
# A padded *query* row (the last row, `<pad>`) is not blocked: only padded *keys* are. That is
# deliberate. The output at a padded query is never read. No position may attend to it, and the
# loss ignores it (`ignore_index`, chapter 10). Blocking padded rows too would create rows with
# nothing to attend to. Chapter 03 showed their trouble (NaN with `-inf`).
#
# ## Which mask does cross-attention take?
#
# Cross-attention's queries come from the decoder, its keys and values from the encoder's
# memory. A mask blocks *keys*, so it must describe the source. It is the source padding mask
# `[B, 1, 1, Ls]`, the very tensor the encoder used. Every target position may look at every
# real source token. "The future" means nothing for the source, which is fully known.
#
# A small `MultiHeadAttention` (chapter 03) shows it. Random inputs stand in for the decoder
# states and the memory.

# %%
d_model, heads = 32, 2
mha = MultiHeadAttention(d_model, heads, dropout=0.0).eval()
x_tgt = torch.randn(2, tgt_in.size(1), d_model)  # [B, Lt, d]
memory = torch.randn(2, src.size(1), d_model)  # [B, Ls, d]

with torch.no_grad():
    out, w = mha(x_tgt, memory, memory, attn_mask=src_pad)
print("cross-attention out", tuple(out.shape), "weights", tuple(w.shape))
print("largest weight on the padded keys of sequence 1:", w[1, :, :, 4:].abs().max().item())
assert w.shape == (2, heads, 6, 7)
assert (w[1, :, :, 4:] == 0).all()  # no query of any head looks at <pad>
torch.testing.assert_close(w.sum(-1), torch.ones(2, heads, 6))

# %% [markdown]
# ### The pitfall: the causal mask passed to cross-attention
#
# A decoder layer has two masks at hand. Handing the causal one to cross-attention is an easy
# slip. When $L_t \ne L_s$ the shapes `[1, 1, Lt, Lt]` and `[B, h, Lt, Ls]` do not broadcast.
# `helpers.DecoderLayer` checks the cross-attention mask where it enters. Its last dimension
# must be the source length $L_s$, its query dimension 1 or $L_t$:

# %%
layer = DecoderLayer(d_model, heads, 64, dropout=0.0).eval()
try:
    with torch.no_grad():
        layer(x_tgt, memory, causal_mask(6), causal_mask(6))  # the causal mask twice
    raise AssertionError("expected an error")
except ValueError as e:
    print(type(e).__name__, "|", e)

# %% [markdown]
# When $L_t = L_s$ the shapes fit and it runs without a word. Training batches are that case:
# in a 20-step run of the book's recipe, every training batch has $L_s = L_t = 13$. The
# validation tensors are not cut: there $L_s = 14$ and $L_t = 13$. So this slip would train
# for a while and then raise at the first validation pass.
#
# :::{dropdown} Going deeper: why training batches have $L_t = L_s$
# `helpers.train_reversal` cuts each batch to its longest sequence (chapter 10). For reversal,
# the source (digits and `<eos>`) and the decoder input (`<bos>` and the digits) of the longest
# sequence have the same length. The cell runs `train_reversal` for 20 steps of the book's
# recipe. A forward pre-hook on every module records the shapes of `src` and `tgt_in` that the
# model receives, at each training step and at the validation pass after the last step.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
from torch.nn.modules.module import register_module_forward_pre_hook

from helpers import BOOK_RECIPE, Transformer, train_reversal

batch_shapes, eval_shapes = [], []


def record_batch(module, args):
    if isinstance(module, Transformer):
        src_batch, tgt_in_batch = args
        shapes = batch_shapes if module.training else eval_shapes  # training step or validation
        shapes.append((src_batch.size(1), tgt_in_batch.size(1)))


short = dataclasses.replace(BOOK_RECIPE, max_steps=20, cooldown=0, target_exact_match=None)
handle = register_module_forward_pre_hook(record_batch)  # a hook for every module's forward
try:
    train_reversal(short, progress=False)
finally:
    handle.remove()
print(
    f"{len(batch_shapes)} training batches of {short.batch_size}: (L_s, L_t) =",
    sorted(set(batch_shapes)),
)
print(f"validation pass: (L_s, L_t) = {sorted(set(eval_shapes))}")
assert len(batch_shapes) == short.max_steps and all(ls == lt for ls, lt in batch_shapes)
assert eval_shapes and all(ls != lt for ls, lt in eval_shapes)

# %% [markdown]
# Where it runs, what does it do? With the causal mask on cross-attention, target position $i$
# may read memory rows $0..i$ only:

# %%
x6, mem6 = torch.randn(1, 6, d_model), torch.randn(1, 6, d_model)
src6 = encode_digits("31415", width=6)  # no padding: every source key is real
with torch.no_grad():
    _, w_right = mha(x6, mem6, mem6, attn_mask=padding_mask(src6))
    _, w_wrong = mha(x6, mem6, mem6, attn_mask=causal_mask(6))
print("which memory rows get weight > 0 (head 0): right mask | causal mask by mistake")
for i in range(6):
    right_row = (w_right[0, 0, i] > 0).int().tolist()
    wrong_row = (w_wrong[0, 0, i] > 0).int().tolist()
    print(f"  target pos {i}:  {right_row}  |  {wrong_row}")
assert (w_right > 0).all()
assert (w_wrong[0, :, 0, 1:] == 0).all()

# %% [markdown]
# Position 0 (`<bos>`) must produce the **last** source digit. Is it now blind to it? It sees
# only memory row 0. But a memory row is not a source token. It is the encoder's output, and the
# encoder's self-attention is bidirectional, so row 0 mixes in every source position. Even an
# untrained encoder shows it: change only the last digit, and memory row 0 changes.

# %%
torch.manual_seed(0)
enc = Encoder(VOCAB_SIZE, 32, 2, 64, num_layers=2, max_len=16, dropout=0.0).eval()
a_src, b_src = encode_digits("31415"), encode_digits("31419")  # only the last digit differs
with torch.no_grad():
    row0_a = enc(a_src, padding_mask(a_src))[0, 0]
    row0_b = enc(b_src, padding_mask(b_src))[0, 0]
row0_change = (row0_a - row0_b).abs().max().item()
print(f"memory row 0 ('3'): largest change when the last digit changes: {row0_change:.3f}")
assert row0_change > 1e-2

# %% [markdown]
# A model can train with this pattern only if the mask is built at the cross-attention shape
# `[B, 1, Lt, Ls]`: True where source position $j > i$, OR-ed with the source padding. We call
# it the **triangular cross mask**. It is a different mask from the slip above, the causal
# pattern rebuilt to fit. Its shape is legal, so no shape check can catch it. At the widths of
# the validation tensors the slip raises and the triangular mask runs:

# %%
x_val, mem_val = torch.randn(2, 13, d_model), torch.randn(2, 14, d_model)  # L_t = 13, L_s = 14
triangular = torch.ones(13, 14, dtype=torch.bool).triu(1)[None, None]  # [1, 1, Lt, Ls]
with torch.no_grad():
    try:
        layer(x_val, mem_val, causal_mask(13), causal_mask(13))  # the slip
        raise AssertionError("expected an error")
    except ValueError:
        print("causal mask [1, 1, 13, 13]: ValueError")
    _, w_tri = layer(x_val, mem_val, causal_mask(13), triangular)
print(f"triangular mask {tuple(triangular.shape)}: runs, cross weights {tuple(w_tri.shape)}")
print("target position 0 reads source positions", (w_tri[0, 0, 0] > 0).nonzero().flatten().tolist())
assert (w_tri[:, :, 0, 1:] == 0).all() and (w_tri[:, :, 12, :13] > 0).all()

# %% [markdown]
# [The cross-mask experiment](../appendix/experiment_cross_mask.ipynb) trains a model with each
# mask for 300 steps, with the same 5 seeds, and scores both on the test set of chapter 09. On
# average over the seeds, the correct mask's test exact match is higher by 0.07 % (95 % interval
# -0.11 % to 0.24 %): not distinguishable with 5 seeds. So five trained models per mask did not
# tell the two masks apart by their accuracy. The check at the end of this chapter looks at the
# mask itself: it captures what cross-attention receives and compares it with the source padding
# mask.
#
# ## Three conventions for the same mask
#
# Libraries disagree on what `True` (or `1`) means:
#
# | who | type and shape | meaning |
# | --- | --- | --- |
# | this book | `bool`, broadcastable to `[B, h, Lq, Lk]` | `True` = **blocked** |
# | `F.scaled_dot_product_attention` | `bool` (or float, added) | `True` = **may attend** |
# | Hugging Face `attention_mask` | integer `[B, L]`, one value per key | `1` = **keep** |
# | `nn.Transformer`, `nn.MultiheadAttention` | `bool` (or float, added) | `True` = **blocked** |
#
# (Chapter 15 compares our model with `nn.Transformer`, which follows the last row.)
# Figure 7.2 shows the decoder self-attention mask of the padded example in the first three
# conventions. Dark cells hold True (or 1). The same dark
# cell means "blocked" in the first panel and "may attend" in the other two. Hugging Face's
# `attention_mask` holds only the padding, one value per key. For a decoder the library adds
# the causal part itself (chapter 16 shows where).

# %% jupyter={"source_hidden": true} tags=["figure", "hide-input"]
hf_row = to_hf_attention_mask(tgt_in)[1:2]  # [1, L]
grids = [
    ("this book: True = blocked", self_mask[1, 0].int(), "T", "F"),
    ("SDPA: True = may attend", to_sdpa_mask(self_mask)[1, 0].int(), "T", "F"),
    ("Hugging Face: 1 = keep (padding only)", hf_row, "1", "0"),
]
fig, axes = plt.subplots(
    1, 3, figsize=(12, 3.8), gridspec_kw={"width_ratios": [1, 1, 1]}, constrained_layout=True
)
for ax, (title, grid, on, off) in zip(axes, grids):
    ax.imshow(grid, cmap="Greys", vmin=0, vmax=1.6, aspect="equal")
    for r in range(grid.size(0)):
        for c in range(grid.size(1)):
            v = bool(grid[r, c])
            ax.text(
                c,
                r,
                on if v else off,
                ha="center",
                va="center",
                fontsize=8,
                color="white" if v else "black",
            )
    ax.set_title(title, fontsize=10)
    ax.set_xticks(range(6), names, rotation=90)
    ax.set_yticks(range(grid.size(0)), names if grid.size(0) > 1 else ["every query"])
    ax.set_xlabel("key")
axes[0].set_ylabel("query")
fig.suptitle("Figure 7.2: one mask, three conventions (the padded example)", fontsize=11)
plt.show()

# %% [markdown]
# `helpers` has a converter for each direction that crosses a boundary. The three conventions
# must give the same attention output for the decoder self-attention mask built above. Hugging
# Face's integer mask is converted back to ours with `from_hf_attention_mask`. (Handing our
# mask to SDPA without the `~` is the mistake chapter 03 reproduced. SDPA then attends only to
# the keys we meant to block.)

# %%
B, h, L, d_k = 2, 4, tgt_in.size(1), 8
Q, K, V = torch.randn(B, h, L, d_k), torch.randn(B, h, L, d_k), torch.randn(B, h, L, d_k)


def attention_ours(Q, K, V, mask):
    """Our convention: bool, True = blocked."""
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.size(-1))
    scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)
    return scores.softmax(-1) @ V


ours = attention_ours(Q, K, V, self_mask)
sdpa = F.scaled_dot_product_attention(Q, K, V, attn_mask=to_sdpa_mask(self_mask))
hf_mask = to_hf_attention_mask(tgt_in)  # [B, L], 1 = keep
print("Hugging Face attention_mask:", hf_mask.tolist())
hf_as_ours = from_hf_attention_mask(hf_mask) | causal
via_hf = attention_ours(Q, K, V, hf_as_ours)
for name, t in (("SDPA, True = may attend", sdpa), ("Hugging Face, converted", via_hf)):
    d = (t - ours).abs().max().item()
    print(f"{name:<24} max |difference| from ours: {'< 1e-5' if d < 1e-5 else f'{d:.1e}'}")
    torch.testing.assert_close(t, ours)
assert torch.equal(hf_as_ours, self_mask)

# %% [markdown]
# A quieter variant of the polarity mistake is a 0/1 **float** mask (say, `mask.float()`, or
# one built with NumPy). SDPA treats a float mask as something to **add** to the scores
# (exercise 3.2 uses that on purpose). So "1 = blocked" adds $+1$ to the blocked scores.
# Nothing is blocked, and the future even gets a bonus. The cell computes the attention weights
# by hand with that addition and shows the weight query 0 puts on future keys.

# %%
float01 = self_mask.float()  # 1.0 = blocked, meant as a filter
sdpa_float01 = F.scaled_dot_product_attention(Q, K, V, attn_mask=float01)
weights_added = (Q @ K.transpose(-2, -1) / math.sqrt(d_k) + float01).softmax(-1)
torch.testing.assert_close(sdpa_float01, weights_added @ V)  # SDPA really added it
future_weight = weights_added[0, :, 0, 1:].sum(-1)
print("weight query 0 puts on future keys, per head:", [f"{x:.2f}" for x in future_weight.tolist()])
assert (future_weight > 0.5).all() and not torch.allclose(sdpa_float01, ours, atol=1e-3)

# %% [markdown]
# ## uint8 masks and bitwise operators
#
# Masks that come from outside (a tokenizer, NumPy, another codebase) can be `uint8` or
# `int64` with `1 = attend`, as Hugging Face's `attention_mask` is. Three things go wrong with
# them.
#
# **1. `masked_fill` refuses them.** In torch 2.13.0, the version this book runs, a `uint8`
# mask raises:

# %%
keep_u8 = (tgt_in != PAD_ID).to(torch.uint8)  # 1 = attend, the Hugging Face polarity
scores = Q @ K.transpose(-2, -1)
print("torch", torch.__version__.split("+")[0])
try:
    scores.masked_fill(keep_u8[:, None, None, :], 0.0)
    raise AssertionError("expected an error")
except RuntimeError as e:
    print(type(e).__name__, "|", e)

# %% [markdown]
# **2. `~` is a bitwise NOT, not a logical one.** On a bool tensor `~` swaps True and False.
# On integers it flips all the bits. For `uint8`, 1 becomes 254 and 0 becomes 255. For Hugging
# Face's `int64`, 1 becomes -2 and 0 becomes -1. Every value is non-zero. So "inverting a
# keep-mask into a blocked-mask" with `~` and then `.bool()` blocks **everything**:

# %%
print("keep_u8[1]         :", keep_u8[1].tolist())
print("~keep_u8[1]        :", (~keep_u8[1]).tolist())
print("~hf_mask[1] (int64):", (~hf_mask[1]).tolist())
blocked_wrong = (~keep_u8).bool()[:, None, None, :]
print("blocked by (~keep_u8).bool():", blocked_wrong[1, 0, 0].tolist())
assert (~keep_u8).min() == 254 and blocked_wrong.all()

# every key blocked: the -inf softmax has nothing to normalise over
bad = (scores.masked_fill(blocked_wrong, float("-inf"))).softmax(-1)
print(f"share of the attention weights that are NaN: {bad.isnan().float().mean().item():.2f}")
assert bad.isnan().all()

# %% [markdown]
# **3. Adding or OR-ing keep-masks.** With `1 = attend`, two masks must be combined with AND:
# a key is visible only if *both* allow it. Adding them gives values 0, 1 and 2 (2 where both
# allow). And `|` lets a key through when *either* allows it, so every real token in the future
# becomes visible:

# %%
causal_keep = (~causal).to(torch.uint8)  # 1 = attend (lower triangle)
pad_keep = keep_u8[:, None, None, :]
summed = pad_keep + causal_keep
print("values in pad_keep + causal_keep:", summed.unique().tolist())
ored = pad_keep | causal_keep  # bitwise OR of two keep-masks: the wrong operator
print("query 0 of sequence 0 may attend to (keys):", ored[0, 0, 0].tolist())
leak = F.scaled_dot_product_attention(Q, K, V, attn_mask=ored.bool())
assert summed.max() == 2 and ored[0, 0, 0].all()  # query 0 now sees the whole future
assert not torch.allclose(leak, ours, atol=1e-3)

# %% [markdown]
# **The fix:** convert to `bool` once, at the boundary where the mask enters your code. Use the
# comparison that states its polarity, then combine with the operator of *that* polarity. In
# our convention that is `mask = (hf_mask == 0)` and `|`; `keep.bool()` followed by the
# logical `~` works too. `helpers.MultiHeadAttention` refuses anything but `bool`, with a
# message that says so (chapter 03):

# %%
blocked = keep_u8 == 0  # bool, True = blocked: the polarity is explicit in the comparison
fixed = blocked[:, None, None, :] | causal
assert fixed.dtype == torch.bool and torch.equal(fixed, self_mask)
assert torch.equal(~keep_u8.bool(), blocked)  # .bool() first, then ~ is a logical NOT

try:
    mha(x6, x6, x6, attn_mask=keep_u8[:1, None, None, :])  # [1, 1, 1, 6], 1 = attend
    raise AssertionError("expected a TypeError")
except TypeError as e:
    print(type(e).__name__, "|", e)

# %% [markdown]
# :::{dropdown} Going deeper: left padding makes rows with nothing to attend to
# Chapter 03 showed what softmax does with a row in which every key is blocked. It gives NaN
# with `-inf`, a uniform row with `finfo.min`, and zeros from SDPA and
# `helpers.MultiHeadAttention` (in torch 2.13.0). Such rows are easy to create. Left padding
# puts the padding at the *start*, a way to batch prompts of different lengths for a
# decoder-only model. With the ordinary causal-or-padding mask, a leading `<pad>` query may only
# look at itself and earlier positions, all of them padding. The first cell below shows it.
#
# "It is only the padding rows" is no comfort with `-inf`, because NaN spreads. In the next
# layer the NaN rows are keys and values. They are masked there, so their weight is an exact 0.
# But $0 \times \text{NaN} = \text{NaN}$ in the matrix product. Every query's output turns NaN,
# including the ones that never looked at padding. The second cell shows it.
#
# In this book's reversal task such rows do not arise. Padding is on the right, and every
# decoder query can see at least `<bos>`. The zero rows of `helpers` are a guard, not a feature
# the model depends on.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
tgt_left = torch.tensor([[PAD_ID, PAD_ID, BOS_ID, 9, 5, 12]])  # left-padded decoder input
left_mask = causal_mask(6) | padding_mask(tgt_left)
print(describe(tgt_left[0]))
show_mask(left_mask[0, 0], tgt_left[0], tgt_left[0])
rows = left_mask.all(dim=-1)  # helpers.fully_masked_rows
print("fully masked query rows:", rows[0, 0].nonzero().flatten().tolist())
assert rows[0, 0].tolist() == [True, True, False, False, False, False]

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
Q1, K1, V1 = torch.randn(1, 1, 6, 8), torch.randn(1, 1, 6, 8), torch.randn(1, 1, 6, 8)
raw = Q1 @ K1.transpose(-2, -1) / math.sqrt(8)
w_inf = raw.masked_fill(left_mask, float("-inf")).softmax(-1)
h_next = w_inf @ V1  # rows 0 and 1 are NaN
w2 = raw.masked_fill(left_mask, torch.finfo(raw.dtype).min).softmax(-1)  # a safe softmax
print("NaN rows after the first layer:", h_next[0, 0].isnan().any(-1).int().tolist())
print("weight of query 5 on the NaN keys 0 and 1:", w2[0, 0, 5, :2].tolist())
spread = w2 @ h_next
print("NaN rows after the next layer:", spread[0, 0].isnan().any(-1).int().tolist())
assert (w2[0, 0, 5, :2] == 0).all() and spread[0, 0].isnan().any(-1).all()

# %% [markdown]
# ## The full model
#
# Everything is in place: the embeddings (chapter 02), the encoder (chapter 05) and decoder
# (chapter 06) stacks, and the masks from this chapter. The model splits into `encode` and
# `decode`. At inference the encoder runs once, while the decoder runs once per generated token
# (chapter 11 reuses `memory`). `decode` builds the decoder self-attention mask from `tgt_in`
# itself. Cross-attention receives the **source** padding mask that `encode` returned. The
# last lines of `__init__` choose the initialisation, discussed right after.


# %%
class MyTransformer(nn.Module):
    def __init__(
        self,
        src_vocab,
        tgt_vocab,
        d_model=128,
        num_heads=4,
        dff=512,
        num_layers=2,
        max_len=64,
        dropout=0.1,
    ):
        super().__init__()
        self.encoder = Encoder(src_vocab, d_model, num_heads, dff, num_layers, max_len, dropout)
        self.decoder = Decoder(tgt_vocab, d_model, num_heads, dff, num_layers, max_len, dropout)
        self.out_proj = nn.Linear(d_model, tgt_vocab)
        for m in self.modules():  # Xavier for every Linear, zero biases
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)

    def encode(self, src):
        src_mask = padding_mask(src)  # [B, 1, 1, Ls]
        return self.encoder(src, src_mask), src_mask

    def decode(self, tgt_in, memory, src_mask):
        self_mask = causal_mask(tgt_in.size(1), tgt_in.device) | padding_mask(tgt_in)
        h, cross_weights = self.decoder(tgt_in, memory, self_mask, src_mask)  # cross: source mask
        return self.out_proj(h), cross_weights

    def forward(self, src, tgt_in):
        memory, src_mask = self.encode(src)
        logits, _ = self.decode(tgt_in, memory, src_mask)
        return logits


torch.manual_seed(0)
model = MyTransformer(VOCAB_SIZE, VOCAB_SIZE).eval()
with torch.no_grad():
    memory, src_mask = model.encode(src)
    logits, cross_weights = model.decode(tgt_in, memory, src_mask)
n_params = sum(p.numel() for p in model.parameters())
print(
    "src", tuple(src.shape), "-> memory", tuple(memory.shape), "+ src_mask", tuple(src_mask.shape)
)
print("tgt_in", tuple(tgt_in.shape), "-> logits", tuple(logits.shape))
print("cross-attention weights:", [tuple(w.shape) for w in cross_weights])
print(f"parameters: {n_params:,} (chapter 01 counts them from the shapes)")
assert logits.shape == (2, 6, VOCAB_SIZE) and len(cross_weights) == 2
assert n_params == 931_213

# %% [markdown]
# ### Xavier initialisation
#
# PyTorch initialises `nn.Linear` with Kaiming-uniform {cite}`he2015`, $a = \sqrt 5$. That
# works out to $U(-1/\sqrt{n_{in}},\ 1/\sqrt{n_{in}})$ and a standard deviation of
# $1/\sqrt{3 n_{in}}$. Xavier (Glorot) uniform {cite}`glorot2010` draws from $U(-a, a)$ with
# $a = \sqrt{6/(n_{in}+n_{out})}$: standard deviation $\sqrt{2/(n_{in}+n_{out})}$. The model
# above applies `xavier_uniform_` to every `nn.Linear` and zeroes its bias
# (`helpers.xavier_init_linears` does the same). `nn.Transformer` applies it to every
# parameter with more than one dimension. The cell shows the lines of torch 2.13.0's source
# that choose the two initialisations. Then it measures one 128x128 layer of the model
# against a fresh default `nn.Linear`:

# %%
for name, fn, words, expected in (
    ("nn.Linear.reset_parameters", nn.Linear.reset_parameters, ("kaiming",), "a=math.sqrt(5)"),
    (
        "nn.Transformer._reset_parameters",
        nn.Transformer._reset_parameters,
        ("dim()", "xavier"),
        "xavier_uniform_(p)",
    ),
):
    lines = [ln.strip() for ln in inspect.getsource(fn).splitlines()]
    code = [ln for ln in lines if any(w in ln for w in words) and not ln.startswith("#")]
    print(f"{name}: {code}")
    assert any(expected in ln for ln in code)
torch.manual_seed(0)
lin_default = nn.Linear(128, 128)
lin_xavier = model.encoder.layers[0].mha.W_q  # initialised by MyTransformer
theory = {"default": 1 / math.sqrt(3 * 128), "xavier": math.sqrt(2 / (128 + 128))}
measured = {"default": lin_default.weight.std().item(), "xavier": lin_xavier.weight.std().item()}
for k in theory:
    print(f"{k:<8} weight std: measured {measured[k]:.4f}, formula {theory[k]:.4f}")
    assert abs(measured[k] / theory[k] - 1) < 0.03
print(f"ratio xavier/default: {measured['xavier'] / measured['default']:.2f}")

torch.manual_seed(1)
by_hand = nn.Linear(128, 128)
nn.init.xavier_uniform_(by_hand.weight)
nn.init.zeros_(by_hand.bias)
torch.manual_seed(1)  # the same draws again
by_helpers = nn.Linear(128, 128)
xavier_init_linears(by_helpers)
weight_gap = (by_hand.weight - by_helpers.weight).abs().max().item()
nonzero_bias = int((by_helpers.bias != 0).sum())
print(
    f"helpers.xavier_init_linears vs by hand: largest |weight difference| {weight_gap},"
    f" nonzero biases {nonzero_bias}"
)
assert weight_gap == 0 and nonzero_bias == 0

# %% [markdown]
# For a square layer the default shrinks a unit-variance input by about $1/\sqrt 3$: the ratio
# of the two standard deviations above is about $\sqrt 3 \approx 1.73$. Xavier keeps it near 1.
# An attention score is the product of *two* projections, $q \cdot k$. So with the default it
# comes out about $(1/\sqrt 3)^2 = 1/3$ as large, and the softmax starts out flatter. Measured
# on 64 unit-variance token vectors:

# %%
torch.manual_seed(2)
x = torch.randn(1, 64, 128)
score_std = {}
with torch.no_grad():
    for name in ("default", "xavier"):
        W_q, W_k = nn.Linear(128, 128), nn.Linear(128, 128)
        if name == "xavier":
            for lin in (W_q, W_k):
                nn.init.xavier_uniform_(lin.weight)
                nn.init.zeros_(lin.bias)
        score_std[name] = (W_q(x) @ W_k(x).transpose(-2, -1) / math.sqrt(128)).std().item()
        print(f"{name:<8} std of the attention scores q.k/sqrt(d): {score_std[name]:.2f}")
print(f"ratio default/xavier: {score_std['default'] / score_std['xavier']:.2f}")
assert 0.25 < score_std["default"] / score_std["xavier"] < 0.45

# %% [markdown]
# :::{dropdown} Going deeper: `nn.Transformer` makes the same call with other results
# Its attention keeps the three projections in one fused `in_proj_weight` of shape $[3d, d]$,
# so Xavier sees $n_{out} = 3d$. Each projection then gets the standard deviation
# $\sqrt{2/(4d)}$, not $\sqrt{2/(2d)}$. And `_reset_parameters` leaves every bias alone.
# `nn.MultiheadAttention` zeroes its own biases. The feed-forward biases `linear1` and `linear2`
# keep `nn.Linear`'s uniform draw. So `MyTransformer` follows the same idea, not the same
# numbers. The cell below measures an `nn.Transformer` of its sizes.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
torch.manual_seed(0)
torch_tf = nn.Transformer(
    d_model=128,
    nhead=4,
    num_encoder_layers=2,
    num_decoder_layers=2,
    dim_feedforward=512,
    batch_first=True,
)
torch_layer = torch_tf.encoder.layers[0]
fused = torch_layer.self_attn.in_proj_weight  # [3d, d]: W_q, W_k, W_v stacked
init_std = {
    "ours, W_q [d, d]": (lin_xavier.weight.std().item(), math.sqrt(2 / (128 + 128))),
    "nn.Transformer, in_proj_weight[:d]": (fused[:128].std().item(), math.sqrt(2 / (128 + 384))),
}
for k, (got, formula) in init_std.items():
    print(f"{k:<36} weight std: measured {got:.4f}, formula {formula:.4f}")
    assert abs(got / formula - 1) < 0.03
for name, bias, fan_in in (
    ("attention in_proj_bias", torch_layer.self_attn.in_proj_bias, None),
    ("feed-forward linear1.bias", torch_layer.linear1.bias, torch_layer.linear1.in_features),
    ("feed-forward linear2.bias", torch_layer.linear2.bias, torch_layer.linear2.in_features),
):
    nonzero = int((bias != 0).sum())
    where = "" if fan_in is None else f", all within +-1/sqrt({fan_in}) (nn.Linear's default)"
    print(f"nn.Transformer {name}: {nonzero} of {bias.numel()} entries nonzero{where}")
    if fan_in is None:
        assert nonzero == 0  # nn.MultiheadAttention zeroes it
    else:
        assert nonzero > 0 and (bias.abs() <= 1 / math.sqrt(fan_in)).all()
assert (model.encoder.layers[0].ffn.net[0].bias == 0).all()  # ours: zero

# %% [markdown]
# What the default initialisation costs in training is measured in chapter 12.
#
# ## Check against `helpers`
#
# `helpers.Transformer` is this model, finished and tested. Two checks. First, with our
# weights loaded, it computes the same logits and cross-attention weights. Second, the masks
# its `encode` and `decode` build are exactly the ones we built by hand. Forward pre-hooks on
# its encoder and decoder see the arguments they are called with.

# %%
ref = Transformer(VOCAB_SIZE, VOCAB_SIZE).eval()
ref.load_state_dict(model.state_dict())  # strict: same module names, same shapes

seen = {}
hooks = [
    ref.encoder.register_forward_pre_hook(lambda mod, args: seen.update(enc_mask=args[1])),
    ref.decoder.register_forward_pre_hook(
        lambda mod, args: seen.update(self_mask=args[2], cross_mask=args[3])
    ),
]
with torch.no_grad():
    mem_ref, src_mask_ref = ref.encode(src)
    logits_ref, cross_ref = ref.decode(tgt_in, mem_ref, src_mask_ref)
    logits_fwd = ref(src, tgt_in)  # forward: the SDPA path everywhere
for hk in hooks:
    hk.remove()

assert torch.equal(seen["enc_mask"], padding_mask(src))
assert torch.equal(seen["self_mask"], causal_mask(tgt_in.size(1)) | padding_mask(tgt_in))
assert torch.equal(seen["cross_mask"], padding_mask(src))
torch.testing.assert_close(logits_ref, logits)
torch.testing.assert_close(logits_fwd, logits)
for a, b in zip(cross_ref, cross_weights):
    torch.testing.assert_close(a, b)
print(
    "masks: encoder",
    tuple(seen["enc_mask"].shape),
    "| decoder self",
    tuple(seen["self_mask"].shape),
    "| cross",
    tuple(seen["cross_mask"].shape),
    "(each equal to ours)",
)
diff = max((logits_ref - logits).abs().max().item(), (logits_fwd - logits).abs().max().item())
print(
    f"logits: max |helpers - ours| = {'< 1e-5' if diff < 1e-5 else f'{diff:.1e}'}"
    " (handwritten and SDPA paths)"
)

# %% [markdown]
# ## How this model differs from the paper
#
# The model keeps the structure of Vaswani et al. {cite}`vaswani2017`: two stacks, multi-head
# self- and cross-attention, feed-forward networks, residual connections, LayerNorm
# {cite}`ba2016`, sinusoidal positions and embeddings scaled by $\sqrt{d}$. It changes the rows
# below. The paper's column is its base model (sections 3 to 6, Table 3). The cells after the
# table read the book's column from `helpers.Transformer` and `helpers.BOOK_RECIPE`.
#
# | | Vaswani et al. (base model) | this book |
# | --- | --- | --- |
# | LayerNorm placement | after each residual add, `LayerNorm(x + f(x))` (Post-Norm) | before each sub-layer, `x + f(LayerNorm(x))` (Pre-Norm {cite}`xiong2020`), plus a final LayerNorm per stack |
# | feed-forward activation | ReLU | GELU {cite}`hendrycks2016` (chapter 04) |
# | embeddings and output projection | one shared matrix {cite}`press2017` | three separate matrices |
# | biases | none in the attention projections' equations; the feed-forward has $b_1, b_2$ | every `nn.Linear` has one, the attention projections included |
# | initialisation | not stated | Xavier-uniform weights, zero biases (above) |
# | dropout | 0.1, on each sub-layer's output and on the embeddings | the same, and on the attention weights; the training recipe sets 0 |
# | sizes | $d = 512$, $h = 8$, $d_{ff} = 2048$, $N = 6$ | $d = 128$, $h = 4$, $d_{ff} = 512$, $N = 2$ here; the training recipe uses $d = 32$, $d_{ff} = 128$ |
#
# The paper's learning-rate schedule and label smoothing are in chapter 10; beam search has its
# own chapter, [20](20_beam_search.ipynb).

# %%
enc_layer = ref.encoder.layers[0]  # ref is in eval mode: no dropout
x_demo = torch.randn(2, 5, ref.config.d_model)
with torch.no_grad():
    out_layer, _ = enc_layer(x_demo, None)
    h1 = enc_layer.ln1(x_demo)
    pre = x_demo + enc_layer.mha(h1, h1, h1)[0]  # Pre-Norm: x + f(LayerNorm(x))
    pre = pre + enc_layer.ffn(enc_layer.ln2(pre))
    post = enc_layer.ln1(x_demo + enc_layer.mha(x_demo, x_demo, x_demo)[0])  # Post-Norm
    post = enc_layer.ln2(post + enc_layer.ffn(post))
gap_pre, gap_post = (out_layer - pre).abs().max().item(), (out_layer - post).abs().max().item()
print(
    f"encoder layer vs the Pre-Norm formula: max |diff| {'< 1e-5' if gap_pre < 1e-5 else gap_pre};"
    f"  vs Post-Norm with the same weights: {gap_post:.2f}"
)
print("final LayerNorms:", type(ref.encoder.ln_final).__name__, type(ref.decoder.ln_final).__name__)
print("feed-forward activation:", enc_layer.ffn.net[1])
assert gap_pre < 1e-5 and gap_post > 0.1
assert isinstance(ref.encoder.ln_final, nn.LayerNorm)
assert isinstance(ref.decoder.ln_final, nn.LayerNorm)
assert isinstance(enc_layer.ffn.net[1], nn.GELU)

# %%
matrices = {
    "source embedding": ref.encoder.embed.emb.weight,
    "target embedding": ref.decoder.embed.emb.weight,
    "output projection": ref.out_proj.weight,
}
distinct = len({w.data_ptr() for w in matrices.values()})
linears = [m for m in ref.modules() if isinstance(m, nn.Linear)]
with_bias = sum(m.bias is not None for m in linears)
drops = sorted({m.p for m in ref.modules() if isinstance(m, nn.Dropout)})
cfg = ref.config
print(f"embedding and output matrices: {distinct} distinct tensors")
print(f"nn.Linear layers with a bias: {with_bias} of {len(linears)}")
print(f"dropout p: {drops}; on the attention weights: {enc_layer.mha.attn_drop.p}")
# drop: the attention sub-layer's output; ffn.net.3: the feed-forward's last step
where = [n for n, m in enc_layer.named_modules() if isinstance(m, nn.Dropout)]
print("dropout modules in an encoder layer:", where, "| in the embedding:", ref.encoder.embed.drop)
print(f"this model: d {cfg.d_model}, h {cfg.num_heads}, dff {cfg.dff}, N {cfg.num_layers}")
r = BOOK_RECIPE
print(
    f"BOOK_RECIPE: d {r.d_model}, h {r.num_heads}, dff {r.dff}, N {r.num_layers},"
    f" dropout {r.dropout}"
)
assert distinct == 3 and with_bias == len(linears)
assert sorted(where) == ["drop", "ffn.net.3", "mha.attn_drop"]
assert drops == [0.1] and enc_layer.mha.attn_drop.p == 0.1

# %% [markdown]
# Next, before training anything, chapter 08 turns the two promises these masks make into
# tests: no peeking at the future, no dependence on padding. It also breaks the masks on
# purpose to see the tests fail.
#
# ## Summary
#
# - Three attentions, three masks: source padding for the encoder, causal OR target padding for
#   the decoder's self-attention (`[B, 1, Lt, Lt]`, Figure 7.1), and the source padding mask
#   `[B, 1, 1, Ls]` alone for cross-attention.
# - Masks block *keys*. The singleton dimensions of `[B, 1, 1, L]` make a padding mask
#   broadcast correctly. A `[B, L]` mask lines $B$ up with the queries. That gives a wrong mask
#   and no error when $B = L_q$, and the right mask when $B = 1$ (so a one-sequence check
#   misses the bug). Scores grow to `[B, h, B, L_k]` when $L_q = 1$, and otherwise it is an
#   error.
# - The decoder's causal mask handed to cross-attention raises a clear error whenever
#   $L_t \ne L_s$: `helpers.DecoderLayer` checks the cross-attention mask's shape. Training
#   batches have $L_t = L_s$, so the slip would fail only at the first validation pass. A
#   triangular cross mask built at the legal shape `[B, 1, Lt, Ls]` passes every shape check.
#   It does not blind position 0 to the end of the source, because memory rows mix the whole
#   source. Against the correct mask, its cost in test exact match after 300 steps is not
#   distinguishable with 5 seeds: 0.07 % (95 % interval -0.11 % to 0.24 %).
# - Three conventions (Figure 7.2): ours True = blocked, SDPA True = may attend, Hugging Face
#   1 = keep. Convert once, to `bool`, at the boundary; `~` on an integer mask is a bitwise NOT.
# - The model differs from the paper's base model in Pre-Norm, GELU, three separate embedding
#   and output matrices, biases, Xavier initialisation, dropout on the attention weights and
#   its sizes; the cells read each from the code.
# - The one thing to remember: **a mask bug can run without an error**, and accuracy may not
#   give it away; check the mask itself.
#
# ## Exercises
#
# ### Exercise 7.1 (predict, then run): OR-ing the wrong masks
#
# For cross-attention with $B = 2$, $L_t = 6$ and $L_s = 7$, someone writes
# `cross_mask = src_pad | causal_mask(6)`. What happens? And what happens with the same line
# when $L_t = L_s = 7$?

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
# Solution to exercise 7.1
try:
    src_pad | causal_mask(6)  # [2, 1, 1, 7] | [1, 1, 6, 6]
    raise AssertionError("expected a broadcasting error")
except RuntimeError as e:
    print("L_t = 6, L_s = 7:", type(e).__name__, "|", e)
combined = src_pad | causal_mask(7)
print(
    "L_t = L_s = 7: no error, shape",
    tuple(combined.shape),
    "- target position 0 may read memory rows",
    (~combined[0, 0, 0]).nonzero().flatten().tolist(),
)
assert combined.shape == (2, 1, 7, 7) and (~combined[0, 0, 0]).sum() == 1

# %% [markdown]
# :::{dropdown} Answer to exercise 7.1
# With different lengths the OR itself fails to broadcast; with equal lengths it silently builds
# the wrong mask of this chapter's pitfall.
# :::

# %% [markdown]
# ### Exercise 7.2 (implement): the decoder's self-attention mask
#
# Write `decoder_self_mask(tgt_in)` for `tgt_in [B, L]` that returns the decoder self-attention
# mask in this book's convention: `bool`, True = blocked, shape `[B, 1, L, L]`, blocking every
# key in the future of its query **or** equal to `<pad>` (`PAD_ID` is 0). Do not use `helpers`'
# mask functions. `check_decoder_self_mask(decoder_self_mask)` compares it with the book's mask on
# three inputs, the first with $B \ne L$. When your mask is wrong, it names the usual slips:
# the polarity, the diagonal, `tril` for `triu`, AND for OR, a padding mask left `[B, L]`, a
# float or `uint8` mask, among others.

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 7.2
from helpers.exercises import check_decoder_self_mask


def decoder_self_mask(tgt_in):
    L = tgt_in.size(1)
    future = torch.ones(L, L, dtype=torch.bool, device=tgt_in.device).triu(1)  # key j > query i
    pad_keys = (tgt_in == PAD_ID)[:, None, None, :]  # [B, 1, 1, L]
    return future | pad_keys  # [B, 1, L, L]


check_decoder_self_mask(decoder_self_mask)

# %% [markdown]
# ### Exercise 7.3 (implement): from Hugging Face to SDPA
#
# Write `hf_to_sdpa(attention_mask)` that turns a Hugging Face `attention_mask` (integer
# `[B, L]`, 1 = keep, 0 = padding) into the boolean mask `F.scaled_dot_product_attention` takes:
# True = may attend, shape `[B, 1, 1, L]`. `check_hf_to_sdpa(hf_to_sdpa)` checks three inputs and
# then runs SDPA with your mask against the book's.

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 7.3
from helpers.exercises import check_hf_to_sdpa


def hf_to_sdpa(attention_mask):
    return (attention_mask == 1)[:, None, None, :]  # compare first: a bool, polarity explicit


check_hf_to_sdpa(hf_to_sdpa)

# %% [markdown]
# ### Exercise 7.4 (implement): both masks of one batch
#
# Write `decoder_masks(src, tgt_in)` for `src [B, L_s]` and `tgt_in [B, L_t]` that returns the
# pair `(self_mask, cross_mask)` the decoder takes: `self_mask` as in Exercise 7.2,
# `[B, 1, L_t, L_t]`, and `cross_mask`, the source padding, `[B, 1, 1, L_s]`. Both `bool`, True =
# blocked. `check_decoder_masks(decoder_masks)` compares them on two batches, the first with
# $L_s \ne L_t$. It names the usual slips, such as a mask built from the wrong sequence, a causal
# cross mask or a swapped pair.

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 7.4
from helpers.exercises import check_decoder_masks


def decoder_masks(src, tgt_in):
    cross_mask = (src == PAD_ID)[:, None, None, :]  # [B, 1, 1, L_s]: the source's <pad> keys
    return decoder_self_mask(tgt_in), cross_mask  # the target's <pad> keys, and the future


check_decoder_masks(decoder_masks)
