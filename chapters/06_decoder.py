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
# # 6. The decoder
#
# We build the decoder layer: masked self-attention, cross-attention and the feed-forward
# network. Then we stack layers into the decoder and check it against `helpers`.
# The picture shows which keys each target position may read in each sub-layer.
#
# ![What each decoder sub-layer may read](figures/06_decoder.png)

# %% [markdown] tags=["run-time"]
# **Run time:** about 5 s.

# %% [markdown]
# The decoder writes the reversed sequence. A decoder layer has one more sub-layer than an
# encoder layer (chapter 05). Each of the three sits behind a LayerNorm inside a residual
# connection (Pre-Norm):
#
# 1. **masked self-attention**: each target position looks at the target tokens up to
#    and including itself, never at later ones;
# 2. **cross-attention**: each target position looks at the *source*. The queries come
#    from the decoder, the keys and values from the encoder's output, the `memory`;
# 3. the **feed-forward network** (chapter 04).
#
# This is the decoder layer of Vaswani et al. {cite}`vaswani2017`, in the Pre-Norm order of
# chapter 05. We build the two attentions shape by shape and check that no position sees its
# future. Then we assemble the layer and the stack, and compare them with
# `helpers.DecoderLayer` and `helpers.Decoder`.

# %%
import dataclasses
import math

import matplotlib.pyplot as plt
import torch
import torch.nn as nn

import helpers
from helpers import (
    VOCAB_SIZE,
    describe,
    make_causal_mask,
    make_padding_mask,
    make_reversal_dataset,
)
from helpers.training.train import build_model

_ = torch.manual_seed(0)

# %% [markdown]
# ## The inputs: memory and the shifted target
#
# Three reversal pairs. The encoder (chapter 05; here the finished `helpers.Encoder`,
# untrained) turns the sources into `memory` `[B, Ls, d]`. The decoder's input is the target
# without its last column: `<bos>`, the reversed digits, then `<eos>` and padding. At every
# position it must predict the *next* target token. That is why training feeds it the target
# shifted by one ("teacher forcing" {cite}`williams1989`, chapter 10). Here the target length
# is $L_t = 13$ and the source length $L_s = 14$: the two need not match.

# %%
d, num_heads, dff = 128, 4, 512
src, tgt = make_reversal_dataset(3, seed=0)
tgt_in = tgt[:, :-1]
src_mask = make_padding_mask(src)  # [B, 1, 1, Ls]: True on source padding

encoder = helpers.Encoder(VOCAB_SIZE, d, num_heads, dff, num_layers=2, max_len=64).eval()
tgt_embed = helpers.TokenAndPosition(VOCAB_SIZE, d, max_len=64).eval()  # the decoder's table
with torch.no_grad():
    memory = encoder(src, src_mask)
    y = tgt_embed(tgt_in)

print("source:      ", describe(src[0]))
print("decoder input:", describe(tgt_in[0]))
print("src", tuple(src.shape), " memory", tuple(memory.shape), "  [B, Ls, d]")
print("tgt_in", tuple(tgt_in.shape), " y", tuple(y.shape), "  [B, Lt, d]")
B, Ls, Lt = src.size(0), src.size(1), tgt_in.size(1)

# %% [markdown]
# ## Masked self-attention
#
# At training time the decoder sees the whole target at once. But at position $i$ it must
# predict token $i+1$, so it may not look at positions after $i$. Otherwise it could read the
# very token it must predict, a token that does not exist yet at inference time. The **causal
# mask** blocks every key $j > i$: True above the diagonal. Here it is for six positions
# (`x` = blocked, `.` = may attend):

# %%
causal6 = make_causal_mask(6)
print("causal mask", tuple(causal6.shape), "  [1, 1, L, L]; row = query i, column = key j")
for i, row in enumerate(causal6[0, 0]):
    print(f"  query {i}: " + " ".join("x" if blocked else "." for blocked in row))
