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
# # 14. A decoder-only mini GPT
#
# A language model of the GPT family {cite}`radford2019` has no source to read: it continues a
# text. Take away the encoder, and cross-attention goes too. We build that model from the book's
# own blocks, train it on a small English text, and let it write, greedily and by sampling.
#
# ![Encoder-decoder and decoder-only, side by side](figures/14_mini_gpt.png)

# %% [markdown] tags=["run-time"]
# **Run time:** about 2.8 min.

# %% [markdown]
# What is left is a stack of blocks with two parts each, causal self-attention and a feed-forward
# network, trained to predict the next token. Figure 14.1 puts the two architectures side by side.
# That block is not new. It is chapter 05's encoder layer (Pre-Norm self-attention, then the
# feed-forward network), run under chapter 07's causal mask. `helpers.gpt` builds the model from
# `TokenAndPosition`, `EncoderLayer` (as `GPTBlock`, which adds a KV cache), and the
# `FeedForward` and `MultiHeadAttention` inside it.

# %%
import math
import re
import time

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from helpers import (
    PAD_ID,
    CharTokenizer,
    EncoderLayer,
    MiniGPT,
    TokenAndPosition,
    count_parameters,
    generate,
    load_corpus,
    make_causal_mask,
    top_k_filter,
    train_gpt,
)
from helpers.gpt import causal_mask_with_past, fixed_windows, random_windows, split_train_val

_ = torch.manual_seed(0)
torch.set_num_threads(1)  # the tensors are small: one CPU thread is enough


# %% jupyter={"source_hidden": true} tags=["figure", "hide-input", "opening-figure"]
def draw_two_architectures():
    from matplotlib.patches import FancyBboxPatch

    fig, ax = plt.subplots(figsize=(9, 5.6))
    ax.set_xlim(0, 12)
    ax.set_ylim(0, 9.6)
    ax.axis("off")

    def box(x, y, w, text, color, h=0.7, ls="-", alpha=1.0):
        ax.add_patch(
            FancyBboxPatch(
                (x - w / 2, y - h / 2), w, h, fc=color, ec="0.3", lw=1.0, ls=ls, alpha=alpha,
                boxstyle="round,pad=0.02,rounding_size=0.1",
            )
        )  # fmt: skip
        ax.text(x, y, text, ha="center", va="center", fontsize=8.5, alpha=max(alpha, 0.5))

    def frame(x, y0, y1, w):  # one layer, repeated N times
        ax.add_patch(
            FancyBboxPatch(
                (x - w / 2, y0), w, y1 - y0, fc="none", ec="0.55", lw=1.0, ls="--",
                boxstyle="round,pad=0.02,rounding_size=0.15",
            )
        )  # fmt: skip
        ax.text(x - w / 2 + 0.08, y1 - 0.22, "x N", fontsize=8, color="0.35")

    def up(x, y0, y1, color="0.3"):
        ax.annotate("", xy=(x, y1), xytext=(x, y0),
                    arrowprops=dict(arrowstyle="-|>", color=color, lw=1.1))  # fmt: skip

    att, cross, ffn, io, norm = "#fde2c8", "#f9c6c6", "#d8f0d2", "white", "#ececec"
    # left: encoder-decoder (chapters 05-07)
    xe, xd = 1.8, 5.0
    ax.text(3.4, 9.25, "encoder-decoder (chapters 05-07)", ha="center", fontsize=11, weight="bold")
    box(xe, 0.6, 2.6, "source ids + positions", io)
    box(xe, 2.4, 2.6, "self-attention\n(padding mask)", att, h=0.9)
    box(xe, 3.9, 2.6, "feed-forward", ffn)
    box(xe, 5.4, 2.6, "LayerNorm: memory", io)
    for y0, y1 in [(0.95, 1.95), (2.85, 3.55), (4.25, 5.05)]:
        up(xe, y0, y1)
    box(xd, 0.6, 2.6, "target ids + positions", io)
    box(xd, 2.4, 2.6, "self-attention\n(causal mask)", att, h=0.9)
    box(xd, 3.9, 2.6, "cross-attention\nK, V = memory", cross, h=0.9)
    box(xd, 5.4, 2.6, "feed-forward", ffn)
    box(xd, 6.9, 2.6, "LayerNorm, Linear", norm)
    box(xd, 8.2, 2.6, "next-token logits", io)
    for y0, y1 in [(0.95, 1.95), (2.85, 3.45), (4.35, 5.05), (5.75, 6.55), (7.25, 7.85)]:
        up(xd, y0, y1)
    ax.annotate("", xy=(xd - 1.3, 3.9), xytext=(xe + 1.3, 5.4),
                arrowprops=dict(arrowstyle="-|>", color="#c0392b", lw=1.6))  # fmt: skip
    frame(xe, 1.75, 4.55, 3.0)
    frame(xd, 1.75, 6.05, 3.0)
    # right: decoder-only (this chapter)
    xg = 9.6
    ax.text(xg, 9.25, "decoder-only (this chapter)", ha="center", fontsize=11, weight="bold")
    box(xg, 0.6, 2.8, "text ids + positions", io)
    box(xg, 2.4, 2.8, "self-attention\n(causal mask)", att, h=0.9)
    box(xg, 3.9, 2.8, "no encoder:\nno cross-attention", cross, h=0.9, ls="--", alpha=0.25)
    box(xg, 5.4, 2.8, "feed-forward", ffn)
    box(xg, 6.9, 2.8, "LayerNorm, Linear", norm)
    box(xg, 8.2, 2.8, "next-token logits", io)
    for y0, y1 in [(0.95, 1.95), (2.85, 4.95), (5.75, 6.55), (7.25, 7.85)]:
        up(xg, y0, y1)
    frame(xg, 1.75, 6.05, 3.2)
    ax.text(xg + 1.7, 3.9, "GPTBlock =\nEncoderLayer\nunder the\ncausal mask", fontsize=8,
            color="0.25", va="center")  # fmt: skip
    ax.set_title(
        "Figure 14.1: take away the encoder, and cross-attention goes with it", fontsize=11
    )
    fig.tight_layout()


