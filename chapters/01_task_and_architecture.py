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
# # 1. The task and the architecture
#
# This book builds the Transformer below from an empty file, one tensor at a time.
# Then it trains it on a CPU to reverse strings of digits: `7 3 0 9 5` becomes `5 9 0 3 7`.
# This chapter sets the scene: the task, its 13 tokens, the architecture and the shape names.
# It runs a first forward pass through the untrained model and counts its parameters.
#
# ![The encoder-decoder Transformer of this book](figures/01_task_and_architecture.png)

# %% [markdown] tags=["run-time"]
# **Run time:** about 20 s.

# %%
import math

import matplotlib.pyplot as plt
import torch
from matplotlib.patches import Circle, FancyBboxPatch

from helpers import (
    BOOK_RECIPE,
    BOS_ID,
    EOS_ID,
    NUM_OFFSET,
    PAD_ID,
    TEST_SIZE,
    VOCAB_SIZE,
    MiniGPT,
    Transformer,
    count_parameters,
    describe,
    make_reversal_dataset,
    token_name,
)

# %% [markdown]
# ## Why sequence reversal
#
# A real translation task needs a corpus, a tokenizer and long training runs. Only then
# can you tell a bug from a model that is still learning. We want a task where a bug shows
# up quickly. The task of this book is to **reverse a string of digits**:
#
# ```text
# input  : 7 3 0 9 5 <eos>
# output : <bos> 5 9 0 3 7 <eos>
# ```
#
# It is tiny, but it exercises every part of a Transformer:
#
# - **We know the answer exactly.** There is one correct output per input, so we can
#   measure *exact match* (the whole sequence right, or wrong) instead of arguing over
#   BLEU scores.
# - **It cannot be solved without positions.** The output contains the same digits as the
#   input; only their order differs. A model that ignores positions sees the same bag of
#   tokens for `7 3 0` and `0 3 7` and cannot tell which reversal to produce.
# - **It needs cross-attention to align.** To write its $i$-th digit the decoder has to
#   look up the $i$-th digit *from the end* of the source. That lookup is the job of
#   cross-attention; drawn as a matrix it is an anti-diagonal (shown below), and the
#   heatmap chapter (18) measures how closely a trained model's cross-attention follows it.
# - **It trains quickly on a CPU.** Vocabulary 13, sequences of at most 12 digits, a model
#   under one million parameters. The training chapter (10) trains until at least 99.5 %
#   of 1,000 validation sequences are reversed exactly. It then reports exact match once
#   on a separate test set of 10,000 sequences that plays no part in training.
#
# A subtly wrong component makes the model learn slowly or not at all. Think of a mask off
# by one, a badly scaled embedding, or a transpose in the wrong place. With this task we
# find out quickly. Chapter 12 measures a real case: correct code that learns more slowly
# because of two initialisation lines.
#
# :::{dropdown} Going deeper: the validation and test sets
# The validation and test sets are drawn with seeds of their own. The test set plays no
# part in training or stopping. Both sizes are printed in the section "How this model
# differs from the paper" below. Chapter 09 counts how many validation and test sequences
# happen to occur in the training set too.
# :::

# %% [markdown]
# ## The vocabulary
#
# Thirteen tokens: three special ones and the ten digits. The constants live in `helpers`
# (module `helpers.core.vocab`) so that every chapter agrees on them.
#
# - `<pad>` (id 0) fills sequences up to a common length. It is never attended to and
#   never scored by the loss.
# - `<bos>` (id 1) is the first input of the decoder: "begin the output".
# - `<eos>` (id 2) ends a sequence; the decoder must learn to produce it.
# - digit $k$ is token $k + 3$.

# %%
print(
    f"PAD_ID={PAD_ID}  BOS_ID={BOS_ID}  EOS_ID={EOS_ID}  NUM_OFFSET={NUM_OFFSET}",
    f" VOCAB_SIZE={VOCAB_SIZE}",
)
for i in range(VOCAB_SIZE):
    print(f"  id {i:2d} -> {token_name(i)}")

names = [token_name(i) for i in range(VOCAB_SIZE)]
assert names[NUM_OFFSET:] == [str(k) for k in range(10)]  # digit k is token k + NUM_OFFSET
assert len(set(names)) == VOCAB_SIZE  # every id has a name of its own
assert len({PAD_ID, BOS_ID, EOS_ID}) == 3  # BOS must differ from PAD (a classic decoding bug)

# %% [markdown]
# The data set is generated, not downloaded. `make_reversal_dataset(n, seed)` draws `n`
# digit strings of length 3 to 12. It returns `(src, tgt)` as integer tensors, both padded
# to a common width of 12 + 2 = 14 (the target needs room for `<bos>` and `<eos>`). The same
# seed always gives the same data. Here is one example, as ids and as tokens, and the range
# of lengths in a larger draw (chapter 09 looks at the data more closely):

