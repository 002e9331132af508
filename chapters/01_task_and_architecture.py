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
# # 1. The task and the architecture
#
# This book builds an encoder-decoder Transformer from an empty file, one tensor at a
# time, and trains it on a CPU until it solves its task. This first chapter fixes what we
# are building and why: the task, its vocabulary, the architecture, the names we give to
# tensor dimensions, and a first forward pass through the finished model, so that every
# later chapter knows where its piece goes.
#
# Everything here runs in a few seconds on a laptop CPU. Every claim in the prose is
# either printed by a cell or checked by an `assert`, so if you change something and a
# claim stops being true, the cell fails.

# %%
import math

import matplotlib.pyplot as plt
import torch
from matplotlib.patches import FancyBboxPatch

from helpers import (
    BOS_ID,
    EOS_ID,
    NUM_OFFSET,
    PAD_ID,
    VOCAB_SIZE,
    Transformer,
    count_parameters,
    describe,
    make_reversal_dataset,
    token_name,
)

# %% [markdown]
# ## Why sequence reversal
#
# A real translation task needs a corpus, a tokenizer and hours of training before you can
# tell a bug from a model that is merely still learning. We want the opposite: a task
# where a bug shows up within seconds. The task of this book is to **reverse a string of
# digits**:
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
#   look up the $i$-th digit *from the end* of the source. That lookup is exactly what
#   cross-attention learns, and a trained model's cross-attention map shows it as an
#   anti-diagonal (the heatmap chapter, 18).
# - **It trains in seconds.** Vocabulary 13, sequences of at most 12 digits, a model under
#   one million parameters: the training chapter (10) reaches over 99.5 % exact match on
#   this CPU in seconds.
#
# A component that is subtly wrong (a mask off by one, an embedding scaled badly, a
# transpose in the wrong place) makes the model learn slowly or not at all, and with this
# task we find out right away. Chapter 12 shows a real case: code that passes every test
# and still learns slowly because of two initialisation lines.

# %% [markdown]
# ## The vocabulary
#
# Thirteen tokens: three special ones and the ten digits. The constants live in `helpers`
# (module `helpers.vocab`) so that every chapter agrees on them.
#
# - `<pad>` (id 0) fills sequences up to a common length. It is never attended to and
#   never scored by the loss.
# - `<bos>` (id 1) is the first input of the decoder: "begin the output".
# - `<eos>` (id 2) ends a sequence; the decoder must learn to produce it.
# - digit $k$ is token $k + 3$.

# %%
print(
    f"PAD_ID={PAD_ID}  BOS_ID={BOS_ID}  EOS_ID={EOS_ID}  NUM_OFFSET={NUM_OFFSET}  VOCAB_SIZE={VOCAB_SIZE}"
)
for i in range(VOCAB_SIZE):
    print(f"  id {i:2d} -> {token_name(i)}")

assert VOCAB_SIZE == NUM_OFFSET + 10
assert len({PAD_ID, BOS_ID, EOS_ID}) == 3  # BOS must differ from PAD (a classic decoding bug)

# %% [markdown]
# The data set is generated, not downloaded: `make_reversal_dataset(n, seed)` draws `n`
# digit strings of length 3 to 12 and returns `(src, tgt)` as integer tensors, padded to a
# common width of 12 + 2 = 14 (room for `<bos>` and `<eos>`). The same seed always gives
# the same data. Here is one example, as ids and as tokens:

# %%
src, tgt = make_reversal_dataset(4, seed=0)
print("src:", tuple(src.shape), src.dtype, "  tgt:", tuple(tgt.shape), tgt.dtype)
print()
print("src ids   :", src[1].tolist())
print("src tokens:", describe(src[1]))
print("tgt ids   :", tgt[1].tolist())
print("tgt tokens:", describe(tgt[1]))

# the target is <bos>, the reversed digits, <eos>
n = int((src[1] >= NUM_OFFSET).sum())
assert tgt[1, 0] == BOS_ID and tgt[1, n + 1] == EOS_ID and src[1, n] == EOS_ID
assert torch.equal(tgt[1, 1 : n + 1], src[1, :n].flip(0))