pos = torch.arange(6)
assert torch.equal(
    causal6[0, 0], pos[None, :] > pos[:, None]
)  # blocked exactly where key j > query i

# %% [markdown]
# The target batch is padded too. So the self-attention mask blocks a key if it is in the
# future **or** is padding. The two masks broadcast to `[B, 1, Lt, Lt]` (chapter 07 takes
# combining masks apart):

# %%
causal = make_causal_mask(Lt)
tgt_pad = make_padding_mask(tgt_in)
self_mask = causal | tgt_pad
print(
    "causal", tuple(causal.shape), "| padding", tuple(tgt_pad.shape), "->", tuple(self_mask.shape)
)

self_mha = helpers.MultiHeadAttention(d, num_heads).eval()
with torch.no_grad():
    sa_out, sa_w = self_mha(y, y, y, attn_mask=self_mask)
print("self-attention out", tuple(sa_out.shape), " weights", tuple(sa_w.shape), " [B, h, Lt, Lt]")
print("sequence 0, head 0, first 6 queries x first 6 keys:")
print(sa_w[0, 0, :6, :6].numpy().round(2))
above = sa_w.triu(1).abs().max().item()
row_sums = sa_w.sum(-1)
print(
    f"largest weight above the diagonal: {above}; row sums between "
    f"{row_sums.min().item():.6f} and {row_sums.max().item():.6f}"
)
assert above == 0  # nothing above the diagonal, in any sequence or head
torch.testing.assert_close(row_sums, torch.ones(B, num_heads, Lt))

# %% [markdown]
# Every weight above the diagonal is zero, in all sequences and heads. Every row still sums
# to 1: query 0 (`<bos>`) can only attend to itself.
#
# The property that matters: **the output at position $i$ does not change when any token
# after $i$ changes.** We replace every token after position $k = 4$ with random digits and
# compare the outputs. Without the causal mask, the earlier positions change too: that is
# the "leak" the mask prevents.

# %%
k = 4
g = torch.Generator().manual_seed(1)
tgt_changed = tgt_in.clone()
tgt_changed[:, k + 1 :] = torch.randint(3, 13, (B, Lt - k - 1), generator=g)
with torch.no_grad():
    y_changed = tgt_embed(tgt_changed)
    masked_a, _ = self_mha(y, y, y, attn_mask=causal)
    masked_b, _ = self_mha(y_changed, y_changed, y_changed, attn_mask=causal)
    open_a, _ = self_mha(y, y, y)
    open_b, _ = self_mha(y_changed, y_changed, y_changed)


def max_change(a, b):
    return (a - b).abs().max().item()


def small(v):
    """A float-rounding-sized difference, printed the same on every CPU."""
    return "< 1e-5" if v < 1e-5 else f"{v:.1e}"


print("changed positions", list(range(k + 1, Lt)), "of", describe(tgt_changed[0]))
early_masked = max_change(masked_a[:, : k + 1], masked_b[:, : k + 1])
late_masked = max_change(masked_a[:, k + 1 :], masked_b[:, k + 1 :])
early_open = max_change(open_a[:, : k + 1], open_b[:, : k + 1])
print(
    f"with the causal mask:    max |change| at positions 0..{k}: {small(early_masked)},"
    f" at positions {k + 1}..: {late_masked:.2f}"
)
print(f"without the causal mask: max |change| at positions 0..{k}: {early_open:.2f}")
assert early_masked < 1e-6 and late_masked > 1e-2 and early_open > 1e-2

# %% [markdown]
# ## Cross-attention, step by step
#
# Cross-attention is ordinary multi-head attention with two different inputs. The queries
# are projected from the decoder's stream `[B, Lt, d]`, the keys and values from the encoder's
# memory `[B, Ls, d]`. Follow the shapes through the module's own weights:

# %%
cross_mha = helpers.MultiHeadAttention(d, num_heads).eval()
h, d_k = num_heads, d // num_heads
with torch.no_grad():
    Q = cross_mha.W_q(y)
    print("Q = W_q(decoder)      ", tuple(Q.shape), "  [B, Lt, d]")
    K, V = cross_mha.W_k(memory), cross_mha.W_v(memory)
    print("K = W_k(memory), V    ", tuple(K.shape), "  [B, Ls, d]")
    Q = Q.view(B, Lt, h, d_k).transpose(1, 2)
    K = K.view(B, Ls, h, d_k).transpose(1, 2)
    V = V.view(B, Ls, h, d_k).transpose(1, 2)
    print("split heads: Q        ", tuple(Q.shape), "  [B, h, Lt, d_k]")
    print("             K, V     ", tuple(K.shape), "  [B, h, Ls, d_k]")
    scores = Q @ K.transpose(-2, -1) / math.sqrt(d_k)
    print("scores = Q K^T/sqrt(dk)", tuple(scores.shape), "  [B, h, Lt, Ls]")
    print("source padding mask   ", tuple(src_mask.shape), "  [B, 1, 1, Ls], broadcast")
    scores = scores.masked_fill(src_mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)
    print("weights               ", tuple(weights.shape), "  [B, h, Lt, Ls]: a row per target")
    ctx = weights @ V
    print("weights @ V           ", tuple(ctx.shape), "  [B, h, Lt, d_k]: Ls is summed away")
    ctx = ctx.transpose(1, 2).reshape(B, Lt, d)
    print("merge heads           ", tuple(ctx.shape), "  [B, Lt, d]")
    cross_out = cross_mha.W_o(ctx)
    print("W_o                   ", tuple(cross_out.shape), "  [B, Lt, d]: the decoder's length")

    out_mod, w_mod = cross_mha(y, memory, memory, attn_mask=src_mask)
torch.testing.assert_close(out_mod, cross_out)
torch.testing.assert_close(w_mod, weights)
assert (weights[src_mask.expand_as(weights)] == 0).all()  # no weight on source padding
torch.testing.assert_close(weights.sum(-1), torch.ones(B, h, Lt))
print("\nmodule call cross_mha(q=decoder, k=memory, v=memory) gives the same output and weights")

# %% [markdown]
# The source length $L_s$ appears in the keys, the values and the last dimension of the
# weights. Then it disappears in the weighted sum. The output has one row per *query*, so it
# has the decoder's length and can be added to the decoder's residual stream. Each row of
# weights is a distribution over the real source tokens, with no weight on source padding.
# Which source position each target position reads is what the heatmaps at the end of the
# book show for a trained model.
#
# Cross-attention takes only the **source padding mask**. There is nothing causal about it.
# The whole source is known before the decoder writes its first token, and every target
# position may read all of it. (Chapter 07 shows what goes wrong when the causal mask is
# passed here by mistake.) So changing a real source position (here the memory at position 0)
# changes the output at *every* target position. Changing the memory at padded source
# positions changes nothing:

# %%
with torch.no_grad():
    mem_real = memory.clone()
    mem_real[:, 0] += 1.0  # position 0 is a real digit in every sequence
    mem_pad = memory.clone()
    mem_pad[src_mask[:, 0, 0]] = 99.0  # overwrite every padded source position
    out_real, _ = cross_mha(y, mem_real, mem_real, attn_mask=src_mask)
    out_pad, _ = cross_mha(y, mem_pad, mem_pad, attn_mask=src_mask)
change_real = (out_real - out_mod).abs().amax(-1)  # [B, Lt]: how much each target position moved
change_pad = (out_pad - out_mod).abs().max().item()
print(
    f"source position 0 changed: smallest change over the {B * Lt} target positions "
    f"{change_real.min().item():.3f}"
)
print(f"padded source positions set to 99: largest change of the output {small(change_pad)}")
assert change_real.min() > 1e-4 and change_pad < 1e-6

