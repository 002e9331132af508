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
# # 3. Multi-head attention
#
# Attention is the only place in a Transformer where positions exchange information.
# Everything else (embeddings, feed-forward networks, LayerNorms) treats each position on
# its own. It is also the densest piece of code in the model: one formula,
#
# $$
# \operatorname{Attention}(Q, K, V) = \operatorname{softmax}\!\left(\frac{Q K^\top}{\sqrt{d_k}}\right) V,
# $$
#
# becomes a sequence of projections, reshapes, transposes and masks on 4-D tensors, and
# each step has a way to go silently wrong. This chapter computes one head by hand,
# measures why the $\sqrt{d_k}$ is there, splits and merges heads with every shape
# printed, reproduces the two classic PyTorch errors (`view` after `transpose`, and
# `-1e9` in half precision), and ends with a module that matches both
# `torch.nn.MultiheadAttention` and `helpers.MultiHeadAttention` to float precision.

# %%
import math

import matplotlib.pyplot as plt
import torch
import torch.nn as nn
import torch.nn.functional as F

import helpers
from helpers import PAD_ID, VOCAB_SIZE, describe

# %% [markdown]
# ## One head, by hand
#
# Start from real inputs: the reversal source `7 3 0 <eos>`, embedded with the module of
# chapter 02 at a toy width $d = 8$. One attention head projects each token vector three
# ways:
#
# - a **query** $q_i$: what position $i$ is looking for;
# - a **key** $k_j$: what position $j$ offers to be found by;
# - a **value** $v_j$: what position $j$ hands over if it is chosen.
#
# The score of query $i$ against key $j$ is their dot product, scaled by $1/\sqrt{d_k}$;
# a softmax over $j$ turns each row of scores into weights that sum to 1; and the output
# for position $i$ is the weighted average of the values.

# %%
torch.manual_seed(0)
ids = helpers.encode_digits("730")  # [1, 4]: digits 7 3 0, then <eos>
embed = helpers.TokenAndPosition(VOCAB_SIZE, d_model=8, max_len=16).eval()
x = embed(ids)[0].detach()  # [L, d] = [4, 8]: one sequence, no batch dim yet
print("tokens:", describe(ids[0]), "  ids:", tuple(ids.shape), "  x:", tuple(x.shape))

d_k = 4
W_q, W_k, W_v = (nn.Linear(8, d_k) for _ in range(3))
with torch.no_grad():
    Q, K, V = W_q(x), W_k(x), W_v(x)
print("Q:", tuple(Q.shape), " K:", tuple(K.shape), " V:", tuple(V.shape), "  [L, d_k]")

scores = Q @ K.T / math.sqrt(d_k)  # [Lq, Lk]: scores[i, j] = q_i . k_j / sqrt(d_k)
weights = scores.softmax(dim=-1)   # normalise each row over the keys
out = weights @ V                  # [Lq, d_k]
print("scores:", tuple(scores.shape), " weights:", tuple(weights.shape), " out:", tuple(out.shape))
print("weights (row = query, column = key):")
print(weights.numpy().round(2))

torch.testing.assert_close(weights.sum(dim=-1), torch.ones(4))
assert (weights > 0).all()

# %% [markdown]
# Every weight is positive and every row sums to 1 (asserted), so each output row is a
# *convex combination* of the value rows. The matrix product hides that; written as a
# loop for the first query it is plain:

# %%
by_loop = sum(weights[0, j] * V[j] for j in range(4))
print("out[0]           =", out[0].numpy().round(3))
print("sum_j w[0,j] V[j] =", by_loop.numpy().round(3))
torch.testing.assert_close(out[0], by_loop)

# %% [markdown]
# ## Why divide by $\sqrt{d_k}$
#
# Suppose the components of $q$ and $k$ are independent with mean 0 and variance 1. Then
# $q \cdot k = \sum_{i=1}^{d_k} q_i k_i$ is a sum of $d_k$ terms of variance 1, so its
# variance is $d_k$: the scores grow with the head width. The softmax is not scale-free:
# large scores make it nearly one-hot. A nearly one-hot softmax passes almost no gradient
# back to the scores (its Jacobian $\operatorname{diag}(p) - p p^\top$ vanishes when $p$
# is one-hot), so the model struggles to learn *where* to look. Dividing by $\sqrt{d_k}$
# brings the variance back to 1 whatever the head width.
#
# Measure it: random unit-variance queries against 16 random keys, for $d_k$ = 16, 64
# and 256, without and with the scale. For each case the cell prints the variance of the
# scores, the mean largest softmax weight (uniform would be $1/16 \approx 0.06$), the
# share of rows where one key takes over 99 % of the weight, the mean entropy of the
# weights (uniform: $\ln 16 \approx 2.77$ nats), and the mean size of the softmax's
# Jacobian, i.e. how much gradient reaches the scores.

