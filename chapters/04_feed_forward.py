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
# # 4. The feed-forward network
#
# Attention mixes positions. The feed-forward network (FFN) works on each position alone.
# You will build it and check that it treats every position alike.
# Then you will compare its two usual activations, ReLU and GELU, and count what it costs.
#
# ![ReLU and GELU with their derivatives](figures/04_feed_forward.png)

# %% [markdown] tags=["run-time"]
# **Run time:** about 10 s.

# %%
import copy
import math

import matplotlib.pyplot as plt
import torch
import torch.nn as nn
import torch.nn.functional as F
import transformers
from transformers.activations import ACT2FN  # Hugging Face's table of activations

import helpers

_ = torch.manual_seed(0)

# %% [markdown]
# ## The network, built by hand
#
# Every Transformer layer has two kinds of sub-layer. Attention (chapter 03) is the only
# place where positions exchange information. The FFN does the opposite. It transforms
# each position's vector on its own, with the same small two-layer MLP everywhere
# ({cite}`vaswani2017` used a ReLU where this book uses a GELU):
#
# $$
# \operatorname{FFN}(x) = W_2\, \operatorname{GELU}(W_1 x + b_1) + b_2,
# \qquad W_1 \in \mathbb{R}^{d_{ff} \times d},\; W_2 \in \mathbb{R}^{d \times d_{ff}}.
# $$
#
# It widens each vector from $d$ to $d_{ff}$ (four times wider in this book: 128 to 512),
# applies a nonlinearity, and projects back to $d$. Simple as it is, it holds most of an
# encoder layer's parameters.
#
# Two `nn.Linear` layers with an activation between them, then dropout (a regulariser
# during training, the identity in eval mode). `nn.Linear` multiplies along the *last*
# dimension only, so the same code accepts `[d]`, `[L, d]` or `[B, L, d]`: every leading
# dimension is treated as a batch. Follow the shapes through one batch of 2 sequences of
# 5 positions:


# %%
class FeedForwardByHand(nn.Module):
    def __init__(self, d_model, dff, dropout=0.1):
        super().__init__()
        self.lin1 = nn.Linear(d_model, dff)  # widen:  d -> dff
        self.act = nn.GELU()
        self.lin2 = nn.Linear(dff, d_model)  # narrow: dff -> d
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.drop(self.lin2(self.act(self.lin1(x))))


d, dff = 128, 512
ffn = FeedForwardByHand(d, dff).eval()  # eval: dropout off, so outputs are deterministic
B, L = 2, 5
x = torch.randn(B, L, d)

with torch.no_grad():
    h = ffn.lin1(x)
    print("x        ", tuple(x.shape), "  [B, L, d]")
    print("lin1(x)  ", tuple(h.shape), "  [B, L, dff]: each position widened to 4d")
    a = ffn.act(h)
    print("GELU     ", tuple(a.shape), "  elementwise, shape unchanged")
    y = ffn.lin2(a)
    print("lin2(.)  ", tuple(y.shape), "  [B, L, d]: back to the residual stream's width")
    torch.testing.assert_close(ffn(x), y)
print(
    "weights: lin1",
    tuple(ffn.lin1.weight.shape),
    " lin2",
    tuple(ffn.lin2.weight.shape),
    " (nn.Linear stores [out, in])",
)
assert y.shape == x.shape

# %% [markdown]
# The output has the input's shape, which is what lets the layer add it back onto the
# residual stream (chapter 05).
#
# ## Position-wise: the same MLP at every position
#
# "Position-wise" means three things, each checked below:
#
# 1. Feeding **one position alone** gives the same row as feeding the whole batch: no
#    position's output depends on any other position.
# 2. The FFN on `[B, L, d]` is the FFN on the `[B*L, d]` matrix of all positions, reshaped
#    back: it is one matrix multiplication over every token in the batch.
# 3. **Shuffling the positions** shuffles the outputs the same way (it is
#    *permutation-equivariant*): the FFN cannot tell where a vector sits. Knowing the
#    position is the job of the position encodings (chapter 02); mixing positions is the
#    job of attention.
#
# Results computed with different batch shapes may differ in the last bits (the matrix
# multiplication may sum in another order), so these are compared with
# `torch.testing.assert_close` rather than `==`.

# %%
with torch.no_grad():
    full = ffn(x)  # [B, L, d]
    alone = ffn(x[1, 3])  # one vector [d]: batch 1, position 3
    flat = ffn(x.reshape(B * L, d)).reshape(B, L, d)
    perm = torch.randperm(L)
    shuffled = ffn(x[:, perm])