# %% [markdown]
# The decoder is trained with **teacher forcing**: it reads the target shifted right by
# one (`tgt_in`, starting with `<bos>`) and must predict the target shifted left by one
# (`tgt_out`, ending with `<eos>`). Position $t$ of `tgt_in` sees the correct tokens up to
# $t$ and predicts token $t+1$. The training chapter (10) covers this in depth; here we
# only need the two tensors:

# %%
tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
print("tgt_in :", tuple(tgt_in.shape), " ", describe(tgt_in[1]))
print("tgt_out:", tuple(tgt_out.shape), " ", describe(tgt_out[1]))
assert torch.equal(tgt_in[:, 1:], tgt_out[:, :-1])

# %% [markdown]
# Two claims from the list above can be checked right now. First, order is everything:
# a source and its own reversal contain the same tokens, so any model that only counts
# tokens gives them the same output, yet their targets differ.

# %%
digits = src[1, :n]
a, b = digits, digits.flip(0)
same_bag = torch.equal(
    torch.bincount(a, minlength=VOCAB_SIZE), torch.bincount(b, minlength=VOCAB_SIZE)
)
print("source a      :", describe(a))
print("source b      :", describe(b))
print("same tokens?  :", same_bag, "   same target?", torch.equal(a.flip(0), b.flip(0)))
assert same_bag and not torch.equal(a.flip(0), b.flip(0))

# %% [markdown]
# Second, the alignment the decoder must learn. For a source of $n$ digits, the decoder
# position that writes output digit $i$ (counting from 0) must read source position
# $n-1-i$. Written as a matrix with one row per output digit and one column per source
# digit, that is a permutation matrix with its ones on the anti-diagonal: the picture a
# well-trained model's cross-attention reproduces.

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
# The model is the encoder-decoder of *Attention Is All You Need* (Vaswani et al., 2017),
# with one modern change: each sub-layer is **Pre-Norm** (`x + f(LayerNorm(x))`, the
# encoder chapter, 05, explains why), and each stack ends with a final LayerNorm.
#
# - The **encoder** reads the whole source at once. Each of its $N$ layers lets every
#   source position attend to every other real (non-padding) source position, then
#   transforms each position with a small feed-forward network. Its output, one
#   $d$-dimensional vector per source position, is called the **memory**.
# - The **decoder** produces the output one token at a time. Each of its $N$ layers has
#   three sub-layers: *masked* self-attention over the tokens produced so far (the causal
#   mask hides the future), **cross-attention** whose queries come from the decoder and
#   whose keys and values are the encoder's memory, and a feed-forward network.
# - A final linear layer turns each decoder position into 13 scores (**logits**), one per
#   vocabulary entry.
#
# The figure shows the data flow; the red arrow is the only place where the two stacks
# meet. (The cell that draws it is hidden in the HTML book: the drawing code is not the
# lesson.)