# %% [markdown]
# Figure 6.1 puts the three sub-layers side by side for the shortest sequence of the batch.
# Each row is a target position; blue cells are the keys it may read. Self-attention reads the
# target, up to itself and never `<pad>`. Cross-attention reads every real source token. The
# feed-forward network reads nothing but the position's own vector.

# %% jupyter={"source_hidden": true} tags=["figure", "hide-input", "opening-figure"]
b = int((~src_mask[:, 0, 0]).sum(-1).argmin())  # the sequence with the shortest source
t_names, s_names = describe(tgt_in[b]).split(), describe(src[b]).split()
panels = [
    ("1. masked self-attention\nkeys: the target", self_mask[b, 0], t_names),
    ("2. cross-attention\nkeys: the source (memory)", src_mask[b, 0].expand(Lt, Ls), s_names),
    ("3. feed-forward\neach position alone", ~torch.eye(Lt, dtype=torch.bool), t_names),
]
fig, axes = plt.subplots(
    1, 3, figsize=(12, 4.6), gridspec_kw={"width_ratios": [Lt, Ls, Lt]}, layout="constrained"
)
for ax, (title, blocked, k_names) in zip(axes, panels):
    ax.imshow((~blocked).int(), cmap="Blues", vmin=0, vmax=1.3)
    ax.set_title(title, fontsize=10)
    ax.set_xticks(range(len(k_names)), k_names, rotation=90, fontsize=7)
    ax.set_yticks(range(Lt), t_names, fontsize=7)
    ax.set_xlabel("key (what is read)")
axes[0].set_ylabel("query: target position")
fig.suptitle("Figure 6.1: what a decoder position may read (blue) in each sub-layer", fontsize=11)
plt.show()

# %% [markdown]
# ## The decoder layer: three sub-layers, Pre-Norm
#
# Each sub-layer reads a LayerNorm of the stream and adds its result back:
#
# $$
# \begin{aligned}
# x &\leftarrow x + \operatorname{Dropout}\big(\operatorname{SelfAttn}(\operatorname{LN}_1(x);\
#   \text{causal} \lor \text{pad}_{t})\big) \\
# x &\leftarrow x + \operatorname{Dropout}\big(\operatorname{CrossAttn}(q = \operatorname{LN}_2(x),\
#   k = v = \text{memory};\ \text{pad}_{s})\big) \\
# x &\leftarrow x + \operatorname{FFN}\big(\operatorname{LN}_3(x)\big)
# \end{aligned}
# $$
#
# The memory is *not* normalised again inside the layer. The encoder's final LayerNorm
# (chapter 05) already did that once. The layer returns the cross-attention weights along with
# its output. The attribute names are those of `helpers.DecoderLayer`.


# %%
class DecoderLayerByHand(nn.Module):
    def __init__(self, d_model, num_heads, dff, dropout=0.1):
        super().__init__()
        self.ln1, self.ln2, self.ln3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.self_mha = helpers.MultiHeadAttention(d_model, num_heads, dropout)
        self.cross_mha = helpers.MultiHeadAttention(d_model, num_heads, dropout)
        self.ffn = helpers.FeedForward(d_model, dff, dropout)
        self.drop1, self.drop2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x, memory, self_mask, cross_mask, need_weights=True):
        h = self.ln1(x)  # 1. masked self-attention
        a, _ = self.self_mha(h, h, h, attn_mask=self_mask, need_weights=False)
        x = x + self.drop1(a)
        h = self.ln2(x)  # 2. cross-attention: Q from x, K/V from memory
        a, cross_w = self.cross_mha(
            h, memory, memory, attn_mask=cross_mask, need_weights=need_weights
        )
        x = x + self.drop2(a)
        x = x + self.ffn(self.ln3(x))  # 3. feed-forward
        return x, cross_w


