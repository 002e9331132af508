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
# # Masks and the full model
#
# An encoder-decoder Transformer runs attention in three places, and each needs its own mask:
#
# | attention | queries from | keys from | blocked keys |
# | --- | --- | --- | --- |
# | encoder self-attention | source | source | source padding |
# | decoder self-attention | target | target | the future **or** target padding |
# | cross-attention | target | source (the encoder's memory) | source padding only |
#
# A mask answers one question per (query, key) pair: may this query look at this key? In this book
# a mask is a `bool` tensor in which **True means blocked**, broadcastable to the attention scores
# `[B, h, Lq, Lk]`. Mask bugs rarely crash. The model trains, the loss goes down, and it quietly
# learns to cheat or to read noise. So every pitfall in this chapter is reproduced: you see the
# wrong numbers (or the error), then the fix.
#
# At the end we assemble the whole model, count its 931,213 parameters, and check that
# `helpers.Transformer` builds exactly the masks and logits we built here.

# %%
import math
import warnings

import matplotlib.pyplot as plt
import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers import (
    BOS_ID,
    PAD_ID,
    VOCAB_SIZE,
    Decoder,
    Encoder,
    MultiHeadAttention,
    describe,
    encode_digits,
    from_hf_attention_mask,
    fully_masked_rows,
    to_hf_attention_mask,
    to_sdpa_mask,
)

torch.manual_seed(0)

# %% [markdown]
# ## A small padded batch
#
# Two reversal examples of different lengths. The source is the digits, then `<eos>`, then padding;
# the decoder input (`tgt_in`) is `<bos>` followed by the reversed digits, and it is padded too.
# The source is one column wider than the target here, so that $L_s \ne L_t$, as in most real
# batches.

# %%
def reversal_pair(digits: str, src_width: int, tgt_width: int):
    """src: digits <eos> <pad>...; tgt_in: <bos> reversed digits <eos> <pad>... (cut to tgt_width)."""
    src = encode_digits(digits, width=src_width)
    tgt = torch.cat([torch.tensor([[BOS_ID]]), encode_digits(digits[::-1], width=tgt_width)], dim=1)
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
# and the queries: broadcasting stretches them, so that *no head and no query* may look at a
# padded key.

# %%
def padding_mask(ids: torch.Tensor) -> torch.Tensor:
    return (ids == PAD_ID)[:, None, None, :]  # [B, L] -> [B, 1, 1, L]


src_pad = padding_mask(src)
print("src_pad", tuple(src_pad.shape), src_pad.dtype)
print(src_pad[:, 0, 0].int())

scores_shape = (2, 4, 6, 7)  # [B, h, Lt, Ls]: cross-attention scores with 4 heads
print("broadcast against", scores_shape, "->", tuple(torch.broadcast_shapes(src_pad.shape, scores_shape)))
assert src_pad.shape == (2, 1, 1, 7) and src_pad[1, 0, 0].tolist() == [False] * 4 + [True] * 3

# %% [markdown]
# Why not keep the mask as `[B, L]`? Broadcasting aligns shapes **from the right**: a `[B, L]`
# mask against `[B, h, Lq, Lk]` scores lines `L` up with `Lk` (right) but `B` with `Lq` (wrong).
# When $B \ne L_q$ this is an error. When $B = L_q$ by coincidence it runs, and query $i$ of
# *every* sequence gets the padding of sequence $i$:

# %%
flat = src == PAD_ID  # [B, Ls], the two singleton dims forgotten
scores = torch.zeros(2, 4, 6, 7)  # Lq = 6 != B = 2
try:
    scores.masked_fill(flat, float("-inf"))
    raise AssertionError("expected a broadcasting error")
except RuntimeError as e:
    print(type(e).__name__, "|", e)

scores_lq2 = torch.zeros(2, 4, 2, 7)  # Lq = 2 == B = 2: runs
wrong = scores_lq2.masked_fill(flat, float("-inf")).softmax(-1)
print("sequence 0 (no padding), query 1 attends to:", [f"{x:.2f}" for x in wrong[0, 0, 1].tolist()])
assert (wrong[0, 0, 1, 4:] == 0).all()  # sequence 0 has no padding, yet its query 1 lost 3 keys

