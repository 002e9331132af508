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
# # 2. Embeddings and positions
#
# The model's first step turns token ids `[B, L]` into vectors `[B, L, d]`.
# You will build it by hand: a learned vector per token, plus a fixed vector per position.
# You will see why attention needs the positions, and why sines and cosines make good ones.
# You will also measure what goes wrong when the two parts have different scales.
#
# ![The sinusoidal position table as a heatmap](figures/02_embeddings_and_positions.png)
#
# The step is
#
# $$
# x_{b,p} = \sqrt{d}\; E[\text{ids}_{b,p}] + PE[p]
# $$
#
# A row of a learned table $E$ per token is scaled by $\sqrt{d}$. A fixed vector $PE[p]$ says
# *where* the token is. Both are as in {cite}`vaswani2017`.

# %% [markdown] tags=["run-time"]
# **Run time:** about 15 s.

# %%
import copy
import math

import matplotlib.pyplot as plt
import torch
import torch.nn as nn
import torch.nn.functional as F

import helpers
from helpers import PAD_ID, VOCAB_SIZE, make_reversal_dataset

# %% [markdown]
# ## An embedding is a lookup
#
# `nn.Embedding(V, d)` holds a weight matrix of shape `[V, d]`, one row per token. Calling
# it with ids returns the rows those ids point at: `emb(ids)` is `emb.weight[ids]`. It is
# also a one-hot vector times the weight matrix, so an embedding is a linear layer without
# bias applied to one-hot inputs. The lookup gives the same numbers without building a
# `[B, L, V]` tensor of zeros. The first examples use a small $d = 8$, so a row fits on one line.

# %%
torch.manual_seed(0)
d_small = 8
emb = nn.Embedding(VOCAB_SIZE, d_small, padding_idx=PAD_ID)
src, _ = make_reversal_dataset(2, seed=0)
ids = src[:, :6]
print("ids:", tuple(ids.shape), "\n", ids)
print("weight:", tuple(emb.weight.shape))

looked_up = emb(ids)
one_hot = F.one_hot(ids, VOCAB_SIZE).float()
print("emb(ids):", tuple(looked_up.shape), "  one_hot(ids):", tuple(one_hot.shape))

assert torch.equal(looked_up, emb.weight[ids])
torch.testing.assert_close(looked_up, one_hot @ emb.weight)

# %% [markdown]
# ### The padding row
#
# `padding_idx=PAD_ID` does two things: the `<pad>` row starts at zero, and it never
# receives a gradient. The cell takes two steps with each of two optimisers, SGD and Adam.
# The pad row stays zero under both. The first batch holds the digits 2 and 4, the second
# only the digit 6.
#
# :::{dropdown} Going deeper: rows of tokens not in the batch
# Rows of tokens that did not occur in the batch get a zero gradient too: that is what a
# lookup means for the backward pass. Whether such a row moves depends on the optimiser.
# Plain SGD moves a row only in a step whose batch contains its token. Adam, the optimiser
# this book trains with (chapter 10), keeps running averages of past gradients. So under
# Adam a row keeps moving after its token has left the batch. A row with no gradient yet,
# like the pad row, has nothing to average and stays put. The cell runs both optimisers
# from the same weights: in step 2, SGD changes only row 9 and Adam rows 5, 7 and 9.
# :::

# %%
batches = [
    torch.tensor([[5, 7, 7, PAD_ID, PAD_ID]]),  # tokens '2', '4', '4', then padding
    torch.tensor([[9, 9, PAD_ID, PAD_ID, PAD_ID]]),  # token '6', then padding
]
print("pad row at the start:", emb.weight[PAD_ID].tolist())
changed = {}
for name, optimizer in (("SGD", torch.optim.SGD), ("Adam", torch.optim.Adam)):
    table = copy.deepcopy(emb)  # the same starting weights for both optimisers
    opt = optimizer(table.parameters(), lr=0.1)
    for step, batch in enumerate(batches, 1):
        before = table.weight.detach().clone()
        opt.zero_grad()
        table(batch).pow(2).sum().backward()
        with_grad = table.weight.grad.norm(dim=1).nonzero().flatten().tolist()
        opt.step()
        changed[name, step] = (table.weight.detach() != before).any(dim=1).nonzero().flatten()
        print(
            f"{name:4s} step {step}: rows with a non-zero gradient {with_grad},"
            f" rows changed {changed[name, step].tolist()}"
        )
    pad_after = table.weight[PAD_ID].abs().max().item()
    print(f"{name:4s} pad row after both steps: max |entry| = {pad_after}")
    assert pad_after == 0
assert changed["SGD", 1].tolist() == changed["Adam", 1].tolist() == [5, 7]
assert changed["SGD", 2].tolist() == [9] and changed["Adam", 2].tolist() == [5, 7, 9]

# %% [markdown]
# One trap: the zero is only set at construction. Any re-initialisation of the weight
# overwrites the pad row too, and nothing warns you. The next cell shows it with
# `nn.init.normal_`, which the module below uses too. The pad row must be zeroed again
# afterwards (and `helpers` does so).

# %%
nn.init.normal_(emb.weight, std=d_small**-0.5)
print(f"pad row after nn.init.normal_: max |entry| = {emb.weight[PAD_ID].abs().max().item():.2f}")
assert emb.weight[PAD_ID].abs().max() > 0
with torch.no_grad():
    emb.weight[PAD_ID].zero_()