torch.manual_seed(0)
layer = DecoderLayerByHand(d, num_heads, dff).eval()
with torch.no_grad():
    x1 = y + layer.self_mha(layer.ln1(y), layer.ln1(y), layer.ln1(y), attn_mask=self_mask)[0]
    print("after masked self-attention", tuple(x1.shape))
    a, w = layer.cross_mha(layer.ln2(x1), memory, memory, attn_mask=src_mask)
    x2 = x1 + a
    print("after cross-attention      ", tuple(x2.shape), "  weights", tuple(w.shape))
    x3 = x2 + layer.ffn(layer.ln3(x2))
    print("after the feed-forward     ", tuple(x3.shape))
    out, cross_w = layer(y, memory, self_mask, src_mask)
torch.testing.assert_close(out, x3)
torch.testing.assert_close(cross_w, w)
assert out.shape == y.shape and cross_w.shape == (B, num_heads, Lt, Ls)

# %% [markdown]
# ### $L_t \ne L_s$, and the prefix property
#
# Nothing in the layer ties the target length to the source length. We run it with a 5-token
# target prefix against the 14-position memory. Then we run the full target against a shorter
# source batch (sources of at most 6 digits, padded to width 8):

# %%
short_src, _ = make_reversal_dataset(B, seed=2, max_len=6)
short_mask = make_padding_mask(short_src)
with torch.no_grad():
    short_memory = encoder(short_src, short_mask)
    cases = {
        "5-token prefix vs Ls = 14": (y[:, :5], memory, src_mask),
        "Lt = 13 vs short source  ": (y, short_memory, short_mask),
    }
    for name, (x_in, mem, mmask) in cases.items():
        t_len = x_in.size(1)
        smask = make_causal_mask(t_len) | make_padding_mask(tgt_in[:, :t_len])
        o, w_c = layer(x_in, mem, smask, mmask)
        print(
            f"{name}: x {tuple(x_in.shape)}, memory {tuple(mem.shape)} -> out {tuple(o.shape)},"
            f" cross weights {tuple(w_c.shape)}"
        )
        assert o.shape == x_in.shape and w_c.shape == (B, num_heads, t_len, mem.size(1))
        if t_len == 5:
            prefix_out, prefix_w = o, w_c

d_out = max_change(prefix_out, out[:, :5])
d_w = max_change(prefix_w, cross_w[:, :, :5])
print(
    f"\nthe layer on the first 5 target tokens vs the first 5 rows of the layer on all 13:"
    f" max |diff| {small(d_out)} (output), {small(d_w)} (cross weights)"
)
torch.testing.assert_close(prefix_out, out[:, :5])
torch.testing.assert_close(prefix_w, cross_w[:, :, :5])

# %% [markdown]
# The last check is the causal property seen from the other side. The layer's output for the
# first 5 positions is the same whether or not the later tokens exist at all. So are the
# cross-attention weights, up to float rounding. That lets greedy decoding (chapter 11) run
# the decoder on the tokens produced so far, one step at a time. It gets what training
# computed for those positions.
#
# ## The decoder stack: collecting the cross-attention weights
#
# The decoder is the target embedding, $N$ layers and a final LayerNorm, like the encoder. It
# returns the final hidden states *and* a list of cross-attention weights, one
# `[B, h, Lt, Ls]` tensor per layer. The heatmap chapter plots them.


# %%
class DecoderByHand(nn.Module):
    def __init__(self, vocab_size, d_model, num_heads, dff, num_layers, max_len, dropout=0.1):
        super().__init__()
        self.embed = helpers.TokenAndPosition(vocab_size, d_model, max_len, dropout)
        self.layers = nn.ModuleList(
            DecoderLayerByHand(d_model, num_heads, dff, dropout) for _ in range(num_layers)
        )
        self.ln_final = nn.LayerNorm(d_model)  # Pre-Norm: normalise the stream once, at the exit

    def forward(self, tgt, memory, self_mask, cross_mask, need_weights=True):
        x = self.embed(tgt)
        cross_weights = []
        for layer in self.layers:
            x, w = layer(x, memory, self_mask, cross_mask, need_weights=need_weights)
            cross_weights.append(w)
        return self.ln_final(x), cross_weights