diffs = {
    "one position alone vs row [1, 3] of the batch": (alone - full[1, 3]).abs().max().item(),
    "[B*L, d] matrix, reshaped back, vs the batch": (flat - full).abs().max().item(),
    f"shuffled by {perm.tolist()} vs the batch shuffled": (shuffled - full[:, perm])
    .abs()
    .max()
    .item(),
}
print(
    "one position alone:",
    tuple(x[1, 3].shape),
    "->",
    tuple(alone.shape),
    "   [B*L, d] matrix:",
    (B * L, d),
    "->",
    tuple(flat.shape),
)
for name, diff in diffs.items():
    print(f"max |difference|, {name}: {'< 1e-06' if diff < 1e-6 else f'{diff:.2g}'}")
torch.testing.assert_close(alone, full[1, 3])
torch.testing.assert_close(flat, full)
torch.testing.assert_close(shuffled, full[:, perm])

# %% [markdown]
# A direct consequence: two positions that hold the same vector get the same output,
# wherever they are and whatever surrounds them. Below, position 0 of the first sequence
# is copied into position 4 of the second; their outputs agree, while the neighbours of
# the copy keep their own outputs.

# %%
x2 = x.clone()
x2[1, 4] = x[0, 0]
with torch.no_grad():
    out2 = ffn(x2)
torch.testing.assert_close(out2[1, 4], full[0, 0])
torch.testing.assert_close(out2[1, :4], full[1, :4])  # the other positions did not notice
copy_diff = (out2[1, 4] - full[0, 0]).abs().max().item()
others_diff = (out2[1, :4] - full[1, :4]).abs().max().item()
print(f"max |output at (1, 4) - output at (0, 0)|: {'< 1e-06' if copy_diff < 1e-6 else copy_diff}")
print(
    f"max change at the other positions of sequence 1: "
    f"{'< 1e-06' if others_diff < 1e-6 else others_diff}"
)

# %% [markdown]
# ## GELU vs ReLU
#
# The original Transformer used ReLU, $\max(0, x)$ {cite}`vaswani2017`. Later models
# such as GPT-2 {cite}`radford2019` use GELU, the Gaussian error linear unit
# {cite}`hendrycks2016`. This is its exact form; GPT-2 uses a tanh approximation of it, shown
# in a dropdown below:
#
# $$
# \operatorname{GELU}(x) = x\,\Phi(x) = \frac{x}{2}\left(1 + \operatorname{erf}\frac{x}{\sqrt 2}\right),
# $$
#
# where $\Phi$ is the standard normal CDF: the input is scaled by the probability that a
# standard normal variable falls below it. Large positive inputs pass almost unchanged,
# large negative ones go to 0, as with ReLU; in between the curve is smooth, and it dips
# slightly below zero. Its derivative, $\Phi(x) + x\,\varphi(x)$ (with $\varphi$ the
# normal density), is continuous. Unlike ReLU's it is not zero on the negative half-line.
# It stays positive a little way left of 0, crosses zero where GELU has its minimum, and
# is negative further left. The cell finds that zero by bisection. Figure 4.1 shows both
# functions and their derivatives, computed by autograd rather than by formula.

# %%
xs = torch.linspace(-4, 4, 801, requires_grad=True)
curves = {}
for name, fn in (("ReLU", F.relu), ("GELU", F.gelu)):
    ys = fn(xs)
    (grad,) = torch.autograd.grad(ys.sum(), xs)
    curves[name] = (ys.detach(), grad)
relu_grad, gelu_grad = curves["ReLU"][1], curves["GELU"][1]
negative_x = xs.detach() < 0
print(
    f"on the 400 grid points with x < 0: ReLU' is 0 at {int((relu_grad[negative_x] == 0).sum())},"
    f" GELU' is 0 at {int((gelu_grad[negative_x] == 0).sum())}"
)
assert (relu_grad[negative_x] == 0).all() and (gelu_grad[negative_x] != 0).all()


