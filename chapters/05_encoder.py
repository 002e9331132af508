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
# # 5. The encoder
#
# You will build the encoder: self-attention and a feed-forward network, each wrapped in a
# residual connection with a LayerNorm, stacked $N$ times.
# Where the LayerNorm sits changes what flows through the stack.
# The picture shows 24 random layers: Pre-Norm's residual stream (blue) grows with depth,
# Post-Norm's (green) stays at size 1.
#
# ![The residual stream's size through 24 random Pre-Norm and Post-Norm layers](figures/05_encoder.png)

# %% [markdown] tags=["run-time"]
# **Run time:** about 10 s.

# %% [markdown]
# An encoder layer wraps the two sub-layers of the last two chapters, self-attention
# (chapter 03) and the feed-forward network (chapter 04). Each sits in a **residual
# connection** with a **LayerNorm** {cite}`ba2016`. The one real design decision is where
# the LayerNorm goes (Figure 5.1):
#
# $$
# \text{Post-Norm (the original paper):}\quad x \leftarrow \operatorname{LN}\big(x + f(x)\big)
# \qquad\qquad
# \text{Pre-Norm (GPT-2, this book):}\quad x \leftarrow x + f\big(\operatorname{LN}(x)\big)
# $$
#
# The original Transformer {cite}`vaswani2017` uses Post-Norm. GPT-2 {cite}`radford2019` moves
# the LayerNorm to the input of each sub-layer. This chapter builds both layers by hand. It
# measures what each does to the residual stream through a deep stack, and why Pre-Norm
# needs one extra LayerNorm at the very end. It reproduces a bug that raises no error:
# layers kept in a plain Python list. It cites an experiment that trains both orders
# without warmup. And it checks the hand-built encoder against `helpers.Encoder`.
#
# :::{dropdown} Going deeper: what the literature reports
# Wang et al. {cite}`wang2019` and Liu et al. {cite}`liu2020` report that Pre-Norm trains
# deep stacks more stably than Post-Norm. Nguyen and Salazar {cite}`nguyen2019` and Xiong
# et al. {cite}`xiong2020` train Pre-Norm Transformers without a learning-rate warmup.
# :::

# %%
import copy

import matplotlib.pyplot as plt
import torch
import torch.nn as nn
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

import helpers
import helpers.analysis.norm_experiment as norm_exp
from helpers import VOCAB_SIZE, describe, make_padding_mask, make_reversal_dataset

_ = torch.manual_seed(0)


# %% jupyter={"source_hidden": true} tags=["figure", "hide-input"]
def layer_diagram(ax, title, steps):
    """steps: (label, colour) boxes from bottom to top; '+' is the residual addition."""
    ax.set_xlim(0, 4)
    ax.set_ylim(-0.6, len(steps) + 0.6)
    ax.axis("off")
    ax.set_title(title, fontsize=11)
    ys = []
    for i, (label, color) in enumerate(steps):
        y = i + 0.5
        ys.append(y)
        if label == "+":
            ax.add_patch(plt.Circle((2, y), 0.22, fc="white", ec="0.2"))
            ax.text(2, y, "+", ha="center", va="center", fontsize=13)
        else:
            ax.add_patch(
                FancyBboxPatch(
                    (1.1, y - 0.25),
                    1.8,
                    0.5,
                    fc=color,
                    ec="0.3",
                    boxstyle="round,pad=0.02,rounding_size=0.08",
                )
            )
            ax.text(2, y, label, ha="center", va="center", fontsize=9)
    ax.annotate("", xy=(2, ys[0] - 0.27), xytext=(2, -0.5), arrowprops=dict(arrowstyle="->"))
    ax.text(2.15, -0.45, "x", fontsize=10)
    for y0, y1 in zip(ys, ys[1:]):
        ax.annotate("", xy=(2, y1 - 0.27), xytext=(2, y0 + 0.27), arrowprops=dict(arrowstyle="->"))
    ax.annotate(
        "", xy=(2, len(steps) + 0.5), xytext=(2, ys[-1] + 0.27), arrowprops=dict(arrowstyle="->")
    )
    plus = steps.index(("+", None))
    ax.add_patch(
        FancyArrowPatch(
            (2, -0.2),
            (2.22, ys[plus]),
            connectionstyle="arc3,rad=-0.6",
            arrowstyle="->",
            mutation_scale=10,
            color="C3",
            lw=1.5,
        )
    )
    ax.text(3.3, ys[plus] / 2, "residual\n(skip)", color="C3", fontsize=8, ha="center")


fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(8, 4))
sub = ("sub-layer f\n(attention or FFN)", "#cfe2f3")
norm = ("LayerNorm", "#fde9c9")
layer_diagram(ax1, "Post-Norm: x <- LN(x + f(x))", [sub, ("+", None), norm])
layer_diagram(ax2, "Pre-Norm: x <- x + f(LN(x))", [norm, sub, ("+", None)])
fig.suptitle("Figure 5.1: where the LayerNorm sits (one sub-layer)", fontsize=11)
plt.tight_layout()
plt.show()

# %% [markdown]
# In Post-Norm the residual stream itself passes through the LayerNorm after every
# sub-layer. In Pre-Norm only the sub-layer's *input* is normalised. The stream runs from
# the bottom of the stack to the top through additions alone.

# %% [markdown]
# ## A batch to work with
#
# Four reversal sources, padded to the data set's width of 14. Their padding mask is
# `[B, 1, 1, L]`, True = blocked (chapter 03). Their embeddings have the book's width
# $d = 128$ (chapter 02).

# %%
d, num_heads, dff = 128, 4, 512
src, _ = make_reversal_dataset(4, seed=0)
pad_mask = make_padding_mask(src)
embed = helpers.TokenAndPosition(VOCAB_SIZE, d, max_len=64).eval()
with torch.no_grad():
    x = embed(src)