draw_two_architectures()
plt.show()

# %% [markdown]
# ## 1. The text
#
# The corpus is a short essay about the Transformer, written for this book and placed in the
# public domain. It ships inside the package (`helpers/data/corpus.txt`), so nothing is
# downloaded.

# %%
text = load_corpus()
print(f"{len(text)} characters, {len(text.encode())} bytes, {text.count(chr(10))} lines")
print(text[:400])

# %% [markdown]
# ## 2. A character tokenizer
#
# One id per distinct character: sort the characters, number them. One choice needs a reason: the
# numbering starts at **1**, not 0. The book's `TokenAndPosition` builds its embedding with
# `padding_idx=PAD_ID` (= 0). Row 0 starts at zero and gets no gradient, the right thing for
# `<pad>` in the reversal task. A real character with id 0 would never learn an embedding. Watch
# it happen: backpropagate through the embedding of ids 0, 1, 2 and look at the gradients.

# %%
emb = TokenAndPosition(vocab_size=4, d_model=8, max_len=4, dropout=0.0)
emb(torch.tensor([[0, 1, 2]])).pow(2).sum().backward()
row_grad = emb.emb.weight.grad.abs().sum(dim=1)
row0 = emb.emb.weight[0].abs().max().item()
print(f"row 0 of the embedding: max |value| = {row0:.3f}")
for i in range(3):
    print(f"id {i}: gradient of its embedding row = {row_grad[i].item():.3f}")
assert row0 == 0 and row_grad[0] == 0 and (row_grad[1:3] > 0).all()

# %% [markdown]
# So id 0 stays reserved: it is not a character. The tokenizer by hand, then
# `helpers.CharTokenizer`, which does the same and adds clear errors:

# %%
chars = sorted(set(text))
stoi = {c: i + 1 for i, c in enumerate(chars)}  # 0 is reserved
itos = {i: c for c, i in stoi.items()}
print(f"{len(chars)} characters: {''.join(chars)!r}")

tok = CharTokenizer(text)
print(tok, "(the characters + the reserved id 0)")
assert tok.stoi == stoi and tok.vocab_size == len(chars) + 1

sample = "Attention is a soft lookup."
ids = tok.encode(sample)
print(sample, "->", ids.tolist())
assert tok.decode(ids) == sample and [stoi[c] for c in sample] == ids.tolist()

# %% [markdown]
# A tokenizer must not guess. The text has no digits and no accented letters. A character it has
# never seen is an error that names the character and where it is, not a silent substitution:

# %%
for bad in ("Attention in 2017", "café"):
    try:
        tok.encode(bad)
        raise AssertionError("expected a ValueError")
    except ValueError as e:
        print(f"{bad!r}: ValueError: {e}")

# %% [markdown]
# ## 3. Training data: windows shifted by one
#
# The whole text becomes one long sequence of ids. The last 10 % is held out for validation, as
# one contiguous piece. Training windows are cut at random places, so a random split of windows
# would put overlapping copies of the same text on both sides.
#
# A training example is a window of `block_size` ids, `x`, and the same window shifted by one,
# `y`. At every position the target is the next character. One window of 128 characters is 128
# lessons at once.

# %%
data = tok.encode(text)
train_ids, val_ids = split_train_val(data, val_fraction=0.1)
print(f"train {len(train_ids)} ids, validation {len(val_ids)} ids")

x, y = random_windows(
    train_ids, batch_size=4, block_size=128, generator=torch.Generator().manual_seed(0)
)
print("x", tuple(x.shape), x.dtype, "| y", tuple(y.shape))
print("x[0][:40]:", repr(tok.decode(x[0][:40])))
print("y[0][:40]:", repr(tok.decode(y[0][:40])))
assert torch.equal(x[:, 1:], y[:, :-1])

# %% [markdown]
# ## 4. The model
#
# | part | shape |
# | --- | --- |
# | ids | `[B, L]` |
# | `TokenAndPosition`: embedding $\cdot \sqrt{d}$ + sinusoidal positions | `[B, L, d]` |
# | $N$ blocks: $x + \text{attn}(\text{LN}(x))$ under the causal mask, then $x + \text{FFN}(\text{LN}(x))$ | `[B, L, d]` |
# | final LayerNorm (Pre-Norm never normalises the residual stream itself) | `[B, L, d]` |
# | output head: a linear map to the vocabulary | `[B, L, V]` |
#
# A small configuration, so that section 5 can train it on one CPU thread while the chapter runs.
# Dropout is **off**: section 5 sets out to show over-fitting, and dropout is a regulariser meant
# to slow it down. The model keeps its hyperparameters in `model.config`, a frozen dataclass
# (`GPTConfig`).

