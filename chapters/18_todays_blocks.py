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
# # 18. Today's blocks: RMSNorm, RoPE, SwiGLU and grouped-query attention
#
# The book's model has the blocks of 2017. A Llama-style model of today swaps four of them:
# RMSNorm for LayerNorm, rotary positions (RoPE) for the added sinusoids, a gated feed-forward
# network (SwiGLU) for the GELU one, and grouped-query attention for full multi-head attention.
# You will build each by hand, check it against PyTorch's or Hugging Face's own, and swap it into
# the book's encoder-decoder with one option. Then you will train a model with all four. The
# picture shows what makes RoPE work: a rotated query and key score the same for every pair of
# positions with the same offset.
#
# ![Attention scores against the offset m - n, with RoPE and with added sinusoids](figures/18_todays_blocks.png)

# %% [markdown] tags=["run-time"]
# **Run time:** about 20 s. The first time, it also trains the book's model with today's four blocks (`blocks_recipe(...)`) and caches it on disk (about 45 s more); later runs load it.

# %%
import dataclasses

import matplotlib.pyplot as plt
import torch
import torch.nn as nn
import torch.nn.functional as F
import transformers
from transformers.models.llama import modeling_llama

from helpers import (
    BOOK_RECIPE,
    VOCAB_SIZE,
    Transformer,
    allocate_static_caches,
    count_parameters,
    exact_match_with_interval,
    greedy_decode,
    greedy_decode_static,
    load_or_train,
    make_padding_mask,
    make_reversal_dataset,
    test_set,
)
from helpers.core.modern import (
    SwiGLU,
    apply_rope,
    repeat_kv,
    rms_norm,
    rope_angles,
    rope_permutation,
    swiglu_hidden,
)
from helpers.training.recipes import blocks_recipe

_ = torch.manual_seed(0)
torch.set_num_threads(1)  # every tensor here is small


def shown(diff, below=1e-6):
    """A difference at the level of float rounding, printed as a bound."""
    return f"< {below:.0e}" if diff < below else f"{diff:.2g}"

# %% [markdown]
# The book's recipe, `BOOK_RECIPE`, with all four of today's blocks. The first call trains it and
# caches it on disk; section 6 scores it. Its sizes are the book's: $d = 32$, 4 heads of
# $d_k = 8$, $d_{ff} = 128$, two layers in each stack.

# %%
TODAY = dict(norm="rms", ffn="swiglu", positions="rope", num_kv_heads=2)
today = load_or_train(blocks_recipe(BOOK_RECIPE, **TODAY), progress=False, verbose=False)
model = today.model.eval()
cfg = model.config
print(cfg)
d, h, d_k, dff = cfg.d_model, cfg.num_heads, cfg.d_k, cfg.dff

# %% [markdown]
# ## 1. RMSNorm
#
# LayerNorm subtracts each vector's mean, divides by its standard deviation, then scales by a
# gain $g$ and adds a bias $b$. RMSNorm {cite}`zhang2019` keeps only the division and the gain.
# It divides by the root mean square:
#
# $$
# \operatorname{RMSNorm}(x) = \frac{x}{\sqrt{\tfrac{1}{d}\sum_{i=1}^{d} x_i^2 + \epsilon}} \odot g .
# $$
#
# By hand, on a batch of 2 sequences of 5 positions. The inputs are not centred, so the two norms
# will differ:


# %%
def rms_norm_by_hand(x, weight, eps=1e-6):
    rms = (x.pow(2).mean(dim=-1, keepdim=True) + eps).sqrt()  # one number per position
    return x / rms * weight


x = torch.randn(2, 5, d) * 3 + 1
weight = torch.rand(d) + 0.5
rms = (x.pow(2).mean(dim=-1, keepdim=True) + 1e-6).sqrt()
y = rms_norm_by_hand(x, weight)
print("x      ", tuple(x.shape), "  [B, L, d]")
print("rms    ", tuple(rms.shape), "  [B, L, 1]: one divisor per position")
print("weight ", tuple(weight.shape), "     [d]: the gain, no bias")
print("output ", tuple(y.shape))
unit_rms = rms_norm_by_hand(x, torch.ones(d)).pow(2).mean(-1).sqrt()  # [B, L]
print(
    f"with g = 1, the output's RMS at the 10 positions: {unit_rms.min():.4f} to "
    f"{unit_rms.max():.4f}"
)
torch.testing.assert_close(unit_rms, torch.ones(2, 5))

# %% [markdown]
# PyTorch has `nn.RMSNorm`, and the library's `rms_norm(d)` is one with $\epsilon = 10^{-6}$,
# Hugging Face's Llama default. Exercise 5.3 built one too. All agree with ours once they share
# our gain:

# %%
torch_norm = nn.RMSNorm(d, eps=1e-6)
lib_norm = rms_norm(d)
hf_norm = modeling_llama.LlamaRMSNorm(d, eps=1e-6)
for m in (torch_norm, lib_norm, hf_norm):
    with torch.no_grad():
        m.weight.copy_(weight)