# %% tags=["hide-input"]
def draw_architecture():
    fig, ax = plt.subplots(figsize=(9, 7.2))
    ax.set_xlim(0, 10.4)
    ax.set_ylim(-0.3, 10.6)
    ax.axis("off")

    def box(x, y, w, h, text, color, weight="normal"):
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
        ax.text(x, y, text, ha="center", va="center", fontsize=9.5, weight=weight)

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
        ax.text(x - 2.0, y0 + height - 0.25, label, fontsize=9.5, style="italic", va="center")

    def arrows(x, ys):
        for y0, y1 in zip(ys[::2], ys[1::2]):
            ax.annotate(
                "",
                xy=(x, y1),
                xytext=(x, y0),
                arrowprops=dict(arrowstyle="-|>", color="0.25", lw=1.3),
            )

    emb, att, cross, ffn, norm, io = "#dbe9f6", "#fde2c8", "#f9c6c6", "#d8f0d2", "#ececec", "white"
    xe, xd = 2.4, 8.0
    ax.text(xe, 10.35, "Encoder", ha="center", va="center", fontsize=13, weight="bold")
    ax.text(xd, 10.35, "Decoder", ha="center", va="center", fontsize=13, weight="bold")

    box(xe, 0.5, 3.2, 0.55, "src ids  [B, Ls]", io)
    box(xe, 1.55, 3.6, 0.7, "token embedding × √d\n+ sinusoidal positions", emb)
    frame(xe, 2.35, 3.9, "encoder layer × N")
    box(xe, 3.2, 3.4, 0.9, "self-attention\n(source padding mask)", att)
    box(xe, 5.0, 3.4, 0.9, "feed-forward", ffn)
    box(xe, 7.0, 2.6, 0.55, "final LayerNorm", norm)
    box(xe, 8.2, 3.2, 0.6, "memory  [B, Ls, d]", io, weight="bold")
    arrows(xe, [0.78, 1.2, 1.9, 2.75, 3.65, 4.55, 5.45, 6.72, 7.28, 7.9])

    box(xd, 0.5, 3.2, 0.55, "tgt_in ids  [B, Lt]", io)
    box(xd, 1.55, 3.6, 0.7, "token embedding × √d\n+ sinusoidal positions", emb)
    frame(xd, 2.35, 5.0, "decoder layer × N")
    box(xd, 3.1, 3.4, 0.9, "masked self-attention\n(causal | target padding)", att)
    box(xd, 4.75, 3.4, 0.9, "cross-attention\nQ: decoder   K, V: memory", cross)
    box(xd, 6.3, 3.4, 0.8, "feed-forward", ffn)
    box(xd, 8.0, 2.6, 0.55, "final LayerNorm", norm)
    box(xd, 8.95, 2.8, 0.55, "Linear  d → V", norm)
    box(xd, 9.85, 3.2, 0.55, "logits  [B, Lt, V]", io, weight="bold")
    arrows(xd, [0.78, 1.2, 1.9, 2.65, 3.55, 4.3, 5.2, 5.9, 6.7, 7.72, 8.28, 8.67, 9.23, 9.57])

    ax.annotate(
        "",
        xy=(xd - 1.7, 4.75),
        xytext=(xe + 1.6, 8.2),
        arrowprops=dict(arrowstyle="-|>", color="#c0392b", lw=2.0, connectionstyle="arc3,rad=0.2"),
    )
    ax.text(
        5.0,
        9.35,
        "memory is K and V\nof the cross-attention\nin every decoder layer\n(source padding mask)",
        ha="center",
        va="center",
        fontsize=9,
        color="#c0392b",
    )
    ax.text(
        5.2,
        -0.15,
        "every sub-layer: x + f(LayerNorm(x))   (Pre-Norm residual)",
        ha="center",
        va="center",
        fontsize=9,
        color="0.3",
    )
    ax.set_title("The encoder-decoder Transformer of this book", fontsize=12, pad=4)
    fig.tight_layout()


draw_architecture()
plt.show()

# %% [markdown]
# Two design decisions are visible in the figure and pay off later:
#
# - **Encoding and decoding are separate calls** (`model.encode`, `model.decode`). At
#   inference the encoder runs once per input, while the decoder runs once per generated
#   token and reuses the same memory (greedy decoding, chapter 11; the KV cache,
#   chapter 13).
# - **Cross-attention takes only the source padding mask.** Every output position may
#   look at every real source token; only the decoder's *self*-attention is causal
#   (the masks chapter, 07, shows what breaks when the causal mask is passed to
#   cross-attention).

# %% [markdown]
# ## Shape conventions
#
# Most Transformer bugs are shape bugs, and most shape bugs come from two dimensions that
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
# `[B, h, L, d_k]`, and attention scores are `[B, h, L_q, L_k]`: one row per query
# position, one column per key position. The sizes are the defaults of
# `helpers.Transformer`, the configuration of the 931,213-parameter model counted below
# (the training chapter may choose a narrower model to train faster). The next cell reads
# them from the model itself rather than trusting the table.