def gelu_grad_at(x0):
    """GELU'(x0) by autograd, in float64."""
    t = torch.tensor(x0, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(F.gelu(t), t)
    return g.item()


lo, hi = -2.0, 0.0  # GELU'(-2) < 0 < GELU'(0) = 0.5
assert gelu_grad_at(lo) < 0 < gelu_grad_at(hi)
for _ in range(60):  # bisection: keep the sign change between lo and hi
    mid = (lo + hi) / 2
    lo, hi = (mid, hi) if gelu_grad_at(mid) < 0 else (lo, mid)
x_zero = (lo + hi) / 2
grid_x = xs.detach()
print(f"GELU'(x) = 0 at x = {x_zero:.4f} (bisection in float64)")
print(
    f"GELU' on the grid: positive at all {int(((grid_x > x_zero) & negative_x).sum())} points"
    f" in ({x_zero:.3f}, 0), negative at all {int((grid_x < x_zero).sum())} points left of it"
)
assert (gelu_grad[(grid_x > x_zero) & negative_x] > 0).all()
assert (gelu_grad[grid_x < x_zero] < 0).all()

# %% jupyter={"source_hidden": true} tags=["figure", "hide-input", "opening-figure"]
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.4))
for name, (ys, grad) in curves.items():
    ax1.plot(xs.detach(), ys, label=name)
    ax2.plot(xs.detach(), grad, label=name)
ax1.set(title="activation", xlabel="x", ylabel="f(x)", ylim=(-0.5, 2))
ax2.set(title="derivative (autograd)", xlabel="x", ylabel="f'(x)")
for ax in (ax1, ax2):
    ax.axhline(0, color="gray", lw=0.5)
    ax.axvline(0, color="gray", lw=0.5)
    ax.legend()
fig.suptitle("Figure 4.1  ReLU and GELU, and their derivatives", fontsize=10)
plt.tight_layout()
plt.show()

# %% [markdown]
# GELU's derivative is zero at exactly one point, $x \approx -0.752$, where GELU has its
# minimum. It is negative left of that point and positive right of it.
#
# :::{dropdown} Going deeper: GELU's landmarks, read off a fine grid
# The cell below reads the landmarks off a grid in float64. It finds where GELU reaches
# its minimum (there its derivative is zero) and the sign of the derivative on either
# side. It also finds the range of the derivative. Its extremes sit at $x = \pm\sqrt 2$,
# where the derivative of $\Phi(x) + x\varphi(x)$, namely $(2 - x^2)\varphi(x)$, vanishes.
#
# Left of the minimum the derivative goes down to about $-0.13$ at $x = -\sqrt 2$, then
# back towards 0 from below. A unit whose input sits there gets a gradient of the
# *opposite* sign to the one it would get on the right, but not a zero one.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
grid = torch.linspace(-6, 6, 120_001, dtype=torch.float64, requires_grad=True)
g = F.gelu(grid)
(dg,) = torch.autograd.grad(g.sum(), grid)
g, grid = g.detach(), grid.detach()
x_min = grid[g.argmin()].item()
print(f"GELU minimum: {g.min().item():.4f} at x = {x_min:.3f}")
zero_crossing = grid[1:][(dg[:-1] < 0) & (dg[1:] >= 0)]
print(f"GELU'(x) changes sign from - to + at x = {zero_crossing.tolist()[0]:.3f}")
for x0 in (-3.0, -2.0, -1.0, -0.5, 0.0):
    i = int(torch.argmin((grid - x0).abs()))
    print(f"  GELU'({x0:+.1f}) = {dg[i].item():+.4f}")
print(
    f"GELU'(x) ranges over [{dg.min().item():.4f}, {dg.max().item():.4f}], "
    f"extremes at x = {grid[dg.argmin()].item():.3f} and {grid[dg.argmax()].item():.3f}"
)
print(f"sqrt(2) = {math.sqrt(2):.3f}")
assert -0.18 < g.min() < -0.16 and -0.76 < x_min < -0.74
assert len(zero_crossing) == 1 and abs(zero_crossing[0] - x_min) < 1e-3
assert (dg[grid < x_min - 1e-3] < 0).all() and (dg[grid > x_min + 1e-3] > 0).all()
assert abs(grid[dg.argmax()] - math.sqrt(2)) < 1e-3
assert abs(grid[dg.argmin()] + math.sqrt(2)) < 1e-3
assert dg.max() > 1.1 and dg.min() < -0.1  # steeper than ReLU's 1, and negative on the left