# %% [markdown]
# ## The causal mask: `[1, 1, L, L]`
#
# In the decoder, position $i$ predicts token $i+1$, so it may look at positions $\le i$ only. The
# blocked pairs are the ones *above* the diagonal: `torch.triu(..., diagonal=1)`. With
# `diagonal=0` the diagonal would be blocked too and every position would be blind to itself
# (chapter 08 shows what that does).

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
# `[1, 1, Lt, Lt]` broadcast to `[B, 1, Lt, Lt]`: one mask per sequence, shared by all heads.

# %%
tgt_pad = padding_mask(tgt_in)
self_mask = causal | tgt_pad
print("tgt_pad", tuple(tgt_pad.shape), "| causal", tuple(causal.shape), "->", tuple(self_mask.shape))


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
# The same three masks as pictures, for the padded example. Dark cells are blocked.

# %%
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
plt.tight_layout()
plt.show()

# %% [markdown]
# A padded *query* row (the last row, `<pad>`) is not blocked by the padding mask: only padded
# *keys* are. That is deliberate. The output at a padded query position is garbage that nobody
# reads: other positions never attend to it (it is a blocked key for them) and the loss ignores
# it (`ignore_index`, chapter on training). Blocking padded rows as well would only create rows
# with nothing to attend to, which is its own trap (see "A fully masked row" below).
#
# ## Which mask does cross-attention take?
#
# Cross-attention's queries come from the decoder, its keys and values from the encoder's memory.
# What a mask blocks are *keys*, so the mask must describe the source: the source padding mask
# `[B, 1, 1, Ls]`, the very tensor the encoder used. Every target position may look at every real
# source token; "the future" means nothing for the source, which is fully known.
#
# We use a small `MultiHeadAttention` (from `helpers`, chapter 03) in eval mode, random inputs
# standing in for the decoder states and the memory.

# %%
d_model, heads = 32, 2
mha = MultiHeadAttention(d_model, heads, dropout=0.0).eval()
x_tgt = torch.randn(2, tgt_in.size(1), d_model)  # [B, Lt, d]
memory = torch.randn(2, src.size(1), d_model)  # [B, Ls, d]

with torch.no_grad():
    out, w = mha(x_tgt, memory, memory, attn_mask=src_pad)
print("cross-attention out", tuple(out.shape), "weights", tuple(w.shape))
print("weight on the padded keys of sequence 1:", w[1, :, :, 4:].abs().max().item())
assert w.shape == (2, heads, 6, 7)
assert (w[1, :, :, 4:] == 0).all()  # no query of any head looks at <pad>
torch.testing.assert_close(w.sum(-1), torch.ones(2, heads, 6))

# %% [markdown]
# ### The pitfall: passing the causal mask to cross-attention
#
# The decoder layer has two masks at hand, and handing the causal one to cross-attention is an
# easy slip. When $L_t \ne L_s$ the shapes `[1, 1, Lt, Lt]` and `[B, h, Lt, Ls]` do not broadcast,
# and you get an error, which is the lucky case:

# %%
try:
    with torch.no_grad():
        mha(x_tgt, memory, memory, attn_mask=causal_mask(tgt_in.size(1)))
    raise AssertionError("expected an error")
except RuntimeError as e:
    print(type(e).__name__, "|", e)

# %% [markdown]
# When $L_t = L_s$ (equal-length sequences, or everything padded to one fixed width) it runs
# without a word. Target position $i$ can then read source positions $0..i$ only. Below, source
# and target both have 6 positions: compare what each target query may see under the right mask
# and under the causal one.

# %%
x6, mem6 = torch.randn(1, 6, d_model), torch.randn(1, 6, d_model)
src6 = encode_digits("31415", width=6)  # no padding: every source key is real
with torch.no_grad():
    _, w_right = mha(x6, mem6, mem6, attn_mask=padding_mask(src6))
    _, w_wrong = mha(x6, mem6, mem6, attn_mask=causal_mask(6))
print("which source keys get weight > 0 (head 0), right mask | causal mask by mistake")
for i in range(6):
    print(f"  target pos {i}:  {(w_right[0, 0, i] > 0).int().tolist()}  |  {(w_wrong[0, 0, i] > 0).int().tolist()}")