# %%
def softmax_stats(scores):
    """scores [n, Lk] -> variance, mean max weight, share saturated, mean entropy, mean Jacobian norm."""
    p = scores.softmax(dim=-1)
    entropy = -(p * p.clamp_min(1e-45).log()).sum(-1)
    jacobian = torch.diag_embed(p) - p[:, :, None] * p[:, None, :]  # d softmax / d scores
    top = p.max(dim=-1).values
    return (scores.var().item(), top.mean().item(), (top > 0.99).float().mean().item(),
            entropy.mean().item(), jacobian.norm(dim=(-2, -1)).mean().item())


torch.manual_seed(0)
n, Lk = 4000, 16
stats = {}
print(f"{'d_k':>4s} {'scale':>10s} {'var(q.k)':>9s} {'max weight':>11s} {'>0.99':>6s} {'entropy':>8s} {'|Jacobian|':>11s}")
for dk in (16, 64, 256):
    q, k = torch.randn(n, 1, dk), torch.randn(n, Lk, dk)
    raw = (q @ k.transpose(-2, -1)).squeeze(1)  # [n, Lk]
    for scale, s in (("none", raw), ("1/sqrt(dk)", raw / math.sqrt(dk))):
        stats[dk, scale] = st = softmax_stats(s)
        print(f"{dk:4d} {scale:>10s} {st[0]:9.1f} {st[1]:11.2f} {st[2]:6.0%} {st[3]:8.2f} {st[4]:11.2f}")

for dk in (16, 64, 256):
    assert abs(stats[dk, "none"][0] / dk - 1) < 0.05          # variance = d_k
    assert abs(stats[dk, "1/sqrt(dk)"][0] - 1) < 0.05          # variance = 1
    assert abs(stats[dk, "1/sqrt(dk)"][1] - stats[16, "1/sqrt(dk)"][1]) < 0.02  # same softmax at any d_k
assert stats[16, "none"][1] < stats[64, "none"][1] < stats[256, "none"][1]  # saturation grows with d_k
assert stats[256, "none"][2] > 0.5 and stats[256, "1/sqrt(dk)"][2] < 0.01
assert stats[256, "none"][4] < 0.4 * stats[256, "1/sqrt(dk)"][4]             # a third of the gradient

# %% [markdown]
# Without the scale, the variance grows linearly with $d_k$, and at $d_k = 256$ more than
# half of the rows are already one-hot (over 99 % on one key) before any training, and
# about a third of the gradient is left. With the scale, every column is the same at every
# width: the softmax sees scores of variance 1. The plot sweeps $d_k$ from 4 to 512.

# %%
torch.manual_seed(0)
dks = [4, 8, 16, 32, 64, 128, 256, 512]
curves = {"none": [], "1/sqrt(dk)": []}
for dk in dks:
    q, k = torch.randn(1000, 1, dk), torch.randn(1000, Lk, dk)
    raw = (q @ k.transpose(-2, -1)).squeeze(1)
    curves["none"].append(softmax_stats(raw))
    curves["1/sqrt(dk)"].append(softmax_stats(raw / math.sqrt(dk)))

fig, axes = plt.subplots(1, 3, figsize=(12, 3.3))
for (col, title, ylabel), ax in zip([(0, "variance of the scores", "var"),
                                     (1, "mean largest softmax weight", "max weight"),
                                     (4, "gradient through the softmax", "mean |Jacobian|")], axes):
    for scale, marker in (("none", "o"), ("1/sqrt(dk)", "s")):
        ax.plot(dks, [c[col] for c in curves[scale]], marker=marker, label=f"scale: {scale}")
    ax.set(title=title, xlabel="d_k", ylabel=ylabel, xscale="log")
    ax.set_xticks(dks, [str(v) for v in dks])