print("torch", torch.__version__.split("+")[0], "| transformers", transformers.__version__)
for name, m in (("nn.RMSNorm", torch_norm), ("rms_norm", lib_norm), ("LlamaRMSNorm", hf_norm)):
    with torch.no_grad():
        diff = (m(x) - y).abs().max().item()
    print(f"{name:>12} vs by hand: max |difference| {shown(diff)}")
    torch.testing.assert_close(m(x), y)
print(f"lib_norm: {lib_norm}")
hf_default_eps = modeling_llama.LlamaRMSNorm(d).variance_epsilon
print(
    f"Hugging Face's defaults: LlamaRMSNorm eps {hf_default_eps:g}, "
    f"LlamaConfig().rms_norm_eps {transformers.LlamaConfig().rms_norm_eps:g}"
)
assert lib_norm.eps == hf_default_eps == transformers.LlamaConfig().rms_norm_eps == 1e-6

# %% [markdown]
# What does the mean do? With its bias at zero, its starting value, LayerNorm is RMSNorm applied
# to the centred vector $x - \bar{x}$, with the same $\epsilon$. So LayerNorm cannot see a shift of
# all $d$ coordinates by the same number; RMSNorm can. And RMSNorm has half of LayerNorm's
# parameters.

# %%
layer_norm = nn.LayerNorm(d, eps=1e-5)
with torch.no_grad():
    layer_norm.weight.copy_(weight)
    centred = x - x.mean(dim=-1, keepdim=True)
    gap = (layer_norm(x) - rms_norm_by_hand(centred, weight, eps=1e-5)).abs().max().item()
    shift = 5.0
    ln_shift = (layer_norm(x + shift) - layer_norm(x)).abs().max().item()
    rms_shift = (torch_norm(x + shift) - torch_norm(x)).abs().max().item()
print(f"LayerNorm(x) vs RMSNorm(x - mean(x)): max |difference| {shown(gap, 1e-5)}")
print(f"every coordinate shifted by {shift}: LayerNorm changes by {shown(ln_shift, 1e-4)},")
print(f"{'':>39}RMSNorm by {rms_shift:.2f}")
n_ln, n_rms = count_parameters(layer_norm), count_parameters(torch_norm)
print(f"parameters at d = {d}: LayerNorm {n_ln} (gain and bias), RMSNorm {n_rms} (gain)")
assert gap < 1e-5 and ln_shift < 1e-4 and rms_shift > 0.1
assert n_ln == 2 * d and n_rms == d

# %% [markdown]
# So RMSNorm gives up the invariance to a common shift, and the bias. Whether the model still
# learns is a question for training: section 6 trains one with RMSNorm in every sub-layer.
#
# :::{dropdown} Going deeper: `nn.RMSNorm`'s own default epsilon
# `nn.RMSNorm(d)` without `eps` does not use $10^{-6}$. Its default, `eps=None`, means the
# machine epsilon of the input's dtype, about $1.2 \times 10^{-7}$ in float32. Llama's
# configurations set their own (`rms_norm_eps`). On vectors of ordinary size the choice hardly
# matters; on a vector whose mean square is close to $\epsilon$ it does. A model ported between
# two libraries must use the same value (chapter 19 measures it on a trained Llama).
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
default_norm, hf_eps_norm = nn.RMSNorm(d), nn.RMSNorm(d, eps=1e-6)  # both with gain 1
print(
    f"nn.RMSNorm(d).eps = {default_norm.eps}; torch.finfo(float32).eps = "
    f"{torch.finfo(torch.float32).eps:.3g}"
)
for scale in (1.0, 1e-3):
    v = torch.randn(4, d) * scale
    with torch.no_grad():
        rel = ((default_norm(v) - hf_eps_norm(v)).norm() / hf_eps_norm(v).norm()).item()
    print(f"inputs of RMS about {scale:g}: default eps vs 1e-6, relative gap {shown(rel, 1e-5)}")
    assert (rel < 1e-5) if scale == 1.0 else (rel > 0.1)
with torch.no_grad():  # on the small inputs: the default is the formula with finfo's eps
    machine = rms_norm_by_hand(v, torch.ones(d), eps=torch.finfo(torch.float32).eps)
    torch.testing.assert_close(default_norm(v), machine)
print("nn.RMSNorm(d) equals the formula with eps = torch.finfo(float32).eps")

# %% [markdown]
# ## 2. Rotary positions (RoPE)
#
# The book adds a sinusoidal code to each token, once, below the first layer. RoPE
# {cite}`su2021` adds nothing. Inside every self-attention, it rotates the queries and keys by
# their positions. A head's $d_k$ dimensions form $d_k/2$ pairs. At position $p$, pair $i$ turns
# by the angle $p\,\theta_i$, with $\theta_i = 10000^{-2i/d_k}$: fast for the first pairs, slow
# for the last.
#
# The RoFormer paper pairs neighbouring dimensions, $(0, 1), (2, 3), \dots$ By hand:


# %%
def rope_by_hand(x, positions, base=10000.0):
    """x [..., L, d_k]: rotate the pairs (0, 1), (2, 3), ... at position p by p * theta_i."""
    d_k = x.size(-1)
    theta = base ** (-torch.arange(0, d_k, 2, dtype=x.dtype) / d_k)  # [d_k / 2]
    angle = positions.to(x.dtype)[:, None] * theta  # [L, d_k / 2]
    cos, sin = angle.cos(), angle.sin()
    first, second = x[..., 0::2], x[..., 1::2]  # the two members of each pair
    out = torch.empty_like(x)
    out[..., 0::2] = first * cos - second * sin
    out[..., 1::2] = first * sin + second * cos
    return out


q = torch.randn(2, h, 6, d_k)  # [B, h, L, d_k]
pos = torch.arange(6)
q_rot = rope_by_hand(q, pos)
print("q       ", tuple(q.shape), "  [B, h, L, d_k]")
print("angles  ", tuple(rope_angles(pos, d_k).shape), "        [L, d_k / 2]: one per pair")
print("rotated ", tuple(q_rot.shape))
lib_rot = apply_rope(q, rope_angles(pos, d_k), layout="interleaved")
print(
    f"vs the library's apply_rope(layout='interleaved'): max |difference| "
    f"{shown((lib_rot - q_rot).abs().max().item())}"
)
norm_change = (q_rot.norm(dim=-1) - q.norm(dim=-1)).abs().max().item()
print(f"a rotation keeps each vector's length: max change {shown(norm_change, 1e-5)}")
torch.testing.assert_close(lib_rot, q_rot)
torch.testing.assert_close(q_rot[..., 0, :], q[..., 0, :])  # position 0: no rotation
assert norm_change < 1e-5

# %% [markdown]
# Why rotate? Turning a query by the angle $m\theta$ and a key by $n\theta$ leaves their dot
# product as if only the key had turned, by $(n - m)\theta$. So the score of a query at position
# $m$ and a key at position $n$ depends on the offset $m - n$, not on where the pair sits. The
# cell scores one query and one key at every pair of 32 positions, in float64. It then compares
# the scores that share an offset. With the sinusoidal code added instead, they differ.

# %%
q1, k1 = torch.randn(d_k, dtype=torch.float64), torch.randn(d_k, dtype=torch.float64)
P = 32
positions = torch.arange(P)
rot_q = rope_by_hand(q1.expand(P, d_k), positions)  # [P, d_k]: the query at each position
rot_k = rope_by_hand(k1.expand(P, d_k), positions)
rope_scores = rot_q @ rot_k.T  # [m, n]


def sinusoids(P, d_k):
    """The book's sinusoidal code, [P, d_k], in float64."""
    angle = positions[:, None].double() * 10000.0 ** (-torch.arange(0, d_k, 2).double() / d_k)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(-2)


pe = sinusoids(P, d_k)
added_scores = (q1 + pe) @ (k1 + pe).T  # the code added to the vectors instead
offset = positions[:, None] - positions[None, :]


def spread_by_offset(scores):
    """Largest (max - min) over the score pairs (m, n) that share an offset m - n."""
    return max(
        (scores[offset == o].max() - scores[offset == o].min()).item() for o in range(-P + 1, P)
    )


print(f"scores: {tuple(rope_scores.shape)}, one per pair (m, n); offsets {-P + 1} to {P - 1}")
rope_spread, added_spread = spread_by_offset(rope_scores), spread_by_offset(added_scores)
print(f"RoPE:            largest spread among scores of one offset: {shown(rope_spread, 1e-12)}")
print(f"added sinusoids: largest spread among scores of one offset: {added_spread:.2f}")
print(f"RoPE: scores range from {rope_scores.min():.2f} to {rope_scores.max():.2f} across offsets")
assert rope_spread < 1e-12
assert added_spread > 1.0 and rope_scores.max() - rope_scores.min() > 1.0

# %% jupyter={"source_hidden": true} tags=["figure", "hide-input", "opening-figure"]
fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=False)
for ax, scores, title in (
    (axes[0], rope_scores, "RoPE: one score per offset"),
    (axes[1], added_scores, "sinusoids added: the score depends on m and n"),
):
    for i, m_q in enumerate((0, 10, 20, 31)):  # the query at m_q against the keys at every n
        width = 4.0 - 1.1 * i  # the later curves drawn thinner, on top of the earlier ones
        ax.plot(offset[m_q], scores[m_q], "-", lw=width, alpha=0.8, label=f"query at m = {m_q}")
    ax.set(title=title, xlabel="offset m - n", ylabel="score q_m . k_n")
    ax.axvline(0, color="gray", lw=0.5)
axes[0].legend(fontsize=8)
fig.suptitle("Figure 18.1  One query and one key at 32 positions (d_k = 8)", fontsize=10)
plt.tight_layout()
plt.show()

# %% [markdown]
# With RoPE the four queries trace one curve: each offset has one score. With the code added,
# each query traces its own.
#
# ### Two layouts, one permutation apart
#
# Hugging Face's Llama pairs dimension $i$ with $i + d_k/2$ instead: the first half with the
# second. Its `rotate_half` returns $(-x_2, x_1)$ for the halves $(x_1, x_2)$. The library's
# `apply_rope(layout="half")` computes it that way; transformers' own `apply_rotary_pos_emb`
# agrees. The two layouts are different functions. But reorder the dimensions by
# `rope_permutation(d_k)`, $(0, 2, 4, 6, 1, 3, 5, 7)$, and the neighbours become halves:

# %%
angles = rope_angles(pos, d_k)  # [L, d_k / 2]
half = apply_rope(q, angles, layout="half")
cos = torch.cat([angles, angles], dim=-1).cos()  # Hugging Face's cos and sin, [L, d_k]
sin = torch.cat([angles, angles], dim=-1).sin()
hf_half, _ = modeling_llama.apply_rotary_pos_emb(q, q, cos[None], sin[None])  # [1, L, d_k]
perm = rope_permutation(d_k)
print("rope_permutation(8) =", perm.tolist())
print(
    f"half vs transformers' apply_rotary_pos_emb: max |difference| "
    f"{shown((half - hf_half).abs().max().item())}"
)
print(
    f"half vs interleaved, same input:            max |difference| "
    f"{(half - q_rot).abs().max().item():.2f}"
)
moved = apply_rope(q[..., perm], angles, layout="half")
print(
    f"half(x[perm]) vs interleaved(x)[perm]:      max |difference| "
    f"{shown((moved - q_rot[..., perm]).abs().max().item())}"
)
torch.testing.assert_close(half, hf_half)
torch.testing.assert_close(moved, q_rot[..., perm])
assert (half - q_rot).abs().max() > 0.5

# %% [markdown]
# So a model trained with one layout runs in the other once the query and key rows of each head
# are reordered. Forget the reordering and the model runs, with no error, on wrongly paired
# dimensions. The trained model uses the halves. Copy its weights as they are into a twin with
# `rope_layout="interleaved"`:

# %% tags=["nbval-ignore-output"]
src_test, tgt_test = test_set()


def twin(model, layout):
    """model's config with another rope_layout, untrained."""
    return Transformer.from_config(dataclasses.replace(model.config, rope_layout=layout)).eval()


naive_twin = twin(model, "interleaved")
naive_twin.load_state_dict(model.state_dict())
src_b, tgt_b = src_test[:1000], tgt_test[:1000]
with torch.no_grad():
    logits = model(src_b, tgt_b[:, :-1])
    naive_gap = (naive_twin(src_b, tgt_b[:, :-1]) - logits).abs().max().item()
naive_score = exact_match_with_interval(naive_twin, src_test, tgt_test)
print(f"the trained model's rope_layout: {model.config.rope_layout!r}; the twin's: 'interleaved'")
print(f"weights copied as they are: max |logit difference| {naive_gap:.1f} on 1,000 test sequences")
print(f"the twin's test exact match: {naive_score}")
assert model.config.rope_layout == "half" and naive_twin.config.rope_layout == "interleaved"
assert naive_gap > 1.0 and naive_score.exact_match < 0.05

# %% [markdown]
# The twin raises no error, yet it reverses fewer than 5 % of the test sequences. The fix: in
# every rotated attention, reorder each head's rows of $W_q$ and $W_k$, and of their biases.
# From halves to interleaved, the twin takes each head's rows in the order
# `rope_permutation(d_k).argsort()`, the inverse of the permutation above. Values and outputs
# stay as they are, and the cross-attention is not rotated.


# %%
def port_layout(model, layout):
    """A twin of model with rope_layout=layout computing the same function."""
    out = twin(model, layout)
    order = rope_permutation(model.config.d_k)
    if model.config.rope_layout == "half":  # half -> interleaved: the inverse order
        order = order.argsort()
    state = model.state_dict()
    for name, module in model.named_modules():
        if getattr(module, "rope", None) is None:
            continue
        for proj in ("W_q", "W_k"):
            for kind in ("weight", "bias"):
                key = f"{name}.{proj}.{kind}"
                t = state[key]
                rows = t.view(-1, model.config.d_k, *t.shape[1:])  # [heads, d_k, ...]
                state[key] = rows[:, order].reshape(t.shape)
    out.load_state_dict(state)
    return out


# %% tags=["nbval-ignore-output"]
fixed_twin = port_layout(model, "interleaved")
with torch.no_grad():
    fixed_gap = (fixed_twin(src_b, tgt_b[:, :-1]) - logits).abs().max().item()
print(
    f"rows reordered: max |logit difference| {fixed_gap:.1e} (logits up to "
    f"{logits.abs().max().item():.0f})"
)
assert fixed_gap < 1e-4

# %% [markdown]
# The reordered twin computes the same logits, up to float rounding. Chapter 19 meets the same
# fix when it copies a tiny Llama into Hugging Face's.
#
# ## 3. SwiGLU
#
# The book's feed-forward network is $W_2\,\operatorname{GELU}(W_1 x + b_1) + b_2$. SwiGLU
# {cite}`shazeer2020` adds a third matrix, a *gate*. One projection goes through SiLU,
# $z\,\sigma(z)$, and multiplies the other elementwise:
#
# $$
# \operatorname{SwiGLU}(x) = W_{\text{down}}\big(\operatorname{SiLU}(W_{\text{gate}}\,x) \odot
# W_{\text{up}}\,x\big).
# $$
#
# Where the gate is near zero, a hidden unit passes nothing, whatever $W_{\text{up}}x$ says.
# Three matrices of $d \times d_{ff}$ would cost half as much again as two. So the hidden width
# shrinks to $\tfrac{2}{3} d_{ff}$, here 85. Exercise 4.3 built one; here it is checked against
# Hugging Face's `LlamaMLP`.