assert (w_right > 0).all()
assert (w_wrong[0, :, 0, 1:] == 0).all()

# %% [markdown]
# In the reversal task this is fatal for the first output: position 0 (`<bos>`) must produce the
# **last** source digit, and with the causal mask it can only see the first one. The model still
# trains and its loss still falls on the later positions, so nothing points at the bug. A one-line
# guard catches it: assert that the cross-attention mask's last dimension equals $L_s$ and its
# query dimension is 1 (`helpers.Transformer` always passes the `[B, 1, 1, Ls]` source mask).
#
# ## Three conventions for the same mask
#
# Libraries disagree on what `True` (or `1`) means:
#
# | who | type and shape | meaning |
# | --- | --- | --- |
# | this book | `bool`, broadcastable to `[B, h, Lq, Lk]` | `True` = **blocked** |
# | `F.scaled_dot_product_attention` | `bool` (or float, added to the scores) | `True` = **may attend** |
# | Hugging Face `attention_mask` | integer `[B, L]`, one value per key | `1` = **attend**, `0` = padding |
# | `torch.nn.Transformer`, `nn.MultiheadAttention` | `bool` (or float, added) | `True` = **blocked** (chapter 15) |
#
# `helpers` has a converter for each direction that crosses a boundary. We check that all three
# conventions give the same attention output for the decoder self-attention mask built above.

# %%
B, h, L, d_k = 2, 4, tgt_in.size(1), 8
Q, K, V = torch.randn(B, h, L, d_k), torch.randn(B, h, L, d_k), torch.randn(B, h, L, d_k)


def attention_ours(Q, K, V, mask):
    """Our convention: bool, True = blocked."""
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.size(-1))
    scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)
    return scores.softmax(-1) @ V


ours = attention_ours(Q, K, V, self_mask)

# SDPA: True = may attend
sdpa = F.scaled_dot_product_attention(Q, K, V, attn_mask=to_sdpa_mask(self_mask))

# Hugging Face: an integer [B, L] mask, 1 = attend; back to ours with the converter
hf_mask = to_hf_attention_mask(tgt_in)
print("Hugging Face attention_mask:\n", hf_mask)
hf_as_ours = from_hf_attention_mask(hf_mask) | causal
assert torch.equal(hf_as_ours, self_mask)

# ... and what Hugging Face models do with it inside: an additive float mask (0 or a huge negative)
neg = torch.finfo(torch.float32).min
hf_additive = (1 - hf_mask)[:, None, None, :].float() * neg + causal.float() * neg
assert hf_additive.isinf().any()  # padding AND future: two huge negatives overflow to -inf
hf_additive = hf_additive.clamp(min=neg)
sdpa_hf = F.scaled_dot_product_attention(Q, K, V, attn_mask=hf_additive)

for name, t in [("SDPA, bool True = attend", sdpa), ("Hugging Face, from_hf_attention_mask", attention_ours(Q, K, V, hf_as_ours)),
                ("Hugging Face-style additive float", sdpa_hf)]:
    torch.testing.assert_close(t, ours)
    print(f"{name:<40} == ours")

# %% [markdown]
# The `clamp` in that cell keeps the additive mask finite. A key that is both padding and in the
# future gets two huge negatives, and $2 \times$ `finfo.min` overflows float32 to `-inf` (the
# cell asserts it). Here that is harmless, because every row keeps a visible key; in a row where
# every key is blocked, `-inf` brings back the NaN of the section on fully masked rows below.
# Combining the booleans first (`|`) and converting once, as `helpers` does, avoids the question.
#
# Now the classic mistake: our mask handed to SDPA **without** flipping it. Every visible key
# becomes blocked and every blocked one visible. Nothing complains:

# %%
flipped = F.scaled_dot_product_attention(Q, K, V, attn_mask=self_mask)  # forgot to_sdpa_mask
print(f"max |difference| from the correct output: {(flipped - ours).abs().max().item():.1f}")
assert not torch.allclose(flipped, ours, atol=1e-3)

# %% [markdown]
# A quieter variant: a 0/1 **float** mask (say, `mask.float()`, or one built with NumPy). SDPA
# treats a float mask as something to **add** to the scores, so "1 = blocked" adds $+1$ to the
# blocked scores: nothing is blocked and the future even gets a bonus. The cell computes the
# attention weights by hand with that addition and shows the weight query 0 puts on future keys.