for row in src[:2]:
    print(describe(row))
print("src", tuple(src.shape), "  pad_mask", tuple(pad_mask.shape), "  x", tuple(x.shape))

# %% [markdown]
# ## What LayerNorm computes
#
# LayerNorm works on each position alone, over its $d$ features $x_1, \dots, x_d$:
#
# $$
# \mu = \frac1d \sum_{i=1}^{d} x_i, \qquad
# \sigma^2 = \frac1d \sum_{i=1}^{d} (x_i - \mu)^2, \qquad
# \operatorname{LN}(x)_i = \gamma_i \, \frac{x_i - \mu}{\sqrt{\sigma^2 + \epsilon}} + \beta_i .
# $$
#
# The variance is the **biased** one: it divides by $d$, not $d - 1$. The small
# $\epsilon$ ($10^{-5}$ in `nn.LayerNorm`) sits *inside* the square root. The scale
# $\gamma$ and shift $\beta$ are learned {cite}`ba2016`; `nn.LayerNorm` starts them at 1
# and 0. The cell writes the formula out and compares it with `nn.LayerNorm`, given a
# random $\gamma$ and $\beta$ so that both take part.


# %%
def layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, unbiased=False)  # biased: divide by d
    return (x - mean) / torch.sqrt(var + eps) * gamma + beta


ln_check = nn.LayerNorm(d)
gen = torch.Generator().manual_seed(2)
with torch.no_grad():
    ln_check.weight.copy_(torch.randn(d, generator=gen))
    ln_check.bias.copy_(torch.randn(d, generator=gen))
    ln_ref = ln_check(x)
    ln_hand = layer_norm(x, ln_check.weight, ln_check.bias, eps=ln_check.eps)
ln_diff = (ln_hand - ln_ref).abs().max().item()
print(f"nn.LayerNorm(d): eps = {ln_check.eps:g}, weight {tuple(ln_check.weight.shape)}")
print(
    f"max |by hand - nn.LayerNorm| on x {tuple(x.shape)}: {'< 1e-5' if ln_diff < 1e-5 else ln_diff}"
)
torch.testing.assert_close(ln_hand, ln_ref)
assert ln_check.eps == 1e-5

# %% [markdown]
# ## The Pre-Norm layer, by hand
#
# Each sub-layer reads a normalised copy of the stream, and its result is *added* to the
# stream:
#
# $$
# x \leftarrow x + \operatorname{Dropout}\big(\operatorname{MHA}(\operatorname{LN}_1(x))\big),
# \qquad
# x \leftarrow x + \operatorname{FFN}\big(\operatorname{LN}_2(x)\big).
# $$
#
# (The FFN already ends with dropout.) The layer also returns the attention weights,
# `[B, h, L, L]`, for the heatmaps later in the book. The attribute names are those of
# `helpers.EncoderLayer`, so weights can be copied between the two at the end.


# %%
class PreNormEncoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, dff, dropout=0.1):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.mha = helpers.MultiHeadAttention(d_model, num_heads, dropout)
        self.ffn = helpers.FeedForward(d_model, dff, dropout)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, pad_mask, need_weights=True):
        h = self.ln1(x)
        a, w = self.mha(h, h, h, attn_mask=pad_mask, need_weights=need_weights)
        x = x + self.drop(a)
        x = x + self.ffn(self.ln2(x))
        return x, w


pre = PreNormEncoderLayer(d, num_heads, dff).eval()

# %% [markdown]
# Step through it once and print the shapes. Also print what the LayerNorm fixes: after
# `ln1`, each position's vector has mean 0 and standard deviation 1 across its $d$
# features. (Its learned scale and shift start at 1 and 0.)

# %%
with torch.no_grad():
    h = pre.ln1(x)
    x_std, h_std = x.std(-1, unbiased=False).mean(), h.std(-1, unbiased=False).mean()
    h_mean = h.mean(-1).abs().max()
    print("x                ", tuple(x.shape), f"  per-position std {x_std:.2f}")
    print(
        "h = ln1(x)       ",
        tuple(h.shape),
        f"  largest |per-position mean| {'below 1e-5' if h_mean < 1e-5 else f'{h_mean:.0e}'}, "
        f"per-position std {h_std:.4f}",
    )
    a, w = pre.mha(h, h, h, attn_mask=pad_mask)
    print("a = MHA(h, h, h) ", tuple(a.shape), "  weights", tuple(w.shape), " [B, h, L, L]")
    x1 = x + a
    print("x + a            ", tuple(x1.shape), "  the residual stream, still [B, L, d]")
    x2 = x1 + pre.ffn(pre.ln2(x1))
    print("x + FFN(ln2(x))  ", tuple(x2.shape))
    out, w_layer = pre(x, pad_mask)
torch.testing.assert_close(out, x2)
torch.testing.assert_close(w_layer, w)
torch.testing.assert_close(h.mean(-1), torch.zeros(4, 14), atol=1e-5, rtol=0)
torch.testing.assert_close(h.std(-1, unbiased=False), torch.ones(4, 14), atol=1e-3, rtol=0)
assert torch.equal(pre.ln1.weight, torch.ones(d)) and not pre.ln1.bias.any()  # scale 1, shift 0
assert (w[pad_mask.expand_as(w)] == 0).all()  # no weight on a PAD key
print("no attention weight lands on a PAD key")

# %% [markdown]
# :::{dropdown} Going deeper: a LayerNorm slip to avoid
# A hand-written version that uses `x.std()`, which is the *unbiased* estimate by default
# in PyTorch, and adds $\epsilon$ to the standard deviation instead of the variance, is a
# slip found in tutorial code (The Annotated Transformer {cite}`rush2018` writes its
# `LayerNorm` this way): at $d = 128$ its outputs are off by about
# $\sqrt{128/127} - 1 \approx 0.4\,\%$, enough to fail an equality check against
# `nn.LayerNorm` even with a tolerance of $10^{-3}$. The cell compares it with
# `nn.LayerNorm`.
# :::


# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
def layer_norm_slip(x, gamma, beta, eps=1e-5):
    centred = x - x.mean(-1, keepdim=True)
    return centred / (x.std(-1, keepdim=True) + eps) * gamma + beta  # unbiased std


ln = pre.ln1
with torch.no_grad():
    ref = ln(x)
    slip = layer_norm_slip(x, ln.weight, ln.bias)
ratio = (ref / slip).median().item()
print(
    f"x.std() version: nn.LayerNorm / it = {ratio:.4f}   (sqrt(128/127) = {(128 / 127) ** 0.5:.4f})"
)
assert not torch.allclose(slip, ref, atol=1e-3) and abs(ratio - (128 / 127) ** 0.5) < 1e-4

# %% [markdown]
# ## Post-Norm, beside it
#
# The original layout normalises *after* the addition. Same parameters, different
# wiring:


# %%
class PostNormEncoderLayer(PreNormEncoderLayer):
    """Same parameters as the Pre-Norm layer; only forward differs."""

    def forward(self, x, pad_mask, need_weights=True):
        a, w = self.mha(x, x, x, attn_mask=pad_mask, need_weights=need_weights)
        x = self.ln1(x + self.drop(a))
        x = self.ln2(x + self.ffn(x))
        return x, w


post = PostNormEncoderLayer(d, num_heads, dff).eval()
post.load_state_dict(pre.state_dict())  # the very same weights
with torch.no_grad():
    out_post, _ = post(x, pad_mask)
print(
    f"same weights: max |Post-Norm output - Pre-Norm output| = "
    f"{(out_post - out).abs().max().item():.2f}"
)
print(
    f"output per-position std: Pre-Norm {out.std(-1, unbiased=False).mean():.2f},"
    f" Post-Norm {out_post.std(-1, unbiased=False).mean():.3f}"
)
assert not torch.allclose(out_post, out, atol=1e-3)

# %% [markdown]
# A Post-Norm layer's output leaves through a LayerNorm. While that LayerNorm has its
# initial scale 1 and shift 0, the output's per-position standard deviation is 1, whatever
# the layer computed. A Pre-Norm layer's output is the stream plus two updates, with no
# normalisation on the way out.
#
# The difference is easiest to see with sub-layers that contribute nothing. Zero the
# output projections of the attention and of the FFN, so both sub-layers return 0. The
# Pre-Norm layer becomes *exactly* the identity. The residual path carries $x$ through
# untouched, and a gradient flows back along it untouched too. The Post-Norm layer still
# applies two LayerNorms. So even a layer that "does nothing" rescales its input and
# reshapes its gradient:


# %%
def silenced(layer):
    layer = copy.deepcopy(layer)
    with torch.no_grad():
        for lin in (layer.mha.W_o, layer.ffn.net[2]):
            lin.weight.zero_()
            lin.bias.zero_()
    return layer


with torch.no_grad():
    y_pre, _ = silenced(pre)(x, pad_mask)
    y_post, _ = silenced(post)(x, pad_mask)
print(
    f"silent sub-layers: max |output - x| = {(y_pre - x).abs().max().item()} (Pre-Norm),"
    f" {(y_post - x).abs().max().item():.2f} (Post-Norm, which returns LN(LN(x)))"
)
assert torch.equal(y_pre, x) and not torch.allclose(y_post, x, atol=1e-2)
torch.testing.assert_close(y_post, post.ln2(post.ln1(x)))

upstream = torch.randn(x.shape, generator=torch.Generator().manual_seed(1))
grad_gap = {}
for name, layer in (("Pre-Norm", silenced(pre)), ("Post-Norm", silenced(post))):
    x_in = x.clone().requires_grad_()
    layer(x_in, pad_mask)[0].backward(upstream)
    grad_gap[name] = (x_in.grad - upstream).abs().max().item()
print(
    f"backward: max |gradient reaching x - incoming gradient| = {grad_gap['Pre-Norm']}"
    f" (Pre-Norm), {grad_gap['Post-Norm']:.2f} (Post-Norm)"
)
assert grad_gap["Pre-Norm"] == 0 and grad_gap["Post-Norm"] > 0.1

# %% [markdown]
# In a deep Post-Norm stack, the gradient that reaches an early layer has passed through
# two LayerNorm Jacobians per layer above it. In a Pre-Norm stack there is always a direct
# path of plain additions from the top of the stack to every layer. Xiong et al.
# {cite}`xiong2020` analyse the gradients of the two orders at initialisation. They explain
# with them why Post-Norm needs a learning-rate warmup and Pre-Norm can do without. How the
# two fare without warmup on our task is an experiment, cited near the end of the chapter.
# Pre-Norm pays for its clean path elsewhere, as the next section measures.
#
# ## Through a deep stack: the residual stream's scale
#
# Stack 24 layers of each kind, with random Xavier-initialised weights (chapter 07), in
# eval mode. Feed them the same input, whose per-position RMS is 1. After every layer,
# measure the residual stream's size: the RMS of each position's vector,
# $\sqrt{\tfrac1d \sum_i x_i^2}$, averaged over the positions. Three curves:
#
# - **Post-Norm**: every layer ends with a LayerNorm;
# - **Pre-Norm**: the raw stream;
# - **Pre-Norm + final LayerNorm**: what the stack would output if it ended at that
#   depth with one LayerNorm, as `helpers.Encoder` does.
#
# The cell also measures how much each layer changes the stream relative to its size:
# $\operatorname{RMS}(x_{\text{out}} - x_{\text{in}}) / \operatorname{RMS}(x_{\text{in}})$.


