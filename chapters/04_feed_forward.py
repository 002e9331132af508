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
# # 4. The feed-forward network
#
# Every Transformer layer has two kinds of sub-layer. Attention (chapter 03) is the only
# place where positions exchange information. The **feed-forward network** (FFN) is the
# other one, and it does the opposite: it transforms each position's vector on its own,
# with the same small two-layer MLP everywhere:
#
# $$
# \operatorname{FFN}(x) = W_2\, \operatorname{GELU}(W_1 x + b_1) + b_2,
# \qquad W_1 \in \mathbb{R}^{d_{ff} \times d},\; W_2 \in \mathbb{R}^{d \times d_{ff}}.
# $$
#
# It widens each vector from $d$ to $d_{ff}$ (four times wider in this book: 128 to 512),
# applies a nonlinearity, and projects back to $d$. Simple as it is, it holds most of an
# encoder layer's parameters. This chapter builds it, proves that it really is the same
# function at every position, compares the two usual activations (ReLU and GELU, with
# GELU's two variants), and counts what the 4x width costs.

# %%
import copy
import math

import matplotlib.pyplot as plt
import torch
import torch.nn as nn
import torch.nn.functional as F

import helpers

_ = torch.manual_seed(0)

# %% [markdown]
# ## The network, built by hand
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
        self.lin1 = nn.Linear(d_model, dff)   # widen:  d -> dff
        self.act = nn.GELU()
        self.lin2 = nn.Linear(dff, d_model)   # narrow: dff -> d
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
print("weights: lin1", tuple(ffn.lin1.weight.shape), " lin2", tuple(ffn.lin2.weight.shape),
      " (nn.Linear stores [out, in])")
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
    full = ffn(x)                                  # [B, L, d]
    alone = ffn(x[1, 3])                           # one vector [d]: batch 1, position 3
    flat = ffn(x.reshape(B * L, d)).reshape(B, L, d)
    perm = torch.randperm(L)
    shuffled = ffn(x[:, perm])

print("one position alone:", tuple(x[1, 3].shape), "->", tuple(alone.shape),
      "  equals row [1, 3] of the full output:", torch.allclose(alone, full[1, 3], atol=1e-6))
print("[B*L, d] matrix:   ", (B * L, d), "->", tuple(flat.shape))
print("permutation", perm.tolist(), "-> outputs permuted the same way")
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
print("same input vector at (0, 0) and (1, 4) -> same output:", torch.allclose(out2[1, 4], full[0, 0], atol=1e-6))

# %% [markdown]
# ## GELU vs ReLU
#
# The original Transformer used ReLU, $\max(0, x)$. BERT, GPT-2 and many later models use
# GELU, the Gaussian error linear unit:
#
# $$
# \operatorname{GELU}(x) = x\,\Phi(x) = \frac{x}{2}\left(1 + \operatorname{erf}\frac{x}{\sqrt 2}\right),
# $$
#
# where $\Phi$ is the standard normal CDF: the input is scaled by the probability that a
# standard normal variable falls below it. Large positive inputs pass almost unchanged,
# large negative ones go to 0, as with ReLU; in between the curve is smooth, and it dips
# slightly below zero. Its derivative, $\Phi(x) + x\,\varphi(x)$ (with $\varphi$ the
# normal density), is continuous, and it is not zero for negative inputs.
#
# The plot shows both functions and their derivatives (computed by autograd, not by
# formula).

# %%
xs = torch.linspace(-4, 4, 801, requires_grad=True)
curves = {}
for name, fn in (("ReLU", F.relu), ("GELU", F.gelu)):
    ys = fn(xs)
    (grad,) = torch.autograd.grad(ys.sum(), xs)
    curves[name] = (ys.detach(), grad)

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
plt.tight_layout()
plt.show()

# %% [markdown]
# Read the landmarks off a fine grid in float64: where GELU reaches its minimum, and the
# range of its derivative (whose extremes sit at $x = \pm\sqrt 2$, where the derivative of
# $\Phi(x) + x\varphi(x)$, namely $(2 - x^2)\varphi(x)$, vanishes).

# %%
grid = torch.linspace(-6, 6, 120_001, dtype=torch.float64, requires_grad=True)
g = F.gelu(grid)
(dg,) = torch.autograd.grad(g.sum(), grid)
g, grid = g.detach(), grid.detach()
print(f"GELU minimum: {g.min().item():.4f} at x = {grid[g.argmin()].item():.3f}")
print(f"GELU'(x) ranges over [{dg.min().item():.4f}, {dg.max().item():.4f}], "
      f"extremes at x = {grid[dg.argmin()].item():.3f} and {grid[dg.argmax()].item():.3f}")