axes[0].set_yscale("log")
axes[0].legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# The scale is $\sqrt{d_k}$, the width of **one head**, not $\sqrt{d}$ of the whole
# model. Dividing by $\sqrt{d} = \sqrt{h\, d_k}$ is a common slip; it does not crash, it
# just shrinks the score variance to $1/h$ and makes every head's attention flatter than
# intended:

# %%
h = 4
dk = 32
q, k = torch.randn(20000, dk), torch.randn(20000, dk)
v_wrong = ((q * k).sum(-1) / math.sqrt(h * dk)).var().item()
print(f"var(q.k / sqrt(d_model)) with h={h}: {v_wrong:.2f}  (1/h = {1 / h})")
assert abs(v_wrong - 1 / h) < 0.02

# %% [markdown]
# ## Many heads: split, attend, merge
#
# One head can express one pattern of "who looks at whom". Multi-head attention runs $h$
# heads side by side, each in its own $d_k = d/h$-dimensional subspace, and concatenates
# the results. It costs no more than one wide head: the four projections are still
# $d \times d$ matrices, and the heads are just a different way of *reading* their
# outputs. The trick is in the shapes: the head dimension is split off the feature
# dimension and moved next to the batch dimension, so that one batched matrix product
# computes all heads at once. Follow the shapes with $B = 2$ sequences of $L = 5$ tokens
# (the first ends in two `<pad>`), embedded at $d = 16$, and $h = 4$ heads:

# %%
torch.manual_seed(0)
B, L, d, h = 2, 5, 16, 4
d_k = d // h
tokens = torch.tensor([[5, 6, 7, PAD_ID, PAD_ID],
                       [5, 6, 7, 8, 9]])
x = helpers.TokenAndPosition(VOCAB_SIZE, d, max_len=16).eval()(tokens).detach()
W_q, W_k, W_v, W_o = (nn.Linear(d, d) for _ in range(4))

with torch.no_grad():
    q = W_q(x)
    print(f"x, W_q(x)                    {tuple(q.shape)}      [B, L, d]")
    q4 = q.view(B, L, h, d_k)
    print(f".view(B, L, h, d_k)          {tuple(q4.shape)}   [B, L, h, d_k]")
    Q = q4.transpose(1, 2)
    print(f".transpose(1, 2)             {tuple(Q.shape)}   [B, h, L, d_k]")
    K = W_k(x).view(B, L, h, d_k).transpose(1, 2)
    V = W_v(x).view(B, L, h, d_k).transpose(1, 2)
    scores = Q @ K.transpose(-2, -1) / math.sqrt(d_k)
    print(f"Q @ K^T / sqrt(d_k)          {tuple(scores.shape)}   [B, h, Lq, Lk]")
    weights = scores.softmax(dim=-1)
    heads = weights @ V
    print(f"softmax(...) @ V             {tuple(heads.shape)}   [B, h, Lq, d_k]")
    merged = heads.transpose(1, 2).reshape(B, L, d)
    print(f".transpose(1, 2).reshape     {tuple(merged.shape)}      [B, L, d]")
    y = W_o(merged)
    print(f"W_o(...)                     {tuple(y.shape)}      [B, L, d]")

assert y.shape == x.shape

# %% [markdown]
# Two checks make the bookkeeping concrete. Head $i$ uses exactly the columns
# $i\,d_k$ to $(i+1)\,d_k - 1$ of the projected features; and the merged tensor is the
# concatenation of the heads' outputs along the feature dimension, position by position.

# %%
for i in range(h):
    assert torch.equal(Q[:, i], q[..., i * d_k:(i + 1) * d_k])
assert torch.equal(merged, torch.cat([heads[:, i] for i in range(h)], dim=-1))
print("head i == columns [i*d_k, (i+1)*d_k) of W_q(x): True;  merged == cat(heads, dim=-1): True")

# %% [markdown]
# ### `view` versus `reshape`
#
# The split uses `view` and the merge uses `reshape`, and the difference matters.
# `view` never copies: it reinterprets the same memory with new strides, which only works
# when the requested shape can be expressed as strides over that memory. The output of a
# linear layer is *contiguous* (stored row after row), so viewing `[B, L, d]` as
# `[B, L, h, d_k]` is fine. `transpose` also does not copy: it swaps two strides, and the
# result is no longer contiguous. Merging the heads of such a tensor with `view` fails:

# %%
t = heads.transpose(1, 2)  # [B, L, h, d_k], a view with swapped strides
print("heads.is_contiguous():", heads.is_contiguous(), "  strides", heads.stride())
print("t.is_contiguous():    ", t.is_contiguous(), "  strides", t.stride())
try:
    t.view(B, L, d)
except RuntimeError as err:
    print("\nt.view(B, L, d) ->", type(err).__name__ + ":", err)
    caught = err
assert not t.is_contiguous() and "view size is not compatible" in str(caught)

# %% [markdown]
# The fixes are `t.contiguous().view(...)`, which copies the data into a fresh contiguous
# block first, or `t.reshape(...)`, which returns a view when it can and copies when it
# must. Both give the same result; here `reshape` had to copy (new memory), whereas the
# `view` in the split shared memory with the linear layer's output.

# %%
fixed_a = t.contiguous().view(B, L, d)
fixed_b = t.reshape(B, L, d)
assert torch.equal(fixed_a, fixed_b) and torch.equal(fixed_b, merged)
print("reshape copied:", fixed_b.data_ptr() != t.data_ptr(), "  split view shares memory:", q4.data_ptr() == q.data_ptr())
assert fixed_b.data_ptr() != t.data_ptr() and q4.data_ptr() == q.data_ptr()

# %% [markdown]
# `reshape` is not a licence to skip the transpose, though. `heads.reshape(B, L, d)`
# runs without complaint, because the number of elements matches, and produces garbage:
# it lays the `[h, L, d_k]` block out in memory order, so each "position" of the result
# mixes different positions of one head. No error, wrong numbers:

# %%
scrambled = heads.reshape(B, L, d)  # forgot .transpose(1, 2)
print("shape looks right:", tuple(scrambled.shape), "  values equal merged:", torch.equal(scrambled, merged))
assert scrambled.shape == merged.shape and not torch.allclose(scrambled, merged)

# %% [markdown]
# ### `d_model` must be divisible by `num_heads`
#
# With $d = 16$ and $h = 3$, $d_k = 16 // 3 = 5$ and the three heads cover only 15 of the
# 16 features. Code that does not check fails only at the first forward pass, inside
# `view`, with a message about sizes that does not mention heads:

# %%
h_bad = 3
try:
    W_q(x).view(B, L, h_bad, d // h_bad)
except RuntimeError as err:
    print(type(err).__name__ + ":", err)
    caught = err
assert "invalid for input of size" in str(caught)

# %% [markdown]
# The module built below (and `helpers.MultiHeadAttention`) checks at construction and
# names the problem; the last section shows that error.

# %% [markdown]
# ## Masking, and what "minus infinity" means in half precision
#
# A mask says which keys a query may not see: padding keys, and in the decoder the future.
# The book's convention everywhere: a **bool tensor, True = blocked**. Blocked scores are
# replaced by a very negative number before the softmax, so their weight becomes 0. The
# question is *which* very negative number. Three candidates are common: `-1e9`,
# `float("-inf")`, and `torch.finfo(dtype).min`, the most negative finite number of the
# dtype. In float32 all three look fine. Mixed-precision training computes the scores in
# float16 or bfloat16, and there they differ:

# %%
for dtype in (torch.float32, torch.float16, torch.bfloat16):
    print(f"{str(dtype):15s} -1e9 stored as {torch.tensor(-1e9, dtype=dtype).item():>14.6g}"
          f"   finfo.min = {torch.finfo(dtype).min:.6g}")
assert torch.tensor(-1e9, dtype=torch.float16).item() == -math.inf  # fp16 tops out at 65504
assert math.isfinite(torch.tensor(-1e9, dtype=torch.bfloat16).item())

# %% [markdown]
# bfloat16 has float32's range with only 8 bits of precision, so `-1e9` survives there,
# rounded. Float16's range ends at 65504: `-1e9` does not exist in it and becomes `-inf`.
# What that does depends on how the mask is applied. `masked_fill` refuses outright; the
# additive form `scores + mask * -1e9`, common in older code, quietly produces `-inf`:

# %%
torch.manual_seed(0)
scores16 = torch.randn(2, 4).half()
mask = torch.tensor([[False, True, False, True],   # row 0: two keys blocked
                     [True, True, True, True]])    # row 1: every key blocked
try:
    scores16.masked_fill(mask, -1e9)
except RuntimeError as err:
    print("masked_fill(mask, -1e9) in fp16 ->", type(err).__name__ + ":", err)
    caught = err
assert "overflow" in str(caught)

additive = scores16 + (mask.half() * -1e9)
print("\nscores + mask * -1e9 in fp16:\n", additive)
assert torch.isinf(additive[mask]).all()

# %% [markdown]
# `-inf` is fine as long as a row keeps at least one visible key. But a **fully masked
# row** (a query with nothing it may look at; it happens, for instance, with an all-padding
# sequence or when masks are combined carelessly) is all `-inf`, and
# $\operatorname{softmax}$ computes $e^{-\infty} / \sum e^{-\infty} = 0/0$: NaN, in any
# dtype. The NaN then spreads through every later layer and into the loss.
# `finfo(dtype).min` is finite, so a fully masked row becomes a uniform distribution
# instead: meaningless but harmless (and the finished module zeroes it, see below):

# %%
for dtype in (torch.float32, torch.float16, torch.bfloat16):
    s = scores16.to(dtype)
    w_inf = s.masked_fill(mask, float("-inf")).softmax(-1)
    w_min = s.masked_fill(mask, torch.finfo(dtype).min).softmax(-1)
    print(f"{str(dtype):15s} -inf:      row 0 {w_inf[0].float().numpy().round(3)}  row 1 {w_inf[1].float().numpy()}")
    print(f"{'':15s} finfo.min: row 0 {w_min[0].float().numpy().round(3)}  row 1 {w_min[1].float().numpy()}")
    assert torch.isnan(w_inf[1]).all() and not torch.isnan(w_inf[0]).any()
    assert not torch.isnan(w_min).any() and (w_min[0][mask[0]] == 0).all()
    torch.testing.assert_close(w_min[1].float(), torch.full((4,), 0.25))

# %% [markdown]
# One more trap, for code that *adds* masks instead of filling: `finfo.min` is so close to
# the edge of the range that adding anything negative to it overflows. In float16,
# `finfo.min - 20` is already `-inf`, and two additive masks on the same key give
# `-inf` in every dtype. `masked_fill` *replaces* the score, which is why the book
# combines bool masks with `|` first and fills once.

# %%
for dtype in (torch.float16, torch.bfloat16, torch.float32):
    fmin = torch.tensor(torch.finfo(dtype).min, dtype=dtype)
    print(f"{str(dtype):15s} finfo.min + finfo.min = {(fmin + fmin).item()}"
          + (f"   finfo.min - 20 = {(fmin - 20).item()}" if dtype == torch.float16 else ""))
    assert torch.isinf(fmin + fmin)
assert torch.isinf(torch.tensor(torch.finfo(torch.float16).min, dtype=torch.float16) - 20)

# %% [markdown]
# ## Fused QKV projection
#
# In self-attention the queries, keys and values are all projections of the same input.
# Three `d -> d` linear layers can then be one `d -> 3d` layer whose output is cut in
# three: one larger matrix multiplication instead of three smaller ones, which keeps the
# hardware busier.
# The two forms compute the same function: stacking the three weight matrices (and
# biases) row-wise gives the fused weight, and `chunk(3, dim=-1)` recovers Q, K and V.
# (`torch.nn.MultiheadAttention` stores its weights exactly this way, as one
# `in_proj_weight` of shape `[3d, d]`. Cross-attention cannot fuse all three, since its
# queries come from a different input than its keys and values; K and V can still share
# one layer.)

# %%
qkv = nn.Linear(d, 3 * d)
with torch.no_grad():
    qkv.weight.copy_(torch.cat([W_q.weight, W_k.weight, W_v.weight], dim=0))  # [3d, d]
    qkv.bias.copy_(torch.cat([W_q.bias, W_k.bias, W_v.bias]))
    fused = qkv(x)                        # [B, L, 3d]
    q_f, k_f, v_f = fused.chunk(3, dim=-1)  # three [B, L, d]
print("qkv.weight:", tuple(qkv.weight.shape), "  qkv(x):", tuple(fused.shape), "  chunks:", tuple(q_f.shape))
with torch.no_grad():
    for a, b in ((q_f, W_q(x)), (k_f, W_k(x)), (v_f, W_v(x))):
        torch.testing.assert_close(a, b)
print("fused == separate projections: True")

# %% [markdown]
# The book's modules keep the three projections separate: they read better, cross-attention
# uses the same module, and the KV cache (chapter 13) needs the key/value projections on
# their own.
#
# ## The module
#
# Everything above, in one `nn.Module`. It takes separate query, key and value inputs
# (for self-attention they are the same tensor; for cross-attention the keys and values
# come from the encoder), an optional bool mask broadcastable to `[B, h, Lq, Lk]`, and
# returns the output and the attention weights. Dropout on the weights is the original
# paper's regularisation; it is inactive in `eval()` mode.

# %%
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, dropout=0.1):
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        self.h, self.d_k = num_heads, d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)
        self.W_o = nn.Linear(d_model, d_model)
        self.attn_drop = nn.Dropout(dropout)

    def split(self, x):   # [B, L, d] -> [B, h, L, d_k]
        B, L, _ = x.shape
        return x.view(B, L, self.h, self.d_k).transpose(1, 2)

    def merge(self, x):   # [B, h, L, d_k] -> [B, L, d]
        B, _, L, _ = x.shape
        return x.transpose(1, 2).reshape(B, L, self.h * self.d_k)

    def forward(self, q, k, v, attn_mask=None):
        Q, K, V = self.split(self.W_q(q)), self.split(self.W_k(k)), self.split(self.W_v(v))
        scores = Q @ K.transpose(-2, -1) / math.sqrt(self.d_k)       # [B, h, Lq, Lk]
        if attn_mask is not None:                                    # bool, True = blocked
            scores = scores.masked_fill(attn_mask, torch.finfo(scores.dtype).min)
        weights = scores.softmax(dim=-1)                             # [B, h, Lq, Lk]
        out = self.attn_drop(weights) @ V                            # [B, h, Lq, d_k]
        return self.W_o(self.merge(out)), weights                    # [B, Lq, d]