# %%
hidden = swiglu_hidden(dff)
gate, up, down = (
    nn.Linear(d, hidden, bias=False),
    nn.Linear(d, hidden, bias=False),
    nn.Linear(hidden, d, bias=False),
)
x = torch.randn(2, 5, d)
with torch.no_grad():
    g, u = F.silu(gate(x)), up(x)
    ours = down(g * u)
print(
    f"x {tuple(x.shape)} -> silu(gate(x)) {tuple(g.shape)} * up(x) {tuple(u.shape)}"
    f" -> down {tuple(ours.shape)}"
)

lib_ffn = SwiGLU(d, hidden)
hf_config = transformers.LlamaConfig(hidden_size=d, intermediate_size=hidden, mlp_bias=False)
hf_mlp = modeling_llama.LlamaMLP(hf_config)
with torch.no_grad():
    for (a, b, c), m in (
        ((lib_ffn.gate, lib_ffn.up, lib_ffn.down), lib_ffn),
        ((hf_mlp.gate_proj, hf_mlp.up_proj, hf_mlp.down_proj), hf_mlp),
    ):
        a.weight.copy_(gate.weight), b.weight.copy_(up.weight), c.weight.copy_(down.weight)
        print(
            f"{type(m).__name__:>8} vs by hand: max |difference| "
            f"{shown((m(x) - ours).abs().max().item())}"
        )
        torch.testing.assert_close(m(x), ours)
print(f"LlamaConfig's default hidden_act: {hf_config.hidden_act!r}")
assert hf_config.hidden_act == "silu"

# %% [markdown]
# Count the parameters. The GELU network has two matrices and two biases. SwiGLU has three
# matrices and no bias, at two thirds of the width:

# %%
gelu_params = count_parameters(nn.Sequential(nn.Linear(d, dff), nn.Linear(dff, d)))
swiglu_params = count_parameters(lib_ffn)
print(f"hidden width: round(2 * {dff} / 3) = {hidden}")
print(f"GELU FFN   2 * {d} * {dff} + {dff} + {d} = {gelu_params:,}")
print(
    f"SwiGLU     3 * {d} * {hidden}            = {swiglu_params:,}"
    f"  ({swiglu_params / gelu_params:.1%} of the GELU network)"
)
assert gelu_params == 2 * d * dff + dff + d and swiglu_params == 3 * d * hidden
assert abs(swiglu_params / gelu_params - 1) < 0.03

# %% [markdown]
# ## 4. Grouped-query and multi-query attention
#
# In multi-head attention each head has its own keys and values. Grouped-query attention
# {cite}`ainslie2023` lets groups of query heads share one key/value head. Multi-query attention
# {cite}`shazeer2019` is the extreme: one key/value head for all. With 4 query heads and 2
# key/value heads, heads 0 and 1 share key/value head 0, heads 2 and 3 share head 1. Before the
# scores, each key/value head is repeated to match, `repeat_interleave` along the heads:

# %%
B, L, h_kv = 2, 6, 2
q = torch.randn(B, h, L, d_k)
k, v = torch.randn(B, h_kv, L, d_k), torch.randn(B, h_kv, L, d_k)
k_rep, v_rep = k.repeat_interleave(h // h_kv, dim=1), v.repeat_interleave(h // h_kv, dim=1)
print("q", tuple(q.shape), "| k, v", tuple(k.shape), "-> repeated", tuple(k_rep.shape))
print(
    "query head -> key/value head:",
    {i: next(j for j in range(h_kv) if torch.equal(k_rep[:, i], k[:, j])) for i in range(h)},
)
causal = torch.ones(L, L, dtype=torch.bool).triu(1)
scores = (q @ k_rep.transpose(-2, -1)) / d_k**0.5
ours = scores.masked_fill(causal, float("-inf")).softmax(-1) @ v_rep

sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
print(
    f"vs F.scaled_dot_product_attention(enable_gqa=True): max |difference| "
    f"{shown((sdpa - ours).abs().max().item())}"
)
for name, fn in (
    ("helpers repeat_kv", repeat_kv),
    ("transformers repeat_kv", modeling_llama.repeat_kv),
):
    assert torch.equal(fn(k, h // h_kv), k_rep), name
torch.testing.assert_close(sdpa, ours)

# %% [markdown]
# The easy slip is `k.repeat(1, 2, 1, 1)`. It tiles instead: heads 0 and 2 get key/value head 0.
# Shapes match and nothing fails, but neither `enable_gqa` nor transformers' `repeat_kv` pairs
# the heads that way:

# %%
k_tiled, v_tiled = k.repeat(1, h // h_kv, 1, 1), v.repeat(1, h // h_kv, 1, 1)
tiled = (q @ k_tiled.transpose(-2, -1) / d_k**0.5).masked_fill(causal, float("-inf"))
tiled = tiled.softmax(-1) @ v_tiled
print(
    f"tiled with repeat: max |difference| from enable_gqa {(tiled - sdpa).abs().max().item():.2f}"
)
print(
    f"repeat_interleave: max |difference| from enable_gqa {shown((ours - sdpa).abs().max().item())}"
)
assert (tiled - sdpa).abs().max() > 0.1

# %% [markdown]
# Why share? The KV cache of chapter 13 stores each key/value head at every decoded position. With
# `num_kv_heads` the library's caches hold only the key/value heads. The cell builds the book's
# model, untrained, with 4, 2 and 1 key/value heads. It decodes 1,000 validation sequences with
# chapter 13's preallocated cache, then counts the bytes the cache holds.

# %%
src_val, _ = make_reversal_dataset(1000, seed=BOOK_RECIPE.val_seed)
sizes = dict(d_model=d, num_heads=h, dff=dff, num_layers=cfg.num_layers, max_len=cfg.max_len)
cache_bytes = {}
for name, kv_heads in (("MHA", h), ("GQA", 2), ("MQA", 1)):
    torch.manual_seed(0)
    decoder = Transformer(VOCAB_SIZE, VOCAB_SIZE, **sizes, num_kv_heads=kv_heads).eval()
    caches = allocate_static_caches(decoder, src_val.size(0))
    greedy_decode_static(decoder, src_val, caches=caches)
    nbytes = {
        part: sum(c[f"{part}_{kv}"].nbytes for c in caches for kv in "kv")
        for part in ("self", "cross")
    }
    cache_bytes[name] = nbytes
    print(
        f"{name}: {kv_heads} key/value head(s), layer 0 self_k {tuple(caches[0]['self_k'].shape)}"
        f", cross_k {tuple(caches[0]['cross_k'].shape)}"
    )
print()
print(f"{'':>4} {'self-attention':>15} {'cross-attention':>16} {'total':>10}   (KiB)")
for name, nb in cache_bytes.items():
    print(
        f"{name:>4} {nb['self'] / 1024:15,.0f} {nb['cross'] / 1024:16,.0f}"
        f" {(nb['self'] + nb['cross']) / 1024:10,.0f}"
    )
per_position = cfg.num_layers * 2 * d_k * 4  # layers, K and V, d_k floats of 4 bytes
n_pos = src_val.size(0) * cfg.max_len
assert cache_bytes["MHA"]["self"] == n_pos * h * per_position
assert (
    cache_bytes["GQA"]["self"] * 2 == cache_bytes["MHA"]["self"] == cache_bytes["MQA"]["self"] * 4
)
assert cache_bytes["MHA"]["cross"] == cache_bytes["GQA"]["cross"] == cache_bytes["MQA"]["cross"]

# %% jupyter={"source_hidden": true} tags=["figure", "hide-input"]
fig, ax = plt.subplots(figsize=(6, 3))
names = list(cache_bytes)
self_kib = [cache_bytes[n]["self"] / 1024 for n in names]
cross_kib = [cache_bytes[n]["cross"] / 1024 for n in names]
ax.barh(names, self_kib, label="self-attention keys and values")
ax.barh(names, cross_kib, left=self_kib, label="cross-attention keys and values")
ax.invert_yaxis()
ax.set(xlabel="KiB for 1,000 sequences of 14 positions")
ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2)
fig.suptitle("Figure 18.2  The decoder's KV cache with 4, 2 and 1 key/value heads", fontsize=10)
plt.tight_layout()
plt.show()

# %% [markdown]
# The self-attention half shrinks with the key/value heads: 4 to 2 halves it, 4 to 1 quarters it.
# The cross-attention half stays whole: the option leaves cross-attention with all its heads. A
# decoder-only model such as Llama has no cross-attention, so there the whole cache shrinks.
#
# :::{dropdown} Going deeper: RoPE and grouped heads inside the KV cache
# With RoPE the cache stores each key already rotated, at its own position. A new query is
# rotated at the position it sits at, the `start_pos` the decoder passes on. The cell decodes
# 100 test sources to 14 tokens with the trained model. It then feeds the same tokens to the
# decoder one at a time, with a cache, and compares the logits with those of one full pass.
# Last, it recomputes layer 0's keys, rotates them at their positions, and compares them with the
# keys the cache holds.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
src_c = src_test[:100]
with torch.no_grad():
    tokens = greedy_decode(model, src_c, stop_at_eos=False)  # [100, 14]
    memory, src_mask = model.encode(src_c)
    full_pass, _ = model.decode(tokens[:, :-1], memory, src_mask, need_weights=False)
    kv_caches, step_logits = [{} for _ in model.decoder.layers], []
    for step in range(tokens.size(1) - 1):
        h_step, _ = model.decoder(
            tokens[:, step : step + 1],
            memory,
            make_padding_mask(tokens[:, : step + 1]),
            src_mask,
            need_weights=False,
            caches=kv_caches,
            start_pos=step,
        )
        step_logits.append(model.out_proj(h_step[:, -1]))
one_at_a_time = torch.stack(step_logits, dim=1)  # [100, 13, V]
cache_gap = (one_at_a_time - full_pass).abs().max().item()
print(
    f"layer 0's cache: self_k {tuple(kv_caches[0]['self_k'].shape)} (2 key/value heads),"
    f" cross_k {tuple(kv_caches[0]['cross_k'].shape)}"
)
print(
    f"logits {tuple(full_pass.shape)}: one at a time with the cache vs one full pass, "
    f"max |difference| {shown(cache_gap, 1e-4)}"
)
torch.testing.assert_close(one_at_a_time, full_pass, atol=1e-4, rtol=1e-4)

layer0 = model.decoder.layers[0]
with torch.no_grad():
    a0 = layer0.ln1(model.decoder.embed(tokens[:, :-1]))  # what layer 0's self-attention sees
    keys = layer0.self_mha.split_heads(layer0.self_mha.W_k(a0))  # [100, 2, 13, 8], unrotated
turned = apply_rope(keys, rope_angles(torch.arange(keys.size(2)), d_k))
cached = kv_caches[0]["self_k"]
print(
    f"layer 0's cached keys vs its keys rotated at their positions: max |difference| "
    f"{shown((cached - turned).abs().max().item())}"
)
torch.testing.assert_close(cached, turned)
assert (cached - keys).abs().max() > 0.1  # and they are not the unrotated keys

# %% [markdown]
# ## 5. One option each
#
# Each block is an option of the library's `Transformer`; everything else stays as it was. The
# cell builds the book's model once per option and counts its parameters. The differences are
# the pieces above: 12 norms lose their bias, 4 feed-forward networks shrink, and the 4
# self-attentions lose key/value heads. RoPE, like the sinusoids, has no parameters.

# %%
variants = {
    "the book's model": {},
    "RMSNorm": dict(norm="rms"),
    "SwiGLU": dict(ffn="swiglu"),
    "RoPE": dict(positions="rope"),
    "GQA, 2 kv heads": dict(num_kv_heads=2),
    "MQA, 1 kv head": dict(num_kv_heads=1),
    "all four": TODAY,
}
counts = {}
src_s, tgt_s = src_val[:3], src_val[:3, :9]
for name, options in variants.items():
    torch.manual_seed(0)
    m = Transformer(VOCAB_SIZE, VOCAB_SIZE, **sizes, **options).eval()
    counts[name] = count_parameters(m)
    with torch.no_grad():
        shape = tuple(m(src_s, tgt_s).shape)
    chosen = ", ".join(f"{k}={v!r}" for k, v in options.items()) or "(defaults)"
    print(f"{name:>16}: {counts[name]:6,d} parameters, logits {shape}   {chosen}")

n_norms = cfg.num_layers * (2 + 3) + 2  # 2 per encoder layer, 3 per decoder layer, 2 final
n_ffn = n_self = 2 * cfg.num_layers  # one per layer of each stack
base = counts["the book's model"]


def kv_saving(kv_heads):
    return n_self * 2 * (h - kv_heads) * d_k * (d + 1)  # W_k and W_v rows, with their biases


assert base - counts["RMSNorm"] == n_norms * d
assert base - counts["SwiGLU"] == n_ffn * (gelu_params - swiglu_params)
assert counts["RoPE"] == base
assert base - counts["GQA, 2 kv heads"] == kv_saving(2)
assert base - counts["MQA, 1 kv head"] == kv_saving(1)
assert base - counts["all four"] == n_norms * d + n_ffn * (gelu_params - swiglu_params) + kv_saving(
    2
)
assert counts["all four"] == count_parameters(model)
print(
    f"\n{n_norms} norms, {n_ffn} feed-forward networks, {n_self} self-attentions: "
    f"all four save {base - counts['all four']:,} of {base:,}"
)

# %% [markdown]
# ALiBi (exercise 3.3) and a learned position table are options too: `positions="alibi"`,
# `positions="learned"`.
#
# ## 6. All four together, trained
#
# The model loaded at the top was trained with the book's recipe, unchanged: the same data,
# schedule and stopping rule. The cell scores it on the book's 10,000 test sequences.

# %% tags=["nbval-ignore-output"]
history = today.history
test_score = exact_match_with_interval(model, src_test, tgt_test)
print(
    f"stopped at step {history['eval_step'][-1]} of at most {BOOK_RECIPE.max_steps}, "
    f"validation exact match {history['exact_match'][-1]:.1%}"
)
print(f"test exact match: {test_score}")
assert history["exact_match"][-1] >= BOOK_RECIPE.target_exact_match
assert test_score.n == 10_000 and test_score.low > 0.98

# %% [markdown]
# The model with all four blocks learns the task with the book's recipe. Trained on other CPU
# kernels, the same recipe gives another model, so your score may differ slightly. One run says
# nothing about which block helps. Two Experiments pages train each block with several seeds and
# compare: [today's blocks, one at a time](../appendix/experiment_todays_blocks.ipynb) and
# [length generalisation](../appendix/experiment_length_generalisation.ipynb) for sinusoidal,
# learned, RoPE and ALiBi positions.
#
# ## Summary
#
# - RMSNorm divides by the root mean square and keeps a gain: LayerNorm without the centring and
#   the bias. It equals `nn.RMSNorm` and Hugging Face's `LlamaRMSNorm` at the same $\epsilon$,
#   and has $d$ parameters where LayerNorm has $2d$.
# - RoPE rotates each pair of query and key dimensions by an angle proportional to the position.
#   A score then depends only on the offset $m - n$: scores of one offset agreed to $10^{-12}$.
# - The interleaved and the split-halves layouts are one permutation apart. A model copied across
#   layouts without reordering its query and key rows runs silently and is wrong.
# - SwiGLU gates one projection with the SiLU of another. At width $\tfrac{2}{3} d_{ff}$ it has
#   about the parameters of the GELU network (8,160 against 8,352).
# - Grouped-query attention repeats each key/value head with `repeat_interleave`, as
#   `enable_gqa=True` does; tiling pairs the heads wrongly. The decoder's self-attention cache
#   shrinks in proportion to the key/value heads.
# - Each block is one option of `Transformer`; all four together learn the reversal task.
#
# ## Exercises
#
# ### Exercise 18.1 (predict, then run): which offsets score the same
#
# Take the query and key of section 2. Predict which of these RoPE scores are equal: the query at
# position 5 and the key at 2, the query at 105 and the key at 102, the query at 2 and the key
# at 5. Then run the solution.

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
# Solution to exercise 18.1
def rope_score(m, n):
    qm = rope_by_hand(q1[None], torch.tensor([m]))[0]
    kn = rope_by_hand(k1[None], torch.tensor([n]))[0]
    return (qm @ kn).item()


s_5_2, s_105_102, s_2_5 = rope_score(5, 2), rope_score(105, 102), rope_score(2, 5)
print(f"(5, 2): {s_5_2:.6f}   (105, 102): {s_105_102:.6f}   (2, 5): {s_2_5:.6f}")
assert abs(s_5_2 - s_105_102) < 1e-9 and abs(s_5_2 - s_2_5) > 1e-3

# %% [markdown]
# :::{dropdown} Answer to exercise 18.1
# The first two are equal: both have the offset $+3$. The third has the offset $-3$. A rotation
# by $-3\theta$ is not a rotation by $+3\theta$, so its score differs: RoPE tells a key three
# positions back from a key three positions ahead.
# :::
#
# ### Exercise 18.2 (implement): RoPE in Hugging Face's layout
#
# Write `rope_halves(x, start_pos=0)` for `x` of shape `[B, h, L, d_k]`, as Hugging Face's Llama
# does. Row $\ell$ sits at position $p = $ `start_pos` $+ \ell$. There each pair
# $(x_i, x_{i + d_k/2})$ turns by the angle $p\,\theta_i$, $\theta_i = 10000^{-2i/d_k}$, to
# $(x_i \cos - x_{i + d_k/2} \sin,\; x_{i + d_k/2} \cos + x_i \sin)$: that is
# `x * cos + rotate_half(x) * sin`. Check it with
# `check_rope(rope_halves)`. It names the slip it recognises: the interleaved layout, a turn the
# wrong way, frequencies over the wrong exponent, or positions that ignore `start_pos`.

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 18.2
from helpers.exercises import check_rope


def rope_halves(x, start_pos=0):
    d_k, L = x.size(-1), x.size(-2)
    theta = 10000.0 ** (-torch.arange(0, d_k, 2, dtype=torch.float32) / d_k)
    angle = torch.arange(start_pos, start_pos + L, dtype=torch.float32)[:, None] * theta
    angle = torch.cat([angle, angle], dim=-1)  # [L, d_k]: pair i uses angle i twice
    x1, x2 = x[..., : d_k // 2], x[..., d_k // 2 :]
    return x * angle.cos() + torch.cat([-x2, x1], dim=-1) * angle.sin()


check_rope(rope_halves)

# %% [markdown]
# ### Exercise 18.3 (implement): grouped-query attention
#
# Write `gqa_attention(q, k, v, causal=False)` with `q` of shape `[B, h, Lq, d_k]` and `k`, `v`
# of shape `[B, h_kv, Lk, d_k]`, where `h_kv` divides `h`. Query head $i$ uses key/value head
# $\lfloor i / (h / h_{kv}) \rfloor$. With `causal=True`, query $i$ sees keys $0..i$ (here
# $L_q = L_k$). It returns $\operatorname{softmax}(q k^\top / \sqrt{d_k})\, v$ per query head, of
# shape `[B, h, Lq, d_k]`. Do not call `enable_gqa`. `check_gqa_attention(gqa_attention)`
# compares it with `F.scaled_dot_product_attention(..., enable_gqa=True)` on grouped,
# multi-query and full heads.

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 18.3
from helpers.exercises import check_gqa_attention


def gqa_attention(q, k, v, causal=False):
    rep = q.size(1) // k.size(1)
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5
    if causal:
        blocked = torch.ones(q.size(2), k.size(2), dtype=torch.bool).triu(1)
        scores = scores.masked_fill(blocked, float("-inf"))
    return scores.softmax(dim=-1) @ v


check_gqa_attention(gqa_attention)