# %%
src, tgt = make_reversal_dataset(4, seed=0)
print("src:", tuple(src.shape), src.dtype, "  tgt:", tuple(tgt.shape), tgt.dtype)
print()
print("src ids   :", src[1].tolist())
print("src tokens:", describe(src[1]))
print("tgt ids   :", tgt[1].tolist())
print("tgt tokens:", describe(tgt[1]))

lengths = (src >= NUM_OFFSET).sum(dim=1)
print("\ndigits per source:", lengths.tolist())
many_lengths = (make_reversal_dataset(2000, seed=1)[0] >= NUM_OFFSET).sum(dim=1)
print(f"digits per source in 2,000 draws (seed 1): {many_lengths.min()} to {many_lengths.max()}")
again_src, again_tgt = make_reversal_dataset(4, seed=0)
assert torch.equal(again_src, src) and torch.equal(again_tgt, tgt)  # same seed, same data
assert many_lengths.min() == 3 and many_lengths.max() == 12

# the target is <bos>, the reversed digits, <eos>
n = int((src[1] >= NUM_OFFSET).sum())
assert tgt[1, 0] == BOS_ID and tgt[1, n + 1] == EOS_ID and src[1, n] == EOS_ID
assert torch.equal(tgt[1, 1 : n + 1], src[1, :n].flip(0))

# %% [markdown]
# The decoder is trained with **teacher forcing** {cite}`williams1989`. It reads the
# target shifted right by one (`tgt_in`, starting with `<bos>`). It must predict the
# target shifted left by one (`tgt_out`, ending with `<eos>`). Position $t$ of `tgt_in`
# sees the correct tokens up to $t$ and predicts token $t+1$. Chapter 10 covers this in
# depth. Here we only need two properties. Every decoder input starts with `<bos>`. Every
# target row holds exactly one `<eos>` (the model must learn where to stop) and no `<bos>`.

# %%
tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
print("tgt_in :", tuple(tgt_in.shape), " ", describe(tgt_in[1]))
print("tgt_out:", tuple(tgt_out.shape), " ", describe(tgt_out[1]))
eos_per_row = (tgt_out == EOS_ID).sum(dim=1)
print(
    "first token of each tgt_in:",
    describe(tgt_in[:, 0]),
    "  <eos> per tgt_out row:",
    eos_per_row.tolist(),
)
assert (tgt_in[:, 0] == BOS_ID).all() and (eos_per_row == 1).all()
assert not (tgt_out == BOS_ID).any()

# %% [markdown]
# Two claims from the list above can be shown right now. First, order is everything. A
# source and its own reversal contain the same digits, each the same number of times. A
# model that only counts tokens gives them the same output. Yet their targets differ
# (unless the source is a palindrome). Chapter 02 shows this on the whole model, with the
# encoder's positions removed.

# %%
digits = src[1, :n]
a, b = digits, digits.flip(0)
print("source a:", describe(a), "   target:", describe(a.flip(0)))
print("source b:", describe(b), "   target:", describe(b.flip(0)))
print("count of each digit 0-9 in a:", torch.bincount(a - NUM_OFFSET, minlength=10).tolist())
print("count of each digit 0-9 in b:", torch.bincount(b - NUM_OFFSET, minlength=10).tolist())
differ = int((a.flip(0) != b.flip(0)).sum())
print(f"the two targets differ at {differ} of {n} positions")
assert differ > 0

# %% [markdown]
# Second, the alignment the decoder must learn. For a source of $n$ digits, output digit
# $i$ (counting from 0) must read source position $n-1-i$. Draw it as a matrix, one row
# per output digit and one column per source digit. It is a permutation matrix with its
# ones on the anti-diagonal. Chapter 21 compares this picture with a trained model's
# cross-attention.

# %%
align = torch.zeros(n, n, dtype=torch.int64)
for i in range(n):
    align[i, n - 1 - i] = 1
print("columns: source digits  ", " ".join(str(d - NUM_OFFSET) for d in digits.tolist()))
for i in range(n):
    out_digit = tgt_out[1, i].item() - NUM_OFFSET
    print(
        f"output digit {i} ({out_digit}) reads  ",
        " ".join("#" if x else "." for x in align[i].tolist()),
    )

# each output digit is the source digit its row points at
assert torch.equal(align @ digits, tgt_out[1, :n])