# %% [markdown]
# :::{dropdown} Going deeper: exact GELU and the tanh approximation
# The GELU paper {cite}`hendrycks2016` also gave a cheaper tanh approximation, which
# early implementations used (the docstring of Hugging Face's version names Google's
# BERT code and OpenAI's GPT):
#
# $$
# \operatorname{GELU}_{\tanh}(x) = \frac{x}{2}\left(1 + \tanh\!\left[\sqrt{2/\pi}\,\left(x + 0.044715\,x^3\right)\right]\right).
# $$
#
# PyTorch has both: `nn.GELU()` is the exact erf form (`approximate='none'` is the
# default) and `nn.GELU(approximate='tanh')` the approximation. They are close but not
# equal, so a checkpoint trained with one and run with the other computes slightly
# different activations. Hugging Face's `transformers` {cite}`wolf2020` keeps separate
# names for the variants: `gelu` for the exact form, `gelu_new` for the tanh form. Its
# GPT-2 configuration sets `activation_function` to `gelu_new`, the tanh form.
#
# The model in this book uses the exact form throughout (checked at the end of this
# chapter). The gap matters when you load weights trained with the other variant and
# expect bit-for-bit equal outputs.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
print("transformers", transformers.__version__)
print("nn.GELU() ->", nn.GELU(), "  default approximate =", repr(nn.GELU().approximate))
assert nn.GELU().approximate == "none"

exact_formula = 0.5 * grid * (1 + torch.erf(grid / math.sqrt(2)))
tanh_formula = 0.5 * grid * (1 + torch.tanh(math.sqrt(2 / math.pi) * (grid + 0.044715 * grid**3)))
torch.testing.assert_close(nn.GELU()(grid), exact_formula)
torch.testing.assert_close(nn.GELU(approximate="tanh")(grid), tanh_formula)
for name, form, formula in (("gelu", "exact", exact_formula), ("gelu_new", "tanh", tanh_formula)):
    hf_gap = (ACT2FN[name](grid) - formula).abs().max().item()
    shown = "< 1e-12" if hf_gap < 1e-12 else f"= {hf_gap:.1e}"
    print(f"Hugging Face's ACT2FN[{name!r}] vs the {form} formula: max |difference| {shown}")
    assert hf_gap < 1e-12
origin = type(ACT2FN["gelu_new"]).__doc__.split(". ")[0].strip()
print(f"its docstring: {origin!r}")
assert "BERT" in origin and "GPT" in origin
gpt2_act = transformers.GPT2Config().activation_function
print(f"transformers.GPT2Config().activation_function = {gpt2_act!r}")
assert gpt2_act == "gelu_new"

gap = (exact_formula - tanh_formula).abs()
print(
    f"max |exact - tanh| on [-6, 6]: {gap.max().item():.1e} at x = {grid[gap.argmax()].item():.2f}"
)
assert 1e-4 < gap.max() < 1e-3  # small, but far above float32 rounding

# %% [markdown]
# ### A dead ReLU unit gets no gradient; a GELU unit still does
#
# ReLU's derivative is exactly 0 for every negative input. A hidden unit whose
# pre-activation $w_i \cdot x + b_i$ is negative for every input is therefore *dead*: its
# incoming weights and its bias receive a gradient of exactly zero, so a plain gradient
# step does not move them. Make one unit of the FFN dead on purpose (bias $-4$, far below
# the other units' pre-activations) and look at the gradient of its incoming weights under
# each activation.

# %%
torch.manual_seed(1)
tokens = torch.randn(64, 14, d)  # 64 sequences of 14 positions
base = FeedForwardByHand(d, dff).eval()
with torch.no_grad():
    base.lin1.bias[0] = -4.0  # unit 0: pushed far into the negative side
    pre = base.lin1(tokens)  # [64, 14, dff] pre-activations
n_pos = 64 * 14
print(f"unit 0: largest pre-activation over all {n_pos} positions: {pre[..., 0].max().item():+.2f}")
print(f"other units: pre-activation std {pre[..., 1:].std().item():.2f}")
assert pre[..., 0].max() < 0  # negative at every position: ReLU passes nothing


def unit0_gradient(act, inputs):
    """Gradient of unit 0's incoming weights, for some loss, under activation act."""
    f = copy.deepcopy(base)
    f.act = act
    f(inputs).pow(2).mean().backward()  # any loss will do
    return f.lin1.weight.grad[0]


grads = {
    name: unit0_gradient(act, tokens) for name, act in (("ReLU", nn.ReLU()), ("GELU", nn.GELU()))
}
for name, g0 in grads.items():
    print(
        f"{name}: |gradient of unit 0's weights| = {g0.norm().item():.0e}, "
        f"non-zero entries: {int((g0 != 0).sum())} of {g0.numel()}"
    )
assert (grads["ReLU"] == 0).all() and grads["GELU"].norm() > 0