# %%
float01 = self_mask.float()  # 1.0 = blocked, meant as a filter
sdpa_float01 = F.scaled_dot_product_attention(Q, K, V, attn_mask=float01)
weights_added = (Q @ K.transpose(-2, -1) / math.sqrt(d_k) + float01).softmax(-1)
torch.testing.assert_close(sdpa_float01, weights_added @ V)  # SDPA really added it
future_weight = weights_added[0, :, 0, 1:].sum(-1)
print("weight that query 0 puts on future keys, per head:", [f"{x:.2f}" for x in future_weight.tolist()])
assert (future_weight > 0.5).all() and not torch.allclose(sdpa_float01, ours, atol=1e-3)

# %% [markdown]
# ## uint8 masks and bitwise operators
#
# Masks that come from outside (a tokenizer, NumPy, an older codebase) are often `uint8` or
# `int64` with `1 = attend`. Three things go wrong with them.
#
# **1. `masked_fill` refuses them.** Old PyTorch versions accepted `uint8` masks with a deprecation
# warning; this one raises:

# %%
keep_u8 = (tgt_in != PAD_ID).to(torch.uint8)  # 1 = attend, the Hugging Face polarity
scores = Q @ K.transpose(-2, -1)
try:
    scores.masked_fill(keep_u8[:, None, None, :], 0.0)
    raise AssertionError("expected an error")
except RuntimeError as e:
    print(type(e).__name__, "|", e)

# %% [markdown]
# **2. `~` is a bitwise NOT, not a logical one.** On a bool tensor `~` swaps True and False.
# On integers it flips all the bits: for `uint8`, 1 becomes 254 and 0 becomes 255; for Hugging
# Face's `int64`, 1 becomes -2 and 0 becomes -1. Every value is non-zero, so "inverting a keep-mask
# into a blocked-mask" with `~` and then `.bool()` blocks **everything**:

# %%
print("keep_u8[1]         :", keep_u8[1].tolist())
print("~keep_u8[1]        :", (~keep_u8[1]).tolist())
print("~hf_mask[1] (int64):", (~hf_mask[1]).tolist())
blocked_wrong = (~keep_u8).bool()[:, None, None, :]
print("blocked by (~keep_u8).bool():", blocked_wrong[1, 0, 0].tolist())
assert (~keep_u8).min() == 254 and blocked_wrong.all()

# every key blocked: the -inf softmax has nothing to normalise over
bad = (scores.masked_fill(blocked_wrong, float("-inf"))).softmax(-1)
print("NaN in the attention weights:", bad.isnan().all().item())
assert bad.isnan().all()

# %% [markdown]
# **3. Adding or OR-ing keep-masks.** With `1 = attend`, two masks must be combined with AND:
# a key is visible only if *both* allow it. Adding them gives values 0, 1 and 2 (2 where both
# allow), and `|` lets a key through when *either* allows it, so every real token in the future
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
# **The fix:** convert to `bool` once, at the boundary where the mask enters your code, with the
# comparison that states its polarity, then combine with the operator of *that* polarity. In our
# convention that is `mask = (hf_mask == 0)` (or `keep.bool()` followed by the logical `~`) and
# `|`. `helpers.MultiHeadAttention` refuses anything but `bool`, with a message that says so:

# %%
blocked = keep_u8 == 0  # bool, True = blocked: the polarity is explicit in the comparison
fixed = blocked[:, None, None, :] | causal
assert fixed.dtype == torch.bool and torch.equal(fixed, self_mask)
assert torch.equal(~keep_u8.bool(), blocked)  # .bool() first, then ~ is a logical NOT

try:
    mha(x6, x6, x6, attn_mask=keep_u8[:1, None, None, :])
    raise AssertionError("expected a TypeError")
except TypeError as e:
    print(type(e).__name__, "|", e)