torch.manual_seed(0)
decoder = DecoderByHand(VOCAB_SIZE, d, num_heads, dff, num_layers=2, max_len=64).eval()
with torch.no_grad():
    hidden, cross_list = decoder(tgt_in, memory, self_mask, src_mask)
print(
    "tgt_in", tuple(tgt_in.shape), "+ memory", tuple(memory.shape), "-> hidden", tuple(hidden.shape)
)
print(
    "cross-attention weights:",
    type(cross_list).__name__,
    "of",
    len(cross_list),
    [tuple(w.shape) for w in cross_list],
)
assert len(cross_list) == 2 and all(w.shape == (B, num_heads, Lt, Ls) for w in cross_list)
for w in cross_list:
    torch.testing.assert_close(w.sum(-1), torch.ones(B, num_heads, Lt))
    assert (w[src_mask.expand_as(w)] == 0).all()

# %% [markdown]
# :::{dropdown} Going deeper: how flat are untrained cross-attention rows?
# The decoder above is untrained, and so is the model `helpers.train_reversal` starts from (its
# `build_model`, with the Xavier initialisation of chapter 07). The cell below measures how
# spread out cross-attention is there. For each row it takes the largest weight, averages over
# the rows, and divides by the uniform value $1/n$, where $n$ is the number of real source
# tokens. A row that read one token alone would score $n$. It uses five seeds, both decoder
# layers, the size the book trains ($d = 32$, `BOOK_RECIPE`) and the size of
# [the reference chapter](intro.md#the-reference-chapter) ($d = 128$, `SEED_RECIPE`).
#
# These averages are 1.8 to 3.2 times uniform, far below $n$: an untrained decoder reads a
# blend of many source tokens. Chapter 21, the cross-attention heatmaps, measures what training
# does to these rows.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
def largest_over_uniform(model):
    """Mean largest cross-attention weight of a row / uniform weight: one value per layer and
    sequence."""
    with torch.no_grad():
        mem, mask = model.encode(src)
        _, weights = model.decode(tgt_in, mem, mask)
    n_real = (~mask[:, 0, 0]).sum(-1)
    return torch.stack([w.amax(-1).mean((1, 2)) * n_real for w in weights])  # [layers, B]


xavier_ratios = {}
for name, recipe in (
    ("d = 128 (SEED_RECIPE)", helpers.SEED_RECIPE),
    ("d = 32 (BOOK_RECIPE)", helpers.BOOK_RECIPE),
):
    r = torch.cat(
        [
            largest_over_uniform(build_model(dataclasses.replace(recipe, seed=s)).eval())
            for s in range(5)
        ]
    )
    xavier_ratios[name] = r
    print(
        f"{name}: largest weight = {r.min().item():.2f} to {r.max().item():.2f} x uniform"
        f" (5 seeds x 2 layers x {B} sequences)"
    )
src_len = (~src_mask[:, 0, 0]).sum(-1)  # real source tokens per sequence, <eos> included
print(f"a row that read one token alone: n = {src_len.min().item()} to {src_len.max().item()}")
all_xavier = torch.cat(list(xavier_ratios.values()))
assert (all_xavier / src_len < 0.5).all()  # on average no row puts half its weight on one key

# %% [markdown]
# ## Checking against `helpers`
#
# `helpers.DecoderLayer` and `helpers.Decoder` use the same parameter names, so our weights
# load strictly. In eval mode they must produce the same hidden states and the same
# cross-attention weights, layer by layer. With `need_weights=False` the library computes the
# attentions with `F.scaled_dot_product_attention`. It returns `None` in place of each weight
# tensor and must still give the same hidden states.