negative = (pre[..., 1:] < 0).float().mean().item()
print(f"share of the other units' pre-activations that are negative: {negative:.0%}")
assert 0.4 < negative < 0.6

# %% [markdown]
# The ReLU unit's gradient is exactly zero. The GELU unit sits in the flat tail of the
# curve: its gradient is small, but not zero.
#
# Even for healthy units, ReLU passes no gradient wherever their pre-activation is
# negative. That is half of the pre-activations here, with random weights and inputs.
# GELU's gradient is zero only at the single point $x \approx -0.752$. Its authors put the
# difference as weighting inputs by their value rather than gating them by their sign.
# They report improvements over ReLU and ELU on their vision, language and speech tasks
# {cite}`hendrycks2016`.
#
# :::{dropdown} Going deeper: how far one optimiser step moves the two units
# How far a training step moves the GELU unit depends on the optimiser. Plain SGD moves
# a weight by the learning rate times its gradient, so a small gradient gives a small
# step. Adam, which this book trains with (chapter 10), divides each gradient by the
# square root of a running average of its squares. Its first step therefore moves every
# weight with a non-zero gradient by about the learning rate (as long as the gradient is
# well above Adam's $\epsilon$, here $10^{-9}$). On this first step, a zero gradient moves
# nothing under either. The cell takes one step of each, with
# learning rate $10^{-3}$, and compares how far unit 0's weights move with how far a
# typical unit's do (the median over the other units).
#
# Under SGD the GELU unit moves less than a hundredth as far as a typical unit. Under Adam
# it moves as far as a typical unit. The ReLU unit does not move under either.
# :::


# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
def first_step_ratio(act, make_opt):
    """Largest change of unit 0's weights after one step / the median over other units."""
    f = copy.deepcopy(base)
    f.act = act
    opt = make_opt(f.parameters())
    before = f.lin1.weight.detach().clone()
    f(tokens).pow(2).mean().backward()  # the same loss as above
    opt.step()
    moved = (f.lin1.weight.detach() - before).abs().max(dim=1).values  # per unit
    return (moved[0] / moved[1:].median()).item()


optimisers = {
    "SGD": lambda params: torch.optim.SGD(params, lr=1e-3),
    "Adam": lambda params: torch.optim.Adam(params, lr=1e-3, betas=(0.9, 0.98), eps=1e-9),
}
ratios = {}
for opt_name, make_opt in optimisers.items():
    for act_name, act in (("ReLU", nn.ReLU()), ("GELU", nn.GELU())):
        r = ratios[opt_name, act_name] = first_step_ratio(act, make_opt)
        shown = "0 (it did not move)" if r == 0 else f"{r:.3g}"
        print(f"{opt_name:4s} {act_name}: unit 0's step / a typical unit's step = {shown}")
assert ratios["SGD", "ReLU"] == 0 and ratios["Adam", "ReLU"] == 0
assert 0 < ratios["SGD", "GELU"] < 0.01
assert 0.95 < ratios["Adam", "GELU"] < 1.05

# %% [markdown]
# Is a dead ReLU unit dead for good, then? Not necessarily: "dead" is a property of the
# unit *and its inputs*. Its own weights get no gradient, but its inputs are the outputs
# of the layers below, which keep training. If they drift along the unit's weight vector
# $w_0$, the unit comes back. Shift every input by one fixed vector along $w_0$ and count
# the positions where the unit is active again:

# %%
w0 = base.lin1.weight[0].detach()
shift = 3.0 * w0 / w0.norm() ** 2  # raises unit 0's pre-activation by 3.0 at every position
moved = tokens + shift
with torch.no_grad():
    pre_moved = base.lin1(moved)[..., 0]
active = int((pre_moved > 0).sum())
revived = unit0_gradient(nn.ReLU(), moved)
input_norm = tokens.norm(dim=-1).mean().item()
print(
    f"input shift: norm {shift.norm().item():.2f}; inputs have norm about {input_norm:.1f};"
    f" shift / input = {shift.norm().item() / input_norm:.2f}"
)
print(
    f"unit 0 active at {active} of {n_pos} positions;"
    f" |ReLU gradient of its weights| = {revived.norm().item():.1e}"
)
assert active > 0 and revived.norm() > 0
assert shift.norm() < input_norm  # a shift smaller than a typical input