# %% [markdown]
# ## The architecture
#
# The model is the encoder-decoder of *Attention Is All You Need* {cite}`vaswani2017`.
# The section "How this model differs from the paper" below lists its changes. The most
# visible one: each sub-layer is **Pre-Norm**, `x + f(LayerNorm(x))` {cite}`xiong2020`,
# with a final LayerNorm at the end of each stack. Chapter 05 compares the two placements.
#
# - The **encoder** reads the whole source at once. In each of its $N$ layers, every
#   source position attends to every real (non-padding) source position. Then a small
#   feed-forward network transforms each position. Its output, one $d$-dimensional vector
#   per source position, is called the **memory**.
# - The **decoder** reads the output so far. In training it reads all of `tgt_in` in one
#   call, and the causal mask hides from each position the tokens after it. At inference
#   it produces one token at a time and feeds each token back in (chapter 11). Each of its
#   $N$ layers has three sub-layers. *Masked* self-attention lets each position see the
#   output tokens up to its own. **Cross-attention** takes its queries from the decoder and
#   its keys and values from the encoder's memory. A feed-forward network comes last.
# - A final linear layer turns each decoder position into 13 scores (**logits**), one per
#   vocabulary entry.
#
# Figure 1.1 shows the data flow. The red arrow is the only place where the two stacks meet.
# The blue lines are the residual paths: each sub-layer's input skips past it and is added
# to its output, and the LayerNorm sits before the sub-layer, inside that detour.

# %% jupyter={"source_hidden": true} tags=["figure", "hide-input", "opening-figure"]
def draw_architecture():
    fig, ax = plt.subplots(figsize=(9, 9.6))
    ax.set_xlim(0, 10.4)
    ax.set_ylim(-0.3, 13.4)
    ax.axis("off")

    def box(x, y, w, h, text, color, weight="normal", size=9.5):
        ax.add_patch(
            FancyBboxPatch(
                (x - w / 2, y - h / 2),
                w,
                h,
                fc=color,
                ec="0.25",
                lw=1.1,
                boxstyle="round,pad=0.02,rounding_size=0.12",
            )
        )
        ax.text(x, y, text, ha="center", va="center", fontsize=size, weight=weight)

    def frame(x, y0, height, label):
        ax.add_patch(
            FancyBboxPatch(
                (x - 2.15, y0),
                4.3,
                height,
                fc="#f7f7f7",
                ec="0.45",
                lw=1.2,
                ls="--",
                boxstyle="round,pad=0.02,rounding_size=0.2",
            )
        )
        ax.text(x - 2.0, y0 + height - 0.22, label, fontsize=9.5, style="italic", va="center")

    def arrow(x, y0, y1):
        ax.annotate(
            "",
            xy=(x, y1),
            xytext=(x, y0),
            arrowprops=dict(arrowstyle="-|>", color="0.25", lw=1.3),
        )

    def sublayer(x, y, text, color, side):
        """LayerNorm, then the sub-layer f, then the residual add: x + f(LayerNorm(x))."""
        y_ln, y_f, y_add = y, y + 0.85, y + 1.75
        box(x, y_ln, 1.9, 0.42, "LayerNorm", norm, size=8.5)
        box(x, y_f, 3.0, 0.8, text, color)
        ax.add_patch(Circle((x, y_add), 0.17, fc="white", ec="0.25", lw=1.2))
        ax.text(x, y_add, "+", ha="center", va="center", fontsize=12)
        arrow(x, y_ln + 0.21, y_f - 0.4)
        arrow(x, y_f + 0.4, y_add - 0.17)
        # the residual path: from below the LayerNorm around the sub-layer into the add
        y_split, xs = y_ln - 0.4, x + side * 1.8
        ax.plot([x, xs, xs], [y_split, y_split, y_add], color="#2e86c1", lw=1.6)
        ax.annotate(
            "",
            xy=(x + side * 0.17, y_add),
            xytext=(xs, y_add),
            arrowprops=dict(arrowstyle="-|>", color="#2e86c1", lw=1.6),
        )
        arrow(x, y_split, y_ln - 0.21)
        return y_add

    emb, att, cross, ffn = "#dbe9f6", "#fde2c8", "#f9c6c6", "#d8f0d2"
    norm, io = "#ececec", "white"
    xe, xd = 2.4, 8.0
    ax.text(xe, 13.15, "Encoder", ha="center", va="center", fontsize=13, weight="bold")
    ax.text(xd, 13.15, "Decoder", ha="center", va="center", fontsize=13, weight="bold")

    box(xe, 0.5, 3.2, 0.55, "src ids  [B, Ls]", io)
    box(xe, 1.55, 3.6, 0.7, "token embedding × √d\n+ sinusoidal positions", emb)
    arrow(xe, 0.78, 1.2)
    frame(xe, 2.25, 5.55, "encoder layer × N")
    arrow(xe, 1.9, 2.55)
    top = sublayer(xe, 2.95, "self-attention\n(source padding mask)", att, -1)
    top = sublayer(xe, top + 0.8, "feed-forward", ffn, -1)
    box(xe, 8.3, 2.6, 0.55, "final LayerNorm", norm)
    box(xe, 9.3, 3.2, 0.6, "memory  [B, Ls, d]", io, weight="bold")
    arrow(xe, top + 0.17, 8.02)
    arrow(xe, 8.58, 9.0)

    box(xd, 0.5, 3.2, 0.55, "tgt_in ids  [B, Lt]", io)
    box(xd, 1.55, 3.6, 0.7, "token embedding × √d\n+ sinusoidal positions", emb)
    arrow(xd, 0.78, 1.2)
    frame(xd, 2.25, 8.1, "decoder layer × N")
    arrow(xd, 1.9, 2.55)
    top = sublayer(xd, 2.95, "masked self-attention\n(causal | target padding)", att, 1)
    top = sublayer(xd, top + 0.8, "cross-attention\nQ: decoder   K, V: memory", cross, 1)
    y_cross = top - 0.9
    top = sublayer(xd, top + 0.8, "feed-forward", ffn, 1)
    box(xd, 10.85, 2.6, 0.5, "final LayerNorm", norm)
    box(xd, 11.65, 2.8, 0.5, "Linear  d → V", norm)
    box(xd, 12.45, 3.2, 0.5, "logits  [B, Lt, V]", io, weight="bold")
    arrow(xd, top + 0.17, 10.6)
    arrow(xd, 11.1, 11.4)
    arrow(xd, 11.9, 12.2)

    ax.annotate(
        "",
        xy=(xd - 1.5, y_cross),
        xytext=(xe + 1.6, 9.3),
        arrowprops=dict(arrowstyle="-|>", color="#c0392b", lw=2.0, connectionstyle="arc3,rad=0.2"),
    )
    ax.text(
        4.9,
        11.3,
        "memory is K and V\nof the cross-attention\nin every decoder layer\n(source padding mask)",
        ha="center",
        va="center",
        fontsize=9,
        color="#c0392b",
    )
    ax.text(
        5.2,
        -0.15,
        "blue: the residual path. Every sub-layer computes x + f(LayerNorm(x))   (Pre-Norm)",
        ha="center",
        va="center",
        fontsize=9,
        color="0.3",
    )
    ax.set_title("Figure 1.1  The encoder-decoder Transformer of this book", fontsize=12, pad=4)
    fig.tight_layout()