print(f"sqrt(2) = {math.sqrt(2):.3f}")
assert -0.18 < g.min() < -0.16 and -0.8 < grid[g.argmin()] < -0.7
assert abs(grid[dg.argmax()] - math.sqrt(2)) < 1e-3 and abs(grid[dg.argmin()] + math.sqrt(2)) < 1e-3
assert dg.max() > 1.1 and dg.min() < -0.1  # steeper than ReLU's 1, and negative on the left

# %% [markdown]
# ### Exact GELU and the tanh approximation
#
# The GELU paper also gave a cheaper tanh approximation, and the original BERT and GPT-2
# code used it:
#
# $$
# \operatorname{GELU}_{\tanh}(x) = \frac{x}{2}\left(1 + \tanh\!\left[\sqrt{2/\pi}\,\left(x + 0.044715\,x^3\right)\right]\right).
# $$
#
# PyTorch has both: `nn.GELU()` is the exact erf form (`approximate='none'` is the
# default) and `nn.GELU(approximate='tanh')` the approximation. They are close but not
# equal, so a checkpoint trained with one and run with the other computes slightly
# different activations (Hugging Face's `gelu_new` / `gelu_pytorch_tanh` names exist for
# exactly this reason). Check the default, both formulas, and the size of the gap:

# %%
print("nn.GELU() ->", nn.GELU(), "  default approximate =", repr(nn.GELU().approximate))
assert nn.GELU().approximate == "none"

exact_formula = 0.5 * grid * (1 + torch.erf(grid / math.sqrt(2)))
tanh_formula = 0.5 * grid * (1 + torch.tanh(math.sqrt(2 / math.pi) * (grid + 0.044715 * grid**3)))
torch.testing.assert_close(nn.GELU()(grid), exact_formula)
torch.testing.assert_close(nn.GELU(approximate="tanh")(grid), tanh_formula)

gap = (exact_formula - tanh_formula).abs()
print(f"max |exact - tanh| on [-6, 6]: {gap.max().item():.1e} at x = {grid[gap.argmax()].item():.2f}")
assert 1e-4 < gap.max() < 1e-3  # small, but far above float32 rounding

# %% [markdown]
# A gap of a few $10^{-4}$ is harmless for training from scratch, and the model in this
# book uses the exact form throughout (so does `torch.nn.Transformer` with
# `activation="gelu"`, see the chapter that compares
# against the reference implementation). It matters when you load weights trained with the
# other variant and expect bit-for-bit equal outputs.
#
# ### A dead ReLU unit gets no gradient; a GELU unit still does
#
# ReLU's derivative is exactly 0 for every negative input. A hidden unit whose
# pre-activation $w_i \cdot x + b_i$ is negative for every input is therefore *dead*: its
# incoming weights receive a gradient of exactly zero, so no optimiser step can bring it
# back. Make one unit of the FFN dead on purpose (bias $-4$, far below the pre-activations,
# whose spread the cell prints) and look at the gradient of its incoming weights under
# each activation.

# %%
torch.manual_seed(1)
tokens = torch.randn(64, 14, d)  # 64 sequences of 14 positions
base = FeedForwardByHand(d, dff).eval()
with torch.no_grad():
    base.lin1.bias[0] = -4.0     # unit 0: pushed far into the negative side
    pre = base.lin1(tokens)      # [64, 14, dff] pre-activations
print(f"unit 0: largest pre-activation over all {64 * 14} positions: {pre[..., 0].max().item():+.2f}")
print(f"other units: pre-activation std {pre[..., 1:].std().item():.2f}")
assert pre[..., 0].max() < 0  # negative at every position: ReLU passes nothing

grads = {}
for name, act in (("ReLU", nn.ReLU()), ("GELU", nn.GELU())):
    f = copy.deepcopy(base)
    f.act = act
    f(tokens).pow(2).mean().backward()    # any loss will do
    grads[name] = g0 = f.lin1.weight.grad[0]  # gradient of unit 0's incoming weights
    print(f"{name}: |gradient of unit 0's weights| = {g0.norm().item():.0e}, exactly zero: {bool((g0 == 0).all())}")
assert (grads["ReLU"] == 0).all() and grads["GELU"].norm() > 0

negative = (pre[..., 1:] < 0).float().mean().item()
print(f"share of the other units' pre-activations that are negative: {negative:.0%}")
assert 0.4 < negative < 0.6