# %% [markdown]
# ## A fully masked row, and the NaN it causes
#
# If every key in a query's row is blocked, softmax has nothing to normalise over. With `-inf`
# in the masked places, $e^{-\infty} = 0$ everywhere and the row is $0/0$ = NaN.
#
# Such rows are easy to create. Left padding (padding at the *start*, common in decoder-only
# batched generation) does it with the ordinary causal-or-padding mask: a leading `<pad>` query
# may only look at itself and earlier positions, all of them padding.

# %%
tgt_left = torch.tensor([[PAD_ID, PAD_ID, BOS_ID, 9, 5, 12]])  # left-padded decoder input
left_mask = causal_mask(6) | padding_mask(tgt_left)
print(describe(tgt_left[0]))
show_mask(left_mask[0, 0], tgt_left[0], tgt_left[0])
rows = fully_masked_rows(left_mask)
print("fully masked query rows:", rows[0, 0].nonzero().flatten().tolist())
assert rows[0, 0].tolist() == [True, True, False, False, False, False]

# %%
Q1, K1, V1 = torch.randn(1, 1, 6, 8), torch.randn(1, 1, 6, 8), torch.randn(1, 1, 6, 8)
raw = Q1 @ K1.transpose(-2, -1) / math.sqrt(8)
w_inf = raw.masked_fill(left_mask, float("-inf")).softmax(-1)
print("weights with -inf, rows 0-2:")
print(w_inf[0, 0, :3].round(decimals=2))
assert w_inf[0, 0, :2].isnan().all() and not w_inf[0, 0, 2:].isnan().any()

# %% [markdown]
# "It is only the padding rows" is not a comfort, because NaN spreads. In the next layer the NaN
# rows become keys and values. They are masked there (they are padding), so their weight is an
# exact 0, but $0 \times \text{NaN} = \text{NaN}$ in the matrix product: every query's output
# turns NaN, including the ones that never looked at padding.

# %%
h_next = torch.nan_to_num(w_inf @ V1)  # a clean copy for the valid rows ...
h_next[0, 0, :2] = float("nan")  # ... and the NaN rows the first layer produced
w2 = raw.masked_fill(left_mask, torch.finfo(raw.dtype).min).softmax(-1)  # a perfectly safe softmax
print("weight of query 5 on the NaN keys 0 and 1:", w2[0, 0, 5, :2].tolist())
spread = w2 @ h_next
print("rows of the next layer that are NaN:", spread[0, 0].isnan().any(-1).int().tolist())
assert (w2[0, 0, 5, :2] == 0).all() and spread[0, 0].isnan().any(-1).all()

# %% [markdown]
# **Fix 1: `finfo.min` instead of `-inf`.** The smallest finite float keeps the softmax finite: in
# a row where everything is blocked, every score is equally tiny, so the row becomes *uniform*:
# no NaN, but the query now reads keys it was never meant to see. (Chapter 03 explains why not
# `-1e9`: in fp16 it overflows to `-inf` and you are back to NaN.)

# %%
w_min = raw.masked_fill(left_mask, torch.finfo(raw.dtype).min).softmax(-1)
print("weights with finfo.min, row 0:", [f"{x:.3f}" for x in w_min[0, 0, 0].tolist()])
assert not w_min.isnan().any()
torch.testing.assert_close(w_min[0, 0, 0], torch.full((6,), 1 / 6))

# %% [markdown]
# **Fix 2: give such rows no attention at all.** `F.scaled_dot_product_attention` returns zeros
# for a fully masked row, and `helpers.MultiHeadAttention` does the same on its handwritten path
# (it zeroes the weights of fully masked rows after the softmax), so both of its paths compute the
# same function there too. We check it on the internals (the attention output before the output
# projection) and on the public `forward`, where a zero attention result leaves just the bias of
# `W_o`.

# %%
sdpa_rows = F.scaled_dot_product_attention(Q1, K1, V1, attn_mask=~left_mask)
print("SDPA output, rows 0-1 (first 4 dims):", sdpa_rows[0, 0, :2, :4].tolist())
assert (sdpa_rows[0, 0, :2] == 0).all()

mha8 = MultiHeadAttention(8, 1, dropout=0.0).eval()
by_hand, w_hand = mha8._attention_by_hand(Q1, K1, V1, left_mask)
assert (by_hand[0, 0, :2] == 0).all() and (w_hand[0, 0, :2] == 0).all()
torch.testing.assert_close(by_hand, sdpa_rows)

