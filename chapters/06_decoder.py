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
# # 6. The decoder
#
# The decoder writes the reversed sequence. A decoder layer has one more sub-layer than
# an encoder layer (chapter 05), and each of the three sits behind a LayerNorm inside a
# residual connection (Pre-Norm):
#
# 1. **masked self-attention**: each target position looks at the target tokens up to
#    and including itself, never at later ones;
# 2. **cross-attention**: each target position looks at the *source*. The queries come
#    from the decoder, the keys and values from the encoder's output, the `memory`;
# 3. the **feed-forward network** (chapter 04).
#
# This chapter builds the two attentions with every shape printed, proves that no
# position can see its future, shows that the target and source lengths are independent,
# assembles the layer and the stack (which collects each layer's cross-attention
# weights), and checks everything against `helpers.DecoderLayer` and `helpers.Decoder`.

# %%
import math

import torch
import torch.nn as nn

import helpers
from helpers import VOCAB_SIZE, describe, make_causal_mask, make_padding_mask, make_reversal_dataset

_ = torch.manual_seed(0)

# %% [markdown]
# ## The inputs: memory and the shifted target
#
# Three reversal pairs. The encoder (chapter 05; here the finished `helpers.Encoder`,
# untrained) turns the sources into `memory` `[B, Ls, d]`. The decoder's input is the
# target without its last column (`<bos>` followed by the reversed digits): at every
# position it must predict the *next* target token, which is why training feeds it the
# target shifted by one ("teacher forcing", the training chapter). So here the target
# length is $L_t = 13$ and the source length $L_s = 14$: the two need not match.

# %%
d, num_heads, dff = 128, 4, 512
src, tgt = make_reversal_dataset(3, seed=0)
tgt_in = tgt[:, :-1]
src_mask = make_padding_mask(src)  # [B, 1, 1, Ls]: True on source padding

encoder = helpers.Encoder(VOCAB_SIZE, d, num_heads, dff, num_layers=2, max_len=64).eval()
tgt_embed = helpers.TokenAndPosition(VOCAB_SIZE, d, max_len=64).eval()  # the decoder's own table
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
# At training time the decoder sees the whole target at once, but at position $i$ it
# must predict token $i+1$, so it may not look at positions after $i$: otherwise it
# would copy the answer instead of learning to produce it, and at inference time,
# when later tokens do not exist yet, it would fail. The **causal mask** blocks every key
# $j > i$: True above the diagonal. Printed for six positions, `x` = blocked, `.` = may
# attend:

# %%
causal6 = make_causal_mask(6)
print("causal mask", tuple(causal6.shape), "  [1, 1, L, L]; row = query i, column = key j")
for i, row in enumerate(causal6[0, 0]):
    print(f"  query {i}: " + " ".join("x" if blocked else "." for blocked in row))
assert torch.equal(causal6[0, 0], torch.ones(6, 6, dtype=torch.bool).triu(1))

# %% [markdown]
# The target batch is padded too, so the self-attention mask blocks a key if it is in
# the future **or** is padding. The two masks broadcast to `[B, 1, Lt, Lt]` (chapter 07
# takes combining masks apart in detail):

# %%
causal = make_causal_mask(Lt)
tgt_pad = make_padding_mask(tgt_in)
self_mask = causal | tgt_pad
print("causal", tuple(causal.shape), "| padding", tuple(tgt_pad.shape), "->", tuple(self_mask.shape))

self_mha = helpers.MultiHeadAttention(d, num_heads).eval()
with torch.no_grad():
    sa_out, sa_w = self_mha(y, y, y, attn_mask=self_mask)
print("self-attention out", tuple(sa_out.shape), " weights", tuple(sa_w.shape), "  [B, h, Lt, Lt]")
print("sequence 0, head 0, first 6 queries x first 6 keys:")
print(sa_w[0, 0, :6, :6].numpy().round(2))
assert (sa_w.triu(1) == 0).all()                             # nothing above the diagonal
torch.testing.assert_close(sa_w.sum(-1), torch.ones(B, num_heads, Lt))

# %% [markdown]
# Every weight above the diagonal is zero (asserted for all sequences and heads), and
# every row still sums to 1: query 0 (`<bos>`) can only attend to itself.
#
# The property that matters: **the output at position $i$ does not change when any
# token after $i$ changes.** Replace every token after position $k = 4$ with random
# digits and compare the outputs; then do the same without the causal mask, and watch
# the earlier positions change too (the "leak" the mask prevents):

# %%
k = 4
g = torch.Generator().manual_seed(1)
tgt_changed = tgt_in.clone()
tgt_changed[:, k + 1:] = torch.randint(3, 13, (B, Lt - k - 1), generator=g)
with torch.no_grad():
    y_changed = tgt_embed(tgt_changed)
    masked_a, _ = self_mha(y, y, y, attn_mask=causal)
    masked_b, _ = self_mha(y_changed, y_changed, y_changed, attn_mask=causal)
    open_a, _ = self_mha(y, y, y)
    open_b, _ = self_mha(y_changed, y_changed, y_changed)