# %% [markdown]
# The ReLU unit's gradient is exactly zero: it is stuck. The GELU unit sits in the flat
# tail of the curve and its gradient is small, but it is not zero, so training can still
# move it. Even for healthy units, ReLU passes no gradient through about half of the
# positions at any moment (the negative ones); GELU passes some everywhere. That
# smoother gradient signal is the usual argument for GELU; its cost is a slightly more
# expensive function.
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
print(f"{'dff':>5s} {'dff/d':>5s} {'FFN params':>11s} {'encoder layer':>14s} {'FFN share':>10s}"
      f" {'decoder layer':>14s} {'FFN share':>10s}")
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
    print(f"{w:5d} {ratio:5d} {p_ffn:11,d} {n_params(enc):14,d} {shares[ratio][0]:10.1%}"
          f" {n_params(dec):14,d} {shares[ratio][1]:10.1%}")

assert ffn_formula(128, 512) == 131_712
assert 0.65 < shares[4][0] < 0.68 and 0.48 < shares[4][1] < 0.51

# %% [markdown]
# At the book's setting ($d_{ff} = 512$) the FFN is 131,712 parameters: two thirds of an
# encoder layer and half of a decoder layer (the table's 4x row). Doubling the ratio
# roughly doubles the FFN while the attention stays fixed, so the share climbs towards 1.
# The factor 4 comes from the original paper (512 to 2048); it is a rule of thumb, not a
# derived optimum, and worth sweeping (2x, 3x, 4x) on a small data set. Models that
# replace GELU with a gated unit such as SwiGLU have *three* $d \times d_{ff}$ matrices,
# and shrink $d_{ff}$ to $\tfrac{2}{3} \cdot 4d$ to keep the same $8d^2$ budget.
#
# The parameters are also the compute. Every FFN weight is used exactly once per token
# (one multiply-add), so the FFN costs $2\,d\,d_{ff}$ multiply-adds per token whatever the
# sequence length. Attention's projections cost $4d^2$ per token too, but its two
# length-dependent products ($QK^\top$ and the weighted sum of values) cost $2\,L\,d$
# per query. The FFN dominates those until $L$ reaches $d_{ff}$:

# %%
for L_seq in (14, 128, 512, 2048):
    ffn_macs, attn_len_macs = 2 * d * dff, 2 * L_seq * d
    print(f"L = {L_seq:5d}: FFN {ffn_macs:9,d} MACs/token,"
          f" attention's L-dependent products {attn_len_macs:9,d} MACs/token"
          f"  (FFN / attention {ffn_macs / attn_len_macs:5.2f})")

# %% [markdown]
# For the reversal task ($L \le 14$) the FFN does far more arithmetic than the attention
# scores; the quadratic cost of attention that the benchmark chapter measures only takes
# over for long sequences.
#
# ## Dropout: on in training, off in eval
#
# The last element is dropout. In training mode it zeroes a random 10 % of the outputs and
# scales the rest by $1/0.9$, so two calls on the same input differ; `.eval()` turns it
# into the identity. That is why every comparison in this book runs the modules in eval
# mode.

# %%
ffn_train = FeedForwardByHand(d, dff, dropout=0.1).train()
with torch.no_grad():
    a1, a2 = ffn_train(x), ffn_train(x)
    ffn_train.eval()
    e1, e2 = ffn_train(x), ffn_train(x)
zeros = (a1 == 0).float().mean().item()
print(f"train mode: two calls equal? {torch.equal(a1, a2)}; share of zeroed outputs {zeros:.2f}")
print(f"eval mode:  two calls equal? {torch.equal(e1, e2)}")
assert not torch.equal(a1, a2) and torch.equal(e1, e2)
assert 0.05 < zeros < 0.15

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

renamed = {"net.0." + k[len("lin1."):] if k.startswith("lin1.") else "net.2." + k[len("lin2."):]: v
           for k, v in ffn.state_dict().items()}
lib.load_state_dict(renamed)  # strict: every name and shape must match
with torch.no_grad():
    torch.testing.assert_close(lib(x), ffn(x))
assert isinstance(lib.net[1], nn.GELU) and lib.net[1].approximate == "none"
print("helpers.FeedForward == FeedForwardByHand on", tuple(x.shape))

# %% [markdown]
# The library's FFN computes exactly what we built, with the exact GELU. The next chapter
# wraps it, together with attention, into an encoder layer: each sub-layer behind a
# LayerNorm and inside a residual connection.