# %%
def rms(t):
    """Mean over positions of each position's root-mean-square, t [..., d] -> float."""
    return t.pow(2).mean(-1).sqrt().mean().item()


_ = torch.manual_seed(0)
depth = 24
pre_stack = nn.ModuleList(PreNormEncoderLayer(d, num_heads, dff) for _ in range(depth)).eval()
helpers.xavier_init_linears(pre_stack)
post_stack = nn.ModuleList(PostNormEncoderLayer(d, num_heads, dff) for _ in range(depth)).eval()
post_stack.load_state_dict(pre_stack.state_dict())  # identical weights again
final_ln = nn.LayerNorm(d)

x0 = torch.randn(8, 14, d)  # per-position RMS ~1
scale = {
    "Pre-Norm": [rms(x0)],
    "Pre-Norm + final LN": [rms(final_ln(x0))],
    "Post-Norm": [rms(x0)],
}
relative_update = {"Pre-Norm": [], "Post-Norm": []}
with torch.no_grad():
    xp, xq = x0, x0
    for lp, lq in zip(pre_stack, post_stack):
        new_p, _ = lp(xp, None)
        new_q, _ = lq(xq, None)
        relative_update["Pre-Norm"].append(rms(new_p - xp) / rms(xp))
        relative_update["Post-Norm"].append(rms(new_q - xq) / rms(xq))
        xp, xq = new_p, new_q
        scale["Pre-Norm"].append(rms(xp))
        scale["Pre-Norm + final LN"].append(rms(final_ln(xp)))
        scale["Post-Norm"].append(rms(xq))

print("RMS of the stream after each layer, and each layer's update / the stream it received")
print(f"{'layer':>5s}" + "".join(f"{k:>20s}" for k in scale) + f"{'update: Pre':>13s}{'Post':>6s}")
for i in (0, 1, 2, 4, 8, 12, 16, 20, 24):
    upd = "".join(f"{u[i - 1]:{w}.2f}" for u, w in zip(relative_update.values(), (13, 6)))
    print(f"{i:5d}" + "".join(f"{v[i]:20.2f}" for v in scale.values()) + (upd if i else ""))

s = scale["Pre-Norm"]
assert all(b > a for a, b in zip(s, s[1:]))  # grows at every layer
assert s[-1] > 3 * s[0]
pre_u, post_u = relative_update["Pre-Norm"], relative_update["Post-Norm"]
assert pre_u[-1] < pre_u[0] / 2  # late Pre-Norm layers move the stream less
late = post_u[7:]  # Post-Norm, layers 8 to 24
print(
    f"\nPost-Norm update / stream: layer 1 {post_u[0]:.2f};"
    f" layers 8 to 24 {min(late):.2f} to {max(late):.2f}"
)
assert post_u[0] < 0.65 and all(0.7 < u < 1 for u in late)  # a rise, then a level below 1

# %% jupyter={"source_hidden": true} tags=["figure", "hide-input", "opening-figure"]
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
# Post-Norm first, so the dashed Pre-Norm + final LN line (also at 1) stays visible on top
styles = (("Pre-Norm", "-o", "C0"), ("Post-Norm", "-s", "C2"), ("Pre-Norm + final LN", "--", "C1"))
for name, style, color in styles:
    ax1.plot(range(depth + 1), scale[name], style, ms=3, lw=2, color=color, label=name)
ax1.set(
    title="residual stream size through 24 random layers",
    xlabel="layers applied",
    ylabel="RMS per position",
    ylim=(0, None),
)
ax1.legend()
for name, style, color in styles[:2]:
    ax2.plot(range(1, depth + 1), relative_update[name], style, ms=3, color=color, label=name)
ax2.set(
    title="how much each layer changes the stream",
    xlabel="layer",
    ylabel="RMS(update) / RMS(stream)",
    ylim=(0, None),
)
ax2.legend()
fig.suptitle("Figure 5.2: 24 random layers, eval mode, input RMS 1", fontsize=11)
plt.tight_layout()
plt.show()

# %% [markdown]
# What the table and Figure 5.2 show:
#
# - **Pre-Norm's stream grows at every layer**, to several times its input's size after
#   24 layers: each sub-layer adds its update, and nothing ever scales the sum back down.
# - **Post-Norm's stream stays at 1**: every layer ends with a LayerNorm.
# - **One LayerNorm at the end** brings Pre-Norm's output back to 1 at every depth.
#
# :::{dropdown} Going deeper: why the last two curves sit at 1
# The last two curves hold by construction. A LayerNorm at its initial scale 1 and shift 0
# gives every position mean 0 and standard deviation 1, so RMS 1, whatever it receives.
# :::
#
# Without that final LayerNorm, the decoder's cross-attention (chapter 06) would read
# vectors whose scale depends on the depth. That scale can drift as training changes the
# layers. GPT-2 ends its stack the same way: its paper adds one more layer normalization
# after the final self-attention block {cite}`radford2019`. So does the mini GPT of
# chapter 14.
# A Post-Norm stack does not need it.
#
# The right panel is Pre-Norm's side effect. The stream grows faster than the updates
# written into it. So the deeper a layer sits, the less it changes the stream relative to
# its size. The last layer changes it less than half as much as the first.
#
# :::{dropdown} Going deeper: the Post-Norm curve in the right panel
# In the Post-Norm stack the share goes the other way at first. It rises from 0.57 at
# layer 1 to about 0.8 by layer 8. From there to layer 24 it levels off, between 0.79 and
# 0.89. This is a statement about random weights at initialisation; what training does
# with it is not measured here.
# :::
#
# ## The encoder stack
#
# The encoder is the embedding, $N$ layers, and the final LayerNorm. The layers are held
# in an `nn.ModuleList`.