# %% [markdown]
# A shift smaller than a typical input, 0.46 of its norm, was enough here. A zero gradient
# on the unit's own weights does not, by itself, make the unit dead for good.
#
# ## The 4x width and what it costs
#
# The FFN has two weight matrices of $d \cdot d_{ff}$ entries each and two bias vectors:
#
# $$
# P_{\text{FFN}} = 2\, d\, d_{ff} + d_{ff} + d .
# $$
#
# An encoder layer adds one multi-head attention, four $d \times d$ projections with
# biases, $4(d^2 + d)$, and two LayerNorms, $2 \cdot 2d$. A decoder layer has two
# attentions and three LayerNorms. With $d_{ff} = 4d$ the FFN is about $8d^2$ against
# attention's $4d^2$, so it should hold about two thirds of an encoder layer and about
# half of a decoder layer. Compute it, for the book's $d = 128$ and several widths, and
# check every formula against the modules' own counts:


# %%
def n_params(module):
    return sum(p.numel() for p in module.parameters())


def ffn_formula(d, dff):
    return 2 * d * dff + dff + d


attention = 4 * (d * d + d)
layer_norm = 2 * d
print(f"d = {d}: one attention = {attention:,}, one LayerNorm = {layer_norm:,}\n")
print(
    f"{'dff':>5s} {'dff/d':>5s} {'FFN params':>11s} {'encoder layer':>14s} {'FFN share':>10s}"
    f" {'decoder layer':>14s} {'FFN share':>10s}"
)
shares = {}
for ratio in (1, 2, 4, 8):
    w = ratio * d
    p_ffn = ffn_formula(d, w)
    enc = helpers.EncoderLayer(d, num_heads=4, dff=w)
    dec = helpers.DecoderLayer(d, num_heads=4, dff=w)
    assert n_params(helpers.FeedForward(d, w)) == n_params(FeedForwardByHand(d, w)) == p_ffn
    assert n_params(enc) == p_ffn + attention + 2 * layer_norm
    assert n_params(dec) == p_ffn + 2 * attention + 3 * layer_norm
    assert n_params(enc.ffn) == n_params(dec.ffn) == p_ffn
    shares[ratio] = (p_ffn / n_params(enc), p_ffn / n_params(dec))
    print(
        f"{w:5d} {ratio:5d} {p_ffn:11,d} {n_params(enc):14,d} {shares[ratio][0]:10.1%}"
        f" {n_params(dec):14,d} {shares[ratio][1]:10.1%}"
    )

assert n_params(helpers.FeedForward(128, 512)) == 131_712  # the book's d and d_ff
assert 0.65 < shares[4][0] < 0.68 and 0.48 < shares[4][1] < 0.51

# %% [markdown]
# At the book's setting ($d_{ff} = 512$) the FFN is 131,712 parameters: two thirds of an
# encoder layer and half of a decoder layer (the table's 4x row). Doubling the ratio
# roughly doubles the FFN while the attention stays fixed, so the share climbs towards 1.
# The factor 4 comes from the original paper ($d = 512$, $d_{ff} = 2048$
# {cite}`vaswani2017`); the paper gives no derivation for it. Models that replace GELU
# with a gated unit such as SwiGLU have *three* $d \times d_{ff}$ matrices, and shrink $d_{ff}$ to
# $\tfrac{2}{3} \cdot 4d$ to keep the same $8d^2$ budget {cite}`shazeer2020` (exercise 4.3
# builds one).
#
# :::{dropdown} Going deeper: the FFN's arithmetic per token
# The parameters are also the compute. Every FFN weight is used exactly once per token
# (one multiply-add), so the FFN costs $2\,d\,d_{ff}$ multiply-adds per token whatever the
# sequence length. Attention's four projections also cost a fixed amount per token, $4d^2$.
# Its two length-dependent products ($QK^\top$ and the weighted sum of values) cost
# $2\,L\,d$ per query. The FFN dominates those until $L$ reaches $d_{ff}$.
#
# For the reversal task ($L \le 14$) the FFN does 37 times more arithmetic per token than
# attention's two length-dependent products. By this count, attention's length-dependent
# cost catches up only at $L = d_{ff} = 512$. The benchmark chapter (19) measures
# attention's cost directly.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
for L_seq in (14, 128, 512, 2048):
    ffn_macs, attn_len_macs = 2 * d * dff, 2 * L_seq * d
    print(
        f"L = {L_seq:5d}: FFN {ffn_macs:9,d} MACs/token,"
        f" attention's L-dependent products {attn_len_macs:9,d} MACs/token"
        f"  (FFN / attention {ffn_macs / attn_len_macs:5.2f})"
    )