# %%
lib_layer = helpers.DecoderLayer(d, num_heads, dff).eval()
lib_layer.load_state_dict(layer.state_dict())
lib_decoder = helpers.Decoder(VOCAB_SIZE, d, num_heads, dff, num_layers=2, max_len=64).eval()
lib_decoder.load_state_dict(decoder.state_dict())

with torch.no_grad():
    lib_out, lib_w = lib_layer(y, memory, self_mask, src_mask)
    lib_hidden, lib_cross = lib_decoder(tgt_in, memory, self_mask, src_mask)
    fast_hidden, fast_cross = lib_decoder(tgt_in, memory, self_mask, src_mask, need_weights=False)

torch.testing.assert_close(lib_out, out)
torch.testing.assert_close(lib_w, cross_w)
torch.testing.assert_close(lib_hidden, hidden)
assert len(lib_cross) == len(cross_list)
for ours, theirs in zip(cross_list, lib_cross):
    torch.testing.assert_close(theirs, ours)
torch.testing.assert_close(fast_hidden, hidden)
assert fast_cross == [None, None]
print(
    f"helpers.DecoderLayer vs DecoderLayerByHand: max |diff| {small(max_change(lib_out, out))}"
    f" (output {tuple(lib_out.shape)}), {small(max_change(lib_w, cross_w))} (cross weights)"
)
print(
    f"helpers.Decoder vs DecoderByHand: max |diff| {small(max_change(lib_hidden, hidden))}"
    " (hidden),"
    f" {small(max_change(fast_hidden, hidden))} on the SDPA path, whose weights are {fast_cross}"
)

# %% [markdown]
# The encoder and the decoder are done. What is left is the wiring between them: which
# attention takes which mask, an output projection to the vocabulary, and the initialisation.
# That is the next chapter.
#
# ## Summary
#
# - A decoder layer is three Pre-Norm sub-layers (Figure 6.1). Masked self-attention reads
#   the target. Cross-attention takes its queries from the decoder, its keys and values from
#   the encoder's `memory`. Then comes the feed-forward network.
# - The causal mask keeps position $i$ from reading later tokens. Rewriting the tokens after
#   position 4 moved the outputs at positions 0-4 by less than $10^{-5}$ with it, and by more
#   than 0.01 without it.
# - Cross-attention takes only the source padding mask. Changing one real source position
#   moved every target position; overwriting the padded ones moved nothing.
# - $L_t$ and $L_s$ are independent; the cross-attention weights are `[B, h, Lt, Ls]`. The
#   layer on a 5-token prefix gives the first 5 rows of the layer on the whole target.
# - The one thing to remember: **Q from the decoder, K and V from the memory**.
#
# ## Exercises
#
# ### Exercise 6.1 (predict, then run): the shapes of a decoder layer
#
# A `helpers.DecoderLayer` with $d = 128$ and 4 heads gets `x` of shape `[2, 5, 128]` and a
# `memory` of shape `[2, 9, 128]`. Predict the shapes of the self-attention weights, of the
# cross-attention weights and of the layer's output. Which of them change if the memory
# has 20 positions instead of 9?

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
# Solution to exercise 6.1
torch.manual_seed(0)
ex_layer = helpers.DecoderLayer(d, num_heads, dff).eval()
ex_x = torch.randn(2, 5, d)
with torch.no_grad():
    for ls in (9, 20):
        ex_mem = torch.randn(2, ls, d)
        h_ex = ex_layer.ln1(ex_x)
        _, w_self = ex_layer.self_mha(h_ex, h_ex, h_ex, attn_mask=make_causal_mask(5))
        ex_out, w_cross = ex_layer(ex_x, ex_mem, make_causal_mask(5), None)
        print(
            f"memory [2, {ls}, 128]: self weights {tuple(w_self.shape)}, cross weights"
            f" {tuple(w_cross.shape)}, output {tuple(ex_out.shape)}"
        )
        assert w_self.shape == (2, 4, 5, 5) and w_cross.shape == (2, 4, 5, ls)
        assert ex_out.shape == (2, 5, 128)