# %%
class EncoderByHand(nn.Module):
    def __init__(self, vocab_size, d_model, num_heads, dff, num_layers, max_len, dropout=0.1):
        super().__init__()
        self.embed = helpers.TokenAndPosition(vocab_size, d_model, max_len, dropout)
        self.layers = nn.ModuleList(
            PreNormEncoderLayer(d_model, num_heads, dff, dropout) for _ in range(num_layers)
        )
        self.ln_final = nn.LayerNorm(d_model)  # Pre-Norm: normalise the stream once, at the exit

    def forward(self, src, pad_mask, need_weights=False):
        x = self.embed(src)
        for layer in self.layers:
            x, _ = layer(x, pad_mask, need_weights=need_weights)
        return self.ln_final(x)


torch.manual_seed(0)
encoder = EncoderByHand(VOCAB_SIZE, d, num_heads, dff, num_layers=2, max_len=64).eval()
with torch.no_grad():
    memory = encoder(src, pad_mask)
print("src", tuple(src.shape), "-> memory", tuple(memory.shape), "  [B, Ls, d]")
assert memory.shape == (4, 14, d)

# %% [markdown]
# ## Pitfall: layers in a plain Python list
#
# `nn.Module` finds its sub-modules by watching attribute assignment. Assigning a module,
# or an `nn.ModuleList` of them, registers it. A plain Python `list` of modules is just an
# attribute holding a list; PyTorch does not look inside. The forward pass works, so
# nothing looks wrong. But the layers are invisible to everything that walks the module
# tree. Build the same encoder with a list:


# %%
class EncoderWithList(nn.Module):
    def __init__(self, vocab_size, d_model, num_heads, dff, num_layers, max_len, dropout=0.1):
        super().__init__()
        self.embed = helpers.TokenAndPosition(vocab_size, d_model, max_len, dropout)
        self.layers = [  # the bug: a plain Python list
            PreNormEncoderLayer(d_model, num_heads, dff, dropout) for _ in range(num_layers)
        ]
        self.ln_final = nn.LayerNorm(d_model)

    forward = EncoderByHand.forward  # the same forward pass


def n_params(module):
    return sum(p.numel() for p in module.parameters())


torch.manual_seed(0)
buggy = EncoderWithList(VOCAB_SIZE, d, num_heads, dff, num_layers=2, max_len=64)
good = EncoderByHand(VOCAB_SIZE, d, num_heads, dff, num_layers=2, max_len=64)
per_layer = n_params(good.layers[0])
print(f"one layer: {per_layer:,} parameters; the two layers: {2 * per_layer:,}")
print(f"parameters() with nn.ModuleList: {n_params(good):9,d}")
print(
    f"parameters() with a Python list: {n_params(buggy):9,d}"
    f"   (embedding {n_params(buggy.embed):,} + final LayerNorm {n_params(buggy.ln_final):,})"
)
print(f"state_dict keys: {len(good.state_dict())} vs {len(buggy.state_dict())}")
hidden_share = 1 - n_params(buggy) / n_params(good)
print(f"share of the encoder's parameters that the list hides: {hidden_share:.1%}")
assert n_params(good) - n_params(buggy) == 2 * per_layer == 2 * 198_272
assert n_params(buggy) == n_params(buggy.embed) + n_params(buggy.ln_final)
assert not any(k.startswith("layers.") for k in buggy.state_dict())

# %% [markdown]
# Every tool that relies on the module tree now misses almost all of the encoder. Four
# consequences, each reproduced below:
#
# 1. **The optimiser never updates the layers**: `Adam(model.parameters())` was never
#    given them. The model still trains its embedding and final LayerNorm, so a loss can
#    still go down. That makes the bug easy to miss.
# 2. **`.to()` does not move them.** `model.to("cuda")` would leave the layers on the CPU.
#    The cell moves the model to PyTorch's `meta` device instead, as chapter 02 did: the
#    embedding goes, the layers stay. `.to(torch.float64)` converts the embedding but not
#    the layers, and the forward pass fails.
# 3. **`state_dict()` does not save them**: a checkpoint silently lacks the layers.
#    Loading it restores only the embedding and final LayerNorm.
# 4. **`.eval()` does not reach them**: their dropout stays on at evaluation time, so the
#    "evaluation" output is random.

# %%
batch_src, batch_tgt = make_reversal_dataset(32, seed=1)
batch_mask = make_padding_mask(batch_src)


def one_adam_step(model):
    """One optimiser step on a stand-in loss (the output's mean square); returns the share
    of layer 0's first weight matrix and of the final LayerNorm's weight that changed."""
    before_layer = model.layers[0].ffn.net[0].weight.detach().clone()
    before_ln = model.ln_final.weight.detach().clone()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(batch_src, batch_mask).pow(2).mean().backward()
    opt.step()
    return (
        (model.layers[0].ffn.net[0].weight != before_layer).float().mean().item(),
        (model.ln_final.weight != before_ln).float().mean().item(),
    )


for name, model in (("nn.ModuleList", good), ("Python list", buggy)):
    layer_moved, ln_moved = one_adam_step(copy.deepcopy(model).train())
    print(
        f"1. {name:13s}: one Adam step changed {layer_moved:.0%} of layer 0's weights"
        f" and {ln_moved:.0%} of the final LayerNorm's"
    )
    assert ln_moved > 0 and (layer_moved == 0 if name == "Python list" else layer_moved > 0)

torch.manual_seed(0)  # no dropout, so that the loss moves only through training
frozen = EncoderWithList(VOCAB_SIZE, d, num_heads, dff, num_layers=2, max_len=64, dropout=0.0)
layer_before = frozen.layers[0].ffn.net[0].weight.detach().clone()
opt = torch.optim.Adam(frozen.parameters(), lr=1e-2)
stand_in = []
for _ in range(20):
    loss = frozen(batch_src, batch_mask).pow(2).mean()  # the same stand-in loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    stand_in.append(loss.item())