# %%
config = dict(d_model=64, num_heads=4, dff=256, num_layers=2, max_len=128, dropout=0.0)
torch.manual_seed(0)
model = MiniGPT(tok.vocab_size, **config)
cfg = model.config  # a frozen dataclass, GPTConfig
print(cfg)
print(f"parameters: {count_parameters(model):,}")
assert all(type(b) is not EncoderLayer and isinstance(b, EncoderLayer) for b in model.blocks)

# %% [markdown]
# Every block *is* an `EncoderLayer` (a subclass, for the cache). Is the model nothing more than
# the pieces in the table? Run them by hand, with the encoder layer's own `forward` and the causal
# mask, and compare with the model's logits:

# %%
xb = x[:2, :16]
with torch.no_grad():
    h = model.embed(xb)
    print("embedded ", tuple(h.shape))
    mask = make_causal_mask(xb.size(1))
    for i, block in enumerate(model.blocks):
        h, _ = EncoderLayer.forward(block, h, mask, need_weights=False)
        print(f"block {i}  ", tuple(h.shape))
    logits_by_hand = model.head(model.ln_final(h))
    print("logits   ", tuple(logits_by_hand.shape))
    torch.testing.assert_close(model(xb), logits_by_hand)

# %% [markdown]
# Two checks before training, chapter 08's habit. **Causality**: rewrite every token from position
# 10 on. The logits at positions 0..9 must not move, while the later ones do. **The initial
# loss**: an untrained model should be about uniformly unsure, with a cross entropy near $\ln V$.
# It is a little above it; chapter 17 measures why.

# %%
with torch.no_grad():
    changed = xb.clone()
    changed[:, 10:] = torch.randint(1, tok.vocab_size, (2, 6))
    changed[:, 10] = xb[:, 10] % (tok.vocab_size - 1) + 1  # surely different at position 10
    a, b = model(xb), model(changed)
    past = (a[:, :10] - b[:, :10]).abs().max().item()
    future = (a[:, 10:] - b[:, 10:]).abs().max().item()
print(f"max |change| of the logits at positions 0-9: {past:.4f} (must stay below 1e-5)")
print(f"max |change| of the logits at positions 10-15: {future:.2f} (must exceed 1e-3)")
assert past < 1e-5 and future > 1e-3

with torch.no_grad():
    xv, yv = fixed_windows(val_ids, 128)
    init_loss = F.cross_entropy(model(xv).flatten(0, 1), yv.flatten()).item()
ln_v = math.log(tok.vocab_size)
print(f"initial validation loss {init_loss:.2f}, ln V = ln {tok.vocab_size} = {ln_v:.2f}")
assert abs(init_loss - ln_v) < 0.3

# %% [markdown]
# GPT-2 also ties its output head to its token embedding. This model does not; the dropdown shows
# why.
#
# :::{dropdown} Going deeper: weight tying, and a surprise at initialisation
# GPT-2 **ties** its output head to its token embedding {cite}`press2017,radford2019`. The same
# `[V, d]` matrix turns ids into vectors at the bottom and vectors into scores at the top. That
# saves $V \cdot d$ parameters (`MiniGPT(..., tie_weights=True)`). Here the saving is small, and
# the initial-loss check shows a catch. The residual stream carries each input token's own
# embedding, scaled by $\sqrt{d}$, all the way to the top. A tied head scores every character by
# its dot product with that same embedding matrix, so the input character wins. The untrained tied
# model predicts that every character repeats itself, confidently, and starts far above $\ln V$.
# The next cell measures it.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
torch.manual_seed(0)
tied = MiniGPT(tok.vocab_size, **config, tie_weights=True)
with torch.no_grad():
    tied_logits = tied(xv)
    tied_loss = F.cross_entropy(tied_logits.flatten(0, 1), yv.flatten()).item()
    repeats = (tied_logits.argmax(-1) == xv).float().mean().item()
saved = count_parameters(model) - count_parameters(tied)
print(f"tied: {saved:,} fewer parameters (V * d = {tok.vocab_size} * {cfg.d_model})")
print(f"initial loss {tied_loss:.2f} (ln V = {ln_v:.2f}, untied {init_loss:.2f})")
print(f"predicts the input character again at {repeats:.0%} of positions")
assert saved == tok.vocab_size * cfg.d_model
assert tied_loss > ln_v + 1 and repeats > 0.9

# %% [markdown]
# :::{dropdown} Going deeper: why the head stays untied
# Training would have to unlearn this first. With a vocabulary of 60 the saving is small (3,840 of
# 107,776 parameters). So `MiniGPT` leaves the head untied by default, and this chapter trains the
# untied model.
# :::

# %% [markdown]
# ## 5. Training, and over-fitting
#
# `helpers.train_gpt` samples random windows of 128 characters, 16 per batch. It minimises the
# next-character cross entropy with AdamW: a linear warm-up, then cosine decay, gradients clipped
# at norm 1. Every 50 steps it measures the loss on fixed windows of the training text and of the
# held-out text, in eval mode, so the two numbers are comparable. At the end it restores the
# weights with the **lowest validation loss**: early stopping, decided after the fact. The weights
# come from seed 0 (section 4), and so do the batches (`seed=0`).
#
# 800 steps of 16 windows of 128 characters are about 1.6 million characters: many passes over
# the training text.