draw_architecture()
plt.show()

# %% [markdown]
# Two design decisions are visible in Figure 1.1 and pay off later:
#
# - **Encoding and decoding are separate calls** (`model.encode`, `model.decode`). At
#   inference the encoder runs once per input. The decoder runs once per generated token
#   and reuses the same memory (chapters 11 and 13).
# - **Cross-attention takes only the source padding mask.** Every output position may
#   look at every real source token. Only the decoder's *self*-attention is causal.
#   Chapter 07 shows what goes wrong when cross-attention gets a causal mask instead.

# %% [markdown]
# ## Shape conventions
#
# Many Transformer bugs are shape bugs. Many shape bugs come from two dimensions that
# happen to have the same size. The book names every dimension and prints shapes as they
# change. These are the names:
#
# | symbol | meaning | value here |
# | --- | --- | --- |
# | $B$ | batch size: sequences processed together | 4 in this chapter's example |
# | $L$ | sequence length; $L_s$ for the source, $L_t$ for the decoder input | $L_s = 14$, $L_t = 13$ |
# | $D$ or $d$ | `d_model`: the width of every token vector between sub-layers | 128 |
# | $h$ | `num_heads`: attention heads per attention layer | 4 |
# | $d_k$ | width of one head, $d / h$ | 32 |
# | $d_{ff}$ | `dff`: hidden width of the feed-forward network | 512 |
# | $N$ | `num_layers`: layers in each stack | 2 |
# | $V$ | vocabulary size | 13 |
#
# Between sub-layers every tensor is `[B, L, D]`, so a residual `x + sublayer(x)` is
# always shape-correct. Only inside attention does the tensor take the form
# `[B, h, L, d_k]`. Attention scores are `[B, h, L_q, L_k]`: one row per query position,
# one column per key position. The sizes are the defaults of `helpers.Transformer`. That is
# the 931,213-parameter model counted below, the same as in
# [the reference chapter](intro.md#the-reference-chapter). (Chapter 10 trains a narrower one,
# $d = 32$.) The next cell reads the sizes from the model itself.