print(f"after zeroing it again:        max |entry| = {emb.weight[PAD_ID].abs().max().item():.2f}")
assert emb.weight[PAD_ID].abs().max() == 0

# %% [markdown]
# ## Why attention needs positions
#
# Self-attention compares every token with every other token, but nothing in it knows
# the tokens' order. Permute the input rows and the output rows come out permuted the
# same way: the operation is *permutation-equivariant*. For our task that is fatal:
# `7 3 0` and `0 3 7` would look like the same set of tokens. The cell applies PyTorch's
# built-in attention (chapter 03 builds it by hand) with and without positions added.

# %%
x = emb(ids[:1]).detach()  # [1, 6, 8]: tokens only, no positions
perm = torch.tensor([3, 0, 5, 1, 4, 2])


def attend(t):
    return F.scaled_dot_product_attention(t, t, t)


out, out_perm = attend(x), attend(x[:, perm])
gap_tokens = (out_perm - out[:, perm]).abs().max().item()
print(
    "tokens only:    max |attend(permuted x) - permuted attend(x)|",
    "< 1e-06" if gap_tokens < 1e-6 else f"= {gap_tokens:.2g}",
)
assert gap_tokens < 1e-6

pos = torch.randn(1, 6, d_small)  # any position-dependent signal will do for this check
out, out_perm = attend(x + pos), attend(x[:, perm] + pos)
gap_positions = (out_perm - out[:, perm]).abs().max().item()
print(f"with positions: max |attend(permuted x) - permuted attend(x)| = {gap_positions:.2f}")
assert gap_positions > 1e-2

# %% [markdown]
# The same holds for the whole model. The next cell builds an untrained
# `helpers.Transformer` and a copy whose encoder position table is zero (the decoder keeps
# its own). It feeds both a source and the same digits reversed, with the same decoder
# input. With the encoder's positions removed, the two orders give the same logits, up to
# float rounding. Yet the right first output token (the last source digit) differs between
# the two orders. This holds for any weights, so such a model is wrong on at least one of
# the two, however it is trained.
#
# :::{dropdown} Going deeper: why this does not depend on the weights
# Without positions the encoder is permutation-equivariant. Its attention is, as shown
# above, and its feed-forward networks and LayerNorms act on each position alone.
# Cross-attention then sums over the memory positions, so their order drops out.
# :::

# %%
with torch.random.fork_rng():  # leave the global random stream to the later cells
    torch.manual_seed(0)
    full = helpers.Transformer(VOCAB_SIZE, VOCAB_SIZE).eval()
no_positions = copy.deepcopy(full)
no_positions.encoder.embed.pe.zero_()  # the encoder's position table (a buffer, see below)

n = int((src[1] >= helpers.NUM_OFFSET).sum())
src_a = src[1:2]
src_b = src_a.clone()
src_b[0, :n] = src_a[0, :n].flip(0)  # the same digits reversed; <eos> and padding stay
dec_in = torch.cat([torch.tensor([[helpers.BOS_ID]]), src_a[:, :n].flip(1)], dim=1)
print("source a:", helpers.describe(src_a[0]))
print("source b:", helpers.describe(src_b[0]))
print("decoder input for both:", helpers.describe(dec_in[0]))
with torch.no_grad():
    gaps = {
        name: (m(src_a, dec_in) - m(src_b, dec_in)).abs().max().item()
        for name, m in (("with positions", full), ("encoder positions zeroed", no_positions))
    }
for name, gap in gaps.items():
    shown = "< 1e-05" if gap < 1e-5 else f"= {gap:.2f}"
    print(f"{name:25s} max |logits(a) - logits(b)| {shown}")
first_a, first_b = src_a[0, n - 1], src_b[0, n - 1]  # the last digit comes out first
print(
    "right first output token: for a",
    helpers.token_name(first_a.item()),
    " for b",
    helpers.token_name(first_b.item()),
)
assert torch.equal(no_positions.decoder.embed.pe, full.decoder.embed.pe)  # decoder keeps its own
assert gaps["encoder positions zeroed"] < 1e-5 and gaps["with positions"] > 0.1
assert first_a != first_b

# %% [markdown]
# ## Sinusoidal positions, built by hand
#
# The original Transformer {cite}`vaswani2017` adds a fixed vector per position. Pair the
# dimensions up, $(0, 1), (2, 3), \dots$; pair $i$ turns at its own angular frequency
# $\omega_i = 10000^{-2i/d}$, with a sine in the even dimension and a cosine in the odd one:
#
# $$
# PE[p, 2i] = \sin(\omega_i\, p), \qquad PE[p, 2i+1] = \cos(\omega_i\, p).
# $$
#
# The first pair turns once every $2\pi \approx 6.3$ positions. The frequencies then fall
# geometrically, so the last pair barely moves over hundreds of positions. Each position
# gets a distinct pattern, like a clock with many hands turning at different speeds. The
# cell prints the smallest distance between two rows. We build the table for the book's
# defaults, `max_len` $= 64$ and $d = 128$, straight from the formula.

