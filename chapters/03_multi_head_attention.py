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
# # 3. Multi-head attention
#
# Attention is where positions exchange information. You will compute one head by hand,
# then set its weights so that it reverses a sequence with no training.
# Then you will split it into many heads and mask it, and check the module against PyTorch's.
#
# ![A hand-set head's weights: each query attends to its mirrored key](figures/03_multi_head_attention.png)

# %% [markdown] tags=["run-time"]
# **Run time:** about 10 s.

# %%
import copy
import math

import matplotlib.pyplot as plt
import torch
import torch.nn as nn
import torch.nn.functional as F
from matplotlib.patches import FancyBboxPatch, Rectangle
from torch.nn.attention import SDPBackend, sdpa_kernel

import helpers
from helpers import PAD_ID, VOCAB_SIZE, describe


def at_most(diff, tol=1e-6):
    """A rounding-level difference, printed so that it reads the same on every CPU."""
    return f"< {tol:.0e}" if diff < tol else f"{diff:.2g}"


# %% [markdown]
# ## One head, by hand
#
# Everything in a Transformer except attention (embeddings, feed-forward networks,
# LayerNorms) treats each position on its own. Attention is one formula from {cite}`vaswani2017`:
#
# $$
# \operatorname{Attention}(Q, K, V) = \operatorname{softmax}\!\left(\frac{Q K^\top}{\sqrt{d_k}}\right) V.
# $$
#
# In code it becomes projections, reshapes, transposes and masks on 4-D tensors. Each step
# has a way to go silently wrong, so this chapter prints every shape.
#
# Start from real inputs: the reversal source `7 3 0 <eos>`, embedded with the module of
# chapter 02 at a toy width $d = 8$. One attention head projects each token vector three
# ways:
#
# - a **query** $q_i$: what position $i$ is looking for;
# - a **key** $k_j$: what position $j$ offers to be found by;
# - a **value** $v_j$: what position $j$ hands over if it is chosen.
#
# The score of query $i$ against key $j$ is their dot product, scaled by $1/\sqrt{d_k}$.
# A mask may block some keys. A softmax over $j$ turns each row of scores into weights
# that sum to 1. The output for position $i$ is the weighted average of the values.
# Figure 3.1 draws this data flow with the shapes used later: a batch of $B$ sequences,
# $h$ heads, $L_q$ queries and $L_k$ keys.


# %% jupyter={"source_hidden": true} tags=["figure", "hide-input"]
def flow_box(ax, x, y, text, color, w=1.55, h=0.8):
    ax.add_patch(
        FancyBboxPatch(
            (x - w / 2, y - h / 2),
            w,
            h,
            fc=color,
            ec="0.3",
            lw=1,
            boxstyle="round,pad=0.02,rounding_size=0.08",
        )
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=8.5)


def flow_arrow(ax, start, end):
    ax.annotate("", xy=end, xytext=start, arrowprops=dict(arrowstyle="-|>", color="0.3", lw=1.2))


tensor, op = "#dbe9f6", "#fde2c8"
fig, ax = plt.subplots(figsize=(12, 3.0))
ax.set_xlim(-0.1, 13.6)
ax.set_ylim(-0.35, 3.3)
ax.axis("off")
flow_box(ax, 0.8, 2.75, "Q\n[B, h, Lq, d_k]", tensor)
flow_box(ax, 0.8, 1.55, "K\n[B, h, Lk, d_k]", tensor)
flow_box(ax, 0.8, 0.2, "V\n[B, h, Lk, d_v]", tensor)
chain = [
    (2.75, "Q @ Kᵀ", op),
    (4.55, "scores\n[B, h, Lq, Lk]", tensor),
    (6.35, "÷ √d_k", op),
    (8.15, "mask: blocked\nscores → finfo.min", op),
    (9.95, "softmax over\nkeys (dim −1)", op),
    (11.75, "weights\n[B, h, Lq, Lk]", tensor),
]
for x, text, color in chain:
    flow_box(ax, x, 2.15, text, color)
flow_box(ax, 11.75, 0.2, "weights @ V\n→ [B, h, Lq, d_v]", op, w=1.8)
flow_arrow(ax, (1.58, 2.65), (1.97, 2.3))
flow_arrow(ax, (1.58, 1.65), (1.97, 2.0))
for (x0, _, _), (x1, _, _) in zip(chain, chain[1:]):
    flow_arrow(ax, (x0 + 0.78, 2.15), (x1 - 0.78, 2.15))
flow_arrow(ax, (11.75, 1.75), (11.75, 0.6))
flow_arrow(ax, (1.58, 0.2), (10.85, 0.2))
ax.text(
    8.15,
    1.2,
    "mask: bool, broadcastable to\n[B, h, Lq, Lk]; True = blocked",
    ha="center",
    va="center",
    fontsize=8,
    color="0.35",
)
flow_arrow(ax, (8.15, 1.45), (8.15, 1.75))
ax.set_title(
    "Figure 3.1  Scaled dot-product attention, one tensor operation per box "
    "(blue: tensors, orange: operations)",
    fontsize=10,
)
fig.tight_layout()
plt.show()

# %% [markdown]
# Here it is for one head and one sequence, so the batch and head dimensions are not yet
# there: `Q`, `K`, `V` are `[L, d_k]` and the scores `[L, L]`. No key is masked yet.

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
weights = scores.softmax(dim=-1)  # normalise each row over the keys
out = weights @ V  # [Lq, d_k]
print("scores:", tuple(scores.shape), " weights:", tuple(weights.shape), " out:", tuple(out.shape))
print("weights (row = query, column = key):")
print(weights.numpy().round(2))
row_sums = weights.sum(dim=-1)
print(f"row sums: {row_sums.numpy().round(6)}   smallest weight: {weights.min().item():.3f}")

torch.testing.assert_close(row_sums, torch.ones(4))

# %% [markdown]
# Every weight is positive and every row sums to 1, so each output row is a
# *convex combination* of the value rows. The matrix product hides that; written as a
# loop for the first query it is plain:

# %%
by_loop = sum(weights[0, j] * V[j] for j in range(4))
print("out[0]            =", out[0].numpy().round(3))
print("sum_j w[0,j] V[j] =", by_loop.numpy().round(3))
torch.testing.assert_close(out[0], by_loop)

# %% [markdown]
# ## A head that does a job: look at the mirror
#
# Random weights show the mechanics. Now set the weights by hand. The reversal task needs
# output position $i$ to read input position $L-1-i$, its *mirror*. One head can do that
# with chapter 02's sinusoidal encodings and no training.
#
# Each frequency $\omega$ of the encoding stores the pair $(\sin \omega p, \cos \omega p)$
# at position $p$.
# Write $c = L-1$. The trigonometric identities for $\omega(c-p)$ give
#
# $$
# \begin{pmatrix} \sin \omega(c-p) \\ \cos \omega(c-p) \end{pmatrix}
# = \begin{pmatrix} -\cos \omega c & \sin \omega c \\ \sin \omega c & \cos \omega c \end{pmatrix}
#   \begin{pmatrix} \sin \omega p \\ \cos \omega p \end{pmatrix}.
# $$
#
# The matrix is fixed once $L$ is known: a reflection, one $2 \times 2$ block per
# frequency. Its entries are just the pair stored in $\mathrm{pe}(c)$. Stack the blocks
# into $R$, and $R\,\mathrm{pe}(i) = \mathrm{pe}(L-1-i)$ for every position $i$.
#
# Feed the head the encodings alone, $x_i = \mathrm{pe}(i)$, with $d_k = 16$. Use
# $W_q = s\sqrt{d_k}\,R$ and $W_k = I$. After the division by $\sqrt{d_k}$, the score of
# query $i$ and key $j$ is $s \sum_\omega \cos \omega\,(j - (L-1-i))$. Every cosine is 1
# when $j = L-1-i$, so that key scores highest. The gain $s$ sharpens the softmax;
# $s = 16$ is enough here. Figure 3.2 draws the weights for $L = 10$.