print("changed positions", list(range(k + 1, Lt)), "of", describe(tgt_changed[0]))
print(f"with the causal mask:    positions 0..{k} unchanged: {torch.allclose(masked_a[:, :k + 1], masked_b[:, :k + 1])};"
      f" positions {k + 1}.. changed: {not torch.allclose(masked_a[:, k + 1:], masked_b[:, k + 1:])}")
print(f"without the causal mask: positions 0..{k} unchanged: {torch.allclose(open_a[:, :k + 1], open_b[:, :k + 1])}")
torch.testing.assert_close(masked_a[:, :k + 1], masked_b[:, :k + 1])
assert not torch.allclose(masked_a[:, k + 1:], masked_b[:, k + 1:])
assert not torch.allclose(open_a[:, :k + 1], open_b[:, :k + 1], atol=1e-3)

# %% [markdown]
# ## Cross-attention, step by step
#
# Cross-attention is ordinary multi-head attention with two different inputs: the
# queries are projected from the decoder's stream `[B, Lt, d]`, the keys and values from
# the encoder's memory `[B, Ls, d]`. Follow the shapes through the module's own weights:

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
    print("source padding mask   ", tuple(src_mask.shape), "  [B, 1, 1, Ls], broadcast over heads and queries")
    scores = scores.masked_fill(src_mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)
    print("weights               ", tuple(weights.shape), "  [B, h, Lt, Ls]: one row per target position")
    ctx = weights @ V
    print("weights @ V           ", tuple(ctx.shape), "  [B, h, Lt, d_k]: Ls is summed away")
    ctx = ctx.transpose(1, 2).reshape(B, Lt, d)
    print("merge heads           ", tuple(ctx.shape), "  [B, Lt, d]")
    cross_out = cross_mha.W_o(ctx)
    print("W_o                   ", tuple(cross_out.shape), "  [B, Lt, d]: the decoder's length")

    out_mod, w_mod = cross_mha(y, memory, memory, attn_mask=src_mask)
torch.testing.assert_close(out_mod, cross_out)
torch.testing.assert_close(w_mod, weights)
assert (weights[src_mask.expand_as(weights)] == 0).all()    # no weight on source padding
torch.testing.assert_close(weights.sum(-1), torch.ones(B, h, Lt))
print("\nmodule call cross_mha(q=decoder, k=memory, v=memory) gives the same output and weights")

# %% [markdown]
# The source length $L_s$ appears in the keys, the values and the last dimension of
# the weights, and then disappears in the weighted sum: the output has one row per
# *query*, so it has the decoder's length and can be added to the decoder's residual
# stream. Each row of weights is a distribution over the real source tokens (no weight
# on source padding, asserted); which source position each target position reads is
# exactly what the cross-attention heatmaps at the end of the book show for a trained
# model.
#
# Cross-attention takes only the **source padding mask**. There is nothing causal about
# it: the whole source is known before the decoder writes its first token, and every
# target position may read all of it. (Chapter 07 shows what goes wrong when the causal
# mask is passed here by mistake.) Hence, unlike self-attention, changing *any* real
# source token changes the output at *every* target position, while changing the memory
# at padded source positions changes nothing:

# %%
with torch.no_grad():
    mem_real = memory.clone()
    mem_real[:, 0] += 1.0              # position 0 is a real digit in every sequence
    mem_pad = memory.clone()
    mem_pad[src_mask[:, 0, 0]] = 99.0  # overwrite every padded source position
    out_real, _ = cross_mha(y, mem_real, mem_real, attn_mask=src_mask)
    out_pad, _ = cross_mha(y, mem_pad, mem_pad, attn_mask=src_mask)
moved = (out_real - out_mod).abs().amax(-1) > 1e-4  # [B, Lt]: did this target position change?
print("source position 0 changed -> target positions that changed:", int(moved.sum()), "of", B * Lt)
print("padded source positions changed -> output unchanged:", torch.allclose(out_pad, out_mod, atol=1e-6))
assert moved.all()
torch.testing.assert_close(out_pad, out_mod)

# %% [markdown]
# ## The decoder layer: three sub-layers, Pre-Norm
#
# Each sub-layer reads a LayerNorm of the stream and adds its result back:
#
# $$
# \begin{aligned}
# x &\leftarrow x + \operatorname{Dropout}\big(\operatorname{SelfAttn}(\operatorname{LN}_1(x);\ \text{causal} \lor \text{pad}_{t})\big) \\
# x &\leftarrow x + \operatorname{Dropout}\big(\operatorname{CrossAttn}(q = \operatorname{LN}_2(x),\ k = v = \text{memory};\ \text{pad}_{s})\big) \\
# x &\leftarrow x + \operatorname{FFN}\big(\operatorname{LN}_3(x)\big)
# \end{aligned}
# $$
#
# The memory is *not* normalised again inside the layer: the encoder's final LayerNorm
# (chapter 05) already did that once. The layer returns the cross-attention weights
# along with its output. The attribute names are those of `helpers.DecoderLayer`.