layer_change = (frozen.layers[0].ffn.net[0].weight - layer_before).abs().max().item()
print(
    f"   Python list, 20 Adam steps: stand-in loss {stand_in[0]:.2f} -> {stand_in[-1]:.2f},"
    f" largest change of layer 0's weights {layer_change}"
)
assert stand_in[-1] < 0.9 * stand_in[0] and layer_change == 0

# %%
on_meta = copy.deepcopy(buggy).to("meta")
print(
    '2. after .to("meta"): embedding on',
    on_meta.embed.emb.weight.device,
    "| layer 0 on",
    on_meta.layers[0].ffn.net[0].weight.device,
)
assert on_meta.embed.emb.weight.is_meta and not on_meta.layers[0].ffn.net[0].weight.is_meta
b64 = copy.deepcopy(buggy).eval().to(torch.float64)
print(
    "   after .to(float64): embedding",
    b64.embed.emb.weight.dtype,
    "| layer 0",
    b64.layers[0].ffn.net[0].weight.dtype,
)
try:
    b64(batch_src, batch_mask)
except RuntimeError as err:
    print("   forward:", type(err).__name__ + ":", err)
    caught = err
assert "dtype" in str(caught) and b64.layers[0].ffn.net[0].weight.dtype == torch.float32

restored = EncoderWithList(VOCAB_SIZE, d, num_heads, dff, num_layers=2, max_len=64)
restored.load_state_dict(buggy.state_dict())  # no error: both sides agree there are no layers
gap = (restored.layers[0].ffn.net[0].weight - buggy.layers[0].ffn.net[0].weight).abs().max()
print(f"3. after a checkpoint round trip, layer 0 differs from the saved model by up to {gap:.2f}")
assert gap > 0

buggy.eval()
print(
    "4. after .eval(): encoder.training =",
    buggy.training,
    "| layer 0 training =",
    buggy.layers[0].training,
)
with torch.no_grad():
    e1, e2 = buggy(batch_src, batch_mask), buggy(batch_src, batch_mask)
differ = (e1 != e2).float().mean().item()
print(f"   two 'eval' calls on the same input differ at {differ:.0%} of the output entries")
assert buggy.layers[0].training and differ > 0.5

# %% [markdown]
# The fix is the one already in `EncoderByHand`: `nn.ModuleList` (or `nn.Sequential` when
# the layers take a single input). The same four checks pass on it:

# %%
g64 = copy.deepcopy(good).eval().to(torch.float64)
with torch.no_grad():
    y64 = g64(batch_src, batch_mask)
restored = EncoderByHand(VOCAB_SIZE, d, num_heads, dff, num_layers=2, max_len=64)
restored.load_state_dict(good.state_dict())
good.eval()
with torch.no_grad():
    e1, e2 = good(batch_src, batch_mask), good(batch_src, batch_mask)
gap = (restored.layers[0].ffn.net[0].weight - good.layers[0].ffn.net[0].weight).abs().max()
good_meta = copy.deepcopy(good).to("meta")
print('2. after .to("meta"): layer 0 on', good_meta.layers[0].ffn.net[0].weight.device)
print(
    "   after .to(float64): layer 0", g64.layers[0].ffn.net[0].weight.dtype, "| output", y64.dtype
)
print(f"3. after a checkpoint round trip, layer 0 differs by up to {gap.item()}")
print(
    "4. after .eval(): layer 0 training =",
    good.layers[0].training,
    f"| two calls differ by up to {(e1 - e2).abs().max().item()}",
)
assert y64.dtype == torch.float64 and good_meta.layers[0].ffn.net[0].weight.is_meta
assert torch.equal(restored.layers[0].ffn.net[0].weight, good.layers[0].ffn.net[0].weight)
assert not good.layers[0].training and torch.equal(e1, e2)

# %% [markdown]
# The same applies to a `dict` of modules, which needs `nn.ModuleDict` (the next cell shows
# it). It also applies to a plain tensor attribute that should be a parameter or a buffer.
# That is why chapter 02 registers its position table with `register_buffer`.


# %%
class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.plain = {"a": nn.Linear(4, 4)}  # a Python dict: not registered
        self.registered = nn.ModuleDict({"b": nn.Linear(4, 4)})


print("parameters():", [name for name, _ in TwoHeads().named_parameters()])
assert [name for name, _ in TwoHeads().named_parameters()] == [
    "registered.b.weight",
    "registered.b.bias",
]

# %% [markdown]
# ## Does it matter in training?
#
# The Pre-Norm and Post-Norm measurements so far were made at initialisation. Training is
# a separate question.
# [The Pre-Norm sweep](../appendix/experiment_norm_placement.ipynb) trained a 6-layer
# encoder both ways, 5 seeds each, for 400 steps at a constant learning rate without warmup.
# Pre-Norm ended ahead on every seed at each of three learning rates; at $2 \times 10^{-3}$
# its held-out exact match beat Post-Norm's by 0.95 on average (95 % interval 0.87 to 1.03
# over the 5 paired seeds). Exact match is the share of sequences reversed without an error,
# so a gap of 0.95 spans nearly its whole range. The interval reaches past 1 only because a
# $t$ interval knows nothing of that bound. That is one budget without warmup;
# it says nothing about Post-Norm with the warmup of the original paper.

# %% [markdown]
# ## Checking against `helpers`
#
# `helpers.EncoderLayer` and `helpers.Encoder` are the Pre-Norm layer and stack the rest
# of the book uses. (The full model in chapter 07 holds a `helpers.Encoder`.) They use the
# same parameter names as our classes, so the weights load strictly. In eval mode they must
# give the same layer output, attention weights and encoder output. That holds on both
# attention paths: the handwritten one that returns weights, and
# `F.scaled_dot_product_attention`. The sweep's Post-Norm layer,
# `helpers.analysis.norm_experiment.PostNormEncoderLayer`, must match ours too.