# %%
max_len, d = 64, 128
p = torch.arange(max_len, dtype=torch.float32)[:, None]  # [max_len, 1]
two_i = torch.arange(0, d, 2, dtype=torch.float32)  # [d/2]: 0, 2, 4, ...
omega = 1.0 / 10000 ** (two_i / d)  # [d/2]
angle = p * omega  # [max_len, d/2] by broadcasting

pe = torch.zeros(max_len, d)
pe[:, 0::2] = torch.sin(angle)  # even dims: sine
pe[:, 1::2] = torch.cos(angle)  # odd dims: cosine
print(
    "p:",
    tuple(p.shape),
    " omega:",
    tuple(omega.shape),
    " angle:",
    tuple(angle.shape),
    " pe:",
    tuple(pe.shape),
)
print("PE[0, :6] =", pe[0, :6].tolist(), " (sin 0 = 0, cos 0 = 1)")
print("PE[1, :4] =", [round(v, 4) for v in pe[1, :4].tolist()])

assert torch.equal(pe[0, 0::2], torch.zeros(d // 2))
assert torch.equal(pe[0, 1::2], torch.ones(d // 2))
torch.testing.assert_close(pe[1, :2], torch.tensor([math.sin(1.0), math.cos(1.0)]))
row_distances = torch.cdist(pe, pe) + torch.eye(max_len) * 1e9  # ignore each row vs itself
print(f"smallest distance between two different rows: {row_distances.min().item():.2f}")
assert row_distances.min() > 0.5

# %% [markdown]
# Figure 2.1 shows the whole table as a heatmap: fast stripes on the left (high
# frequencies), slowly varying columns on the right. The line plot beside it follows a
# few sine dimensions along the positions.

# %% jupyter={"source_hidden": true} tags=["figure", "hide-input", "opening-figure"]
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8), gridspec_kw={"width_ratios": [1.2, 1]})
im = ax1.imshow(pe, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1)
ax1.set(title="PE[p, j]  (max_len=64, d=128)", xlabel="dimension j", ylabel="position p")
fig.colorbar(im, ax=ax1, fraction=0.046)
for j in (0, 12, 40, 80):
    ax2.plot(pe[:, j], label=f"dim {j}: wavelength {2 * math.pi / omega[j // 2]:.0f}")
ax2.set(title="a few sine dimensions", xlabel="position p", ylabel="PE[p, j]", ylim=(-1.1, 1.6))
ax2.legend(fontsize=8, loc="upper center", ncol=2)
fig.suptitle("Figure 2.1  The sinusoidal position table", fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# :::{dropdown} Going deeper: the wavelength geometry
# Pair $i$ repeats every $2\pi / \omega_i = 2\pi \cdot 10000^{2i/d}$ positions. That is
# $2\pi$ for the first pair and $2\pi \cdot 10000^{(d-2)/d}$ for the last one,
# $i = d/2 - 1$. At $d = 128$ the last is $2\pi \cdot 8660$, about 54,410 positions; it
# nears $2\pi \cdot 10000$ only as $d$ grows. The cell prints the range. With at most
# 14 positions in our task, the slow pairs are nearly constant: the cell counts the pairs
# whose angle $\omega_i p$ stays below 0.1 radian up to position 13 (their sine stays
# below 0.1, their cosine above 0.99). Such pairs carry
# almost no position information here; only much longer sequences move them.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
wavelength = 2 * math.pi / omega
print(
    "wavelengths (positions): first pairs",
    [round(w, 1) for w in wavelength[:3].tolist()],
    " last pair",
    round(wavelength[-1].item()),
)
ratios = wavelength[1:] / wavelength[:-1]
print(
    f"ratio between neighbouring pairs: {ratios.min():.4f} to {ratios.max():.4f};"
    f" 10000^(2/d) = {10000 ** (2 / d):.4f}"
)
last_factor = 10000 ** ((d - 2) / d)
print(
    f"last pair at d = {d}: 2 pi x 10000^((d-2)/d) = 2 pi x {last_factor:.0f}"
    f" = {2 * math.pi * last_factor:.0f}"
)
slow = int((omega * 13 < 0.1).sum())
print(f"pairs that turn by less than 0.1 radian between positions 0 and 13: {slow} of {d // 2}")
assert (pe[:14, 1::2][:, -slow:] > 0.99).all() and (pe[:14, 0::2][:, -slow:] < 0.1).all()

# %% [markdown]
# ### Relative positions are rotations
#
# Why sines *and* cosines? Because together they make a shift in position a fixed linear
# map. By the angle-addition formulas, pair $i$ at position $p + k$ is pair $i$ at
# position $p$ rotated by the angle $\omega_i k$:
#
# $$
# \begin{pmatrix} \sin \omega_i (p+k) & \cos \omega_i (p+k) \end{pmatrix}
# = \begin{pmatrix} \sin \omega_i p & \cos \omega_i p \end{pmatrix}
# \begin{pmatrix} \cos \omega_i k & -\sin \omega_i k \\ \sin \omega_i k & \cos \omega_i k \end{pmatrix}
# $$
#
# Stack one such $2 \times 2$ block per pair into a block-diagonal matrix $R_k$. Then
# $PE[p+k] = PE[p]\, R_k$ for **every** $p$: the matrix depends on the offset $k$ only.
# A layer that needs "the token three places back" can in principle learn one linear
# map for it, instead of one rule per absolute position. The cell checks the identity for
# every position and a few offsets.

# %%
def rotation(k: int) -> torch.Tensor:
    """Block-diagonal [d, d] matrix that moves every PE row k positions forward."""
    c, s = torch.cos(omega * k), torch.sin(omega * k)
    blocks = [torch.tensor([[ci, -si], [si, ci]]) for ci, si in zip(c.tolist(), s.tolist())]
    return torch.block_diag(*blocks)


for k in (1, 3, 10):
    R = rotation(k)
    err = (pe[:-k] @ R - pe[k:]).abs().max().item()
    shown = "< 1e-05" if err < 1e-5 else f"= {err:.2g}"
    print(f"k={k:2d}: R_k {tuple(R.shape)}, max |PE[p] R_k - PE[p+k]| over all p {shown}")
    torch.testing.assert_close(pe[:-k] @ R, pe[k:], atol=1e-5, rtol=0)

# %% [markdown]
# Two consequences follow. Every row has the same length, $\lVert PE[p] \rVert^2 = d/2$,
# because each pair contributes $\sin^2 + \cos^2 = 1$. And the dot product of two rows
# depends only on their distance: $PE[p] \cdot PE[p+k] = \sum_i \cos(\omega_i k)$. The
# cell checks both for three starting positions $p$.

# %%
norms_sq = pe.pow(2).sum(dim=1)
print(
    f"||PE[p]||^2 for all p: min {norms_sq.min():.4f}  max {norms_sq.max():.4f}  (d/2 = {d // 2})"
)
torch.testing.assert_close(norms_sq, torch.full((max_len,), d / 2))

offsets = torch.arange(0, 40)
formula = torch.cos(offsets[:, None] * omega).sum(1)  # sum_i cos(omega_i k)
dots = {p0: pe[p0] @ pe[p0 + offsets].T for p0 in (0, 5, 20)}
for dot in dots.values():
    torch.testing.assert_close(dot, formula, atol=1e-4, rtol=0)
print(
    "PE[p] . PE[p+k] for k = 0, 1, 2, 5, 10, 20, 39 (the same for p = 0, 5, 20):",
    [round(v, 1) for v in formula[[0, 1, 2, 5, 10, 20, 39]].tolist()],
)
assert (formula[1:] < formula[0]).all() and (formula[1:11].diff() < 0).all()

# %% [markdown]
# Figure 2.2 plots the three curves. They coincide, peak at $k = 0$ and fall with
# distance, monotonically over the first ten offsets. So nearby positions have similar
# vectors.

# %% jupyter={"source_hidden": true} tags=["figure", "hide-input"]
fig, ax = plt.subplots(figsize=(6.5, 3.2))
styles = {0: dict(lw=5, alpha=0.35), 5: dict(lw=2.5, ls="--"), 20: dict(lw=0, marker="o", ms=3)}
for p0, dot in dots.items():
    ax.plot(offsets, dot, label=f"p = {p0}", **styles[p0])
ax.set(
    title="Figure 2.2  PE[p] · PE[p + k] depends on k only", xlabel="offset k", ylabel="dot product"
)
ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Storing a fixed table: `register_buffer`
#
# The table is not learned, yet it belongs to the module. It must move with
# `model.to(device)` and change dtype with `model.double()`. A module has three places to
# keep a tensor, and they behave differently:
#
# - `nn.Parameter`: trained, in `parameters()`, saved in `state_dict()`, moved by `.to()`;
# - `register_buffer(name, t)`: not trained, moved by `.to()`, saved in `state_dict()`;
#   with `persistent=False` it is moved but not saved;
# - a plain attribute `self.t = t`: invisible to PyTorch: not moved, not saved.
#
# The cell shows each of the three behaviours. Instead of a GPU, it moves the module to the
# `meta` device (tensors with shapes but no data), so it runs on any machine.

# %%
class Holder(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(3))
        self.register_buffer("saved_table", torch.ones(3))
        self.register_buffer("table", torch.ones(3), persistent=False)
        self.plain = torch.ones(3)

    def forward(self):
        return self.weight * self.plain


m = Holder()
print("parameters:", [n for n, _ in m.named_parameters()])
print("buffers:   ", [n for n, _ in m.named_buffers()])
print("state_dict:", list(m.state_dict()))
assert [n for n, _ in m.named_parameters()] == ["weight"]
assert list(m.state_dict()) == ["weight", "saved_table"]

m = m.to("meta")
for name in ("weight", "saved_table", "table", "plain"):
    print(f"after .to('meta'): {name:12s} on {getattr(m, name).device}")
assert m.table.device.type == "meta" and m.plain.device.type == "cpu"

try:
    m()
except RuntimeError as err:
    print("\nforward:", type(err).__name__, "-", err)
    caught = err
assert "device" in str(caught)

# %% [markdown]
# The plain attribute stayed behind, and the first operation that mixes it with a moved
# tensor fails with a device mismatch. The position table is a buffer.
#
# Why `persistent=False`? The table is a pure function of `(max_len, d)`. Saving it makes
# checkpoints larger and brittle. A checkpoint saved with `max_len = 64` would no longer
# load into the same model built with `max_len = 128`, though every learned weight fits.
# We will see this once the module is built.

# %% [markdown]
# ## The scale and the initialisation
#
# Vaswani et al. {cite}`vaswani2017` (section 3.4) multiply the embedding weights by
# $\sqrt{d}$ without saying why. A plausible reason: in their model the same matrix also
# serves as the output projection (tied weights, {cite}`press2017`). Its weights are small,
# of order $d^{-1/2}$. The factor brings the token vectors up to the scale of the position
# vectors before the two are added. That is what matters. If one part of the sum is much
# larger, the other is drowned out. We measure each part by its root mean square (RMS),
# $\sqrt{\text{mean}(x^2)}$ over the entries. Every sinusoidal row has RMS
# $\sqrt{1/2} \approx 0.71$, since its squared length is $d/2$. The token part depends
# on how $E$ is initialised:
#
# - PyTorch's `nn.Embedding` starts from $\mathcal{N}(0, 1)$. Times $\sqrt{128} \approx 11.3$,
#   the token part has an RMS around 11.
# - Initialising $E$ from $\mathcal{N}(0, d^{-1/2})$ (standard deviation $d^{-1/2}$)
#   instead makes $\sqrt{d}\,E$ have an RMS around 1.
#
# This is an easy trap when porting a Transformer to PyTorch, and it raises no error.
# (Chapter 12 measures what it does to training.) Measure the two scales on a real batch of
# the reversal task, counting only the non-padding tokens:

# %%
src, _ = make_reversal_dataset(256, seed=0)
real = src != PAD_ID
L = src.shape[1]
position_part = pe[:L].expand(src.shape[0], L, d)[real]  # the PE row added to each real token


def rms(t):
    return t.pow(2).mean().sqrt().item()


sizes, tables = {}, {}
for name in ("default N(0, 1)", "N(0, d^-1/2)"):
    # N(0, 1): PyTorch's default
    table = tables[name] = nn.Embedding(VOCAB_SIZE, d, padding_idx=PAD_ID)
    if name != "default N(0, 1)":
        nn.init.normal_(table.weight, mean=0.0, std=d**-0.5)
    with torch.no_grad():
        table.weight[PAD_ID].zero_()
        token_part = (table(src) * math.sqrt(d))[real]
    sizes[name] = (rms(token_part), rms(position_part))

print(f"{'embedding init':18s} {'token RMS':>10s} {'position RMS':>13s} {'ratio':>7s}")
for name, (tok, pos) in sizes.items():
    print(f"{name:18s} {tok:10.2f} {pos:13.2f} {tok / pos:7.1f}")
print(
    f"position part: mean {position_part.mean().item():.2f}"
    f" (cosine entries {position_part[:, 1::2].mean().item():.2f},"
    f" sine entries {position_part[:, 0::2].mean().item():.2f}),"
    f" standard deviation {position_part.std().item():.2f}"
)

ratio_default = sizes["default N(0, 1)"][0] / sizes["default N(0, 1)"][1]
ratio_fixed = sizes["N(0, d^-1/2)"][0] / sizes["N(0, d^-1/2)"][1]
assert 9 < sizes["default N(0, 1)"][0] < 14 and 0.8 < sizes["N(0, d^-1/2)"][0] < 1.2
assert abs(sizes["N(0, d^-1/2)"][1] - math.sqrt(0.5)) < 1e-4
assert ratio_default > 10 and ratio_fixed < 3

# %% [markdown]
# With the default initialisation the token part is more than ten times larger than the
# position part. With $\mathcal{N}(0, d^{-1/2})$ the two are within a small factor of
# each other.
#
# :::{dropdown} Going deeper: RMS is not the standard deviation
# The standard deviation subtracts the mean of the entries. The position entries have a
# mean near 0.5, because at positions 0 to 13 most cosines sit near 1. So their standard
# deviation is smaller than their RMS.
# :::
#
# What that means for the model: take the digit `5` at positions 0 to 13. How different is
# its input vector from the same token at position 0? We measure cosine similarity, where
# 1 means "the same direction". With the default initialisation, the cosine is still above
# 0.99 at position 13: the model has to hear a whisper under a shout. Figure 2.3 shows all
# fourteen positions.

# %%
five = helpers.NUM_OFFSET + 5
cosines = {}
for name, table in tables.items():
    row = table.weight[five].detach() * math.sqrt(d)  # the token '5' after the sqrt(d) scale
    vectors = row + pe[:14]  # the same token at positions 0..13
    cosines[name] = F.cosine_similarity(vectors[:1], vectors, dim=-1)
    print(
        f"{name:16s} cosine with position 0, at positions 1, 5, 13:",
        [round(v, 3) for v in cosines[name][[1, 5, 13]].tolist()],
    )
assert cosines["default N(0, 1)"][-1] > 0.99 and cosines["N(0, d^-1/2)"][-1] < 0.95

# %% jupyter={"source_hidden": true} tags=["figure", "hide-input"]
fig, ax = plt.subplots(figsize=(6.5, 3.2))
for name, cos in cosines.items():
    ax.plot(cos, marker="o", ms=3, label=f"embedding init {name}")
ax.set(
    title="Figure 2.3  Token '5' at position p vs at position 0",
    xlabel="position p",
    ylabel="cosine similarity",
)
ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# ## The module, built by hand
#
# Now put the pieces together:
#
# - a lookup table initialised from $\mathcal{N}(0, d^{-1/2})$, with a zero pad row;
# - the sinusoidal table as a non-persistent buffer;
# - the $\sqrt{d}$ scale;
# - dropout on the sum, the original paper's regularisation {cite}`vaswani2017`. It is off
#   in `eval()` mode.
#
# The forward pass slices the table to the input length `L`.

# %%
def sinusoidal_table(max_len: int, d: int) -> torch.Tensor:
    p = torch.arange(max_len, dtype=torch.float32)[:, None]
    angle = p / 10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    table = torch.zeros(max_len, d)
    table[:, 0::2], table[:, 1::2] = torch.sin(angle), torch.cos(angle)
    return table


class TokenAndPosition(nn.Module):
    def __init__(self, vocab_size, d, max_len, dropout=0.1, persistent=False):
        super().__init__()
        self.d = d
        self.emb = nn.Embedding(vocab_size, d, padding_idx=PAD_ID)
        nn.init.normal_(self.emb.weight, mean=0.0, std=d**-0.5)
        with torch.no_grad():
            self.emb.weight[PAD_ID].zero_()  # re-initialising overwrote it
        self.register_buffer("pe", sinusoidal_table(max_len, d), persistent=persistent)
        self.drop = nn.Dropout(dropout)

    def forward(self, ids):  # ids [B, L]
        L = ids.size(1)
        x = self.emb(ids) * math.sqrt(self.d)  # [B, L, d]
        x = x + self.pe[:L]  # [L, d] broadcasts over B
        return self.drop(x)


torch.manual_seed(0)
embed = TokenAndPosition(VOCAB_SIZE, d, max_len).eval()
src, _ = make_reversal_dataset(4, seed=0)
x = embed(src)
print("ids:", tuple(src.shape), "->", tuple(x.shape))
print("parameters:", sum(p.numel() for p in embed.parameters()), "= V * d =", VOCAB_SIZE * d)
pad_gap = (x[0, -1] - embed.pe[src.shape[1] - 1]).abs().max().item()
print(f"sequence 0, last position (a <pad>): max |x - PE[{src.shape[1] - 1}]| = {pad_gap}")
assert x.shape == (4, src.shape[1], d)
assert src[0, -1] == PAD_ID and pad_gap == 0

# %% [markdown]
# Note the last line: a `<pad>` input becomes exactly its position vector, not zero. That is
# harmless. Attention masks the pad positions as keys, and the loss ignores them as
# targets (chapter 07 builds the masks).
#
# Here is the checkpoint argument from the `register_buffer` section, made concrete.
# Moving to a longer `max_len` works for a non-persistent table. It fails for a saved one,
# whose stored `[64, 128]` no longer matches the new `[128, 128]`.

# %%
for persistent in (False, True):
    old = TokenAndPosition(VOCAB_SIZE, d, max_len=64, persistent=persistent)
    new = TokenAndPosition(VOCAB_SIZE, d, max_len=128, persistent=persistent)
    try:
        new.load_state_dict(old.state_dict())
        print(f"persistent={persistent}: keys {list(old.state_dict())} -> loaded")
    except RuntimeError as err:
        print(f"persistent={persistent}: keys {list(old.state_dict())} ->", type(err).__name__)
        print("   ", str(err).strip().splitlines()[-1].strip())
        assert persistent and "size mismatch for pe" in str(err)
    else:
        assert not persistent

# %% [markdown]
# ## Learned positions
#
# The alternative to a fixed table is to learn one: an `nn.Embedding(max_len, d)` indexed
# by position, as GPT-2 does {cite}`radford2019`. The module below swaps the fixed buffer
# for that second table. Its token table starts as in `TokenAndPosition`. Its position table
# keeps `nn.Embedding`'s $\mathcal{N}(0, 1)$. So both parts start with an RMS near 1: no
# whisper under a shout.

# %%
class TokenAndLearnedPosition(nn.Module):
    def __init__(self, vocab_size, d, max_len):
        super().__init__()
        self.d = d
        self.emb = nn.Embedding(vocab_size, d, padding_idx=PAD_ID)
        nn.init.normal_(self.emb.weight, mean=0.0, std=d**-0.5)  # as in TokenAndPosition
        with torch.no_grad():
            self.emb.weight[PAD_ID].zero_()
        self.pos = nn.Embedding(max_len, d)  # one trainable row per position, N(0, 1)

    def forward(self, ids):
        positions = torch.arange(ids.size(1), device=ids.device)  # [L]
        return self.emb(ids) * math.sqrt(self.d) + self.pos(positions)


learned = TokenAndLearnedPosition(VOCAB_SIZE, d, max_len)
token_rms = rms(learned.emb.weight[1:] * math.sqrt(d))  # row 0 is <pad>
position_rms = rms(learned.pos.weight)
print(f"at the start: token part RMS {token_rms:.2f}, position part RMS {position_rms:.2f}")
assert 0.9 < token_rms < 1.1 and 0.9 < position_rms < 1.1
learned(src).sum().backward()
trained_rows = learned.pos.weight.grad.abs().sum(dim=1) > 0
print("extra parameters per stack:", learned.pos.weight.numel(), f"(max_len x d = {max_len} x {d})")
print(
    f"position rows that received a gradient from a batch of length {src.shape[1]}:",
    int(trained_rows.sum()),
    "of",
    max_len,
)
assert int(trained_rows.sum()) == src.shape[1] and not trained_rows[src.shape[1] :].any()

# %% [markdown]
# The trade-offs:
#
# - **For learned positions:** no assumption about what position should look like. The
#   model fits whatever pattern the task needs. Vaswani et al. tried both on translation
#   and report nearly identical results {cite}`vaswani2017`.
# - **Against:** `max_len` $\times\, d$ extra parameters (here 8,192 per stack). A row is
#   trained only by sequences long enough to reach it: rows 14 to 63 get no gradient from
#   our data, so they stay random. And there is no row at all at or beyond `max_len`.
# - **Sinusoids** cost nothing, are defined for every position, and encode offsets as
#   rotations. They are no free pass to longer inputs, though. A model trained on 14
#   positions has never seen the patterns of position 40. Press et al. measure how language
#   models with sinusoidal positions degrade on longer inputs {cite}`press2022`.
#
# Many recent language models use neither: they use RoPE or ALiBi, inside attention.
#
# :::{dropdown} Going deeper: RoPE and ALiBi
# **RoPE** (rotary position embedding {cite}`su2021`, used by LLaMA among others) takes
# the rotation property shown above into attention. It rotates the queries and keys by
# their positions, so that positions $p$ and $q$ enter their score only through the offset
# $p - q$. **ALiBi** {cite}`press2022` adds no position vectors at all. It subtracts from
# each attention score a penalty proportional to the distance between query and key, with
# a different slope per head. Its authors report that it extrapolates to longer inputs.
# Both live inside attention rather than at the input (exercise 3.3 builds ALiBi's
# penalty). Our task needs no more than sinusoids.
# :::

# %% [markdown]
# ## Pitfall: a sequence longer than `max_len`
#
# The table has `max_len` rows. What happens when an input is longer? Both hand-built
# modules fail, but with messages that do not say what went wrong. The fixed table's
# slice `pe[:L]` silently stops at 64 rows, and the addition then complains about sizes.
# The learned table fails inside the embedding lookup.

# %%
too_long = torch.full((1, max_len + 6), helpers.NUM_OFFSET)  # 70 tokens, max_len is 64
print("input:", tuple(too_long.shape), " max_len:", max_len)

errors = {}
for name, module in (("sinusoidal", embed), ("learned", learned)):
    try:
        module(too_long)
    except (RuntimeError, IndexError) as err:
        errors[name] = err
        print(f"{name:10s} -> {type(err).__name__}: {err}")
assert isinstance(errors["sinusoidal"], RuntimeError) and "70" in str(errors["sinusoidal"])
assert isinstance(errors["learned"], IndexError)

# %% [markdown]
# Neither message mentions positions or `max_len`. The finished `helpers.TokenAndPosition`
# checks the length first, and says what is wrong and what to do. The whole `helpers` model
# checks the source the same way when it encodes it.

# %%
checked = helpers.TokenAndPosition(VOCAB_SIZE, d, max_len)
with torch.random.fork_rng():  # leave the global random stream as it was
    whole_model = helpers.Transformer(VOCAB_SIZE, VOCAB_SIZE, d_model=d, max_len=max_len)
caught = {}
for name, fn in (("TokenAndPosition", checked), ("Transformer.encode", whole_model.encode)):
    try:
        fn(too_long)
    except ValueError as err:
        print(f"{name:18s} -> {type(err).__name__}: {err}")
        caught[name] = err
assert all("max_len=64" in str(err) for err in caught.values()) and len(caught) == 2

# %% [markdown]
# ## Checking against `helpers`
#
# The library's versions must compute what this chapter built. Its position table equals
# the hand-built one to float32 rounding. (The library computes the frequencies in log
# space, $\exp(-2i \ln 10000 / d)$.) A freshly built `helpers.TokenAndPosition` has a zero
# `<pad>` row, like ours. Given the weights of our module, it produces the same output in
# evaluation mode, to float32 rounding, with the same names for its parts.

# %%
lib_table = helpers.sinusoidal_position_encoding(max_len, d)
table_gap = (lib_table - pe).abs().max().item()
print(
    "table:",
    tuple(lib_table.shape),
    lib_table.dtype,
    " max |difference| from the hand-built table:",
    "< 1e-05" if table_gap < 1e-5 else table_gap,
)
torch.testing.assert_close(lib_table, pe)
torch.testing.assert_close(lib_table, sinusoidal_table(max_len, d))

lib = helpers.TokenAndPosition(VOCAB_SIZE, d, max_len).eval()
lib_pad = lib.emb.weight[PAD_ID].abs().max().item()
print(f"helpers.TokenAndPosition, freshly built: pad row max |entry| = {lib_pad}")
assert lib_pad == 0
print("state_dict keys, ours:", list(embed.state_dict()), " helpers:", list(lib.state_dict()))
lib.load_state_dict(embed.state_dict())  # strict: the names and shapes must match
module_gap = (lib(src) - embed(src)).abs().max().item()
print(
    f"max |helpers.TokenAndPosition(src) - TokenAndPosition(src)| on {tuple(src.shape)}:",
    "< 1e-05" if module_gap < 1e-5 else module_gap,
)
torch.testing.assert_close(lib(src), embed(src))

# %% [markdown]
# The next chapter feeds these `[B, L, d]` vectors into the component that lets positions
# talk to each other: multi-head attention.
#
# ## Summary
#
# - The input layer is a lookup, `emb(ids) = emb.weight[ids]`, scaled by $\sqrt{d}$, plus a
#   fixed sinusoidal table $PE$ stored as a non-persistent buffer (moved with the module,
#   not saved in checkpoints). The `<pad>` row starts at zero and gets no gradient, but any
#   re-initialisation overwrites it. Under Adam a used row keeps moving after its token
#   leaves the batch; under plain SGD (no momentum) it does not.
# - Without positions, attention is permutation-equivariant: permuting the tokens only
#   permutes the outputs. A whole model without encoder positions gives a source and its
#   reversal the same logits, to float rounding.
# - Sinusoids turn a shift by $k$ positions into one rotation $R_k$ for every $p$, and
#   $PE[p] \cdot PE[p+k]$ depends on $k$ only (Figure 2.2).
# - Scale and initialisation must match: PyTorch's $\mathcal{N}(0, 1)$ times $\sqrt{128}$
#   made the token part about 16 times louder than the positions, by RMS (cosine above
#   0.99 between positions 0 and 13, Figure 2.3); $\mathcal{N}(0, d^{-1/2})$ brings the
#   ratio to about 1.4.
# - A sequence longer than `max_len` has no position row: check the length and say so,
#   as `helpers.TokenAndPosition` does, instead of letting a size error surface.
#
# ## Exercises
#
# ### Exercise 2.1 (predict, then run): what learned positions cost the whole model
#
# The book's `Transformer` (chapter 1) has 931,213 parameters with sinusoidal positions,
# `max_len = 64` and $d = 128$. If both stacks (encoder and decoder) used learned
# positions instead, how many parameters would it have? Predict, then run the solution.

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
# Solution to exercise 2.1
with torch.device("meta"):  # shapes only
    book_model = helpers.Transformer(VOCAB_SIZE, VOCAB_SIZE)
    position_table = nn.Embedding(max_len, d)  # what each stack would add
sinusoidal_total = helpers.count_parameters(book_model)
extra = 2 * position_table.weight.numel()  # one position table per stack
print(
    f"sinusoidal: {sinusoidal_total:,}; learned positions add 2 x {max_len} x {d} = {extra:,}"
    f" -> {sinusoidal_total + extra:,} ({extra / sinusoidal_total:.1%} more)"
)
assert sinusoidal_total == 931_213


# %% [markdown]
# ### Exercise 2.2 (modify): learned positions that fail clearly
#
# Modify `TokenAndLearnedPosition` into `LearnedPositions(vocab_size, d_model, max_len)`:
# name the token table `tok` and the position table `pos` (both `nn.Embedding`, no
# padding index needed here), return `tok(ids) * sqrt(d_model) + pos(0, 1, ..., L-1)` for
# ids `[B, L]`, and make an input longer than `max_len` raise a `ValueError` whose message
# names `max_len` (instead of the `IndexError` above). Start both parts equally loud: draw
# `tok` with standard deviation $d^{-1/2}$, as `TokenAndPosition` does, and leave `pos` at
# `nn.Embedding`'s $\mathcal{N}(0, 1)$. Check it with
# `check_learned_positions(LearnedPositions)`: it checks the starting scales, the shapes,
# that the positions are added (and indexed by position, not by token), the $\sqrt{d}$
# scale, and the error.

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 2.2
from helpers.exercises import check_learned_positions


class LearnedPositions(nn.Module):
    def __init__(self, vocab_size, d_model, max_len):
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
        self.tok = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.tok.weight, std=d_model**-0.5)  # sqrt(d) * tok: RMS about 1
        self.pos = nn.Embedding(max_len, d_model)  # N(0, 1): RMS about 1

    def forward(self, ids):  # ids [B, L]
        length = ids.size(1)
        if length > self.max_len:
            raise ValueError(
                f"ids have length {length} but max_len={self.max_len}: there is no position row "
                f"for positions >= {self.max_len}; build the module with a larger max_len"
            )
        positions = torch.arange(length, device=ids.device)
        return self.tok(ids) * math.sqrt(self.d_model) + self.pos(positions)


check_learned_positions(LearnedPositions)


# %% [markdown]
# ### Exercise 2.3 (implement): the sinusoidal table from the formula
#
# Without looking back, write `sinusoidal(max_len, d)` returning the `[max_len, d]` float
# table with $PE[p, 2i] = \sin(p / 10000^{2i/d})$ and
# $PE[p, 2i+1] = \cos(p / 10000^{2i/d})$. Check it with
# `check_sinusoidal_table(sinusoidal)`: it compares your table with the library's for
# three sizes and recognises the usual slips (sine and cosine swapped, the two halves
# concatenated instead of interleaved, a wrong exponent, positions counted from 1).

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 2.3
from helpers.exercises import check_sinusoidal_table


def sinusoidal(max_len, d):
    p = torch.arange(max_len, dtype=torch.float32)[:, None]  # [max_len, 1]
    angle = p / 10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d)  # [max_len, d/2]
    table = torch.zeros(max_len, d)
    table[:, 0::2] = torch.sin(angle)  # even dimensions
    table[:, 1::2] = torch.cos(angle)  # odd dimensions
    return table


check_sinusoidal_table(sinusoidal)