# %% [markdown]
# Test it on the kind of input the decoder's self-attention sees: the two sequences from
# above, the first with two padding tokens at the end, and a mask that blocks a key if it
# is padding **or** in the future. The mask has shape `[B, 1, Lq, Lk]` and broadcasts over
# the heads.

# %%
torch.manual_seed(0)
mha = MultiHeadAttention(d, h).eval()
padding = (tokens == PAD_ID)[:, None, None, :]                   # [B, 1, 1, Lk]
causal = torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1)  # [Lq, Lk], True above the diagonal
mask = padding | causal                                          # [B, 1, Lq, Lk]
out, w = mha(x, x, x, attn_mask=mask)
print("mask:", tuple(mask.shape), " out:", tuple(out.shape), " weights:", tuple(w.shape))
assert out.shape == (B, L, d) and w.shape == (B, h, L, L)
assert (w.masked_select(mask.expand_as(w)) == 0).all()
torch.testing.assert_close(w.sum(-1), torch.ones(B, h, L))

fig, axes = plt.subplots(1, h, figsize=(11, 2.8))
for i, ax in enumerate(axes):
    ax.imshow(w[0, i].detach(), cmap="viridis", vmin=0, vmax=1)
    ax.set(title=f"head {i}", xlabel="key position", ylabel="query position" if i == 0 else None)