# %% [markdown]
# ## Dropout: on in training, off in eval
#
# The last element is dropout, the original paper's regulariser {cite}`vaswani2017`. In
# training mode it zeroes each output with probability 0.1 and scales the rest by
# $1/0.9$, so two calls on the same input differ; `.eval()` turns it into the identity.
# That is why every comparison in this book runs the modules in eval mode.

# %% tags=["nbval-ignore-output"]
ffn_train = FeedForwardByHand(d, dff, dropout=0.1).train()
with torch.no_grad():
    a1, a2 = ffn_train(x), ffn_train(x)
    ffn_train.eval()
    e1, e2 = ffn_train(x), ffn_train(x)
zeros = (a1 == 0).float().mean().item()
kept = a1 != 0
scale = (a1[kept] / e1[kept]).mean().item()
print(
    f"train mode: max |call 1 - call 2| = {(a1 - a2).abs().max().item():.2f};"
    f" zeroed {zeros:.0%} of the {a1.numel()} outputs; kept ones scaled by {scale:.4f}"
    f" (1/0.9 = {1 / 0.9:.4f})"
)
print(f"eval mode:  max |call 1 - call 2| = {(e1 - e2).abs().max().item()}")
assert (a1 - a2).abs().max() > 0 and torch.equal(e1, e2)
assert 0.05 < zeros < 0.15 and abs(scale - 1 / 0.9) < 1e-3

# %% [markdown]
# ## Checking against `helpers`
#
# `helpers.FeedForward` is the same network packed into an `nn.Sequential`, so its
# parameters are named by index: `net.0` is the first linear layer, `net.1` the GELU (no
# parameters), `net.2` the second linear layer, `net.3` the dropout. Copy our weights
# into it under those names and compare the outputs in eval mode.

# %%
lib = helpers.FeedForward(d, dff).eval()
print("helpers.FeedForward parameters:", [(k, tuple(v.shape)) for k, v in lib.state_dict().items()])
print("ours:                          ", [(k, tuple(v.shape)) for k, v in ffn.state_dict().items()])

renamed = {
    "net.0." + k[len("lin1.") :] if k.startswith("lin1.") else "net.2." + k[len("lin2.") :]: v
    for k, v in ffn.state_dict().items()
}
lib.load_state_dict(renamed)  # strict: every name and shape must match
with torch.no_grad():
    lib_diff = (lib(x) - ffn(x)).abs().max().item()
    torch.testing.assert_close(lib(x), ffn(x))
print(
    f"max |helpers.FeedForward - FeedForwardByHand| on {tuple(x.shape)}: "
    f"{'< 1e-06' if lib_diff < 1e-6 else lib_diff}   activation: {lib.net[1]}"
)
assert isinstance(lib.net[1], nn.GELU) and lib.net[1].approximate == "none"

# %% [markdown]
# The library's FFN computes what we built, with the exact GELU. The next chapter wraps
# it, together with attention, into an encoder layer: each sub-layer behind a LayerNorm
# and inside a residual connection.
#
# ## Summary
#
# - The feed-forward network is `Linear(d, d_ff)`, GELU, `Linear(d_ff, d)`, dropout,
#   applied to every position separately: one position alone, the `[B*L, d]` matrix and a
#   shuffled batch all gave the same rows (differences below $10^{-6}$).
# - GELU's derivative is zero only at $x \approx -0.752$, negative left of it and positive
#   right of it; ReLU's is zero on the whole negative half-line, so a unit negative on every
#   input gets no gradient: a plain gradient step cannot revive it, a change in its inputs
#   can.
# - Exact and tanh GELU differ by up to $4.7 \times 10^{-4}$ on $[-6, 6]$: small, but a
#   mismatch when loading weights trained with the other one.
# - With $d_{ff} = 4d$ the FFN holds two thirds of an encoder layer's and half of a decoder
#   layer's parameters (131,712 at $d = 128$), and for $L < d_{ff}$ it does more arithmetic
#   per token than attention's length-dependent products.
#
# ## Exercises
#
# ### Exercise 4.1 (predict, then run): the original model's feed-forward network
#
# The base model of {cite}`vaswani2017` has $d = 512$ and $d_{ff} = 2048$. How many
# parameters does one of its feed-forward networks have, and what share of its encoder
# layer is that (one attention of four $d \times d$ projections with biases, two
# LayerNorms)? Predict with the formulas of this chapter, then run the solution.

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
# Solution to exercise 4.1
with torch.device("meta"):  # shapes only: nothing is allocated
    big_ffn = helpers.FeedForward(512, 2048)
    big_layer = helpers.EncoderLayer(512, num_heads=8, dff=2048)