# %%
lib_layer = helpers.EncoderLayer(d, num_heads, dff).eval()
lib_layer.load_state_dict(pre.state_dict())
lib_encoder = helpers.Encoder(VOCAB_SIZE, d, num_heads, dff, num_layers=2, max_len=64).eval()
lib_encoder.load_state_dict(encoder.state_dict())

with torch.no_grad():
    out_lib, w_lib = lib_layer(x, pad_mask)
    memory_lib = lib_encoder(src, pad_mask)  # SDPA path
    memory_lib_w = lib_encoder(src, pad_mask, need_weights=True)  # handwritten path
torch.testing.assert_close(out_lib, out)
torch.testing.assert_close(w_lib, w)
torch.testing.assert_close(memory_lib, memory)
torch.testing.assert_close(memory_lib_w, memory)
lib_post = norm_exp.PostNormEncoderLayer(d, num_heads, dff).eval()
lib_post.load_state_dict(post.state_dict())
with torch.no_grad():
    out_lib_post, _ = lib_post(x, pad_mask)
torch.testing.assert_close(out_lib_post, out_post)
assert isinstance(lib_encoder.layers, nn.ModuleList)
assert isinstance(helpers.Transformer(13, 13).encoder, helpers.Encoder)


def small(v):
    return "< 1e-5" if v < 1e-5 else f"{v:.1e}"


diffs = {
    "layer output": (out_lib - out).abs().max().item(),
    "attention weights": (w_lib - w).abs().max().item(),
    "memory, SDPA path": (memory_lib - memory).abs().max().item(),
    "memory, handwritten path": (memory_lib_w - memory).abs().max().item(),
    "Post-Norm layer output": (out_lib_post - out_post).abs().max().item(),
}
for name, v in diffs.items():
    print(f"helpers vs ours, {name:<25} max |diff| {small(v)}")

# %% [markdown]
# The encoder turns a padded batch of sources into `memory`: one $d$-dimensional vector
# per source position, normalised by the final LayerNorm. The next chapter builds the
# decoder. It reads that memory through cross-attention while it writes the reversed
# sequence one token at a time.
#
# ## Summary
#
# - An encoder layer is two sub-layers, each inside a residual connection with a
#   LayerNorm; Pre-Norm normalises the sub-layer's input, Post-Norm the stream after the
#   addition (Figure 5.1). With silent sub-layers a Pre-Norm layer is exactly the identity.
# - Through 24 random layers Pre-Norm's stream grew at every layer, and the last layer
#   changed it relatively less than half as much as the first; Post-Norm's stayed at RMS 1
#   (Figure 5.2). One final LayerNorm brings Pre-Norm's output back to RMS 1, which is why
#   `helpers.Encoder` ends with one.
# - Layers kept in a Python list are invisible to `parameters()`, `.to()`, `state_dict()`
#   and `.eval()`; `nn.ModuleList` registers them.
# - Trained for 400 steps without warmup (5 paired seeds, learning rate $2 \times 10^{-3}$),
#   Pre-Norm's held-out exact match beat Post-Norm's by 0.95 on average (95 % interval 0.87
#   to 1.03; [the Pre-Norm sweep](../appendix/experiment_norm_placement.ipynb)).
# - The one thing to remember: **Pre-Norm keeps a path of plain additions through the
#   stack, and pays for it with a final LayerNorm.**
#
# ## Exercises
#
# ### Exercise 5.1 (predict, then run): twice as deep
#
# Figure 5.2 stops at 24 random Pre-Norm layers. Stack 48 (same kind of layers, Xavier,
# eval mode, the same input). Will the stream's RMS after 48 layers be about the same as
# after 24, about $\sqrt 2$ times it, or about twice it? And the RMS after a final
# LayerNorm?

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
# Solution to exercise 5.1
torch.manual_seed(0)
deep = nn.ModuleList(PreNormEncoderLayer(d, num_heads, dff) for _ in range(48)).eval()
helpers.xavier_init_linears(deep)
deep_rms = [rms(x0)]
with torch.no_grad():
    xs = x0
    for layer in deep:
        xs, _ = layer(xs, None)
        deep_rms.append(rms(xs))
    after_ln = rms(final_ln(xs))
ratio_48_24 = deep_rms[48] / deep_rms[24]
print(
    f"RMS after 24 layers {deep_rms[24]:.2f}, after 48 {deep_rms[48]:.2f}:"
    f" ratio {ratio_48_24:.2f} (sqrt 2 = {2**0.5:.2f}); after a final LayerNorm {after_ln:.2f}"
)
assert 1.2 < ratio_48_24 < 1.7

# %% [markdown]
# :::{dropdown} Answer to exercise 5.1
# Closer to $\sqrt 2$ than to 2, as if the layers' updates added up like independent
# random vectors, whose squares (not sizes) add. The final LayerNorm still brings the output
# back to 1. (These 48 layers are a new draw, so their RMS after 24 layers differs a little
# from Figure 5.2's.)
# :::

# %% [markdown]
# ### Exercise 5.2 (predict, then run): a Post-Norm layer that does nothing
#
# A Pre-Norm layer with silenced sub-layers is the identity. The Post-Norm one returns
# $\operatorname{LN}_2(\operatorname{LN}_1(x))$. With fresh LayerNorms (scale 1, shift 0),
# how far is that from $\operatorname{LN}_1(x)$ alone? So what does a stack of 24 silenced
# Post-Norm layers do to its input?

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
# Solution to exercise 5.2
post64, x64 = copy.deepcopy(post).double(), x.double()  # float64: rounding stays far below eps
with torch.no_grad():
    once = post64.ln1(x64)
    twice = post64.ln2(post64.ln1(x64))
    many = x64
    for _ in range(24):
        many = silenced(post64)(many, pad_mask)[0]
    no_eps = nn.functional.layer_norm(x64, (d,), eps=0.0)
    no_eps_gap = (nn.functional.layer_norm(no_eps, (d,), eps=0.0) - no_eps).abs().max().item()