# %%
def mirror_weights(pe):
    """pe [L, d_pos] -> R [d_pos, d_pos], a 2x2 reflection per frequency: R pe(i) = pe(L-1-i)."""
    L, d_pos = pe.shape
    sin_c, cos_c = pe[L - 1, 0::2], pe[L - 1, 1::2]  # sin(w (L-1)), cos(w (L-1)) per w
    R = torch.zeros(d_pos, d_pos)
    R[0::2, 0::2], R[0::2, 1::2] = torch.diag(-cos_c), torch.diag(sin_c)
    R[1::2, 0::2], R[1::2, 1::2] = torch.diag(sin_c), torch.diag(cos_c)
    return R


d_pos, gain = 16, 16.0
mirror_min = {}
for L_m in (6, 10, 16):
    pe = helpers.sinusoidal_position_encoding(L_m, d_pos)  # [L, d_pos], chapter 02
    R = mirror_weights(pe)
    torch.testing.assert_close(pe @ R.T, pe.flip(0))  # R pe(i) = pe(L-1-i)
    Q_m, K_m = (gain * math.sqrt(d_pos)) * pe @ R.T, pe  # W_q = s sqrt(d_k) R, W_k = I
    w_m = (Q_m @ K_m.T / math.sqrt(d_pos)).softmax(dim=-1)  # [L, L]
    mirror = torch.arange(L_m - 1, -1, -1)  # key L-1-i for query i
    assert torch.equal(w_m.argmax(dim=-1), mirror)
    mirror_min[L_m] = w_m[torch.arange(L_m), mirror].min().item()
    print(
        f"L = {L_m:2d}: every query's top key is its mirror; "
        f"smallest mirrored weight {mirror_min[L_m]:.4f}"
    )
    if L_m == 10:
        w_mirror10 = w_m
assert min(mirror_min.values()) > 0.999