# %% tags=["nbval-ignore-output"]
steps = 800
hist = train_gpt(
    model,
    train_ids,
    val_ids,
    steps=steps,
    batch_size=16,
    block_size=128,
    lr=1e-2,
    warmup=80,
    weight_decay=0.01,
    eval_every=50,
    seed=0,
)
seen = steps * 16 * 128  # characters in all the training windows
print(f"{seen:,} characters, {seen / len(train_ids):.0f} passes over the training text")
print(
    f"{steps} steps in {hist['seconds']:.1f} s; best validation loss {hist['best_val_loss']:.3f} "
    f"at step {hist['best_step']}; restored those weights"
)

# %% [markdown]
# Figure 14.2 shows the curves: the loss of every training batch (faint), and the two evaluations.

# %% jupyter={"source_hidden": true} tags=["figure", "hide-input"]
fig, ax = plt.subplots(figsize=(7, 3.8))
ax.plot(
    hist["step"], hist["batch_loss"], color="tab:blue", alpha=0.25, lw=0.8, label="training batches"
)
ax.plot(hist["eval_step"], hist["train_loss"], "o-", color="tab:blue", ms=3, label="training text")
ax.plot(hist["eval_step"], hist["val_loss"], "o-", color="tab:orange", ms=3, label="held-out text")
ax.axvline(hist["best_step"], color="gray", ls=":", label="lowest held-out loss (kept)")
ax.axhline(math.log(tok.vocab_size), color="black", lw=0.8, ls="--", label="ln V (uniform guess)")
ax.set_xlabel("step")
ax.set_ylabel("cross entropy (nats per character)")
ax.set_title("Figure 14.2: mini GPT on the book's corpus (seed 0)")
ax.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# In this run the two curves fall together at first. What the model learns from the training text
# helps on the held-out text as much. Then they part. The training loss keeps falling; the
# held-out loss stops falling and **rises**. From that point on the model gets better at the exact
# sentences it reads and worse at text it has not seen: it is memorising.
#
# This is not a bug. The model has 107,776 parameters for 18,195 training characters, and almost
# no regulariser: dropout is off, and the weight decay is 0.01. The usual remedies are to keep the
# weights from the best step (as `train_gpt` did), turn dropout on, shrink the model, or use more
# text. This chapter tries only the first.
#
# The numbers: the two losses are close at the first evaluation. The held-out loss ends well above
# its best, while the training loss goes on falling, well below its value at the best step. And
# the kept weights are far better than a uniform guess.

# %% tags=["nbval-ignore-output"]
best_i = hist["eval_step"].index(hist["best_step"])
for label, i in (
    (f"step {hist['eval_step'][0]:>3} (first)", 0),
    (f"step {hist['best_step']:>3} (best)", best_i),
    (f"step {steps} (last)", -1),
):
    print(f"{label}: training {hist['train_loss'][i]:.3f}, held-out {hist['val_loss'][i]:.3f}")
assert abs(hist["train_loss"][0] - hist["val_loss"][0]) < 0.1  # together at first
assert hist["best_step"] < steps
assert hist["val_loss"][-1] > hist["best_val_loss"] + 0.1  # held-out loss turned up
assert hist["train_loss"][-1] < hist["train_loss"][best_i] - 0.3  # training loss still falling
assert hist["train_loss"][-1] < hist["val_loss"][-1] - 0.5  # the gap of memorisation
assert hist["best_val_loss"] < math.log(tok.vocab_size) - 1.5  # and yet it learned a lot

# %% [markdown]
# ## 6. Generating text
#
# Generation is a loop: feed the text so far, take the distribution of the next character, choose
# one, append it. `helpers.generate` does it for a batch of prompts. `temperature=0` means
# **greedy**: always the most likely character. Greedy text tends to repeat itself; Holtzman et
# al. {cite}`holtzman2020` document it for GPT-2. We measure it here: for four prompts, the
# longest substring that occurs twice in the text, greedy against sampled at temperature 1.
#
# The four prompts are all 10 characters long. `generate` takes one tensor `[B, T]`, so the
# prompts of one batch must have the same length. Section 7 tries other lengths, one per call.