x = torch.randn(1, 6, 8)
with torch.no_grad():
    out_hand, _ = mha8(x, x, x, attn_mask=left_mask, need_weights=True)
    out_sdpa, _ = mha8(x, x, x, attn_mask=left_mask, need_weights=False)
torch.testing.assert_close(out_hand, out_sdpa)
torch.testing.assert_close(out_hand[0, :2], mha8.W_o.bias.detach().expand(2, 8))
print("both paths of MultiHeadAttention agree; the fully masked rows are W_o(0) = its bias")

# %% [markdown]
# In this book's reversal task fully masked rows do not arise: padding is on the right, and every
# decoder query can see at least `<bos>`. The zero rows are a guard, not a feature we depend on.
#
# ## Xavier initialisation
#
# PyTorch initialises `nn.Linear` with Kaiming-uniform, $a = \sqrt 5$, which works out to
# $U(-1/\sqrt{n_{in}},\ 1/\sqrt{n_{in}})$ and a standard deviation of $1/\sqrt{3 n_{in}}$.
# Xavier (Glorot) uniform draws from $U(-a, a)$ with $a = \sqrt{6/(n_{in}+n_{out})}$: standard
# deviation $\sqrt{2/(n_{in}+n_{out})}$. `nn.Transformer` applies `xavier_uniform_` to every
# matrix it owns, and so do The Annotated Transformer and this book (for every `nn.Linear`). For a
# 128x128 layer, measured:

# %%
torch.manual_seed(0)
lin_default = nn.Linear(128, 128)
lin_xavier = nn.Linear(128, 128)
nn.init.xavier_uniform_(lin_xavier.weight)

theory = {"default": 1 / math.sqrt(3 * 128), "xavier": math.sqrt(2 / (128 + 128))}
measured = {"default": lin_default.weight.std().item(), "xavier": lin_xavier.weight.std().item()}
for k in theory:
    print(f"{k:<8} weight std: measured {measured[k]:.4f}, formula {theory[k]:.4f}")
    assert abs(measured[k] / theory[k] - 1) < 0.03
print(f"ratio xavier/default: {measured['xavier'] / measured['default']:.2f}")

# %% [markdown]
# What that does to a signal: the default shrinks a unit-variance input by about $1/\sqrt 3$ per
# layer, Xavier keeps it near 1 (for a square layer). Through a stack of linear maps the
# difference compounds. The Transformer's residual connections and LayerNorms soften this, but not
# everywhere: an attention score is the product of *two* projections, $q \cdot k$, so it shrinks by
# about $(1/\sqrt 3)^2 = 1/3$, and the softmax starts out flatter than with Xavier (second cell
# below). The chapter on correct code that learns slowly measures what the default initialisation
# costs in training.

# %%
x = torch.randn(4096, 128)
with torch.no_grad():
    for name, init in [("default", None), ("xavier", nn.init.xavier_uniform_)]:
        torch.manual_seed(1)
        h = x
        stds = []
        for _ in range(6):
            lin = nn.Linear(128, 128, bias=False)
            if init is not None:
                init(lin.weight)
            h = lin(h)
            stds.append(h.std().item())
        print(f"{name:<8} output std after layers 1..6:", [round(s, 2) for s in stds])
        if name == "default":
            assert 0.5 < stds[0] < 0.65 and stds[-1] < 0.1
        else:
            assert 0.9 < stds[0] < 1.1 and 0.6 < stds[-1] < 1.5

# %%
torch.manual_seed(2)
x = torch.randn(1, 64, 128)  # 64 unit-variance token vectors
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
# ## The full model
#
# Everything is in place: the embeddings (chapter 02), the encoder (chapter 05) and decoder
# (chapter 06) stacks, and the masks from this chapter. The model splits into `encode` and
# `decode` because at inference the encoder runs once while the decoder runs once per generated
# token (the greedy decoding chapter reuses `memory`). `decode` builds the decoder self-attention
# mask from `tgt_in` itself, and cross-attention receives the **source** padding mask that
# `encode` returned.