# %%
_ = torch.manual_seed(0)  # the untrained model's weights depend on it
model = Transformer(VOCAB_SIZE, VOCAB_SIZE)
cfg = model.config
print(cfg)
d, h = cfg.d_model, cfg.num_heads
print(f"d_k = d_model / num_heads = {d} / {h} = {d // h}")
assert (d, h, d // h, cfg.dff, cfg.num_layers) == (128, 4, 32, 512, 2)
assert src.shape[1] == 14 and tgt_in.shape[1] == 13  # L_s and L_t of the reversal data

# %% [markdown]
# ## How this model differs from the paper
#
# "The Transformer of Vaswani et al." is a family resemblance, not an identity. The
# book's model keeps the paper's structure: the two stacks of Figure 1.1, multi-head
# self- and cross-attention, position-wise feed-forward networks, residual connections,
# LayerNorm {cite}`ba2016`, sinusoidal positions, and embeddings scaled by $\sqrt{d}$. It
# changes the rows of the table below. The paper's column is from {cite}`vaswani2017`
# (sections 3 to 6 and Table 3, base model). Later chapters build each row of the book's
# column, and chapter 07 comes back to the table once the model is assembled. The cell after
# the table prints the training recipe's rows.
#
#
# | | Vaswani et al. (base model) | this book |
# | --- | --- | --- |
# | LayerNorm placement | after each residual add: `LayerNorm(x + f(x))` (Post-Norm) | before each sub-layer: `x + f(LayerNorm(x))` (Pre-Norm {cite}`xiong2020`), plus one final LayerNorm per stack |
# | feed-forward activation | ReLU | GELU {cite}`hendrycks2016` (chapter 04) |
# | embeddings and output projection | one matrix shared by the source embedding, the target embedding and the output projection {cite}`press2017` | three separate matrices |
# | biases of the attention projections | none in the paper's equations | every `nn.Linear` has a bias |
# | initialisation | not stated | Xavier-uniform weights and zero biases for every `nn.Linear` {cite}`glorot2010`; embeddings normal with standard deviation $d^{-1/2}$, with a zero `<pad>` row (chapter 02) |
# | dropout | 0.1, on each sub-layer's output and on embeddings + positions | the same places, and also on the attention weights; the training recipe sets it to 0 |
# | sizes | $d = 512$, $h = 8$, $d_{ff} = 2048$, $N = 6$ | $d = 128$, $h = 4$, $d_{ff} = 512$, $N = 2$ here; the training recipe uses $d = 32$, $d_{ff} = 128$ |
# | positions | sinusoidal, for any length | the same sinusoids, stored for `max_len` = 64 positions; longer inputs are refused |
# | learning rate | warmup for 4,000 steps, then $\propto 1/\sqrt{\text{step}}$ | the same shape with a 100-step warmup, multiplied by a linear cooldown to 0 over the last 400 of at most 500 steps (chapter 10) |
# | label smoothing | 0.1 {cite}`szegedy2016` | none in the training recipe (chapter 10 explains it) |
# | decoding | beam search, beam size 4 | greedy (chapter 11) |

# %% [markdown]
# The training recipe, `helpers.BOOK_RECIPE`, and the model's `max_len`:

# %%
r = BOOK_RECIPE
print(
    f"BOOK_RECIPE: d_model {r.d_model}, heads {r.num_heads}, dff {r.dff}, layers "
    f"{r.num_layers}; warmup {r.warmup}, cooldown {r.cooldown} of {r.max_steps} steps, "
    f"label smoothing {r.label_smoothing}, dropout {r.dropout}"
)
print(f"model max_len: {cfg.max_len}")
print(
    f"training stops at validation exact match >= {r.target_exact_match} on {r.val_size:,}"
    f" sequences; the test set has {TEST_SIZE:,}"
)

# %% [markdown]
# Every chapter runs on the CPU, in the book's own Jupyter kernel; the appendix page
# [How the book checks itself](../appendix/how_the_book_checks_itself.md) explains that
# kernel, and how to opt in to a GPU.

# %% [markdown]
# ## A first forward pass
#
# The finished model lives in `helpers.Transformer`. The following chapters rebuild each
# of its parts by hand. To see the whole path once, push the four examples through the
# untrained model in evaluation mode (no dropout). Encode the source into memory, then
# decode `tgt_in` against that memory, and print the shape at every stage.

# %%
model.eval()
with torch.no_grad():
    memory, src_mask = model.encode(src)
    logits, cross_weights = model.decode(tgt_in, memory, src_mask)

print(f"src           {tuple(src.shape)}              [B, Ls] token ids")
print(f"src_mask      {tuple(src_mask.shape)}        [B, 1, 1, Ls] True = padding (blocked)")
print(f"memory        {tuple(memory.shape)}         [B, Ls, d]")
print(f"tgt_in        {tuple(tgt_in.shape)}              [B, Lt] token ids")
print(f"logits        {tuple(logits.shape)}          [B, Lt, V]")
print(
    f"cross_weights {len(cross_weights)} x {tuple(cross_weights[0].shape)}  "
    "one [B, h, Lt, Ls] per decoder layer"
)

B, Ls, Lt = src.shape[0], src.shape[1], tgt_in.shape[1]
assert memory.shape == (B, Ls, d) and logits.shape == (B, Lt, VOCAB_SIZE)
assert src_mask.shape == (B, 1, 1, Ls) and src_mask.dtype == torch.bool
assert len(cross_weights) == cfg.num_layers
assert all(w.shape == (B, h, Lt, Ls) for w in cross_weights)

# %% [markdown]
# Three properties of this output can already be checked. Each cross-attention row is a
# probability distribution over source positions: it sums to 1. Padding positions of the
# source receive exactly zero weight. And `model(src, tgt_in)` computes the same logits, to
# within float rounding. It takes the attention path that returns no weights
# (`F.scaled_dot_product_attention`, chapter 03).

# %%
w = cross_weights[0]
print(f"row sums: min {w.sum(-1).min().item():.6f}  max {w.sum(-1).max().item():.6f}")
print("largest weight on a padding key:", w.masked_select(src_mask.expand_as(w)).max().item())
torch.testing.assert_close(w.sum(-1), torch.ones(B, h, Lt))
assert w.masked_select(src_mask.expand_as(w)).max() == 0.0
with torch.no_grad():
    torch.testing.assert_close(model(src, tgt_in), logits)

# %% [markdown]
# The untrained model is no better than guessing. The next cell runs it on 1,000
# sequences under teacher forcing. It prints the fraction of output tokens it gets right
# and its cross-entropy loss: the mean over tokens of $-\ln q$, where $q$ is the probability
# the model gives the right token. Two guessers that never look at the input set the bar. A
# uniform guess is right $1/13 \approx 8\%$ of the time. Always answering the most
# frequent target token does better. The model does not beat that second guesser. A model
# that gives each of the 13 tokens probability $1/13$ scores $\ln 13$ on any target. The
# random model scores worse: its predictions are far from uniform, yet know next to nothing
# about the target. Training (chapter 10) is what changes that.
#
# :::{dropdown} Going deeper: why this random model scores worse than $\ln 13$
# The random model's predictions are far from uniform: on average its top token gets a
# third of the probability. And they carry almost no information about the target. Take
# a target drawn uniformly from the 13 tokens. A prediction $q$ then costs on average the
# mean of $-\ln q_k$ over the 13 tokens. Because $\ln$ is concave, that mean is at least
# $\ln 13$, and equal to it only when $q$ is uniform (Jensen's inequality).
#
# The real targets are not uniform, though: `<pad>` and `<bos>` never occur among them.
# A prediction equal to their frequencies costs only their entropy, which is below
# $\ln 13$. So a prediction far from uniform need not cost more than $\ln 13$. This one
# does, because its weight sits on the wrong tokens. The cell prints the targets'
# entropy, the mean over the 13 tokens, and the loss against targets drawn independently
# of the predictions with the real frequencies. The real loss is close to the last one:
# the predictions know next to nothing about the target.
# :::

# %%
src_k, tgt_k = make_reversal_dataset(1000, seed=0)
tgt_out_k = tgt_k[:, 1:]
with torch.no_grad():
    log_q = model(src_k, tgt_k[:, :-1]).log_softmax(-1)[tgt_out_k != PAD_ID]  # [tokens, V]
target = tgt_out_k[tgt_out_k != PAD_ID]
acc = (log_q.argmax(-1) == target).float().mean().item()
loss = -log_q.gather(-1, target[:, None]).mean().item()  # the cross-entropy
p_top = log_q.exp().max(-1).values.mean().item()
uniform_target = -log_q.mean(-1).mean().item()  # mean over the 13 tokens of -ln q_k
freq = torch.bincount(target, minlength=VOCAB_SIZE) / len(target)  # the targets' frequencies
independent_target = -(log_q * freq).sum(-1).mean().item()
most_frequent = int(freq.argmax())
seen = freq[freq > 0]
entropy = -(seen * seen.log()).sum().item()  # the cost of predicting exactly `freq`
print(f"token accuracy: {acc:.1%}   mean probability on its top token: {p_top:.2f}")
print(
    f"guessers: uniform {1 / VOCAB_SIZE:.1%}, always {token_name(most_frequent)} "
    f"{freq.max().item():.1%}"
)
print(f"ln 13 = {math.log(VOCAB_SIZE):.2f}   entropy of the targets' frequencies: {entropy:.2f}")
print(f"loss against a target uniform over the 13 tokens:      {uniform_target:.2f}")
print(f"loss against independent targets, real frequencies:    {independent_target:.2f}")
print(f"loss against the real targets:                         {loss:.2f}")
assert acc < freq.max() and loss > math.log(VOCAB_SIZE) + 0.3  # no better than a guesser
assert uniform_target > math.log(VOCAB_SIZE) + 0.3  # far from uniform
# the real targets cost about what targets unrelated to the predictions cost
assert abs(loss - independent_target) < 0.2 * (independent_target - math.log(VOCAB_SIZE))

# %% [markdown]
# ## Counting the parameters
#
# The default model has 931,213 trainable parameters. Compute it twice: once by summing
# `p.numel()` over the model's parameters, and once from the formulas for each component,
# with $d = 128$, $d_{ff} = 512$, $V = 13$:
#
# - an **embedding table**: $V d$ (the positions are a fixed table, not parameters:
#   chapter 02);
# - **multi-head attention**: four $d \times d$ projections with biases, $4(d^2 + d)$;
# - the **feed-forward network**: $d \to d_{ff} \to d$ with biases, $2 d\, d_{ff} + d_{ff} + d$;
# - a **LayerNorm**: a scale and a shift, $2d$;
# - an **encoder layer**: attention + feed-forward + 2 LayerNorms; a **decoder layer**:
#   2 attentions + feed-forward + 3 LayerNorms;
# - the **output projection**: $d V + V$.

# %%
V, dff, N = VOCAB_SIZE, cfg.dff, cfg.num_layers
embedding = V * d
attention = 4 * (d * d + d)
ffn = 2 * d * dff + dff + d
layer_norm = 2 * d
enc_layer = attention + ffn + 2 * layer_norm
dec_layer = 2 * attention + ffn + 3 * layer_norm
output = d * V + V


def numel(module):
    return sum(p.numel() for p in module.parameters())


rows = [  # component, counted from the model, from the formulas
    (
        "embeddings (source + target)",
        numel(model.encoder.embed) + numel(model.decoder.embed),
        2 * embedding,
    ),
    (
        f"encoder ({N} layers + final LayerNorm)",
        numel(model.encoder.layers) + numel(model.encoder.ln_final),
        N * enc_layer + layer_norm,
    ),
    (
        f"decoder ({N} layers + final LayerNorm)",
        numel(model.decoder.layers) + numel(model.decoder.ln_final),
        N * dec_layer + layer_norm,
    ),
    ("output projection", numel(model.out_proj), output),
]
print(f"{'component':40s} {'counted':>9s} {'formula':>9s} {'share':>6s}")
total = count_parameters(model)
for name, counted, formula in rows:
    print(f"{name:40s} {counted:9,d} {formula:9,d} {counted / total:6.1%}")
    assert counted == formula, name
print(f"{'total':40s} {total:9,d} {sum(r[2] for r in rows):9,d}")
print(f"\none encoder layer: {enc_layer:,}   one decoder layer: {dec_layer:,}")
assert total == sum(r[1] for r in rows) == sum(r[2] for r in rows) == 931_213
assert (rows[0][1] + rows[3][1]) / total < 0.01 and 1.3 < dec_layer / enc_layer < 1.4

# %% [markdown]
# Almost all of the parameters are in the layers. The embeddings and the output
# projection together are well under 1 %, because the vocabulary is tiny. A decoder
# layer is a third larger than an encoder layer because of its cross-attention. The
# position table added to the embeddings costs no parameters at all. The next chapter
# shows why and how it is stored.
#
# With a large vocabulary the embeddings matter much more: the token embedding alone is
# about 31 % of GPT-2 small.
#
# :::{dropdown} Going deeper: counting GPT-2 small
# GPT-2 small
# {cite}`radford2019` is a decoder-only model with $V = 50{,}257$ tokens, 1,024 learned
# positions, $d = 768$, 12 layers of one attention and one feed-forward network
# ($d_{ff} = 4d$, all linear layers with biases, two LayerNorms per layer), a final
# LayerNorm, and an output projection tied to the token embedding (no parameters of its
# own). The same formulas count it. The cell checks the count on a real model. The book's
# mini GPT (chapter 14) has layers of the same shapes as GPT-2's, so the cell builds it at
# GPT-2 small's sizes on the `meta` device (shapes, no data), with a learned position table
# beside it. About 31 % of
# GPT-2 small sits in its token embedding, against under 1 % here. The layers still hold
# most of the parameters, but the vocabulary is no longer negligible.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
V2, ctx2, d2, N2 = 50_257, 1024, 768, 12
token_emb, pos_emb = V2 * d2, ctx2 * d2
gpt2_layer = 4 * (d2 * d2 + d2) + (2 * d2 * 4 * d2 + 4 * d2 + d2) + 2 * (2 * d2)
gpt2_total = token_emb + pos_emb + N2 * gpt2_layer + 2 * d2
print(
    f"GPT-2 small: {gpt2_total:,} parameters; token embedding {token_emb:,} "
    f"({token_emb / gpt2_total:.1%}), with the position table "
    f"{(token_emb + pos_emb) / gpt2_total:.1%}; 12 layers {N2 * gpt2_layer / gpt2_total:.1%}"
)
with torch.device("meta"):  # shapes only: no memory for 124 million numbers
    gpt = MiniGPT(
        V2, d_model=d2, num_heads=12, dff=4 * d2, num_layers=N2, max_len=ctx2, tie_weights=True
    )
    learned_positions = torch.nn.Embedding(ctx2, d2)  # GPT-2 learns its positions
counted = count_parameters(gpt) + learned_positions.weight.numel()
print(f"counted on the mini GPT at these sizes, plus a learned position table: {counted:,}")
assert counted == gpt2_total and gpt.embed.emb.weight.numel() == token_emb

# %% [markdown]
# ## What comes next
#
# The following chapters build Figure 1.1 from the bottom up: token embeddings and
# positions (02), multi-head attention (03), the feed-forward network (04), the encoder
# (05), the decoder (06), the masks and the assembled model (07), and the tests every
# model must pass before it is trained (08). Most of them end by checking that the
# hand-built piece computes what `helpers` computes.
#
# ## Summary
#
# - The task is reversing digit strings: 13 tokens, one right answer per input, exact
#   match as the metric. It cannot be solved without positions. The decoder must learn an
#   anti-diagonal alignment with the source.
# - The model is an encoder-decoder Transformer (Figure 1.1). It differs from
#   {cite}`vaswani2017` in the ways listed in "How this model differs from the paper":
#   Pre-Norm with a final LayerNorm per stack, GELU, untied embeddings, biases, Xavier
#   initialisation, attention-weight dropout, smaller sizes and its own training recipe.
# - Between sub-layers every tensor is `[B, L, d]`; inside attention `[B, h, L, d_k]`, and
#   the weights `[B, h, L_q, L_k]`.
# - The default model has 931,213 parameters, counted twice; with $V = 13$ the
#   embeddings and output projection are under 1 % of it (31 % in GPT-2 small).
#
# ## Exercises
#
# ### Exercise 1.1 (predict, then run): shapes of a bigger model
#
# Build `Transformer(VOCAB_SIZE, VOCAB_SIZE, num_heads=8, num_layers=3)` and feed it a
# batch of 3 sources of length 9 and decoder inputs of length 6. Predict the shapes of
# `memory`, `src_mask`, `logits` and the list `cross_weights` (how many tensors, and of
# which shape) before you run the solution.

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
# Solution to exercise 1.1
_ = torch.manual_seed(0)
bigger = Transformer(VOCAB_SIZE, VOCAB_SIZE, num_heads=8, num_layers=3).eval()
src_x = torch.randint(NUM_OFFSET, VOCAB_SIZE, (3, 9))
tgt_x = torch.randint(NUM_OFFSET, VOCAB_SIZE, (3, 6))
with torch.no_grad():
    memory_x, src_mask_x = bigger.encode(src_x)
    logits_x, cross_x = bigger.decode(tgt_x, memory_x, src_mask_x)
print(
    "memory",
    tuple(memory_x.shape),
    " src_mask",
    tuple(src_mask_x.shape),
    " logits",
    tuple(logits_x.shape),
)
print(f"cross_weights: {len(cross_x)} tensors of shape {tuple(cross_x[0].shape)}")
assert memory_x.shape == (3, 9, 128) and src_mask_x.shape == (3, 1, 1, 9)
assert logits_x.shape == (3, 6, VOCAB_SIZE)
assert len(cross_x) == 3 and all(w.shape == (3, 8, 6, 9) for w in cross_x)

# %% [markdown]
# :::{dropdown} Answer to exercise 1.1
# `memory` keeps the source's length and the model width, `[3, 9, 128]`; the padding mask
# is `[B, 1, 1, L_s]` = `[3, 1, 1, 9]`; the logits are one row of 13 scores per decoder
# position, `[3, 6, 13]`; and there is one cross-attention tensor per decoder layer (3),
# each `[B, h, L_t, L_s]` = `[3, 8, 6, 9]`. More heads change the weights' shape, not the
# width $d$.
# :::

# %% [markdown]
# ### Exercise 1.2 (predict, then run): tying the output projection
#
# GPT-2 shares one matrix between its token embedding and its output projection, and so
# did {cite}`vaswani2017` (see the table above). If the book's model shared the target
# embedding's `[13, 128]` matrix with the output projection's weight (keeping the
# projection's bias), how many parameters would it have? Predict, then run.

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
# Solution to exercise 1.2
_ = torch.manual_seed(0)
tied = Transformer(VOCAB_SIZE, VOCAB_SIZE)
tied.out_proj.weight = tied.decoder.embed.emb.weight  # one Parameter, used twice
total_tied = count_parameters(tied)  # model.parameters() lists a shared Parameter once
print(f"untied: {total:,}   tied: {total_tied:,}   saved: {total - total_tied:,} = V * d")
assert total - total_tied == VOCAB_SIZE * d == 1_664


# %% [markdown]
# ### Exercise 1.3 (implement): the parameter count as a formula
#
# Write `parameter_count(src_vocab, tgt_vocab, d_model, num_heads, dff, num_layers)` that
# returns the number of trainable parameters of `Transformer(src_vocab, tgt_vocab,
# d_model, num_heads, dff, num_layers)` from the component formulas of this chapter,
# without building a model. Check it with `check_parameter_count(parameter_count)`: it
# compares your formula with the real model on four configurations (source and target
# vocabularies of different sizes, one to three layers, two head counts) and names the
# component you most likely missed.

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 1.3
from helpers.exercises import check_parameter_count


def parameter_count(src_vocab, tgt_vocab, d_model, num_heads, dff, num_layers):
    d = d_model  # num_heads splits d_model into slices: it adds no parameters
    attention = 4 * (d * d + d)
    feed_forward = 2 * d * dff + dff + d
    layer_norm = 2 * d
    encoder = num_layers * (attention + feed_forward + 2 * layer_norm) + layer_norm
    decoder = num_layers * (2 * attention + feed_forward + 3 * layer_norm) + layer_norm
    embeddings = (src_vocab + tgt_vocab) * d
    return embeddings + encoder + decoder + d * tgt_vocab + tgt_vocab


check_parameter_count(parameter_count)