print(
    f"max |LN(LN(x)) - LN(x)| = {(twice - once).abs().max().item():.1e};"
    f" after 24 silent layers, max |out - LN(x)| = {(many - once).abs().max().item():.1e};"
    f" max |LN(x) - x| = {(once - x64).abs().max().item():.2f}"
)
print(
    f"with eps = 0: max |LN(LN(x)) - LN(x)| {'below 1e-12' if no_eps_gap < 1e-12 else no_eps_gap}"
)
assert (twice - once).abs().max() < 1e-4 and (many - once).abs().max() < 1e-4
assert (once - x64).abs().max() > 0.1 and no_eps_gap < 1e-12

# %% [markdown]
# :::{dropdown} Answer to exercise 5.2
# A LayerNorm of an already normalised vector changes it only through the $\epsilon$ in
# its root: with $\epsilon = 0$ the second one changes nothing. So a stack of silent
# Post-Norm layers is one LayerNorm, not the identity. Each
# Post-Norm layer can only pass its input on *normalised*; a Pre-Norm layer passes it on
# unchanged.
# :::

# %% [markdown]
# ### Exercise 5.3 (implement): RMSNorm
#
# RMSNorm drops LayerNorm's centring and its shift: it divides each position's vector by
# its root mean square and multiplies by a learned scale,
# $\operatorname{RMSNorm}(x) = x / \sqrt{\tfrac1d \sum_i x_i^2 + \epsilon} \cdot \gamma$.
# PyTorch ships it as `nn.RMSNorm`. Write a class `RMSNorm(d_model, eps=1e-6)`, an
# `nn.Module` with one parameter `weight` of shape `[d_model]` initialised to ones, without
# using `nn.RMSNorm` or `F.rms_norm`. `check_rms_norm(RMSNorm)` compares it with
# `nn.RMSNorm` on three inputs and names the mistake when it recognises one (centring,
# $\epsilon$ missing or outside the root, a missing root, the wrong dimension, `x.std()`).

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 5.3
from helpers.exercises import check_rms_norm


class RMSNorm(nn.Module):
    def __init__(self, d_model, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x):
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


check_rms_norm(RMSNorm)


# %% [markdown]
# ### Exercise 5.4 (implement): LayerNorm as a module
#
# Turn this chapter's `layer_norm` function into a layer. Write a class
# `LayerNorm(d_model, eps=1e-5)`, an `nn.Module` with two parameters of shape `[d_model]`:
# `weight` (initialised to ones) and `bias` (zeros). Its forward computes the formula above
# over the last dimension, without `nn.LayerNorm` or `F.layer_norm`.
# `check_layer_norm(LayerNorm)` compares it with `nn.LayerNorm` given the same weight and
# bias. Its inputs have only $d = 4$ features, so dividing by $d - 1$ shows. One input is
# tiny, so that $\epsilon$ matters. It names the mistake when it recognises one: the
# unbiased variance or one taken around 0, $\epsilon$ missing or outside the root, the wrong
# dimension, no centring, weight and bias swapped or missing.

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 5.4
from helpers.exercises import check_layer_norm


class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)  # biased: divide by d
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


check_layer_norm(LayerNorm)

# %% [markdown]
# ### Exercise 5.5 (implement): the Pre-Norm layer's forward pass
#
# Write `encoder_layer_forward(layer, x, pad_mask)`, the forward pass of a
# `helpers.EncoderLayer`, without calling `layer` itself. Use only its sub-modules:
# `layer.ln1`, `layer.ln2`, `layer.mha`, `layer.ffn` and `layer.drop` (the dropout on the
# attention's result). Return the pair `(x_out, weights)`, with the attention weights
# `[B, h, L, L]` that `layer.mha` gives back.
# `check_encoder_layer_forward(encoder_layer_forward)` compares it with `layer(x, pad_mask)`
# on two padded batches in eval mode. Then it compares once in training mode, with the same
# random seed on both sides, so that a missing `layer.drop` shows. It gives the two
# LayerNorms different weights, so a swapped one shows. It names the mistake when it
# recognises one: the Post-Norm order, a missing residual, a missing or inverted mask, a
# LayerNorm skipped, shared or swapped, dropout left on in eval mode or missing in
# training, a normalised output.
#
# Then write the stack: `encoder_forward(encoder, src, pad_mask)` returns the memory of a
# `helpers.Encoder` from `encoder.embed`, `encoder.layers` and `encoder.ln_final`.
# `check_encoder_forward(encoder_forward)` compares it with `encoder(src, pad_mask)`. It
# names a missing or misplaced final LayerNorm, a missing or inverted mask, a layer's pair
# left unpacked, and layers that do not read each other's output.

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 5.5
from helpers.exercises import check_encoder_forward, check_encoder_layer_forward


def encoder_layer_forward(layer, x, pad_mask):
    h = layer.ln1(x)
    a, w = layer.mha(h, h, h, attn_mask=pad_mask)
    x = x + layer.drop(a)
    x = x + layer.ffn(layer.ln2(x))
    return x, w


check_encoder_layer_forward(encoder_layer_forward)


def encoder_forward(encoder, src, pad_mask):
    x = encoder.embed(src)
    for layer in encoder.layers:
        x, _ = encoder_layer_forward(layer, x, pad_mask)
    return encoder.ln_final(x)  # Pre-Norm: normalise the stream once, at the exit


check_encoder_forward(encoder_forward)