# %%
class MyTransformer(nn.Module):
    def __init__(self, src_vocab, tgt_vocab, d_model=128, num_heads=4, dff=512, num_layers=2, max_len=64,
                 dropout=0.1):
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
        self_mask = causal_mask(tgt_in.size(1), tgt_in.device) | padding_mask(tgt_in)  # [B, 1, Lt, Lt]
        h, cross_weights = self.decoder(tgt_in, memory, self_mask, src_mask)  # cross: the source mask
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
print("src", tuple(src.shape), "-> memory", tuple(memory.shape), "+ src_mask", tuple(src_mask.shape))
print("tgt_in", tuple(tgt_in.shape), "-> logits", tuple(logits.shape))
print("cross-attention weights:", [tuple(w.shape) for w in cross_weights])
assert logits.shape == (2, 6, VOCAB_SIZE) and len(cross_weights) == 2

# %% [markdown]
# ### 931,213 parameters
#
# We count them twice: once by asking the module, once from the shapes with pen-and-paper
# formulas. A disagreement would mean a layer is missing (say, a Python list instead of an
# `nn.ModuleList`, chapter 05) or duplicated.

# %%
n_params = sum(p.numel() for p in model.parameters())
d, dff, V, N = 128, 512, VOCAB_SIZE, 2
attn = 4 * (d * d + d)  # W_q, W_k, W_v, W_o with biases
ffn = (d * dff + dff) + (dff * d + d)
ln = 2 * d  # gain and bias
by_formula = {
    "embeddings (src + tgt)": 2 * V * d,  # sinusoidal positions are a buffer, not parameters
    "encoder layers": N * (attn + ffn + 2 * ln),
    "decoder layers": N * (2 * attn + ffn + 3 * ln),
    "final LayerNorms": 2 * ln,
    "output projection": d * V + V,
}
by_module = {
    "embeddings (src + tgt)": model.encoder.embed, "encoder layers": model.encoder.layers,
    "decoder layers": model.decoder.layers, "output projection": model.out_proj,
}
for name, count in by_formula.items():
    mod = by_module.get(name)
    counted = (sum(p.numel() for p in mod.parameters()) if mod is not None
               else sum(p.numel() for m in (model.encoder.ln_final, model.decoder.ln_final) for p in m.parameters()))
    if name == "embeddings (src + tgt)":
        counted += sum(p.numel() for p in model.decoder.embed.parameters())
    print(f"{name:<24} {count:>9,}")
    assert counted == count, (name, counted, count)
print(f"{'total':<24} {n_params:>9,}")
assert n_params == sum(by_formula.values()) == 931_213

ffn_share = 2 * N * ffn / n_params  # one FFN per encoder layer and per decoder layer
print(f"share of the feed-forward blocks: {ffn_share:.1%}; of the embeddings: {2 * V * d / n_params:.1%}")
assert ffn_share > 0.5

# %% [markdown]
# The feed-forward blocks hold more than half of all parameters; the embeddings, with a
# 13-token vocabulary, hardly count.
#
# ## Check against `helpers`
#
# `helpers.Transformer` is this model, finished and tested. Two checks: (1) with our weights
# loaded, it computes the same logits and cross-attention weights; (2) the masks its `encode` and
# `decode` build are exactly the ones we built by hand. We catch those with forward pre-hooks on
# its encoder and decoder, which see the arguments they are called with.

# %%
from helpers import Transformer, count_parameters

ref = Transformer(VOCAB_SIZE, VOCAB_SIZE).eval()
ref.load_state_dict(model.state_dict())  # strict: same module names, same shapes
assert count_parameters(ref) == n_params == 931_213

seen = {}
hooks = [
    ref.encoder.register_forward_pre_hook(lambda mod, args: seen.update(enc_mask=args[1])),
    ref.decoder.register_forward_pre_hook(lambda mod, args: seen.update(self_mask=args[2], cross_mask=args[3])),
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
print("masks: encoder", tuple(seen["enc_mask"].shape), "| decoder self", tuple(seen["self_mask"].shape),
      "| cross", tuple(seen["cross_mask"].shape))
print("helpers.Transformer == MyTransformer: same masks, same logits, same cross-attention weights")

# %% [markdown]
# Next, before training anything, chapter 08 turns the two promises these masks make (no peeking
# at the future, no dependence on padding) into tests, and breaks the masks on purpose to see the
# tests fail.