# %% jupyter={"source_hidden": true} tags=["figure", "hide-input", "opening-figure"]
fig, ax = plt.subplots(figsize=(4.2, 3.6))
im = ax.imshow(w_mirror10, cmap="viridis", vmin=0, vmax=1)
ax.set(xlabel="key position j", ylabel="query position i")
ax.set_xticks(range(10))
ax.set_yticks(range(10))
fig.colorbar(im, ax=ax, fraction=0.046)
ax.set_title("Figure 3.2  A hand-set head: query i\nattends to key L-1-i (L = 10)", fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# Now let the head carry tokens. Give each position the input
# $x_j = [\text{one-hot}(t_j);\ \mathrm{pe}(j)]$. $W_q$ and $W_k$ read only the
# position part, $W_v$ only the token part. The output at position $i$ is then close to
# the one-hot of the token at $L-1-i$, and its argmax reads the sequence backwards.

# %%
digits = helpers.encode_digits("3141592653")[0, :-1]  # 10 digit tokens, <eos> dropped
L_m = len(digits)
pe = helpers.sinusoidal_position_encoding(L_m, d_pos)
x_m = torch.cat([F.one_hot(digits, VOCAB_SIZE).float(), pe], dim=-1)  # [L, 13 + 16]
zeros_tok = torch.zeros(d_pos, VOCAB_SIZE)
W_q_m = torch.cat([zeros_tok, gain * math.sqrt(d_pos) * mirror_weights(pe)], dim=1)
W_k_m = torch.cat([zeros_tok, torch.eye(d_pos)], dim=1)  # [d_pos, 29]
W_v_m = torch.cat([torch.eye(VOCAB_SIZE), torch.zeros(VOCAB_SIZE, d_pos)], dim=1)  # [13, 29]
Q_m, K_m, V_m = x_m @ W_q_m.T, x_m @ W_k_m.T, x_m @ W_v_m.T
out_m = (Q_m @ K_m.T / math.sqrt(d_pos)).softmax(dim=-1) @ V_m  # [L, 13]
read = out_m.argmax(dim=-1)
print("input:  ", describe(digits))
print("output: ", describe(read))
print(f"smallest winning value in the output rows: {out_m.max(dim=-1).values.min():.4f}")
assert torch.equal(read, digits.flip(0))
assert out_m.max(dim=-1).values.min() > 0.999

x6 = x_m[:6]  # the first six digits, through the same head (its R was built for L = 10)
out6 = (x6 @ W_q_m.T @ (x6 @ W_k_m.T).T / math.sqrt(d_pos)).softmax(dim=-1) @ (x6 @ W_v_m.T)
read6 = out6.argmax(dim=-1)
print("six digits:", describe(digits[:6]), "  output:", describe(read6), "(R built for L = 10)")
assert not torch.equal(read6, digits[:6].flip(0))

# %% [markdown]
# One head, no training, and the sequence comes out reversed. What it does not do:
# $R$ is built from $\mathrm{pe}(L-1)$, so we handed the head the length. On six digits
# the same head reads the wrong positions: another length needs another $R$. A trained
# model gets no such gift. It must find the end of the source from the tokens (the
# `<eos>`) and learn where to look from data; chapter 21 shows the map a trained model
# learns.

# %% [markdown]
# ## Why divide by $\sqrt{d_k}$
#
# Suppose the components of $q$ and $k$ are independent with mean 0 and variance 1. Then
# $q \cdot k = \sum_{i=1}^{d_k} q_i k_i$ is a sum of $d_k$ terms of variance 1, so its
# variance is $d_k$: the scores grow with the head width (the argument of
# {cite}`vaswani2017`, section 3.2.1). The softmax is not scale-free: large scores make
# it nearly one-hot. A nearly one-hot softmax passes almost no gradient back to the
# scores (its Jacobian $\operatorname{diag}(p) - p p^\top$ vanishes when $p$ is one-hot),
# so the scores, and with them *where* to look, get little signal to learn from.
# Dividing by $\sqrt{d_k}$ brings the variance back to 1 whatever the head width.
#
# Measure it: random unit-variance queries against 16 random keys, for $d_k$ = 16, 64
# and 256, without and with the scale. The columns: the variance of the scores, the mean
# largest weight (uniform: $1/16 \approx 0.06$), the share of rows with over 99 % on one
# key, the mean entropy (uniform: $\ln 16 \approx 2.77$ nats), and the mean Jacobian norm.


# %%
def softmax_stats(scores):
    """scores [n, Lk] -> variance, mean max weight, share saturated, mean entropy, mean
    Jacobian norm."""
    p = scores.softmax(dim=-1)
    entropy = -(p * p.clamp_min(1e-45).log()).sum(-1)
    jacobian = torch.diag_embed(p) - p[:, :, None] * p[:, None, :]  # d softmax / d scores
    top = p.max(dim=-1).values
    return (
        scores.var().item(),
        top.mean().item(),
        (top > 0.99).float().mean().item(),
        entropy.mean().item(),
        jacobian.norm(dim=(-2, -1)).mean().item(),
    )


torch.manual_seed(0)
n, Lk = 4000, 16
stats = {}
print(
    f"{'d_k':>4s} {'scale':>10s} {'var(q.k)':>9s} {'max weight':>11s} {'>0.99':>6s} "
    f"{'entropy':>8s} {'|Jacobian|':>11s}"
)
for dk in (16, 64, 256):
    q, k = torch.randn(n, 1, dk), torch.randn(n, Lk, dk)
    raw = (q @ k.transpose(-2, -1)).squeeze(1)  # [n, Lk]
    for scale, s in (("none", raw), ("1/sqrt(dk)", raw / math.sqrt(dk))):
        stats[dk, scale] = st = softmax_stats(s)
        print(
            f"{dk:4d} {scale:>10s} {st[0]:9.1f} {st[1]:11.2f} {st[2]:6.0%} {st[3]:8.2f} "
            f"{st[4]:11.2f}"
        )

for dk in (16, 64, 256):
    assert abs(stats[dk, "none"][0] / dk - 1) < 0.05  # variance = d_k
    assert abs(stats[dk, "1/sqrt(dk)"][0] - 1) < 0.05  # variance = 1
    # the same softmax statistics at any d_k
    assert abs(stats[dk, "1/sqrt(dk)"][1] - stats[16, "1/sqrt(dk)"][1]) < 0.02
assert stats[16, "none"][1] < stats[64, "none"][1] < stats[256, "none"][1]  # saturation grows
assert stats[256, "none"][2] > 0.5 and stats[256, "1/sqrt(dk)"][2] < 0.01
jacobian_share = stats[256, "none"][4] / stats[256, "1/sqrt(dk)"][4]
print(f"\nd_k = 256: mean Jacobian norm without the scale / with it = {jacobian_share:.0%}")
assert jacobian_share < 0.5  # the unscaled softmax passes back much less

# %% [markdown]
# Without the scale, the variance grows linearly with $d_k$. At $d_k = 256$ more than
# half of the rows are one-hot before any training. The softmax's Jacobian, which every
# gradient on the way back to the scores is multiplied by, shrinks: its mean norm is 0.10,
# against 0.31 with the scale, 32 % of it. With the scale, the columns barely change with
# the width. Figure 3.3 sweeps $d_k$ from 4 to 512.

# %%
torch.manual_seed(0)
dks = [4, 8, 16, 32, 64, 128, 256, 512]
curves = {"none": [], "1/sqrt(dk)": []}
for dk in dks:
    q, k = torch.randn(1000, 1, dk), torch.randn(1000, Lk, dk)
    raw = (q @ k.transpose(-2, -1)).squeeze(1)
    curves["none"].append(softmax_stats(raw))
    curves["1/sqrt(dk)"].append(softmax_stats(raw / math.sqrt(dk)))
unscaled_top = [c[1] for c in curves["none"]]
print("mean largest weight without the scale:", [round(v, 2) for v in unscaled_top])
print("with the scale:                       ", [round(c[1], 2) for c in curves["1/sqrt(dk)"]])
assert unscaled_top == sorted(unscaled_top) and unscaled_top[-1] > 0.9

# %% jupyter={"source_hidden": true} tags=["figure", "hide-input"]
fig, axes = plt.subplots(1, 3, figsize=(12, 3.3))
panels = [
    (0, "variance of the scores", "var"),
    (1, "mean largest softmax weight", "max weight"),
    (4, "softmax Jacobian", "mean |Jacobian|"),
]
for (col, title, ylabel), ax in zip(panels, axes):
    for scale, marker in (("none", "o"), ("1/sqrt(dk)", "s")):
        ax.plot(dks, [c[col] for c in curves[scale]], marker=marker, label=f"scale: {scale}")
    ax.set(title=title, xlabel="d_k", ylabel=ylabel, xscale="log")
    ax.set_xticks(dks, [str(v) for v in dks])
axes[0].set_yscale("log")
axes[0].legend()
fig.suptitle("Figure 3.3  Unscaled scores saturate the softmax as d_k grows", fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# The scale is $\sqrt{d_k}$, the width of **one head**, not $\sqrt{d}$ of the whole
# model. Dividing by $\sqrt{d} = \sqrt{h\, d_k}$ is an easy slip. It does not crash. It
# shrinks the score variance to $1/h$ and makes every head's attention flatter:

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
# heads side by side, each in its own $d_k = d/h$-dimensional subspace. It concatenates
# their outputs and passes the result through one more $d \times d$ projection, $W^O$,
# which mixes the heads {cite}`vaswani2017`:
#
# $$
# \text{head}_i = \operatorname{Attention}(X W_i^Q,\ X W_i^K,\ X W_i^V), \qquad
# \operatorname{MultiHead}(X) = \operatorname{Concat}(\text{head}_1, \dots, \text{head}_h)\, W^O .
# $$
#
# Here $W_i^Q$ is the $i$-th block of $d_k$ columns of $W^Q$, and likewise for $K$ and $V$
# (the code adds a bias after each projection). It has no more parameters than one wide
# head. The four projections are still $d \times d$ matrices; the heads are a way of
# *reading* their outputs. The trick is in the shapes. The head dimension is split off the
# features and moved next to the batch dimension, so one batched matrix product computes
# all heads. Figure 3.4 draws the split and the merge for one sequence. The code after it
# uses $B = 2$ sequences of $L = 5$ tokens (the first ends in two `<pad>`), $d = 16$ and
# $h = 4$.


# %% jupyter={"source_hidden": true} tags=["figure", "hide-input"]
def grid(ax, x0, y0, rows, cols, colors, cell=0.15, label="", sub="", gap_every=0):
    """Draw a rows x cols tensor as cells, top-left corner at (x0, y0), one colour per column;
    gap_every=k leaves a small gap after every k columns."""
    for r in range(rows):
        for c in range(cols):
            x = x0 + c * cell + (0.06 * (c // gap_every) if gap_every else 0)
            ax.add_patch(
                Rectangle((x, y0 - (r + 1) * cell), cell, cell, fc=colors[c], ec="white", lw=0.6)
            )
    ax.text(x0 + cols * cell / 2, y0 + 0.1, label, ha="center", va="bottom", fontsize=8.5)
    ax.text(
        x0 + cols * cell / 2,
        y0 - rows * cell - 0.1,
        sub,
        ha="center",
        va="top",
        fontsize=7.5,
        color="0.35",
    )


head_colors = ["#4c72b0", "#dd8452", "#55a868", "#c44e52"]
L_fig, d_fig, h_fig, cell = 5, 16, 4, 0.15
dk_fig = d_fig // h_fig
cols = [head_colors[c // dk_fig] for c in range(d_fig)]
fig, ax = plt.subplots(figsize=(12, 2.0))
ax.set_xlim(-0.2, 17.0)
ax.set_ylim(0.0, 1.35)
ax.axis("off")
top = 1.0
grid(ax, 0.0, top, L_fig, d_fig, cols, label="W_q(x)  [L, d]", sub="[5, 16]")
grid(
    ax,
    3.1,
    top,
    L_fig,
    d_fig,
    cols,
    label=".view(L, h, d_k)",
    sub="[5, 4, 4]: no copy",
    gap_every=dk_fig,
)
for i in range(h_fig):
    grid(ax, 6.4 + i * 0.8, top, L_fig, dk_fig, [head_colors[i]] * dk_fig, sub=f"head {i}")
ax.text(7.9, top + 0.1, ".transpose(1, 2)  [h, L, d_k]", ha="center", va="bottom", fontsize=8.5)
for i in range(h_fig):
    grid(ax, 10.4 + i * 0.8, top, L_fig, dk_fig, [head_colors[i]] * dk_fig, sub=f"head {i}")
ax.text(11.9, top + 0.1, "softmax(QKᵀ/√d_k) V per head", ha="center", va="bottom", fontsize=8.5)
grid(
    ax,
    14.4,
    top,
    L_fig,
    d_fig,
    cols,
    label=".transpose(1, 2).reshape(L, d)",
    sub="[5, 16]: a copy; then W_o",
)
y = top - L_fig * cell / 2
for x0, x1 in ((2.5, 3.1), (5.8, 6.3), (9.6, 10.3), (13.6, 14.3)):
    ax.annotate(
        "", xy=(x1, y), xytext=(x0, y), arrowprops=dict(arrowstyle="-|>", color="0.3", lw=1.2)
    )
ax.set_title(
    "Figure 3.4  Splitting the features into heads and merging them back "
    "(one sequence, d = 16, h = 4; colour = head)",
    fontsize=10,
)
fig.tight_layout()
plt.show()

# %%
torch.manual_seed(0)
B, L, d, h = 2, 5, 16, 4
d_k = d // h
tokens = torch.tensor([[5, 6, 7, PAD_ID, PAD_ID], [5, 6, 7, 8, 9]])
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
# :::{dropdown} Going deeper: which columns each head uses
# Two checks make the bookkeeping concrete. Head $i$ uses exactly the columns
# $i\,d_k$ to $(i+1)\,d_k - 1$ of the projected features. The merged tensor is the
# heads' outputs concatenated along the feature dimension.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
split_diff = max((Q[:, i] - q[..., i * d_k : (i + 1) * d_k]).abs().max().item() for i in range(h))
merge_diff = (merged - torch.cat([heads[:, i] for i in range(h)], dim=-1)).abs().max().item()
print(f"max |Q[:, i] - columns [i*d_k, (i+1)*d_k) of W_q(x)| over the heads: {split_diff}")
print(f"max |merged - cat(heads, dim=-1)|: {merge_diff}")
assert split_diff == 0 and merge_diff == 0

# %% [markdown]
# ### `view` versus `reshape`
#
# The split uses `view` and the merge uses `reshape`, and the difference matters.
# `view` never copies. It reinterprets the same memory with new strides, so it works only
# when the new shape can be written as strides over that memory. A linear layer's output
# is *contiguous* (stored row after row), so viewing `[B, L, d]` as `[B, L, h, d_k]` is
# fine. `transpose` does not copy either: it swaps two strides, and the result is no
# longer contiguous. Merging the heads of such a tensor with `view` fails:

# %%
t = heads.transpose(1, 2)  # [B, L, h, d_k], a view with swapped strides
print(
    "heads: shape",
    tuple(heads.shape),
    " strides",
    heads.stride(),
    " is_contiguous():",
    heads.is_contiguous(),
)
print(
    "t:     shape", tuple(t.shape), " strides", t.stride(), " is_contiguous():", t.is_contiguous()
)
try:
    t.view(B, L, d)
except RuntimeError as err:
    print("\nt.view(B, L, d) ->", type(err).__name__ + ":", err)
    caught = err
assert not t.is_contiguous() and "view size is not compatible" in str(caught)

# %% [markdown]
# :::{dropdown} Going deeper: the bug hides when a swapped dimension has size 1
# The stride of a size-1 dimension is never used. So when either of the two neighbouring
# dimensions that `transpose(1, 2)` swaps has size 1, the result still counts as
# contiguous, and the same `view` works. Two common cases: a decoder that generates one
# token at a time can run attention on a single query (with the cache of chapter 13), so
# $L = 1$; and a model with one head, $h = 1$. Code tried only in such a case runs fine;
# the first longer sequence, or the second head, fails as in the cell above. The cell
# shows both cases.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
x1 = x[:, :1]  # one position per sequence: L = 1
with torch.no_grad():
    Q1, K1, V1 = (W(x1).view(B, 1, h, d_k).transpose(1, 2) for W in (W_q, W_k, W_v))
    heads1 = (Q1 @ K1.transpose(-2, -1) / math.sqrt(d_k)).softmax(dim=-1) @ V1
t1 = heads1.transpose(1, 2)  # [B, 1, h, d_k]
print(
    "t1:    shape",
    tuple(t1.shape),
    " strides",
    t1.stride(),
    " is_contiguous():",
    t1.is_contiguous(),
)
merged1 = t1.view(B, 1, d)  # the same call that failed above
print("t1.view(B, 1, d) ->", tuple(merged1.shape), " no error")
assert t1.is_contiguous() and torch.equal(merged1, t1.reshape(B, 1, d))
t_one_head = torch.randn(B, 1, L, d).transpose(1, 2)  # h = 1: [B, 1, L, d] -> [B, L, 1, d]
print(
    "one head: shape",
    tuple(t_one_head.shape),
    " strides",
    t_one_head.stride(),
    " is_contiguous():",
    t_one_head.is_contiguous(),
    " view(B, L, d) ->",
    tuple(t_one_head.view(B, L, d).shape),
)
assert t_one_head.is_contiguous()

# %% [markdown]
# There are two fixes. `t.contiguous().view(...)` copies the data into a fresh contiguous
# block first. `t.reshape(...)` returns a view when it can and copies when it must. Both
# give the same result. Here `reshape` had to copy. In the split, `view` and `reshape`
# both share memory with the linear layer's output.

# %%
fixed_a = t.contiguous().view(B, L, d)
fixed_b = t.reshape(B, L, d)
diff = max((fixed_a - fixed_b).abs().max().item(), (fixed_b - merged).abs().max().item())
reshape_shares = fixed_b.data_ptr() == t.data_ptr()
view_shares = q4.data_ptr() == q.data_ptr()
reshape_q_shares = q.reshape(B, L, h, d_k).data_ptr() == q.data_ptr()
print(f"max |difference| between the two fixes and merged: {diff}")
print("t.reshape(B, L, d) shares t's memory:", "yes" if reshape_shares else "no (a copy)")
print("q.view(B, L, h, d_k) shares q's memory:", "yes" if view_shares else "no (a copy)")
print("q.reshape(B, L, h, d_k) shares q's memory:", "yes" if reshape_q_shares else "no (a copy)")
assert diff == 0 and not reshape_shares and view_shares and reshape_q_shares

# %% [markdown]
# `reshape` is not a licence to skip the transpose, though. `heads.reshape(B, L, d)`
# runs without complaint, because the number of elements matches. It produces garbage.
# It lays the `[h, L, d_k]` block out in memory order. So a "position" of the result holds
# the pieces of several positions, and some rows also straddle two heads. No error, wrong
# numbers. The cell labels every piece of $d_k$ features by its head and position:

# %%
scrambled = heads.reshape(B, L, d)  # forgot .transpose(1, 2)
wrong_by = (scrambled - merged).abs().max().item()
print("shape:", tuple(scrambled.shape), f"  max |scrambled - merged| = {wrong_by:.2f}")
head_of = torch.arange(h)[:, None].expand(h, L).reshape(L, h)  # [h, L] laid out as L rows
pos_of = torch.arange(L)[None, :].expand(h, L).reshape(L, h)
for row in range(L):
    pieces = " ".join(f"h{a}p{b}" for a, b in zip(head_of[row].tolist(), pos_of[row].tolist()))
    print(f"row {row} of the result holds (head, position): {pieces}")
assert scrambled.shape == merged.shape and wrong_by > 0.1
for row in range(L):  # every label names the piece that is really there, in both sequences
    for piece, (a, b) in enumerate(zip(head_of[row].tolist(), pos_of[row].tolist())):
        assert torch.equal(scrambled[:, row, piece * d_k : (piece + 1) * d_k], heads[:, a, b])
assert len(set(head_of[1].tolist())) > 1 and len(set(pos_of[0].tolist())) > 1

# %% [markdown]
# `d_model` must be divisible by `num_heads`. The module built below (and
# `helpers.MultiHeadAttention`) checks this at construction and names the problem.
#
# :::{dropdown} Going deeper: what happens without that check
# With $d = 16$ and $h = 3$, $d_k = 16 // 3 = 5$, and the three heads cover only 15 of the
# 16 features. Code that does not check fails at the first forward pass, inside `view`.
# Its message is about sizes and does not mention heads. The last section shows the
# module's own error.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
h_bad = 3
try:
    W_q(x).view(B, L, h_bad, d // h_bad)
except RuntimeError as err:
    print(type(err).__name__ + ":", err)
    caught = err
assert "invalid for input of size" in str(caught)

# %% [markdown]
# ## Masking, and what "minus infinity" means in half precision
#
# A mask says which keys a query may not see: padding keys, and in the decoder the future.
# The book's convention everywhere: a **bool tensor, True = blocked**. Blocked scores are
# replaced by a very negative number before the softmax, so their weight becomes 0.
# *Which* very negative number? Three are common: `-1e9`, `float("-inf")`, and
# `torch.finfo(dtype).min`, the most negative finite number of the dtype.
# Mixed-precision training computes the scores in float16 or bfloat16. There the three
# differ even before a row is fully masked:

# %%
for dtype in (torch.float32, torch.float16, torch.bfloat16):
    fi = torch.finfo(dtype)
    print(
        f"{str(dtype):15s} -1e9 stored as {torch.tensor(-1e9, dtype=dtype).item():>14.6g}"
        f"   finfo.min = {fi.min:.6g}   eps = {fi.eps:.3g} (2^{int(math.log2(fi.eps))})"
    )
assert torch.tensor(-1e9, dtype=torch.float16).item() == -math.inf  # fp16 tops out at 65504
assert math.isfinite(torch.tensor(-1e9, dtype=torch.bfloat16).item())

# %% [markdown]
# bfloat16 has about float32's range with far less precision (eps $= 2^{-7}$), so `-1e9`
# survives there, rounded. Float16's range ends at 65504: `-1e9` does not exist in it
# and becomes `-inf`. What that does depends on how the mask is applied. In torch 2.13.0
# `masked_fill` refuses outright. The additive form `scores + mask * -1e9` quietly
# produces `-inf`:

# %%
torch.manual_seed(0)
scores16 = torch.randn(2, 4).half()
mask = torch.tensor(
    [
        [False, True, False, True],  # row 0: two keys blocked
        [True, True, True, True],  # row 1: every key blocked
    ]
)
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
# `-inf` is fine as long as a row keeps at least one visible key. A **fully masked row**
# is a query with nothing it may look at. It happens with an all-padding sequence, or when
# masks are combined carelessly. Such a row is all `-inf`, and the softmax computes
# $e^{-\infty} / \sum e^{-\infty} = 0/0$: NaN, in any dtype. The NaN weights make that
# query's output NaN too. `finfo(dtype).min` is finite, so a fully masked row becomes
# uniform instead: meaningless but harmless.

# %%
values = torch.randn(4, 3)
for dtype in (torch.float32, torch.float16, torch.bfloat16):
    s = scores16.to(dtype)
    w_inf = s.masked_fill(mask, float("-inf")).softmax(-1)
    w_min = s.masked_fill(mask, torch.finfo(dtype).min).softmax(-1)
    out_inf = w_inf.float() @ values
    print(
        f"{str(dtype):15s} -inf:      row 0 {w_inf[0].float().numpy().round(3)}"
        f"  row 1 {w_inf[1].float().numpy()}  -> output row 1 {out_inf[1].numpy()}"
    )
    print(
        f"{'':15s} finfo.min: row 0 {w_min[0].float().numpy().round(3)}"
        f"  row 1 {w_min[1].float().numpy()}"
    )
    assert torch.isnan(w_inf[1]).all() and not torch.isnan(w_inf[0]).any()
    assert torch.isnan(out_inf[1]).all()
    assert not torch.isnan(w_min).any() and (w_min[0][mask[0]] == 0).all()
    torch.testing.assert_close(w_min[1].float(), torch.full((4,), 0.25))

# %% [markdown]
# `masked_fill` *replaces* the score, so it never adds anything to `finfo.min`. That is
# why the book combines bool masks with `|` first and fills once. Adding a second mask
# to `finfo.min` can overflow, as the next dropdown shows.
#
# :::{dropdown} Going deeper: when adding to `finfo.min` overflows
# One more trap, for code that *adds* masks instead of filling. `finfo.min` sits at the
# edge of the range, but adding a small negative number to it does not overflow: the
# exact result rounds back to `finfo.min`, because the spacing between neighbouring
# numbers (one *ulp*, unit in the last place) is large out there. In float16 the two
# most negative numbers are -65504 and -65472, one ulp of 32 apart. The sum overflows
# to `-inf` only when the step is at least half an ulp (16 in float16, $2^{119}$ in
# bfloat16): the exact result is then at least halfway to the next magnitude the format
# would have ($2^{16}$ in float16), which is out of range, and rounding to nearest (ties
# to even) goes there.
# Two additive masks on the same key (finfo.min + finfo.min) overflow in every dtype.
# So `finfo.min - 1` is still `finfo.min` (in float16: -65504), and a second additive
# mask overflows.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
for dtype in (torch.float16, torch.bfloat16, torch.float32):
    zero = torch.tensor(0.0, dtype=dtype)
    fmin = torch.tensor(torch.finfo(dtype).min, dtype=dtype)
    ulp = torch.nextafter(fmin, zero) - fmin  # spacing at finfo.min (exact in this dtype)
    half = ulp / 2
    below = torch.nextafter(half, zero)  # the largest step below half an ulp
    cases = {
        "1": fmin - 1,
        "below half ulp": fmin - below,
        "half ulp": fmin - half,
        "finfo.min": fmin + fmin,
    }
    print(
        f"{str(dtype):15s} finfo.min = {fmin.item():.6g}, ulp there = {ulp.item():.6g}, "
        f"half ulp = {half.item():.6g}, just below = {below.item():.8g}"
    )
    print(
        f"{'':15s} finfo.min - step: "
        + ";  ".join(f"{name} -> {v.item():.6g}" for name, v in cases.items())
    )
    assert cases["1"] == fmin and cases["below half ulp"] == fmin
    assert torch.isinf(cases["half ulp"]) and torch.isinf(cases["finfo.min"])
    if dtype == torch.bfloat16:
        assert half.item() == 2.0**119
    if dtype == torch.float16:
        assert (ulp.item(), half.item(), cases["1"].item()) == (32, 16, -65504)

# %% [markdown]
# :::{dropdown} Going deeper: a fused QKV projection
# In self-attention the queries, keys and values are all projections of the same input.
# Three `d -> d` linear layers can then be one `d -> 3d` layer whose output is cut in
# three: one larger matrix multiplication instead of three smaller ones. The two forms
# compute the same function: stacking the three weight matrices (and biases) row-wise
# gives the fused weight, and `chunk(3, dim=-1)` recovers Q, K and V.
# (`torch.nn.MultiheadAttention` stores its weights this way, as one `in_proj_weight` of
# shape `[3d, d]`, as the comparison below shows. Cross-attention cannot fuse all three,
# since its queries come from a different input than its keys and values; K and V can
# still share one layer.)
#
# The book's modules keep the three projections separate. They read more easily,
# cross-attention uses the same module, and the KV cache (chapter 13) needs the
# key/value projections on their own.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
qkv = nn.Linear(d, 3 * d)
with torch.no_grad():
    qkv.weight.copy_(torch.cat([W_q.weight, W_k.weight, W_v.weight], dim=0))  # [3d, d]
    qkv.bias.copy_(torch.cat([W_q.bias, W_k.bias, W_v.bias]))
    fused = qkv(x)  # [B, L, 3d]
    q_f, k_f, v_f = fused.chunk(3, dim=-1)  # three [B, L, d]
    fused_diff = max(
        (a - b).abs().max().item() for a, b in ((q_f, W_q(x)), (k_f, W_k(x)), (v_f, W_v(x)))
    )
print(
    "qkv.weight:",
    tuple(qkv.weight.shape),
    "  qkv(x):",
    tuple(fused.shape),
    "  chunks:",
    tuple(q_f.shape),
)
print(f"max |fused chunk - separate projection| {at_most(fused_diff)}")
assert fused_diff < 1e-6

# %% [markdown]
# ## The module
#
# Everything above, in one `nn.Module`. It takes separate query, key and value inputs.
# For self-attention they are the same tensor; for cross-attention the keys and values
# come from the encoder. It takes an optional bool mask broadcastable to `[B, h, Lq, Lk]`.
# It returns the output and the attention weights. Dropout on the weights is a common
# regulariser (The Annotated Transformer {cite}`rush2018` uses it); it is off in `eval()`.


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

    def split(self, x):  # [B, L, d] -> [B, h, L, d_k]
        B, L, _ = x.shape
        return x.view(B, L, self.h, self.d_k).transpose(1, 2)

    def merge(self, x):  # [B, h, L, d_k] -> [B, L, d]
        B, _, L, _ = x.shape
        return x.transpose(1, 2).reshape(B, L, self.h * self.d_k)

    def forward(self, q, k, v, attn_mask=None):
        Q, K, V = self.split(self.W_q(q)), self.split(self.W_k(k)), self.split(self.W_v(v))
        scores = Q @ K.transpose(-2, -1) / math.sqrt(self.d_k)  # [B, h, Lq, Lk]
        if attn_mask is not None:  # bool, True = blocked
            scores = scores.masked_fill(attn_mask, torch.finfo(scores.dtype).min)
        weights = scores.softmax(dim=-1)  # [B, h, Lq, Lk]
        out = self.attn_drop(weights) @ V  # [B, h, Lq, d_k]
        return self.W_o(self.merge(out)), weights  # [B, Lq, d]


# %% [markdown]
# Test it on the kind of input the decoder's self-attention sees. Take the two sequences
# from above (the first ends in two padding tokens). The mask blocks a key if it is
# padding **or** in the future. It has shape `[B, 1, Lq, Lk]` and broadcasts over heads.

# %%
torch.manual_seed(0)
mha = MultiHeadAttention(d, h).eval()
padding = (tokens == PAD_ID)[:, None, None, :]  # [B, 1, 1, Lk]
causal = torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1)  # [Lq, Lk]: the future
mask = padding | causal  # [B, 1, Lq, Lk]
out, w = mha(x, x, x, attn_mask=mask)
blocked_max = w.masked_select(mask.expand_as(w)).max().item()
print("mask:", tuple(mask.shape), " out:", tuple(out.shape), " weights:", tuple(w.shape))
print(
    f"largest weight on a blocked key: {blocked_max}   "
    f"row sums between {w.sum(-1).min().item():.6f} and {w.sum(-1).max().item():.6f}"
)
assert out.shape == (B, L, d) and w.shape == (B, h, L, L)
assert blocked_max == 0
torch.testing.assert_close(w.sum(-1), torch.ones(B, h, L))

# %% [markdown]
# Figure 3.5 shows the four heads' weights for the first sequence. The heads are
# untrained, so their patterns mean nothing yet. All of them respect the mask. The weights
# are zero above the diagonal (the future) and in the last two columns (padding). Note the
# last two *rows*: queries at padding positions still produce outputs. Nothing downstream
# uses them, since the loss ignores padding targets (chapter 10).

# %% jupyter={"source_hidden": true} tags=["figure", "hide-input"]
fig, axes = plt.subplots(1, h, figsize=(11, 2.8))
for i, ax in enumerate(axes):
    ax.imshow(w[0, i].detach(), cmap="viridis", vmin=0, vmax=1)
    ax.set(title=f"head {i}", xlabel="key position", ylabel="query position" if i == 0 else None)
fig.suptitle(
    "Figure 3.5  Sequence 0: no weight on future keys or on the two padding keys", fontsize=10
)
fig.tight_layout()
plt.show()

# %% [markdown]
# ### The same module, one head at a time
#
# The formula computes each head from its own $d_k$ columns of the projections and applies
# $W^O$ to their concatenation. The cell does that with the module's weights. Its sums run
# in other orders, so the two can differ by rounding:


# %%
def one_head_at_a_time(m, x_in, mask):
    """W_o(Concat(head_1, ..., head_h)): head i from its own d_k output features of W_q, W_k,
    W_v."""
    heads = []
    for i in range(h):
        cols = slice(i * d_k, (i + 1) * d_k)  # nn.Linear stores [out, in]: rows are outputs
        Q_i, K_i, V_i = (
            x_in @ lin.weight[cols].T + lin.bias[cols] for lin in (m.W_q, m.W_k, m.W_v)
        )  # each [B, L, d_k]
        scores_i = Q_i @ K_i.transpose(-2, -1) / math.sqrt(d_k)  # [B, Lq, Lk]
        scores_i = scores_i.masked_fill(mask[:, 0], torch.finfo(scores_i.dtype).min)
        heads.append(scores_i.softmax(dim=-1) @ V_i)  # [B, Lq, d_k]
    return m.W_o(torch.cat(heads, dim=-1)), heads  # Concat(...) W^O, plus W_o's bias


for dtype in (torch.float32, torch.float64):
    m = copy.deepcopy(mha).to(dtype)
    x_d = x.to(dtype)
    with torch.no_grad():
        batched, _ = m(x_d, x_d, x_d, attn_mask=mask)
        by_heads, head_outputs = one_head_at_a_time(m, x_d, mask)
    gap = (by_heads - batched).abs().max().item()
    # 1000 eps at the output scale: well above rounding (a few eps), well below a real error
    tol = 1000 * torch.finfo(dtype).eps * batched.abs().max().item()
    print(f"{str(dtype):13s} max |W_o(Concat(head_1..head_{h})) - module|: {at_most(gap, tol)}")
    assert torch.allclose(by_heads, batched, rtol=0, atol=tol)
print("each head:", tuple(head_outputs[0].shape), " concatenated:", (B, L, h * d_k))

# %% [markdown]
# ## Against `torch.nn.MultiheadAttention`
#
# PyTorch ships multi-head attention as `nn.MultiheadAttention`. Given our weights, it
# must produce our outputs. Its interface differs in three ways:
#
# - it stores Q, K and V as one fused `in_proj_weight` `[3d, d]` (see above), and the
#   output projection as `out_proj`;
# - it is sequence-first unless `batch_first=True`;
# - it takes two masks instead of one: `key_padding_mask` `[B, Lk]` and `attn_mask`
#   `[Lq, Lk]`, both bool with **True = not allowed**, like ours; by default it returns
#   the weights *averaged over heads*, so ask for `average_attn_weights=False`.

# %%
ref = nn.MultiheadAttention(d, h, batch_first=True).eval()
print("parameters:", [(n, tuple(p.shape)) for n, p in ref.named_parameters()])
print("batch_first by default:", nn.MultiheadAttention(d, h).batch_first)
with torch.no_grad():
    ref.in_proj_weight.copy_(torch.cat([mha.W_q.weight, mha.W_k.weight, mha.W_v.weight]))
    ref.in_proj_bias.copy_(torch.cat([mha.W_q.bias, mha.W_k.bias, mha.W_v.bias]))
    ref.out_proj.weight.copy_(mha.W_o.weight)
    ref.out_proj.bias.copy_(mha.W_o.bias)

kpm = tokens == PAD_ID
out_ref, w_ref = ref(
    x, x, x, key_padding_mask=kpm, attn_mask=causal, need_weights=True, average_attn_weights=False
)
_, w_avg = ref(x, x, x, key_padding_mask=kpm, attn_mask=causal)
print(
    "weights by default:",
    tuple(w_avg.shape),
    "  with average_attn_weights=False:",
    tuple(w_ref.shape),
)
d_out, d_w = (out - out_ref).abs().max().item(), (w - w_ref).abs().max().item()
print(
    f"max |ours - nn.MultiheadAttention|: output {at_most(d_out)}, per-head weights {at_most(d_w)}"
)
assert not nn.MultiheadAttention(d, h).batch_first and w_avg.shape == (B, L, L)
torch.testing.assert_close(out, out_ref)
torch.testing.assert_close(w, w_ref)

# %% [markdown]
# ## The fast path: `F.scaled_dot_product_attention`
#
# When the weights are not needed (in training, say), `F.scaled_dot_product_attention`
# (SDPA) computes
# $\operatorname{softmax}(QK^\top/\sqrt{d_k})V$ in one call. Its bool mask has the
# **opposite** meaning: True = *may attend*. So our mask goes in inverted:

# %%
with torch.no_grad():
    Q, K, V = mha.split(mha.W_q(x)), mha.split(mha.W_k(x)), mha.split(mha.W_v(x))
    out_sdpa = mha.W_o(mha.merge(F.scaled_dot_product_attention(Q, K, V, attn_mask=~mask)))
    heads_wrong = F.scaled_dot_product_attention(Q, K, V, attn_mask=mask)  # not inverted
    out_wrong = mha.W_o(mha.merge(heads_wrong))
d_right, d_wrong = (out_sdpa - out).abs().max().item(), (out_wrong - out).abs().max().item()
print(f"max |SDPA(~mask) - ours| {at_most(d_right)}   max |SDPA(mask) - ours| = {d_wrong:.2f}")
print(
    "SDPA(mask), sequence 1, query 4 (nothing blocked in our mask), head 0:",
    heads_wrong[1, 0, 4].numpy(),
)
torch.testing.assert_close(out_sdpa, out)
assert d_wrong > 0.1 and heads_wrong[1, :, 4].abs().max() == 0

# %% [markdown]
# Passing our mask without the `~` raises no error. SDPA then attends *only* to the keys
# we meant to block. A query with nothing blocked (the second sequence's last) sees no
# key and gets zeros. Convert mask conventions in exactly one place. The masks chapter
# (07) adds Hugging Face's integer convention (1 = attend).
#
# :::{dropdown} Going deeper: which kernel ran, and what it keeps in memory
# Two things about SDPA depend on the PyTorch version and on the *backend* it picks, so
# the book shows them for its pinned version instead of stating them in general. SDPA
# dispatches to one of several implementations: a fused kernel (on this CPU, one that
# PyTorch names after FlashAttention {cite}`dao2022`, as the node names below show) or
# the plain "math" fallback, which computes exactly the formula of Figure 3.1.
# `torch.nn.attention.sdpa_kernel` restricts the choice, and the autograd graph of the
# output tells which one ran and what it saved for the backward pass. The cell runs all
# three (default, math only, flash only) on a mask in which query 0 of the first
# sequence has every key blocked. For each it prints the node that produced the
# output, every saved tensor of the weights' shape `[B, h, Lq, Lk]`, and the output on
# the fully masked row.
# :::


# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell", "nbval-ignore-output"]
def saved_tensors_of_shape(out, shape):
    """Names of the tensors of `shape` that out's autograd graph keeps for backward."""
    found, stack, seen = [], [out.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for attr in dir(node):
            if attr.startswith("_saved_"):
                try:
                    saved = getattr(node, attr)
                except RuntimeError:  # freed or not a tensor
                    continue
                if isinstance(saved, torch.Tensor) and tuple(saved.shape) == shape:
                    found.append(f"{node.name()}.{attr}")
        stack += [nxt for nxt, _ in node.next_functions]
    return found


blocked_row = mask.clone()
blocked_row[0, :, 0] = True  # sequence 0, query 0: every key blocked
print("torch", torch.__version__.split("+")[0])
results = {}
for name, backends in (
    ("default", None),
    ("math only", [SDPBackend.MATH]),
    ("flash only", [SDPBackend.FLASH_ATTENTION]),
):
    Qg = Q.detach().clone().requires_grad_()
    try:
        if backends is None:
            o = F.scaled_dot_product_attention(Qg, K, V, attn_mask=~blocked_row)
        else:
            with sdpa_kernel(backends):
                o = F.scaled_dot_product_attention(Qg, K, V, attn_mask=~blocked_row)
    except RuntimeError as err:  # a backend this build or device does not have
        print(f"{name:10s}: not available here ({str(err).splitlines()[0][:60]})")
        continue
    kept = saved_tensors_of_shape(o, (B, h, L, L))
    results[name] = (o.grad_fn.name(), kept, o.detach())
    print(f"{name:10s}: output from {o.grad_fn.name()}")
    print(f"{'':10s}  saved [B, h, Lq, Lk] tensors: {kept or 'none'}")
    print(f"{'':10s}  fully masked row, head 0: {o[0, 0, 0].detach().numpy()}")
for name, (_, _, o) in results.items():  # zeros, not NaN, on the fully masked row
    assert o[0, :, 0].abs().max() == 0, f"{name}: {o[0, 0, 0]} in torch {torch.__version__}"
    torch.testing.assert_close(o, results["math only"][2])
assert results["math only"][1]  # the math fallback keeps the full weights
if "flash only" in results:
    assert not results["flash only"][1]  # the fused kernel keeps none

# %% [markdown]
# ::::{dropdown} Going deeper: what the kernel cell shows, in torch 2.13.0 on this CPU
# - **Fully masked rows.** Every backend returns zeros for a query whose keys are all
#   blocked. That is not a law of nature: earlier PyTorch releases returned NaN there
#   (pytorch/pytorch issue 103963), and the zeros came with a change to SDPA's math
#   path and fused kernels in 2024 (pull request 133882, the `SafeSoftmaxBackward0`
#   node above). Code that must run on several versions should not rely on it; the
#   library's handwritten path zeroes such rows itself (last section).
# - **Memory.** By default SDPA picked the fused CPU kernel here, and its autograd node
#   keeps no tensor of the weights' shape `[B, h, Lq, Lk]`. The math fallback keeps the
#   full weight tensor, like our handwritten module. "SDPA does not materialise the
#   weights" is therefore a statement about the fused backends, not about SDPA: which
#   backend runs can depend on the device, the dtype, the shapes and the arguments
#   (chapter 22 measures the memory of both paths).
# ::::
#
# ## Checking against `helpers`
#
# `helpers.MultiHeadAttention` is the module the rest of the book uses. It has the same
# parameter names, so our weights load into it directly. It must compute the same
# outputs and weights. Its `need_weights=False` path calls SDPA and must give the same
# outputs. It also refuses a `d_model` not divisible by `num_heads` at construction, and
# says why.

# %%
lib = helpers.MultiHeadAttention(d, h).eval()
lib.load_state_dict(mha.state_dict())  # strict: same names, same shapes
with torch.no_grad():
    out_lib, w_lib = lib(x, x, x, attn_mask=mask)
    out_fast, w_none = lib(x, x, x, attn_mask=mask, need_weights=False)
diffs = [(a - b).abs().max().item() for a, b in ((out_lib, out), (w_lib, w), (out_fast, out))]
print(
    "max |helpers - ours|: output {}, weights {}, SDPA path output {}".format(
        *(at_most(v) for v in diffs)
    )
)
torch.testing.assert_close(out_lib, out)
torch.testing.assert_close(w_lib, w)
torch.testing.assert_close(out_fast, out)
assert w_none is None

try:
    helpers.MultiHeadAttention(d_model=16, num_heads=3)
except ValueError as err:
    print(type(err).__name__ + ":", err)
    caught = err
assert "not divisible" in str(caught)

# %% [markdown]
# :::{dropdown} Going deeper: the library's fully masked rows
# The library goes one step further on fully masked rows. Where every key of a query is
# blocked, it sets the weights to zero, not to the uniform row that `finfo.min` alone
# gives. Its two paths then agree with each other and with SDPA in torch 2.13.0.
# The module's output on such a row is not zero, though. The heads give zero there, and
# the output projection `W_o` maps zero to its bias, so the row equals `W_o.bias`.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
all_blocked = torch.ones(1, 1, 1, L, dtype=torch.bool)
with torch.no_grad():
    out_blocked, w_blocked = lib(x[:1], x[:1], x[:1], attn_mask=all_blocked)
    out_blocked_fast, _ = lib(x[:1], x[:1], x[:1], attn_mask=all_blocked, need_weights=False)
    _, w_ours = mha(x[:1], x[:1], x[:1], attn_mask=all_blocked)
print(
    "fully masked: ours (finfo.min) row",
    w_ours[0, 0, 0].numpy(),
    "  helpers row",
    w_blocked[0, 0, 0].numpy(),
)
bias = lib.W_o.bias
print(f"largest |W_o.bias| entry: {'above 0.1' if bias.abs().max() > 0.1 else 'at most 0.1'}")
for name, o in (("handwritten", out_blocked), ("SDPA", out_blocked_fast)):
    print(f"{name:11s} path: max |output - W_o.bias| = {(o[0] - bias).abs().max().item()}")
assert torch.equal(w_blocked, torch.zeros_like(w_blocked)) and not torch.isnan(w_ours).any()
assert torch.equal(out_blocked[0], bias.expand(L, d)) and bias.abs().max() > 0.1
assert torch.equal(out_blocked_fast[0], bias.expand(L, d))

# %% [markdown]
# With these pieces in hand, the next chapter adds the other sub-layer of every
# Transformer layer, the position-wise feed-forward network.
#
# ## Summary
#
# - Scaled dot-product attention is five tensor operations (Figure 3.1): $QK^\top$, the
#   scale $1/\sqrt{d_k}$, the mask, a softmax over the keys, then a product with $V$.
#   Each output row is a convex combination of the value rows.
# - One head with hand-set weights ($W_q$ a multiple of the mirror reflection $R$,
#   $W_k = I$) reverses a sequence with no training. It needs $L$: on six digits the
#   $L = 10$ head reads the wrong positions.
# - Without the scale the score variance is $d_k$ and the softmax saturates: at
#   $d_k = 256$ more than half of the random rows were one-hot. Divide by $\sqrt{d_k}$ of
#   one head, not $\sqrt{d}$.
# - Heads are a reshape, not extra parameters: `view` + `transpose(1, 2)` to split,
#   `transpose(1, 2)` + `reshape` to merge (Figure 3.4). Merging with `view` after the
#   `transpose` raises, except when $L = 1$ or $h = 1$; `reshape` without the
#   `transpose` silently scrambles positions and heads.
# - Combine bool masks with `|` and fill the blocked scores once with
#   `masked_fill(mask, finfo.min)`: `-1e9` does not exist in float16, `-inf` turns a
#   fully masked row into NaN, and `finfo.min` overflows once a second additive mask is
#   added to it.
# - SDPA's bool mask means the opposite of ours (True = may attend). What it returns on
#   fully masked rows and whether it keeps the weights depend on the version and the
#   backend; in torch 2.13.0 on this CPU: zeros, and the fused kernel keeps no weights.
#
# ## Exercises
#
# ### Exercise 3.1 (predict, then run): the wrong scale
#
# A colleague divides the scores by $d_k$ instead of $\sqrt{d_k}$. For unit-variance
# random queries and keys with $d_k = 64$, what is the variance of the scores? Will the
# softmax rows be closer to one-hot or to uniform than with the right scale? Predict,
# then run the solution.

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
# Solution to exercise 3.1
torch.manual_seed(0)
dk = 64
q, k = torch.randn(20000, dk), torch.randn(20000, 16, dk)
raw = (q[:, None, :] * k).sum(-1)  # [20000, 16] scores
right, wrong = softmax_stats(raw / math.sqrt(dk)), softmax_stats(raw / dk)
print(
    f"variance of q.k / d_k = {wrong[0]:.4f} (1/d_k = {1 / dk:.4f}); with sqrt(d_k): {right[0]:.2f}"
)
print(
    f"mean largest weight: {wrong[1]:.3f} with 1/d_k, {right[1]:.3f} with 1/sqrt(d_k);"
    f" uniform 1/16 = {1 / 16:.4f}"
)
assert abs(wrong[0] * dk - 1) < 0.05  # variance 1/d_k
assert wrong[1] < right[1] and abs(wrong[1] - 1 / 16) < 0.02  # close to uniform

# %% [markdown]
# :::{dropdown} Answer to exercise 3.1
# The variance is $d_k / d_k^2 = 1/d_k$: the scores shrink towards 0 and every row is
# close to uniform (mean largest weight 0.077 against 1/16 = 0.0625): at initialisation
# each query averages the values almost equally, whatever the keys say.
# :::

# %% [markdown]
# ### Exercise 3.2 (implement): attention with an additive float mask
#
# Some codebases (and SDPA given a float mask) *add* a mask to the scores: 0 where
# attention is allowed, $-\infty$ where it is blocked. Write
# `additive_mask_attention(q, k, v, mask)` for `q [B, h, Lq, d_k]`, `k [B, h, Lk, d_k]`,
# `v [B, h, Lk, d_v]` and the book's bool mask, broadcastable to `[B, h, Lq, Lk]`. Add the
# float mask to the scaled scores, take the softmax and return `[B, h, Lq, d_v]`. A query
# whose keys are all blocked must get a zero output, not NaN. Check it with
# `check_additive_mask_attention(additive_mask_attention)`.

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 3.2
from helpers.exercises import check_additive_mask_attention


def additive_mask_attention(q, k, v, mask):
    float_mask = torch.zeros(mask.shape, dtype=q.dtype).masked_fill(mask, float("-inf"))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)) + float_mask
    weights = scores.softmax(dim=-1)
    weights = weights.masked_fill(mask.all(dim=-1, keepdim=True), 0.0)  # 0/0 rows -> 0
    return weights @ v


check_additive_mask_attention(additive_mask_attention)

# SDPA adds a float mask the same way (the chapter's `mask`: no query fully blocked)
q3, k3, v3 = (
    torch.randn(B, h, L, d_k, generator=torch.Generator().manual_seed(i)) for i in range(3)
)
float_mask = torch.zeros(mask.shape).masked_fill(mask, float("-inf"))
ours = additive_mask_attention(q3, k3, v3, mask)
sdpa_gap = (ours - F.scaled_dot_product_attention(q3, k3, v3, attn_mask=float_mask)).abs().max()
print(f"max |additive_mask_attention - SDPA with the float mask| {at_most(sdpa_gap.item())}")
assert sdpa_gap < 1e-6

# %% [markdown]
# ### Exercise 3.3 (implement): ALiBi, a distance penalty instead of positions
#
# ALiBi {cite}`press2022` adds no position vectors to the input. It adds a bias to the
# attention scores instead: head $h$ (counting from 0) of $H$ subtracts $m_h$ times the
# distance between query and key, with slopes $m_h = 2^{-8(h+1)/H}$. Write
# `alibi_bias(num_heads, L)` returning the `[num_heads, L, L]` tensor $-m_h\,|i - j|$
# (the paper's decoder only needs $j \le i$, where $|i - j| = i - j$; the absolute value
# is one way to extend it to an encoder). Check it with `check_alibi_bias(alibi_bias)`,
# then add it to attention scores: with all-zero queries and keys, which key gets the most
# weight in each head, and which head puts the most weight on the farthest key?

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 3.3
from helpers.exercises import check_alibi_bias


def alibi_bias(num_heads, L):
    slopes = 2 ** (-8 * torch.arange(1, num_heads + 1) / num_heads)  # [H]
    pos = torch.arange(L)
    distance = (pos[:, None] - pos[None, :]).abs()  # [L, L]
    return -slopes[:, None, None] * distance  # [H, L, L]


check_alibi_bias(alibi_bias)

bias = alibi_bias(4, 6)
zeros = torch.zeros(1, 4, 6, 8)  # queries and keys carry no content at all
w_alibi = (zeros @ zeros.transpose(-2, -1) / math.sqrt(8) + bias).softmax(dim=-1)
print("query 3, weight on keys 0..5, per head:")
for i in range(4):
    print(f"  head {i} (slope {2 ** (-8 * (i + 1) / 4):.4f}):", w_alibi[0, i, 3].numpy().round(3))
assert (w_alibi[0, :, 3].argmax(dim=-1) == 3).all()  # each head prefers the query's own key
assert w_alibi[0, 0, 3, 3] > w_alibi[0, 3, 3, 3]  # the steepest head is the most local
assert w_alibi[0, :, 3, 0].argmax() == 3  # the flattest head reaches furthest (key 0)

# %% [markdown]
# ### Exercise 3.4 (implement): scaled dot-product attention with a padding mask
#
# Write `scaled_dot_product_attention(q, k, v, padding_mask=None, causal=False)` returning
# `(out [B, h, Lq, d_v], weights [B, h, Lq, Lk])` for `q [B, h, Lq, d_k]`,
# `k [B, h, Lk, d_k]` and `v [B, h, Lk, d_v]`.
# `padding_mask` is a bool `[B, Lk]`, True at the padding keys. `causal=True` blocks the
# keys $j > i$ of query $i$. Fill blocked scores with `torch.finfo(scores.dtype).min`.
# `check_scaled_dot_product_attention` runs it with no mask, on a padded batch ($B = 2$,
# $L_q = 4$, $h = 3$), with `causal=True`, and in float16.

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 3.4
from helpers.exercises import check_scaled_dot_product_attention


def scaled_dot_product_attention(q, k, v, padding_mask=None, causal=False):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # [B, h, Lq, Lk]
    Lq, Lk = scores.shape[-2:]
    mask = torch.zeros(Lq, Lk, dtype=torch.bool)
    if padding_mask is not None:
        mask = mask | padding_mask[:, None, None, :]  # [B, Lk] -> [B, 1, 1, Lk]
    if causal:
        mask = mask | torch.ones(Lq, Lk, dtype=torch.bool).triu(diagonal=1)  # keys j > i
    weights = scores.masked_fill(mask, torch.finfo(scores.dtype).min).softmax(dim=-1)
    return weights @ v, weights


check_scaled_dot_product_attention(scaled_dot_product_attention)

# %% [markdown]
# ### Exercise 3.5 (implement): multi-head attention
#
# Write `class MyMultiHeadAttention(nn.Module)`. `__init__(self, d_model, num_heads)`
# creates four `nn.Linear(d_model, d_model)` named `W_q`, `W_k`, `W_v`, `W_o`, and no other
# parameters. `forward(self, q, k, v, padding_mask=None, causal=False)` projects, splits the
# heads, attends with your function of exercise 3.4, merges the heads, and applies `W_o`.
# It returns `out [B, Lq, d_model]` and `weights [B, h, Lq, Lk]`.
# `check_multi_head_attention(MyMultiHeadAttention)` loads a `helpers.MultiHeadAttention`'s
# weights into `MyMultiHeadAttention(24, 3)` and compares the two, with and without masks.

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 3.5
from helpers.exercises import check_multi_head_attention


class MyMultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.h, self.d_k = num_heads, d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)
        self.W_o = nn.Linear(d_model, d_model)

    def forward(self, q, k, v, padding_mask=None, causal=False):
        B, Lq, d_model = q.shape

        def split(t):  # [B, L, d_model] -> [B, h, L, d_k]
            return t.view(B, t.size(1), self.h, self.d_k).transpose(1, 2)

        Q, K, V = split(self.W_q(q)), split(self.W_k(k)), split(self.W_v(v))
        out, weights = scaled_dot_product_attention(Q, K, V, padding_mask, causal)
        merged = out.transpose(1, 2).reshape(B, Lq, d_model)  # [B, Lq, d_model]
        return self.W_o(merged), weights


check_multi_head_attention(MyMultiHeadAttention)