# %%
class DecoderLayerByHand(nn.Module):
    def __init__(self, d_model, num_heads, dff, dropout=0.1):
        super().__init__()
        self.ln1, self.ln2, self.ln3 = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.self_mha = helpers.MultiHeadAttention(d_model, num_heads, dropout)
        self.cross_mha = helpers.MultiHeadAttention(d_model, num_heads, dropout)
        self.ffn = helpers.FeedForward(d_model, dff, dropout)
        self.drop1, self.drop2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x, memory, self_mask, cross_mask, need_weights=True):
        h = self.ln1(x)                                   # 1. masked self-attention
        a, _ = self.self_mha(h, h, h, attn_mask=self_mask, need_weights=False)
        x = x + self.drop1(a)
        h = self.ln2(x)                                   # 2. cross-attention: Q from x, K/V from memory
        a, cross_w = self.cross_mha(h, memory, memory, attn_mask=cross_mask, need_weights=need_weights)
        x = x + self.drop2(a)
        x = x + self.ffn(self.ln3(x))                     # 3. feed-forward
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
# Nothing in the layer ties the target length to the source length. Run it with a
# 5-token target prefix against the 14-position memory, and with the full target
# against a shorter source batch (sources of at most 6 digits, padded to width 8):

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
        print(f"{name}: x {tuple(x_in.shape)}, memory {tuple(mem.shape)} -> out {tuple(o.shape)},"
              f" cross weights {tuple(w_c.shape)}")
        assert o.shape == x_in.shape and w_c.shape == (B, num_heads, t_len, mem.size(1))
        if t_len == 5:
            prefix_out, prefix_w = o, w_c

torch.testing.assert_close(prefix_out, out[:, :5])
torch.testing.assert_close(prefix_w, cross_w[:, :, :5])
print("\nthe layer on the first 5 target tokens == the first 5 rows of the layer on all 13")

# %% [markdown]
# The last check is the causal property seen from the other side: the layer's output for
# the first 5 positions is the same whether or not the later tokens exist at all
# (asserted, output and cross-attention weights). That is what lets greedy decoding
# (a later chapter) run the decoder on the tokens produced so far, one step at a time,
# and get exactly what training computed for those positions.
#
# ## The decoder stack: collecting the cross-attention weights
#
# The decoder is the target embedding, $N$ layers and a final LayerNorm, like the
# encoder. It returns the final hidden states *and* a list with one cross-attention
# weight tensor per layer, `[B, h, Lt, Ls]` each: the heatmap chapter plots them.

# %%
class DecoderByHand(nn.Module):
    def __init__(self, vocab_size, d_model, num_heads, dff, num_layers, max_len, dropout=0.1):
        super().__init__()
        self.embed = helpers.TokenAndPosition(vocab_size, d_model, max_len, dropout)
        self.layers = nn.ModuleList(
            DecoderLayerByHand(d_model, num_heads, dff, dropout) for _ in range(num_layers))
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
print("tgt_in", tuple(tgt_in.shape), "+ memory", tuple(memory.shape), "-> hidden", tuple(hidden.shape))
print("cross-attention weights:", type(cross_list).__name__, "of", len(cross_list),
      [tuple(w.shape) for w in cross_list])
assert len(cross_list) == 2 and all(w.shape == (B, num_heads, Lt, Ls) for w in cross_list)
for w in cross_list:
    torch.testing.assert_close(w.sum(-1), torch.ones(B, num_heads, Lt))
    assert (w[src_mask.expand_as(w)] == 0).all()

# %% [markdown]
# Before training, these weights are spread over each sequence's real source tokens: an
# untrained model has no reason to prefer any position. The cell prints the mean of each
# row's largest weight next to the uniform value $1/(\text{number of real source
# tokens})$, and asserts that it stays within a factor of 3 of it:

# %%
src_len = (~src_mask[:, 0, 0]).sum(-1)  # real source tokens per sequence, <eos> included
for b in range(B):
    top = cross_list[0][b].amax(-1).mean().item()
    print(f"sequence {b}: {int(src_len[b]):2d} real source tokens, uniform weight {1 / src_len[b].item():.3f},"
          f" mean largest weight (layer 0) {top:.3f}")
    assert top < 3 / src_len[b].item()

# %% [markdown]
# A trained model concentrates each row on one source position, the one it is copying:
# the anti-diagonal that the heatmap chapter shows.
#
# ## Checking against `helpers`
#
# `helpers.DecoderLayer` and `helpers.Decoder` use the same parameter names, so our
# weights load strictly. In eval mode they must produce the same hidden states and the
# same cross-attention weights, layer by layer. With `need_weights=False` the library
# computes the attentions with `F.scaled_dot_product_attention`, returns `None` in place
# of each weight tensor, and must still give the same hidden states.

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
print("helpers.DecoderLayer == DecoderLayerByHand: output", tuple(lib_out.shape), "and cross weights", tuple(lib_w.shape))
print("helpers.Decoder == DecoderByHand: hidden", tuple(lib_hidden.shape), "and",
      len(lib_cross), "cross-attention weight tensors; SDPA path: same hidden, weights", fast_cross)

# %% [markdown]
# The encoder and the decoder are done. What is left before the model is complete is
# the wiring between them: which of the three attentions takes which mask, an output
# projection to the vocabulary, and the initialisation. That is the next chapter.