p_big = n_params(big_ffn)
print(f"FFN: 2 * 512 * 2048 + 2048 + 512 = {ffn_formula(512, 2048):,}; counted: {p_big:,}")
print(f"encoder layer: {n_params(big_layer):,}; FFN share {p_big / n_params(big_layer):.1%}")
assert p_big == ffn_formula(512, 2048) == 2_099_712
assert abs(p_big / n_params(big_layer) - shares[4][0]) < 0.01  # the same 2/3 as at d = 128

# %% [markdown]
# :::{dropdown} Answer to exercise 4.1
# 2,099,712 parameters, about two thirds of the layer, the same share as at $d = 128$:
# with $d_{ff} = 4d$ both the FFN ($8d^2$) and the attention ($4d^2$) grow as $d^2$.
# :::

# %% [markdown]
# ### Exercise 4.2 (predict, then run): what dropout does on average
#
# In training mode, dropout with $p = 0.1$ zeroes about 10 % of the outputs and multiplies
# the others by $1/0.9$. Predict: averaged over many training-mode calls on the same
# input, how far is the FFN's output from its eval-mode output? Why is the $1/0.9$ there?
# Run the solution to check.

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["nbval-ignore-output", "hide-cell"]
# Solution to exercise 4.2
torch.manual_seed(0)
drop_ffn = FeedForwardByHand(d, dff, dropout=0.1)
x_one = torch.randn(1, 3, d)
with torch.no_grad():
    eval_out = drop_ffn.eval()(x_one)
    drop_ffn.train()
    # 4000 copies in one batch: dropout draws an independent mask for every element
    mean_out = drop_ffn(x_one.expand(4000, 3, d)).mean(dim=0, keepdim=True)
rel = ((mean_out - eval_out).norm() / eval_out.norm()).item()
print(f"|mean of 4000 training-mode outputs - eval output| / |eval output|: {rel:.1%}")
assert rel < 0.01


# %% [markdown]
# :::{dropdown} Answer to exercise 4.2
# The average of 4000 training-mode outputs is within 1 % of the eval-mode output: each
# output is kept with probability 0.9 and then divided by 0.9, so its expected value is
# unchanged. That is why `.eval()` can simply switch dropout off without rescaling
# anything.
# :::

# %% [markdown]
# ### Exercise 4.3 (implement): a gated feed-forward block (SwiGLU)
#
# Some recent language models replace `Linear -> GELU -> Linear` with a *gated* unit
# {cite}`shazeer2020`:
#
# $$
# \operatorname{FFN}_{\text{SwiGLU}}(x) = W_{\text{down}}\,\big(\operatorname{SiLU}(W_{\text{gate}}\,x)
# \odot W_{\text{up}}\,x\big), \qquad \operatorname{SiLU}(z) = z\,\sigma(z),
# $$
#
# with three bias-free linear layers: `w_gate` and `w_up` ($d \to d_{ff}$) and `w_down`
# ($d_{ff} \to d$); $\odot$ is the elementwise product. Write `SwiGLUFeedForward(d_model,
# dff)` with those three attribute names and check it with
# `check_swiglu_ffn(SwiGLUFeedForward)` (import it from `helpers.exercises`). The checker
# names the mistake when it recognises one: the SiLU on the wrong branch, another
# activation or none, a missing gate or `w_down`. Then choose $d_{ff}$ so that at $d = 128$
# it has about as many parameters as this chapter's FFN with $d_{ff} = 512$.

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 4.3
from helpers.exercises import check_swiglu_ffn


class SwiGLUFeedForward(nn.Module):
    def __init__(self, d_model, dff):
        super().__init__()
        self.w_gate = nn.Linear(d_model, dff, bias=False)
        self.w_up = nn.Linear(d_model, dff, bias=False)
        self.w_down = nn.Linear(dff, d_model, bias=False)

    def forward(self, x):  # [..., d] -> [..., d], position by position
        return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))


check_swiglu_ffn(SwiGLUFeedForward)

dff_gated = round(2 / 3 * 4 * d)  # three matrices of d x dff instead of two
p_gated = n_params(SwiGLUFeedForward(d, dff_gated))
print(
    f"SwiGLU with dff = {dff_gated}: {p_gated:,} parameters;"
    f" GELU FFN with dff = 512: {ffn_formula(d, 512):,}"
)
assert abs(p_gated / ffn_formula(d, 512) - 1) < 0.01