fig.suptitle("sequence 0: no weight on future keys or on the two padding keys", fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# Each head has its own pattern, and all of them respect the mask: zero above the
# diagonal (the future) and zero in the last two columns (padding). Note the last two
# *rows*: queries at padding positions still produce outputs; nothing downstream uses
# them, since the loss ignores padding targets.
#
# ## Against `torch.nn.MultiheadAttention`
#
# PyTorch ships multi-head attention as `nn.MultiheadAttention`. Given our weights, it
# must produce our outputs. Its interface differs in three ways worth knowing:
#
# - it stores Q, K and V as one fused `in_proj_weight` `[3d, d]` (see above), and the
#   output projection as `out_proj`;
# - it is sequence-first unless `batch_first=True`;
# - it takes two masks instead of one: `key_padding_mask` `[B, Lk]` and `attn_mask`
#   `[Lq, Lk]`, both bool with **True = not allowed**, like ours; by default it returns
#   the weights *averaged over heads*, so ask for `average_attn_weights=False`.

# %%
ref = nn.MultiheadAttention(d, h, batch_first=True).eval()
with torch.no_grad():
    ref.in_proj_weight.copy_(torch.cat([mha.W_q.weight, mha.W_k.weight, mha.W_v.weight]))
    ref.in_proj_bias.copy_(torch.cat([mha.W_q.bias, mha.W_k.bias, mha.W_v.bias]))
    ref.out_proj.weight.copy_(mha.W_o.weight)
    ref.out_proj.bias.copy_(mha.W_o.bias)

out_ref, w_ref = ref(x, x, x, key_padding_mask=tokens == PAD_ID, attn_mask=causal,
                     need_weights=True, average_attn_weights=False)
print("nn.MultiheadAttention: out", tuple(out_ref.shape), " weights", tuple(w_ref.shape))
torch.testing.assert_close(out, out_ref)
torch.testing.assert_close(w, w_ref)
print("same output and same per-head weights: True")

# %% [markdown]
# ## The fast path: `F.scaled_dot_product_attention`
#
# When the weights are not needed (during training, in every layer but the one whose
# heatmap we draw), PyTorch's fused `F.scaled_dot_product_attention` computes
# $\operatorname{softmax}(QK^\top/\sqrt{d_k})V$ without materialising the `[B, h, Lq, Lk]`
# weights, which saves memory and time (chapter 19 measures how much). Its bool mask has
# the **opposite** meaning: True = *may attend*. So our mask goes in inverted:

# %%
with torch.no_grad():
    Q, K, V = mha.split(mha.W_q(x)), mha.split(mha.W_k(x)), mha.split(mha.W_v(x))
    out_sdpa = mha.W_o(mha.merge(F.scaled_dot_product_attention(Q, K, V, attn_mask=~mask)))
    out_wrong = mha.W_o(mha.merge(F.scaled_dot_product_attention(Q, K, V, attn_mask=mask)))
torch.testing.assert_close(out_sdpa, out)
print("SDPA with ~mask == our output:", True)
print("SDPA with mask (not inverted) == our output:", torch.allclose(out_wrong, out, atol=1e-4))
assert not torch.allclose(out_wrong, out, atol=1e-4)

# %% [markdown]
# Passing our mask without the `~` raises no error: SDPA then attends *only* to the
# blocked keys (and returns zeros for rows where nothing is blocked). Convert mask
# conventions in exactly one place; the masks chapter (07) adds Hugging Face's integer
# convention (1 = attend) to the list.
#
# ## Checking against `helpers`
#
# `helpers.MultiHeadAttention` is the module the rest of the book uses. It has the same
# parameter names, so our weights load into it directly. It must compute the same
# outputs and weights, and its `need_weights=False` path (which calls
# `F.scaled_dot_product_attention`) the same outputs. It also validates its inputs: a
# `d_model` not divisible by `num_heads` is refused at construction, with a message that
# says why.

# %%
lib = helpers.MultiHeadAttention(d, h).eval()
lib.load_state_dict(mha.state_dict())  # strict: same names, same shapes
out_lib, w_lib = lib(x, x, x, attn_mask=mask)
out_fast, w_none = lib(x, x, x, attn_mask=mask, need_weights=False)
torch.testing.assert_close(out_lib, out)
torch.testing.assert_close(w_lib, w)
torch.testing.assert_close(out_fast, out)
assert w_none is None
print("helpers.MultiHeadAttention == ours: outputs, weights, and the SDPA path")

try:
    helpers.MultiHeadAttention(d_model=16, num_heads=3)
except ValueError as err:
    print(type(err).__name__ + ":", err)
    caught = err
assert "not divisible" in str(caught)

# %% [markdown]
# The library goes one step further on fully masked rows: where every key of a query is
# blocked, it returns zero weights (and hence a zero output) rather than the uniform
# distribution that `finfo.min` alone gives, so that both of its paths agree with each
# other and with SDPA. With these pieces in hand, the next chapter adds the other
# sub-layer of every Transformer layer, the position-wise feed-forward network.

# %%
all_blocked = torch.ones(1, 1, 1, L, dtype=torch.bool)
with torch.no_grad():
    _, w_blocked = lib(x[:1], x[:1], x[:1], attn_mask=all_blocked)
    _, w_ours = mha(x[:1], x[:1], x[:1], attn_mask=all_blocked)
print("fully masked: ours (finfo.min) row", w_ours[0, 0, 0].numpy(), "  helpers row", w_blocked[0, 0, 0].numpy())
assert torch.equal(w_blocked, torch.zeros_like(w_blocked)) and not torch.isnan(w_ours).any()