# %% tags=["nbval-ignore-output"]
def longest_repeat(s: str) -> int:
    """Length of the longest substring that occurs at least twice without overlapping (>= 4)."""
    best = 0
    for n in range(4, len(s) // 2):
        if any(s.find(s[i : i + n], i + n) >= 0 for i in range(len(s) - 2 * n + 1)):
            best = n
        else:
            break
    return best


prompts = torch.stack(
    [tok.encode(p) for p in ("The model ", "Attention ", "A mask is ", "The cache ")]
)
prompt = prompts[:1]  # "The model ", used alone below
greedy = generate(model, prompts, max_new_tokens=118, temperature=0)
sampled = generate(
    model, prompts, max_new_tokens=118, temperature=1.0, generator=torch.Generator().manual_seed(0)
)
rep_greedy = [longest_repeat(tok.decode(r)) for r in greedy]
rep_sampled = [longest_repeat(tok.decode(r)) for r in sampled]
for r in greedy[:2]:
    print(repr(tok.decode(r)))
print("longest repeated substring, greedy: ", rep_greedy)
print("longest repeated substring, sampled:", rep_sampled)
assert greedy.shape == (4, 128) and sum(rep_greedy) > sum(rep_sampled)

# %% [markdown]
# ### Temperature and top-k
#
# Sampling draws the next character at random from the model's distribution. Two knobs reshape
# the distribution before the draw:
#
# - **temperature** $T$ divides the logits: $p_i \propto e^{z_i / T}$. $T < 1$ sharpens the
#   distribution toward the likely characters; $T > 1$ flattens it; $T \to 0$ is greedy.
# - **top-k** {cite}`fan2018` keeps the $k$ most likely characters and gives every other one
#   probability zero (their logits become $-\infty$), then renormalises.
#
# One distribution, from the held-out text, before and after each knob:

# %% tags=["nbval-ignore-output"]
with torch.no_grad():
    z = model(val_ids[None, :60])[0, -1]  # the next character after 60 held-out characters
z[PAD_ID] = float("-inf")  # id 0 is not a character: generate never picks it
context = tok.decode(val_ids[:60])
print("context:", repr(context[-40:]))
for label, zz in (
    ("T=1", z),
    ("T=0.5", z / 0.5),
    ("T=2", z / 2),
    ("T=1, top-5", top_k_filter(z[None], 5)[0]),
):
    p = zz.softmax(-1)
    top = p.topk(6)
    shown = "  ".join(f"{tok.decode([int(i)])!r}:{v:.2f}" for v, i in zip(top.values, top.indices))
    print(f"{label:>10}: non-zero {int((p > 0).sum()):>2} | {shown}")
    if "top-5" in label:
        assert int((p > 0).sum()) == 5
        assert set(p.nonzero().flatten().tolist()) == set(z.topk(5).indices.tolist())

# %% [markdown]
# Over many positions, the knobs have a measurable effect on the **entropy** of the distribution
# the sampler draws from, in nats: $H = -\sum_i p_i \ln p_i$. We compute it at every position of
# the held-out windows, for several temperatures, with and without top-k. Entropy rises with
# temperature, for any logits that are not all equal. Top-k, which zeroes the tail, lowers it.
# Both hold at every point of Figure 14.3.

# %%
with torch.no_grad():
    zv = model(xv).flatten(0, 1)  # every position of the held-out windows
zv[:, PAD_ID] = float("-inf")
temperatures = [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0]
ks = [None, 10, 3]


def mean_entropy(logits):
    p = logits.softmax(-1)
    return -(p * p.clamp_min(1e-30).log()).sum(-1).mean().item()


entropy = {
    k: [mean_entropy(top_k_filter(zv / T, k) if k else zv / T) for T in temperatures] for k in ks
}
for k in ks:
    assert all(a < b for a, b in zip(entropy[k], entropy[k][1:]))  # rises with temperature
assert all(entropy[3][i] < entropy[10][i] < entropy[None][i] for i in range(len(temperatures)))
assert entropy[3][-1] < math.log(3) + 1e-6  # top-3 can never exceed the entropy of 3 equal choices

# %% jupyter={"source_hidden": true} tags=["figure", "hide-input"]
fig, ax = plt.subplots(figsize=(6, 3.6))
for k in ks:
    ax.plot(
        temperatures, entropy[k], "o-", ms=3, label="all characters" if k is None else f"top-{k}"
    )
ax.axhline(
    math.log(tok.vocab_size - 1),
    color="black",
    lw=0.8,
    ls="--",
    label="uniform over all characters",
)
ax.set_xlabel("temperature")
ax.set_ylabel("mean entropy (nats)")
ax.set_title("Figure 14.3: what the sampler draws from, on held-out text")
ax.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# What this does to the text: eight samples of 110 characters for each setting, all from the same
# prompt and the same random seed (0). We count how many of the sampled words (runs of letters) are
# real: they occur in the training text.

# %% tags=["nbval-ignore-output"]
train_words = set(re.findall(r"[a-z]+", tok.decode(train_ids).lower()))


def sample_stats(temperature, top_k=None, n=8):
    g = torch.Generator().manual_seed(0)
    out = generate(
        model,
        prompt.repeat(n, 1),
        110,
        temperature=temperature,
        top_k=top_k,
        use_cache=True,
        generator=g,
    )
    texts = [tok.decode(row[prompt.size(1) :]) for row in out]
    words = [w for t in texts for w in re.findall(r"[a-z]+", t.lower())]
    return texts, sum(w in train_words for w in words) / len(words)


settings = [(0.5, None), (1.0, None), (2.0, None), (2.0, 5)]
real = {}
for T, k in settings:
    texts, real[T, k] = sample_stats(T, k)
    print(f"T={T}, top_k={k}: {real[T, k]:.0%} real words | {texts[0][:75]!r}")
assert real[0.5, None] > real[1.0, None] > real[2.0, None]
assert real[2.0, 5] > real[2.0, None] + 0.1

# %% [markdown]
# The lower the temperature, the more of the sampled words are real. Top-k cuts off the long tail
# of unlikely characters. At $T = 2$ that brings a part of the real words back: more than 10
# points.
#
# ## 7. The KV cache for a decoder-only model
#
# Without a cache, generation feeds the whole text at every step, and chapter 13's argument
# applies. Under the causal mask the keys and values of earlier positions never change, so each
# block can keep them. A decoder-only model is simpler than the encoder-decoder: one attention
# per block, and no cross-attention keys. One thing is new: the **prompt**. It is fed in one
# pass, a "prefill" of several positions, which needs a causal mask for the prompt's own
# positions. After that, one token per step, and no mask at all.
#
# `MiniGPT.forward(ids, caches)` counts the positions already cached and builds the mask for the
# new ones. New query $i$ sits at position `past + i` and may see keys `0 .. past + i`. For 3 new
# positions after 4 cached ones (a prompt fed in two chunks, say):

# %%
print(causal_mask_with_past(3, past=4)[0, 0].int())
assert torch.equal(causal_mask_with_past(5, past=0), make_causal_mask(5))
assert causal_mask_with_past(1, past=9) is None  # one new query: it sees everything

# %% [markdown]
# Prefill, then two single steps, with the cache of block 0 printed as it grows: `[B, h, t, d_k]`,
# appended along `dim=2`.

# %%
caches = [{} for _ in model.blocks]
seq = prompt.clone()
with torch.no_grad():
    for step in range(3):
        feed = seq if step == 0 else seq[:, -1:]
        logits = model(feed, caches=caches)
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        print(
            f"fed {tuple(feed.shape)} -> logits {tuple(logits.shape)} | block 0 cache K "
            f"{tuple(caches[0]['self_k'].shape)}, V {tuple(caches[0]['self_v'].shape)}"
        )
        seq = torch.cat([seq, nxt], dim=1)
assert caches[0]["self_k"].shape == (1, cfg.num_heads, prompt.size(1) + 2, cfg.d_k)

# %% [markdown]
# Now the check that matters: `generate(..., use_cache=True)` against `use_cache=False`, for the
# four prompts of section 6. Greedy decoding should give the same tokens. So should **sampling**,
# almost always, if both runs draw from generators seeded the same way. Each step makes one
# `torch.multinomial` call in both loops, so both use the same random numbers. The probabilities
# they draw from agree up to float rounding. A token could differ only where that rounding
# decides between two candidates. In these runs none did: every token is the same.

# %%
outs = {}
for label, kw in (
    ("greedy", dict(temperature=0)),
    ("sampled, T=1", dict(temperature=1.0)),
    ("sampled, T=0.8, top-10", dict(temperature=0.8, top_k=10)),
):
    naive_out, cached_out = [
        generate(
            model, prompts, 100, use_cache=c, generator=torch.Generator().manual_seed(42), **kw
        )
        for c in (False, True)
    ]
    assert torch.equal(naive_out, cached_out)
    outs[label] = cached_out
    print(f"{label:>22}: naive and cached tokens identical, {tuple(cached_out.shape)}")

# another seed gives other samples: the sampled comparison is not trivially true
other = generate(model, prompts, 100, temperature=1.0, generator=torch.Generator().manual_seed(43))
assert not torch.equal(other, outs["sampled, T=1"])

# %% [markdown]
# `generate` takes one tensor `[B, T]` and has no padding mask. So the prompts of one batch must
# have the same length: `torch.stack` refuses rows of different sizes. Prompts of other lengths
# go in calls of their own. Below: 1 character (`A`), 20 characters, and 100 characters of
# held-out text, greedy. The limit on the length is the model's `max_len`. The prompt and the new
# characters must fit in 128 positions, the length of the sinusoidal table and of the training
# windows. A request for more is a `ValueError`.

# %%
try:
    torch.stack([tok.encode("A"), tok.encode("The model ")])
    raise AssertionError("expected a RuntimeError")
except RuntimeError as e:
    print(f"torch.stack of a 1- and a 10-character prompt: RuntimeError: {e}")
for p_text in ("A", "Attention is a soft ", tok.decode(val_ids[:100])):
    p_ids = tok.encode(p_text)[None]
    n_new = min(60, cfg.max_len - p_ids.size(1))
    naive_out, cached_out = [
        generate(model, p_ids, n_new, temperature=0, use_cache=c) for c in (False, True)
    ]
    assert torch.equal(naive_out, cached_out) and cached_out.size(1) == p_ids.size(1) + n_new
    print(f"prompt of {p_ids.size(1):>3} characters, {n_new} new: naive and cached identical")
try:
    generate(model, tok.encode(tok.decode(val_ids[:100]))[None], 29)
    raise AssertionError("expected a ValueError")
except ValueError as e:
    print(f"100 + 29 characters: ValueError: {e}")

# %% [markdown]
# And the time, for a prompt of 10 characters and 118 new ones, the longest `max_len = 128`
# allows. Timings vary with the machine and its load. Chapter 13 measures how the saving grows
# with length.

# %% tags=["nbval-ignore-output"]
from helpers.repro.numerics import timing_label

timing = {}
for use_cache in (False, True):
    runs = []
    for _ in range(3):
        t0 = time.perf_counter()
        generate(model, prompt, 118, temperature=0, use_cache=use_cache)
        runs.append(time.perf_counter() - t0)
    timing[use_cache] = min(runs)
print(
    f"naive {1e3 * timing[False]:.0f} ms, cached {1e3 * timing[True]:.0f} ms, "
    f"speed-up {timing[False] / timing[True]:.1f}x"
)
print(timing_label())

# %% [markdown]
# ## 8. What a real GPT adds
#
# The blocks above are the ones GPT-2 {cite}`radford2019` stacks, at toy scale. What it adds is
# mostly scale and engineering:
#
# - **tokens**: byte-pair encoding instead of characters, so that a token carries a word piece and
#   the same context window holds more text;
# - **positions**: learned position vectors (GPT-2), or, in later models, rotations of the queries
#   and keys (RoPE {cite}`su2021`) instead of fixed sinusoids;
# - **data and size**: many more parameters, trained on far more text;
# - **speed**: fused attention kernels, 16-bit floats, and compiled code (`torch.compile`).
#
# `GPTBlock` already runs SDPA's fused kernel, with an explicit causal mask; the dropdowns below
# show the kernel, and why not `is_causal=True`. A third tries bfloat16 for accuracy. Whether
# 16-bit floats or `torch.compile` make a model faster depends on the hardware. This chapter does
# not measure it.
#
# :::{dropdown} Going deeper: fused attention, with an explicit mask or `is_causal`
# `GPTBlock`'s attention is `MultiHeadAttention.attend` with `need_weights=False`. It calls
# `F.scaled_dot_product_attention` (chapter 03) with the explicit causal mask that
# `MiniGPT.forward` builds. `helpers.benchmark.record_op_outputs` (chapter 22) records every ATen
# operator a call runs. The next cell lists the attention operators of one forward pass.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
from helpers.benchmark import record_op_outputs

with torch.no_grad():
    _, ops = record_op_outputs(model, xv[:2])
sdpa_ops = {r.op for r in ops if "scaled_dot_product" in r.op}
print(f"torch {torch.__version__.split('+')[0]}, attention operators: {sorted(sdpa_ops)}")
assert sdpa_ops == {"_scaled_dot_product_flash_attention_for_cpu"}

# %% [markdown]
# :::{dropdown} Going deeper: `is_causal=True` on full windows and on a prefill
# SDPA can also build the causal mask itself: `is_causal=True` and no `attn_mask`. The next cell
# computes block 0's attention on the held-out windows both ways, from the same queries, keys and
# values, and prints the largest difference.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["nbval-ignore-output", "hide-cell"]
mha0 = model.blocks[0].mha
with torch.no_grad():
    h0 = model.blocks[0].ln1(model.embed(xv))
    Q, K, V = mha0.split_heads(mha0.W_q(h0)), *mha0.project_kv(h0, h0)
    may_attend = ~make_causal_mask(xv.size(1))  # SDPA: True = may attend
    by_mask = F.scaled_dot_product_attention(Q, K, V, attn_mask=may_attend)
    by_flag = F.scaled_dot_product_attention(Q, K, V, is_causal=True)
gap = (by_mask - by_flag).abs().max().item()
print(f"{tuple(Q.shape)}: max |explicit mask - is_causal| = {gap:.1e}")
assert gap < 1e-5

# a prefill of queries 4..6 after 4 cached keys (section 7): 3 queries, 7 keys
Qp, Kp, Vp = Q[:, :, 4:7], K[:, :, :7], V[:, :, :7]
with torch.no_grad():
    p_mask = F.scaled_dot_product_attention(Qp, Kp, Vp, attn_mask=~causal_mask_with_past(3, past=4))
    p_flag = F.scaled_dot_product_attention(Qp, Kp, Vp, is_causal=True)
    top_left = torch.ones(3, 7, dtype=torch.bool).tril()  # query i may see keys 0..i
    p_top_left = F.scaled_dot_product_attention(Qp, Kp, Vp, attn_mask=top_left)
gap_mask = (p_mask - by_mask[:, :, 4:7]).abs().max().item()
gap_flag = (p_flag - by_mask[:, :, 4:7]).abs().max().item()
print(f"prefill, 3 queries after 4 cached keys: mask {gap_mask:.1e}, is_causal {gap_flag:.2f}")
assert gap_mask < 1e-5 and gap_flag > 0.01
torch.testing.assert_close(p_flag, p_top_left)  # is_causal: query i sees keys 0..i


# %% [markdown]
# :::{dropdown} Going deeper: what the `is_causal` comparison shows
# On the full windows the two agree to float rounding. On a prefill they do not. With 3 queries
# and 7 keys, `is_causal=True` lets query $i$ see keys $0..i$, as if the queries started at
# position 0. The queries sit at positions 4 to 6, so the mask of section 7 lets them see keys
# $0..4+i$. That is why `MiniGPT` passes an explicit mask. Chapter 22 measures the two paths at
# larger sizes.
# :::
#
# :::{dropdown} Going deeper: bfloat16, for accuracy
# **bfloat16** keeps 8 significant bits, against float32's 24. The next cell makes a copy of the
# trained model in bfloat16 and runs both on the held-out windows `xv`. It prints the validation
# loss of both, and how often their top character agrees.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["nbval-ignore-output", "hide-cell"]
import copy

with torch.no_grad():
    model_bf16 = copy.deepcopy(model).to(torch.bfloat16)
    logits32, logits16 = model(xv), model_bf16(xv).float()
loss32 = F.cross_entropy(logits32.flatten(0, 1), yv.flatten()).item()
loss16 = F.cross_entropy(logits16.flatten(0, 1), yv.flatten()).item()
agree = (logits16.argmax(-1) == logits32.argmax(-1)).float().mean().item()
print(f"validation loss: float32 {loss32:.4f}, bfloat16 {loss16:.4f}")
print(f"top character agrees at {agree:.1%} of {logits32.shape[0] * logits32.shape[1]} positions")
assert abs(loss16 - loss32) < 0.02 and agree > 0.95

# %% [markdown]
# :::{dropdown} Going deeper: what bfloat16 changed
# With a third of float32's significant bits, the loss moved by less than 0.02 nats, and the top
# character stayed the same at more than 95% of the positions.
# :::
#
# The pieces of this chapter live in `helpers.gpt`: `CharTokenizer`, `GPTBlock`, `MiniGPT`,
# `train_gpt`, `generate` (with `temperature`, `top_k`, `top_p`, `use_cache` and `generator`) and
# `load_corpus`.
#
# ## Summary
#
# - A decoder-only model is chapter 05's encoder layer run under chapter 07's causal mask,
#   stacked, with a LayerNorm and a linear head: `MiniGPT`, 107,776 parameters here (Figure 14.1).
#   Running its blocks by hand reproduces its logits.
# - Before training, changing tokens from position 10 on left the logits at positions 0-9
#   unchanged, and the initial loss was within 0.3 of $\ln V$. Tying the head to the embedding
#   saved $V \cdot d$ = 3,840 parameters but started more than 1 nat above $\ln V$.
# - On 18,195 characters the model over-fits (one run, seed 0). The held-out loss reaches its
#   minimum and rises again while the training loss keeps falling (Figure 14.2). `train_gpt` keeps
#   the best weights.
# - On four prompts, greedy text repeated itself more than text sampled with seed 0. Temperature
#   raises the entropy of what the sampler draws from, and top-k lowers it (Figure 14.3).
# - The KV cache changed no token on four prompts of 10 characters, greedy or sampled with the
#   same seed. Nor did it on greedy runs from prompts of 1, 20 and 100 characters. A prompt and its
#   new characters must fit in `max_len` = 128 positions.
# - `GPTBlock` already runs SDPA's fused CPU kernel, with an explicit mask. `is_causal=True` gives
#   the same output on full windows but not on a prefill after cached keys. bfloat16 moved the
#   validation loss by less than 0.02 nats.
# - The one thing to remember: a GPT block is not a new kind of layer. The causal mask and the
#   next-token target are what make the stack a language model.
#
# ## Exercises
#
# ### Exercise 14.1 (predict, then run): top-1 sampling
#
# Sampling at temperature 1 with `top_k=1` keeps one candidate per step. Will
# `generate(model, prompts, 60, temperature=1.0, top_k=1, generator=...)` give the same tokens as
# greedy decoding (`temperature=0`), and does the seed of the generator matter? Predict, then
# run it for the four prompts of section 6 with two different seeds.

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
# Solution to exercise 14.1
greedy60 = generate(model, prompts, 60, temperature=0, use_cache=True)
top1 = [
    generate(model, prompts, 60, temperature=1.0, top_k=1, use_cache=True,
             generator=torch.Generator().manual_seed(seed))
    for seed in (0, 1)
]  # fmt: skip
same = [int((t == greedy60).all(dim=1).sum()) for t in top1]
print(f"rows identical to greedy: {same[0]} of 4 (seed 0), {same[1]} of 4 (seed 1)")
# top-1 leaves one token with probability 1: multinomial must draw it, whatever the seed
assert same == [4, 4]

# %% [markdown]
# ### Exercise 14.2 (predict, then run): how big is the nucleus?
#
# Top-k keeps the same number of candidates at every step, whether the model is sure of the next
# character or not. **Top-p**, or nucleus, sampling {cite}`holtzman2020` keeps a number that adapts:
# the smallest set of most likely tokens whose probabilities add up to at least $p$
# (`helpers.gpt.top_p_filter(logits, p)` sets every other logit to $-\infty$; `generate` and
# `next_token` accept `top_p=`, applied after `temperature` and `top_k`). Top-5 keeps 5 characters
# at every position. At $T = 1$ and $p = 0.9$, how many does the nucleus keep over the held-out
# positions of section 6 (`zv`): about the same number everywhere, or sometimes one and sometimes
# many? Predict the smallest and the largest, then count.

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["nbval-ignore-output", "hide-cell"]
# Solution to exercise 14.2
from helpers.gpt import top_p_filter

sizes = torch.isfinite(top_p_filter(zv, 0.9)).sum(-1)
print(
    f"nucleus size at p = 0.9 over {len(sizes):,} positions: min {int(sizes.min())}, "
    f"median {int(sizes.median())}, max {int(sizes.max())}; a single character at "
    f"{(sizes == 1).float().mean():.0%} of the positions"
)
# where the model is sure, one character; where it is not, many more than top-5 would keep
assert int(sizes.min()) == 1 and int(sizes.max()) > 10

# %% [markdown]
# ### Exercise 14.3 (implement): top-p (nucleus) sampling
#
# Write `top_p_filter(logits, p)` yourself: `logits` is `[B, V]`, and the result is the same
# logits with $-\infty$ for every token outside the nucleus of its row (softmax then renormalises
# the kept ones, as with top-k). Sort each row's probabilities in descending order, take the
# cumulative sum, and keep a token while the mass of the tokens *before* it is still below $p$ (so
# the token that takes the sum past $p$ is kept). `check_top_p_filter` compares your function with
# `helpers.gpt.top_p_filter` on five fixed inputs, and says which row and which tokens differ.

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 14.3
from helpers.exercises import check_top_p_filter


def top_p_filter_mine(logits, p):
    probs, order = logits.softmax(-1).sort(-1, descending=True)
    keep_sorted = probs.cumsum(-1) - probs < p  # the mass of the more likely tokens is below p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)  # back to vocab order
    return logits.masked_fill(~keep, float("-inf"))


check_top_p_filter(top_p_filter_mine)