# %% [markdown]
# :::{dropdown} Answer to exercise 6.1
# Only the last dimension of the cross-attention weights follows the memory's length;
# the output always has the decoder's shape.
# :::

# %% [markdown]
# ### Exercise 6.2 (predict, then run): which outputs move?
#
# Take the hand-built `layer` of this chapter and sequence 0 of the batch. First change
# source digit 2 (re-encoding the memory); then, separately, change target token 2.
# Which of the 13 target positions of the layer's output change in each case?

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
# Solution to exercise 6.2
src_alt, tgt_alt = src[:1].clone(), tgt_in[:1].clone()
src_alt[0, 2] = 3 + (src_alt[0, 2] - 3 + 1) % 10  # another digit
tgt_alt[0, 2] = 3 + (tgt_alt[0, 2] - 3 + 1) % 10
with torch.no_grad():
    base, _ = layer(y[:1], memory[:1], self_mask[:1], src_mask[:1])
    mem_alt = encoder(src_alt, src_mask[:1])
    by_src, _ = layer(y[:1], mem_alt, self_mask[:1], src_mask[:1])
    y_alt = tgt_embed(tgt_alt)
    by_tgt, _ = layer(y_alt, memory[:1], self_mask[:1], src_mask[:1])
moved_src = ((by_src - base).abs().amax(-1) > 1e-5)[0].nonzero().flatten().tolist()
moved_tgt = ((by_tgt - base).abs().amax(-1) > 1e-5)[0].nonzero().flatten().tolist()
print("source digit 2 changed -> target positions that moved:", moved_src)
print("target token 2 changed -> target positions that moved:", moved_tgt)
assert moved_src == list(range(Lt)) and moved_tgt == list(range(2, Lt))

# %% [markdown]
# :::{dropdown} Answer to exercise 6.2
# A source token reaches every target position (through the encoder's self-attention and
# then cross-attention); a target token reaches only its own and later positions.
# :::

# %% [markdown]
# ### Exercise 6.3 (implement): the decoder layer's forward pass
#
# Write `decoder_layer_forward(layer, x, memory, self_mask, cross_mask)`. It computes what
# `layer(x, memory, self_mask, cross_mask)` returns, `(output, cross-attention weights)`, for a
# `helpers.DecoderLayer` in eval mode. Use only the layer's sub-modules: `layer.ln1`,
# `layer.ln2`, `layer.ln3`, `layer.self_mha`, `layer.cross_mha` and `layer.ffn`. Each
# `MultiHeadAttention` returns `(output, weights)`. The masks go in as they are (True =
# blocked). Check your function with `check_decoder_layer_forward(decoder_layer_forward)`. It
# runs it on two inputs with $L_t \ne L_s$. When it recognises a mistake, it names it:
#
# - a missing residual, mask or LayerNorm, or a LayerNorm reused or in the wrong place;
# - the masks swapped or inverted, or the causal mask given to cross-attention;
# - the queries or the keys from the wrong side, or the memory normalised again;
# - the sub-layers out of order, or in the Post-Norm order;
# - the self-attention's weights returned, or no weights at all; dropout left on.

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 6.3
from helpers.exercises import check_decoder_layer_forward


def decoder_layer_forward(layer, x, memory, self_mask, cross_mask):
    h = layer.ln1(x)
    a, _ = layer.self_mha(h, h, h, attn_mask=self_mask)
    x = x + a
    h = layer.ln2(x)
    a, cross_w = layer.cross_mha(h, memory, memory, attn_mask=cross_mask)
    x = x + a
    return x + layer.ffn(layer.ln3(x)), cross_w


check_decoder_layer_forward(decoder_layer_forward)