# %%
torch.manual_seed(0)  # the untrained model's weights depend on it
model = Transformer(VOCAB_SIZE, VOCAB_SIZE)
cfg = model.config
print(cfg)
d, h = cfg.d_model, cfg.num_heads
print(f"d_k = d_model / num_heads = {d} / {h} = {d // h}")
assert (d, h, d // h, cfg.dff, cfg.num_layers) == (128, 4, 32, 512, 2)
assert src.shape[1] == 14 and tgt_in.shape[1] == 13  # L_s and L_t of the reversal data

# %% [markdown]
# ## Where the book runs
#
# Every chapter runs on the CPU: the model is small enough that a GPU would spend more
# time launching kernels than computing, and the stored outputs are then reproducible on
# any machine. Only the attention benchmark (chapter 19) uses a GPU when there is one.
# The next cell reports what this machine has; its output differs between machines, so
# the test suite does not compare it, but it still checks that the book's device is the
# CPU.

# %% tags=["nbval-ignore-output"]
has_gpu = torch.cuda.is_available()
print("torch", torch.__version__, "| CPU threads:", torch.get_num_threads())
print("GPU available:", f"yes ({torch.cuda.get_device_name(0)})" if has_gpu else "no")
device = torch.device("cpu")
print("this book runs on:", device)
assert device.type == "cpu"

# %% [markdown]
# ## A first forward pass
#
# The finished model lives in `helpers.Transformer`; the following chapters rebuild each
# of its parts by hand. To see the whole path once, push the four examples through the
# untrained model, in evaluation mode (no dropout), and print the shape at every stage:
# encode the source into memory, then decode `tgt_in` against that memory.

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
    f"cross_weights {len(cross_weights)} x {tuple(cross_weights[0].shape)}  one [B, h, Lt, Ls] per decoder layer"
)

B, Ls, Lt = src.shape[0], src.shape[1], tgt_in.shape[1]
assert memory.shape == (B, Ls, d) and logits.shape == (B, Lt, VOCAB_SIZE)
assert src_mask.shape == (B, 1, 1, Ls) and src_mask.dtype == torch.bool
assert (
    all(w.shape == (B, h, Lt, Ls) for w in cross_weights) and len(cross_weights) == cfg.num_layers
)

# %% [markdown]
# Three properties of this output can already be checked. Each cross-attention row is a
# probability distribution over source positions (it sums to 1); padding positions of the
# source receive exactly zero weight; and `model(src, tgt_in)`, which takes the faster
# attention path that does not return weights, computes the same logits.

# %%
w = cross_weights[0]
print("row sums: min %.6f  max %.6f" % (w.sum(-1).min(), w.sum(-1).max()))
print("largest weight on a padding key:", w.masked_select(src_mask.expand_as(w)).max().item())
torch.testing.assert_close(w.sum(-1), torch.ones(B, h, Lt))
assert w.masked_select(src_mask.expand_as(w)).max() == 0.0
with torch.no_grad():
    torch.testing.assert_close(model(src, tgt_in), logits)

# %% [markdown]
# The untrained model is, of course, no better than guessing. The next cell prints the
# fraction of output tokens it predicts correctly under teacher forcing (chance is
# $1/13 \approx 8\%$) and its cross-entropy loss. A model that spread its probability
# uniformly over the 13 tokens would score $\ln 13$; the random model does worse than
# that, because its random logits are confidently wrong. Training (chapter 10) drives the
# accuracy towards 100 % and the loss towards 0.

# %%
real = tgt_out != PAD_ID
acc = (logits.argmax(-1) == tgt_out)[real].float().mean().item()
loss = torch.nn.functional.cross_entropy(
    logits.reshape(-1, VOCAB_SIZE), tgt_out.reshape(-1), ignore_index=PAD_ID
)
print(f"token accuracy: {acc:.0%}   loss: {loss.item():.1f}   ln 13 = {math.log(VOCAB_SIZE):.2f}")
assert acc < 0.3 and loss.item() > math.log(VOCAB_SIZE)

# %% [markdown]
# ## Counting the parameters
#
# The default model has 931,213 trainable parameters. Rather than take that number on
# trust, compute it twice: once by summing `p.numel()` over the model's parameters, and
# once from the formulas for each component, with $d = 128$, $d_{ff} = 512$, $V = 13$:
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
# Almost all of the parameters are in the layers; the embeddings and the output
# projection together are well under 1 %, because the vocabulary is tiny. (In a language
# model with a 50,000-token vocabulary the proportions flip.) A decoder layer is a third
# larger than an encoder layer because of its second attention, the cross-attention.
# The position table added to the embeddings costs no parameters at all; the next chapter
# shows why and how it is stored.
#
# ## What comes next
#
# The following chapters build this figure from the bottom up: token embeddings and
# positions (02), multi-head attention (03), the feed-forward network (04), the encoder
# (05), the decoder (06), the masks and the assembled model (07), and the tests every
# model must pass before it is trained (08). Each ends by checking that its hand-built
# piece computes exactly what `helpers` computes.
