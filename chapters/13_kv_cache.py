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
# # 13. The KV cache: decoding without recomputing the past
#
# Greedy decoding (chapter 11) reruns the whole decoder over every token written so far, at
# every step. A **KV cache** keeps the attention keys and values of earlier steps and feeds the
# decoder only the newest token. We build that cache by hand, break it four ways, and check that
# it decodes the naive loop's tokens. The picture shows the cache growing while the trained model
# reverses a digit string.
#
# ![Layer 0's KV cache, growing one row per step](figures/13_kv_cache.png)

# %% [markdown] tags=["run-time"]
# **Run time:** about 50 s. The first time, it also trains the book's reversal model (`BOOK_RECIPE`) and caches it on disk (about 30 s more); later runs load it.

# %%
import textwrap
import time
from types import SimpleNamespace

import matplotlib.pyplot as plt
import torch

from helpers import (
    BOOK_RECIPE,
    BOS_ID,
    EOS_ID,
    PAD_ID,
    VOCAB_SIZE,
    Transformer,
    describe,
    greedy_decode,
    make_causal_mask,
    make_padding_mask,
    make_reversal_dataset,
    sequences_equal,
    trained_reversal_model,
)
from helpers.exercises import check_decode_step

_ = torch.manual_seed(0)
# every tensor here is small: one CPU thread is enough
torch.set_num_threads(1)

# %% [markdown]
# We load the trained reversal model of chapter 10; the first call in a fresh clone trains it.
# We also draw its recipe's 1000 validation sequences, with another seed than the training data.

# %%
model = trained_reversal_model(progress=False, verbose=False)
cfg = model.config
print({k: getattr(cfg, k) for k in ("d_model", "num_heads", "num_layers", "max_len")})
src_val, tgt_val = make_reversal_dataset(1000, seed=BOOK_RECIPE.val_seed)
print("validation src", tuple(src_val.shape), "| e.g.", describe(src_val[0]))
print(f"validation seed {BOOK_RECIPE.val_seed}, training data seed {BOOK_RECIPE.data_seed}")

# %% [markdown]
# ## 1. What the naive loop recomputes
#
# Forward hooks count, at every step, how many rows go through four modules of the decoder. A
# hook fires whenever its module is called.
#
# - the token embedding: how many target tokens the decoder processes;
# - the query projection of layer 0's self-attention: how many **query rows** attend;
# - the key and value projections of layer 0's **cross**-attention: how many memory rows become
#   keys and values.
#
# We decode one source of 12 digits for all 13 steps (`stop_at_eos=False`), naive and cached.
# Its tensor holds 14 positions: the digits, `<eos>` and one `<pad>`. The memory keeps all 14.
# The "self scores" column is not hooked: it is the query rows times the $t$ keys of step $t$.

# %%
def count_rows(model, run):
    """Call run(); return per call of each hooked module the number of rows it processed."""
    layer0 = model.decoder.layers[0]
    where = {
        "tokens": model.decoder.embed.emb,
        "self queries": layer0.self_mha.W_q,
        "memory rows -> cross keys": layer0.cross_mha.W_k,
        "memory rows -> cross values": layer0.cross_mha.W_v,
    }
    counts = {name: [] for name in where}
    hooks = [
        m.register_forward_hook(
            lambda mod, inp, out, name=name: counts[name].append(inp[0].shape[1])
        )
        for name, m in where.items()
    ]
    try:
        run()
    finally:
        for h in hooks:
            h.remove()
    return counts


n_real = (src_val != PAD_ID).sum(1)  # digits + <eos>
src1 = src_val[(n_real == 13).nonzero()[0]]  # the first 12-digit source, [1, 14]
Ls = src1.size(1)
naive = count_rows(model, lambda: greedy_decode(model, src1, use_cache=False, stop_at_eos=False))
cached = count_rows(model, lambda: greedy_decode(model, src1, use_cache=True, stop_at_eos=False))
steps = len(naive["tokens"])
mem = "memory rows -> cross keys"
mem_cached = cached[mem] + [0] * (steps - 1)  # the cached path projects the memory once
print(f"source: {describe(src1[0])}")
print(f"source length Ls = {Ls}, steps = {steps}")
cols = ("tokens", "self queries", "self scores", "memory rows")
print(f"{'step':>4} | " + " | ".join(f"{c:>13}" for c in cols))
print(f"{'':>4} | " + " | ".join(f"{'naive cached':>13}" for _ in cols))
for t in range(1, steps + 1):
    nq, cq = naive["self queries"][t - 1], cached["self queries"][t - 1]
    row = (
        (naive["tokens"][t - 1], cached["tokens"][t - 1]),
        (nq, cq),
        (nq * t, cq * t),
        (naive[mem][t - 1], mem_cached[t - 1]),
    )
    print(f"{t:>4} | " + " | ".join(f"{a:>6} {b:>6}" for a, b in row))

assert naive["tokens"] == list(range(1, steps + 1)) and cached["tokens"] == [1] * steps
assert naive["self queries"] == naive["tokens"] and cached["self queries"] == cached["tokens"]
assert naive[mem] == [Ls] * steps  # memory re-projected every step
assert cached[mem] == [Ls]  # ... versus exactly once
assert naive["memory rows -> cross values"] == naive[mem]  # the values: the same counts
assert cached["memory rows -> cross values"] == cached[mem]

# %% [markdown]
# At step $t$ the naive loop processes $t$ tokens. It computes $t \times t$ self-attention scores
# per head and layer. And it projects the whole source memory to cross-attention keys and values
# again. The cached loop processes one token and computes one row of $t$ scores. It projects the
# memory once, before the first step.
#
# Summed over an output of $n$ tokens, the naive decoder processes
# $1 + 2 + \dots + n = n(n+1)/2$ tokens and $\sum t^2 \approx n^3/3$ score entries. The cached one
# processes $n$ tokens and $n(n+1)/2$ scores. The hook counts above are these formulas for
# $n = 13$. Figure 13.1 extends them to $n = 512$.

# %%
n = torch.arange(1, 513, dtype=torch.float64)
work = {
    "naive: tokens": n.cumsum(0),
    "cached: tokens": n.clone(),
    "naive: self-attention scores": (n**2).cumsum(0),
    "cached: self-attention scores": n.cumsum(0),
}
assert work["naive: tokens"][12] == sum(naive["tokens"])
assert work["cached: tokens"][12] == sum(cached["tokens"])
for m_ in (13, 16, 64, 256, 512):
    print(
        f"n = {m_:>3}: naive processes {int(work['naive: tokens'][m_ - 1]):>6} tokens, "
        f"cached {m_:>3}  ({work['naive: tokens'][m_ - 1] / m_:.1f}x fewer)"
    )

# %% jupyter={"source_hidden": true} tags=["figure", "hide-input"]
fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
for ax, what in zip(axes, ("tokens", "self-attention scores")):
    for path, style in (("naive", "-"), ("cached", "--")):
        ax.plot(n, work[f"{path}: {what}"], style, label=path)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("new tokens n")
    ax.set_ylabel(f"total {what} " + ("(per layer)" if what == "tokens" else "(per layer, head)"))
    ax.set_title(f"{what} processed for n new tokens")
    ax.legend()
fig.suptitle("Figure 13.1: work of the naive and the cached decoder", fontsize=11)
plt.tight_layout()
plt.show()

# %% [markdown]
# The linear layers (projections and feed-forward network) pay per token processed. The cached
# loop does $(n+1)/2$ times less of that work. Section 6 measures whether the clock shows it.
#
# ## 2. Why the past does not change
#
# Caching is only correct if the keys and values of positions $0..t-1$ are the same at step $t$
# as at step $t-1$. The causal mask makes it so. Position $i$ attends only to positions $\le i$, in
# every layer. So nothing computed at position $i$ can depend on a token that arrives later. In a
# layer without a causal mask, an encoder layer for instance, a new token could change every
# earlier row.
#
# The check: run the decoder over a prefix of 5 tokens, then over the same prefix plus one token.
# We capture the keys and values of every self-attention layer and compare the first 5 rows.

# %% tags=["nbval-ignore-output"]
def self_kv(model, tgt_in, memory, src_mask):
    """Per decoder layer, the self-attention keys and values [B, t, d] of a full naive pass."""
    out = []
    hooks = [
        m.register_forward_hook(lambda mod, inp, o: out.append(o))
        for layer in model.decoder.layers
        for m in (layer.self_mha.W_k, layer.self_mha.W_v)
    ]
    try:
        model.decode(tgt_in, memory, src_mask, need_weights=False)
    finally:
        for h in hooks:
            h.remove()
    return out


with torch.no_grad():
    memory, src_mask = model.encode(src1)
    full = greedy_decode(model, src1, stop_at_eos=False)  # BOS + 13 tokens
    before = self_kv(model, full[:, :5], memory, src_mask)
    after = self_kv(model, full[:, :6], memory, src_mask)
for i, (b, a) in enumerate(zip(before, after)):
    name = f"layer {i // 2} {'KV'[i % 2]}"
    diff = (a[:, :5] - b).abs().max().item()
    print(
        f"{name}: step 5 {tuple(b.shape)}, step 6 {tuple(a.shape)}, "
        f"first 5 rows: max |difference| {diff:.1e}"
    )
    torch.testing.assert_close(a[:, :5], b, atol=1e-5, rtol=1e-5)

# %% [markdown]
# The differences are zero or at the level of float32 rounding; the check allows $10^{-5}$. The
# cross-attention keys and values are projections of the memory, which does not change while the
# decoder writes.
#
# ## 3. Building the cache by hand
#
# One decoding step with a cache, in each decoder layer (Pre-Norm, as in chapter 06):
#
# 1. **self-attention**: project the newest position's normalised vector to a key and a value,
#    `[B, h, 1, d_k]` each. Append them to the cached ones **along the sequence dimension**
#    (`dim=2` of `[B, h, L, d_k]`). The one new query attends to all $t$ keys.
# 2. **cross-attention**: the memory's keys and values, `[B, h, L_s, d_k]`, are computed on the
#    first step and reused afterwards. The new query attends to them with the source padding
#    mask, as before.
# 3. the feed-forward network, on the one new position.
#
# **Which mask does the one-row query need?** The causal mask hides keys that lie after the
# query. The single query *is* the newest position, so every cached key is in its past. The last
# row of a causal mask is therefore all `False`:

# %%
for t in (1, 4, 9):
    last_row = make_causal_mask(t)[0, 0, -1]
    print(f"t = {t}: last row of the causal mask blocks {int(last_row.sum())} of {t} keys")
    assert not last_row.any()

# %% [markdown]
# What remains is key padding. The naive loop blocks `<pad>` keys in the target, where finished
# rows are padded with `<pad>`. So the cached loop blocks them too, with `make_padding_mask(out)`
# of shape `[B, 1, 1, t]`. It broadcasts over heads and the single query row. With it, the two
# loops compute the same function.
#
# :::{dropdown} Going deeper: a `<pad>` in a row that is still writing
# A row still writing has a `<pad>` key only if the model emitted one; the naive loop masks it,
# so the cached loop must too.
# :::
#
# Also easy to forget: the new token's **position**. It is token number `step` of the target, so
# it is embedded with `start_pos=step`. Otherwise it gets position 0's encoding at every step.
#
# The function below is the whole cached decoder, written with the layer's own sub-modules.
# Like `greedy` in chapter 11, it decodes in evaluation mode and gives the caller's mode back
# (`helpers.restores_mode`). A caller may pass in its own `caches`; section 9 needs that.

# %%
from helpers import restores_mode


@restores_mode
@torch.no_grad()
def greedy_decode_by_hand(model, src, max_len=None, stop_at_eos=True, caches=None, trace=None):
    """Greedy decoding with a KV cache we manage ourselves: one dict per decoder layer.
    -> (tokens [B, <= max_len], caches). trace: a list that receives the shapes at each step."""
    model.eval()
    max_len = model.max_len if max_len is None else max_len
    dec = model.decoder
    memory, src_mask = model.encode(src)  # the encoder runs once
    B = src.size(0)
    out = torch.full((B, 1), BOS_ID, dtype=torch.long)
    finished = torch.zeros(B, dtype=torch.bool)
    caches = [{} for _ in dec.layers] if caches is None else caches
    for step in range(max_len - 1):
        x = dec.embed(out[:, -1:], start_pos=step)  # the newest token, at its true position
        self_mask = make_padding_mask(out)  # [B, 1, 1, t]: padding keys only, no causal part
        for layer, cache in zip(dec.layers, caches):
            h = layer.ln1(x)
            k, v = layer.self_mha.project_kv(h, h)  # [B, h, 1, d_k]
            if "self_k" in cache:  # append along dim 2, the positions of [B, h, L, d_k]
                k = torch.cat([cache["self_k"], k], dim=2)
                v = torch.cat([cache["self_v"], v], dim=2)
            cache["self_k"], cache["self_v"] = k, v
            a, _ = layer.self_mha.attend(h, k, v, attn_mask=self_mask, need_weights=False)
            x = x + layer.drop1(a)

            h = layer.ln2(x)
            if "cross_k" not in cache:  # first step only
                cache["cross_k"], cache["cross_v"] = layer.cross_mha.project_kv(memory, memory)
            a, _ = layer.cross_mha.attend(
                h, cache["cross_k"], cache["cross_v"], attn_mask=src_mask, need_weights=False
            )
            x = x + layer.drop2(a)
            x = x + layer.ffn(layer.ln3(x))
        logits = model.out_proj(dec.ln_final(x)[:, -1])  # [B, V]
        nxt = logits.argmax(-1).masked_fill(finished, PAD_ID)
        out = torch.cat([out, nxt[:, None]], dim=1)
        if trace is not None:
            c = caches[0]
            trace.append(
                dict(
                    step=step,
                    x=tuple(x.shape),
                    mask=tuple(self_mask.shape),
                    self_k=tuple(c["self_k"].shape),
                    cross_k=tuple(c["cross_k"].shape),
                    cross_ptr=c["cross_k"].data_ptr(),
                )
            )
        if stop_at_eos:
            finished |= nxt == EOS_ID
            if finished.all():
                break
    return out, caches

# %% [markdown]
# Watch the cache grow while the trained model reverses two sources of different lengths; the
# second is padded. Layer 0's self-attention keys gain one row per step. Its cross-attention keys
# keep the shape `[B, h, L_s, d_k]` and are the very same tensor at every step.

# %%
src2 = src_val[:2]
print("src:", describe(src2[0]), "|", describe(src2[1]))
trace = []
out2, caches2 = greedy_decode_by_hand(model, src2, trace=trace)
heads = ("step", "new x", "self mask", "self K (layer 0)", "cross K (layer 0)")
widths = (4, 12, 14, 18, 18)
print("  ".join(f"{h:>{w}}" for h, w in zip(heads, widths)))
for r in trace:
    cells = (r["step"], r["x"], r["mask"], r["self_k"], r["cross_k"])
    print("  ".join(f"{str(c):>{w}}" for c, w in zip(cells, widths)))
print("output:", describe(out2[0]), "|", describe(out2[1]))

h_, dk = cfg.num_heads, cfg.d_model // cfg.num_heads
assert [r["self_k"] for r in trace] == [(2, h_, s + 1, dk) for s in range(len(trace))]
assert len({r["cross_ptr"] for r in trace}) == 1  # computed once, reused
assert torch.equal(out2, greedy_decode(model, src2, use_cache=False))
assert sequences_equal(out2, tgt_val[:2]).all()  # and both rows are correct reversals

# %% [markdown]
# The output matches the naive loop. The second row finished earlier and was padded with
# `<pad>`, which the padding mask hides from later steps.
#
# Figure 13.2 draws the same trace for the first row, one column per step. A coloured cell is a
# key/value row held in layer 0's cache. The cross-attention rows are all computed at step 0.

# %% jupyter={"source_hidden": true} tags=["figure", "hide-input", "opening-figure"]
n_steps = len(trace)
self_rows = [r["self_k"][2] for r in trace]  # cached positions after each step
fed = [describe(out2[0, i : i + 1]) for i in range(n_steps)]  # the token fed at each step
src_tokens = [describe(src2[0, i : i + 1]) for i in range(src2.size(1))]
state_self = torch.zeros(n_steps, n_steps)  # [row, step]: 0 empty, 1 reused, 2 new
state_cross = torch.zeros(len(src_tokens), n_steps)
for s_, rows in enumerate(self_rows):
    state_self[: rows - 1, s_], state_self[rows - 1, s_] = 1, 2
state_cross[:, 0] = 2
state_cross[:, 1:] = 1
colours = plt.matplotlib.colors.ListedColormap(["white", "#9ecae1", "#fd8d3c"])
fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), gridspec_kw=dict(width_ratios=[n_steps, n_steps]))
for ax, state, labels, title in (
    (axes[0], state_self, fed, "self-attention K/V: one new row per step"),
    (axes[1], state_cross, src_tokens, "cross-attention K/V: computed once"),
):
    ax.imshow(state, cmap=colours, vmin=0, vmax=2, aspect="auto")
    ax.set_xticks(range(n_steps))
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xticks([x - 0.5 for x in range(1, n_steps)], minor=True)
    ax.set_yticks([y - 0.5 for y in range(1, len(labels))], minor=True)
    ax.grid(which="minor", color="grey", lw=0.5)
    ax.tick_params(which="minor", length=0)
    ax.set_xlabel("decoding step")
    ax.set_title(title, fontsize=10)
axes[0].set_ylabel("cached position (token fed)")
axes[1].set_ylabel("source position")
handles = [
    plt.matplotlib.patches.Patch(color=colours(2), label="computed at this step"),
    plt.matplotlib.patches.Patch(color=colours(1), label="reused from the cache"),
]
fig.legend(handles=handles, loc="lower center", ncol=2, frameon=False)
fig.suptitle("Figure 13.2: layer 0's KV cache while the model reverses one source", fontsize=11)
plt.tight_layout(rect=(0, 0.07, 1, 1))
plt.show()

# %% [markdown]
# In the HTML book, [chapter 21's live explorer](21_cross_attention_heatmaps.ipynb) shows this
# cache growing as you step.

# %% [markdown]
# ## 4. Four cache bugs, reproduced
#
# Each of these is a one-line slip in `greedy_decode_by_hand`. The cell prints each as a diff
# (`-` the line above, `+` the slip), builds the slipped function from the source of ours, and
# runs it. Two slips raise an error. Two run without one and decode other tokens than the naive
# loop; only a check of the output reveals them. We measure each on the 1000 validation
# sequences: the fraction of rows decoded exactly like the naive loop.

# %% tags=["nbval-ignore-output"]
import inspect

naive_val = greedy_decode(model, src_val, use_cache=False)
source = inspect.getsource(greedy_decode_by_hand)
slips = {
    "position 0": (
        "x = dec.embed(out[:, -1:], start_pos=step)",
        "x = dec.embed(out[:, -1:], start_pos=0)",
    ),
    "first causal row": (
        "self_mask = make_padding_mask(out)",
        "self_mask = make_padding_mask(out) | make_causal_mask(step + 1)[:, :, :1]",
    ),
    "full causal mask": (
        "self_mask = make_padding_mask(out)",
        "self_mask = make_padding_mask(out) | make_causal_mask(step + 1)",
    ),
    "cat on heads": (
        'k = torch.cat([cache["self_k"], k], dim=2)',
        'k = torch.cat([cache["self_k"], k], dim=1)',
    ),
}


def with_slip(old, new):
    """greedy_decode_by_hand with one line changed: its source, edited, then run."""
    assert source.count(old) == 1
    namespace = dict(globals())
    exec(source.replace(old, new), namespace)
    return namespace["greedy_decode_by_hand"]


def agreement(tokens):
    L = max(tokens.size(1), naive_val.size(1))
    pad = lambda t: torch.nn.functional.pad(t, (0, L - t.size(1)), value=PAD_ID)  # noqa: E731
    return (pad(tokens) == pad(naive_val)).all(1).float().mean().item()


outcome = {}
for mistake, (old, new) in slips.items():
    print(f"{mistake}:\n  - {old}\n  + {new}")
    try:
        toks, _ = with_slip(old, new)(model, src_val)
        frac = agreement(toks)
        print(f"  runs, and decodes {frac:.1%} of the rows like the naive loop")
        assert frac < 0.5
        outcome[mistake] = "runs"
    except (RuntimeError, ValueError) as e:
        message = f"  {type(e).__name__}: {e}"
        print(textwrap.fill(message, 96, subsequent_indent=" " * 4))
        outcome[mistake] = "raises"
assert outcome == {
    "position 0": "runs",
    "first causal row": "runs",
    "full causal mask": "raises",
    "cat on heads": "raises",
}

ours, _ = greedy_decode_by_hand(model, src_val)
print(f"no slip: {agreement(ours):.1%}")
assert agreement(ours) == 1.0

# %% [markdown]
# - **position 0**: every new token sits at position 0. Nothing crashes; most rows decode
#   other tokens.
# - **first causal row**: the causal mask kept "to be safe", sliced to its *first* row. It
#   blocks every key but `<bos>`. Silent.
# - **full causal mask**: a `[B, 1, t, t]` mask for scores of `[B, h, 1, t]`. The book's
#   attention checks that the mask broadcasts, and the error names `Lq`.
# - **cat on heads**: keys appended along the heads. The same check names `Lk`: the mask covers
#   the positions so far, the key tensor one.
#
# ## 5. Token-identical: the trained model and random models
#
# Three decoders: the naive loop, our hand-built cache, and `helpers.greedy_decode(use_cache=True)`.
# The last is the library version of the same cache, built into `DecoderLayer`. On the trained
# model and the 1000 validation sequences:

# %%
cached_val = greedy_decode(model, src_val, use_cache=True)
shapes = (naive_val.shape, ours.shape, cached_val.shape)
print("naive {} | by hand {} | helpers cached {}".format(*(tuple(x) for x in shapes)))
assert torch.equal(ours, naive_val) and torch.equal(cached_val, naive_val)
print(f"identical tokens on all {src_val.size(0)} sequences")

# %% [markdown]
# Agreement on a trained model is a weak test when its top logit wins by a wide margin. A small
# numerical difference between the paths could not flip the argmax. Random models are a harder
# test, because their top two logits lie much closer together. The cell prints the median gap at
# the first step. Four configurations, 64 padded sources each, decoded until `<eos>` and for the
# full length without stopping:

# %% tags=["nbval-ignore-output"]
def top2_gap(m, src):
    """Median gap between the two largest logits of the first decoding step."""
    with torch.no_grad():
        memory, src_mask = m.encode(src)
        bos = torch.full((src.size(0), 1), BOS_ID)
        top2 = m.decode(bos, memory, src_mask, need_weights=False)[0][:, -1].topk(2).values
    return (top2[:, 0] - top2[:, 1]).median().item()


configs = [
    dict(d_model=32, num_heads=2, dff=64, num_layers=1),
    dict(d_model=64, num_heads=4, dff=256, num_layers=2),
    dict(d_model=96, num_heads=8, dff=192, num_layers=3),
    dict(d_model=128, num_heads=4, dff=512, num_layers=4),
]
src_r, _ = make_reversal_dataset(64, seed=5, min_len=1, max_len=20)
gap_trained = top2_gap(model, src_val[:64])
print(f"trained model: median top-2 logit gap {gap_trained:.2f}")
for i, c in enumerate(configs):
    torch.manual_seed(100 + i)
    rand = Transformer(VOCAB_SIZE, VOCAB_SIZE, max_len=24, **c).eval()
    for stop in (True, False):
        a = greedy_decode(rand, src_r, use_cache=False, stop_at_eos=stop)
        b = greedy_decode(rand, src_r, use_cache=True, stop_at_eos=stop)
        h, _ = greedy_decode_by_hand(rand, src_r, stop_at_eos=stop)
        assert torch.equal(a, b) and torch.equal(a, h), (c, stop)
    gap = top2_gap(rand, src_r)
    print(f"{c}: median top-2 gap {gap:.2f}; identical tokens, {tuple(a.shape)} without stopping")
    assert gap < gap_trained / 4

# %% [markdown]
# ## 6. Speed against output length and batch size
#
# Outputs of up to 512 new tokens need a model whose position table is that long. The trained
# model has `max_len` 14. Timing does not need a trained model, so we use an **untrained** one. It
# has the `Transformer` constructor's default shape, that of
# [the reference chapter](intro.md#the-reference-chapter), and `max_len = 513`. With
# `stop_at_eos=False`, an early `<eos>` cannot end a run. One source sequence, batch 1. The
# timings vary from run to run; the tokens of the two loops must not.

# %% tags=["nbval-ignore-output"]
from helpers.repro.numerics import timing_label

torch.manual_seed(0)
long_model = Transformer(VOCAB_SIZE, VOCAB_SIZE, max_len=513).eval()
lc = long_model.config
print(f"d_model {lc.d_model}, {lc.num_heads} heads, dff {lc.dff}, {lc.num_layers} layers")
src_t = src_val[:1]
lengths = [16, 64, 256, 512]
for use_cache in (False, True):  # warm-up
    greedy_decode(long_model, src_t, max_len=9, use_cache=use_cache)
timing = {}
for n_new in lengths:
    best = {}
    for use_cache in (False, True):
        runs = []
        for _ in range(3 if n_new <= 64 else 1):
            t0 = time.perf_counter()
            toks = greedy_decode(
                long_model, src_t, max_len=n_new + 1, use_cache=use_cache, stop_at_eos=False
            )
            runs.append(time.perf_counter() - t0)
        best[use_cache] = (min(runs), toks)
    assert torch.equal(best[False][1], best[True][1]) and best[True][1].size(1) == n_new + 1
    timing[n_new] = (best[False][0], best[True][0])
    print(
        f"{n_new:>4} new tokens: naive {1e3 * best[False][0]:8.1f} ms, "
        f"cached {1e3 * best[True][0]:7.1f} ms, "
        f"speed-up {best[False][0] / best[True][0]:5.1f}x, identical tokens"
    )
print(timing_label())

# %% [markdown]
# Figure 13.3 shows the same timings. The counts of section 1 predict that the speed-up grows
# with the length: naive step $t$ reprocesses $t$ tokens, a cached step one. Compare the
# speed-ups printed for 16 and for 512 new tokens.
#
# :::{dropdown} Going deeper: what a cached step still pays for
# Its one query attends to $t$ keys. In every layer, `torch.cat` copies the whole cached K and V
# into new tensors one position longer: $2\, t\, d_{model}$ numbers per sequence. And the step
# builds a new padding mask of $t$ entries. Section 8 removes the copy.
# :::

# %% jupyter={"source_hidden": true} tags=["figure", "hide-input", "nbval-ignore-output"]
fig, ax = plt.subplots(figsize=(6, 3.6))
for j, (label, style) in enumerate((("naive", "o-"), ("KV cache", "s--"))):
    ax.plot(lengths, [timing[n_new][j] for n_new in lengths], style, label=label)
ax.set_yscale("log")
ax.set_ylabel("seconds (log scale)")
ax.set_xscale("log", base=2)
ax.set_xticks(lengths, [str(n_new) for n_new in lengths])
ax.set_xlabel("new tokens")
ax.legend()
ax.set_title("Figure 13.3: greedy decoding time,\nuntrained d=128 model, batch 1", fontsize=11)
plt.tight_layout()
plt.show()

# %% [markdown]
# The reversal task writes at most 13 tokens. How much of the saving the clock sees then depends on
# the batch; the dropdowns below measure it.
#
# :::{dropdown} Going deeper: the reversal task, one sequence at a time or a thousand at once
# The reversal model writes at most 13 tokens, so by the counts of section 1 the naive loop
# processes at most 7 times the tokens the cached loop does. The next cell decodes with the
# trained model, naive and cached side by side (alternating, the fastest of a few runs each). It
# decodes 20 validation sources one at a time (batch 1), and all 1000 validation sources in one
# batch (as sections 4 and 5 decode them).
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["nbval-ignore-output", "hide-cell"]
def fastest_pair(run, repeats):
    """run(use_cache) -> tokens. The fastest of `repeats` alternating runs of each path."""
    best, outs = {False: float("inf"), True: float("inf")}, {}
    for _ in range(repeats):
        for use_cache in (False, True):
            t0 = time.perf_counter()
            outs[use_cache] = run(use_cache)
            best[use_cache] = min(best[use_cache], time.perf_counter() - t0)
    return best, outs


def one_at_a_time(use_cache, n=20):
    """The first n validation sources, each decoded alone; the rows padded to one tensor."""
    rows = [greedy_decode(model, src_val[i : i + 1], use_cache=use_cache) for i in range(n)]
    width = max(r.size(1) for r in rows)
    pad = torch.nn.functional.pad
    return torch.cat([pad(r, (0, width - r.size(1)), value=PAD_ID) for r in rows])


workloads = {
    "batch 1 (20 sources, one at a time)": (one_at_a_time, 3),
    "batched (1000 sources at once)": (lambda c: greedy_decode(model, src_val, use_cache=c), 2),
}
speedup = {}
for name, (run, repeats) in workloads.items():
    best, outs = fastest_pair(run, repeats)
    assert torch.equal(outs[False], outs[True])  # identical tokens
    speedup[name] = best[False] / best[True]
    print(
        f"{name:>36}: naive {1e3 * best[False]:7.1f} ms, cached {1e3 * best[True]:7.1f} ms, "
        f"speed-up {speedup[name]:.2f}x, identical tokens"
    )
print(timing_label())

# %% [markdown]
# :::{dropdown} Going deeper: why the batch matters
# In the printed run the speed-up at batch 1000 is the larger. On this 13-token output, the cache
# saved more of the time when 1000 sequences shared each step. Why, when the counts of section 1
# are the same per sequence? The next cell times one decoder pass over 1 position and over 13
# positions, at batch 1 and at batch 1000.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["nbval-ignore-output", "hide-cell"]
pass_ms = {}
with torch.no_grad():
    for B in (1, 1000):
        memory_b, mask_b = model.encode(src_val[:B])
        for L in (1, 13):
            tgt_b = torch.full((B, L), BOS_ID)
            runs = []
            for _ in range(10 if B == 1 else 3):
                t0 = time.perf_counter()
                model.decode(tgt_b, memory_b, mask_b, need_weights=False)
                runs.append(time.perf_counter() - t0)
            pass_ms[B, L] = 1e3 * min(runs)
    for B in (1, 1000):
        ratio = pass_ms[B, 13] / pass_ms[B, 1]
        print(
            f"batch {B:>4}: 1 position {pass_ms[B, 1]:7.2f} ms, 13 positions "
            f"{pass_ms[B, 13]:7.2f} ms, ratio {ratio:.1f}"
        )
print(timing_label())

# %% [markdown]
# :::{dropdown} Going deeper: a fixed cost per operation, and the GPU
# In the printed run, at batch 1 a pass over 13 positions costs less than twice a pass over one.
# Most of a one-position pass's time is a cost that does not grow with the number of rows: a fixed
# cost per operation. Launching each of the many small operations of a pass is one candidate,
# which this chapter does not measure. So removing rows saves little. At batch 1000 the same pass
# multiplies matrices with 13,000 rows instead of 1,000, and the time grows more with the rows
# (the larger ratio printed). The rows the cache removes are then time saved. In these runs, the
# cache saved more time on long outputs and large batches than on one short reversal at a time.
#
# This book has not yet measured the cache on a GPU.
# :::

# %% [markdown]
# ## 7. What the cache costs in memory
#
# Each decoder layer keeps, per sequence, one key and one value vector of size $d_{model}$ for
# every target position. The heads split $d_{model}$; they do not add to it. The layer also keeps
# the cross-attention keys and values of the $L_s$ source positions. In float32 (4 bytes):
#
# $$
# \text{bytes} = N_{layers} \cdot B \cdot 2\, d_{model} \cdot 4 \cdot (t + L_s)
# $$
#
# so $2 \cdot d_{model} \cdot 4$ bytes per token per layer. Here $t$ counts the positions fed to
# the decoder: `<bos>` and every new token except the last, which is never fed back. So 512 new
# tokens leave 512 cached positions. We check the formula against the tensors of our hand-built
# cache, after the two sources of section 3 and after 512 new tokens with the long model.

# %%
def cache_bytes(caches):
    return sum(t.numel() * t.element_size() for c in caches for t in c.values())


def formula(cfg, B, t, Ls, bytes_per=4):
    return cfg.num_layers * B * 2 * cfg.d_model * bytes_per * (t + Ls)


per_token = 2 * cfg.d_model * 4
print(
    f"trained model: {per_token} bytes per token per layer, "
    f"x {cfg.num_layers} layers = {per_token * cfg.num_layers} bytes per token"
)
t2 = caches2[0]["self_k"].size(2)
print(
    f"after {t2} positions, B=2, Ls={src2.size(1)}: "
    f"formula {formula(cfg, 2, t2, src2.size(1))} bytes, tensors {cache_bytes(caches2)} bytes"
)
assert cache_bytes(caches2) == formula(cfg, 2, t2, src2.size(1))

_, caches_long = greedy_decode_by_hand(long_model, src_t, max_len=513, stop_at_eos=False)
t_long, lc = caches_long[0]["self_k"].size(2), long_model.config
print(
    f"long model after 512 new tokens, t={t_long} cached positions: "
    f"formula {formula(lc, 1, t_long, src_t.size(1)) / 2**20:.3f} MiB, "
    f"tensors {cache_bytes(caches_long) / 2**20:.3f} MiB"
)
assert t_long == 512 and cache_bytes(caches_long) == formula(lc, 1, t_long, src_t.size(1))

# %% [markdown]
# :::{dropdown} Going deeper: the cache of a large model
# Small here, but the formula scales with every factor. Take a decoder-only model with 32 layers
# and $d_{model} = 4096$, in 16-bit floats. The next cell compares its cache for 8 sequences of
# 4096 tokens with its weights. The weights are about $12\, d_{model}^2$ per layer:
# $4 d_{model}^2$ in the attention projections and $8 d_{model}^2$ in a feed-forward network of
# width $4 d_{model}$. A decoder-only model has no cross-attention. At that size the cache
# outgrows the weights, and every cached step reads all of it. Multi-query attention
# {cite}`shazeer2019` shrinks the cache by letting every query head share one key/value head;
# grouped-query attention {cite}`ainslie2023` lets groups of query heads share one. Exercise
# 13.2 computes what sharing saves.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
big = SimpleNamespace(num_layers=32, d_model=4096)
per_tok_big = formula(big, 1, 1, 0, bytes_per=2)
cache_big = per_tok_big * 4096 * 8
weights_big = 12 * big.d_model**2 * big.num_layers * 2
print(f"{per_tok_big / 2**10:.0f} KiB per token; 4096 tokens x 8 sequences: ", end="")
print(f"{cache_big / 2**30:.0f} GiB")
print(f"the weights: about {weights_big / 2**30:.0f} GiB")

# %% [markdown]
# :::{dropdown} Going deeper: memory bandwidth
# The multi-query paper's argument is the memory bandwidth of reloading keys and values at every
# decoding step. Pope et al. {cite}`pope2023` count the cache's memory among the costs to plan for
# when they partition large models for inference.
# :::
#
# ## 8. A preallocated cache
#
# The cache of section 3 grows with `torch.cat`: at every step, in every layer, it copies all $t$
# cached positions into new tensors one position longer. A preallocated cache allocates two buffers
# of shape `[B, h, L_max, d_k]` per layer, once. Step $t$ writes its key and value at position $t$,
# and attention reads positions $0..t$. `helpers.decoding.static_cache` does this for the book's
# `Transformer`. Its `write_kv(buf, new, pos)` writes `new` at `pos` and returns the written
# positions as a view of the buffer, with no copy. The padding mask is a preallocated buffer too,
# filled one column per step.
#
# Hugging Face's `StaticCache` is a preallocated cache too, and writes the same way, but for
# another reason. The next cell prints the first line of its docstring and of its layer's, and
# the lines of the layer's update that write and return (installed version). The update returns
# the whole buffers, all `L_max` positions, at every step, so attention must mask the positions
# not yet written. Then the cell prints `write_kv` and the shape it returns at two steps.

# %%
import transformers
from transformers.cache_utils import StaticCache, StaticLayer

from helpers.decoding.static_cache import allocate_static_caches, greedy_decode_static, write_kv

print(f"transformers {transformers.__version__}")
print("StaticCache:", inspect.getdoc(StaticCache).split(". ")[0] + ".")
print("StaticLayer:", " ".join(inspect.getdoc(StaticLayer).splitlines()[:2]))
hf_lines = [
    line.strip()
    for line in inspect.getsource(StaticLayer.update).splitlines()
    if line.strip().startswith(("self.keys.index_copy_", "self.values.index_copy_", "return"))
]
print("StaticLayer.update:")
print("\n".join("    " + line for line in hf_lines))
assert any("index_copy_(2, cache_position" in line for line in hf_lines)
print(inspect.getsource(write_kv))
buf = torch.zeros(1, cfg.num_heads, 14, cfg.d_model // cfg.num_heads)
new = torch.ones(1, cfg.num_heads, 1, cfg.d_model // cfg.num_heads)
views = [tuple(write_kv(buf, new, pos).shape) for pos in (0, 5)]
print(f"write_kv returns {views[0]} at step 0 and {views[1]} at step 5")
assert views == [(1, cfg.num_heads, 1, cfg.d_model // cfg.num_heads),
                 (1, cfg.num_heads, 6, cfg.d_model // cfg.num_heads)]  # fmt: skip

# %% [markdown]
# So Hugging Face's cache keeps every shape fixed, and its docstrings say it is built for
# `torch.compile` and `torch.export`. Ours returns a view that grows by one position per step, so
# its shapes change at every step, and that purpose is lost. What our preallocated cache removes
# is the copy (and the rebuilt padding mask), nothing else.
# A fixed-shape version would attend to all `L_max` positions with a mask, as Hugging Face's
# does; this chapter does not build it.

# %% [markdown]
# The check, as in section 5: the two sources of section 3, the 1000 validation sequences, and the
# four random models, until `<eos>` and without stopping. For the two sources the cell also
# compares the buffers with the `torch.cat` cache of section 3. And it checks that the buffers are
# never reallocated.

# %%
static2 = allocate_static_caches(model, src2.size(0), model.max_len)
ptrs = [(c["self_k"].data_ptr(), c["self_v"].data_ptr()) for c in static2]
out_static = greedy_decode_static(model, src2, caches=static2)
t2 = out2.size(1) - 1  # positions fed: the last token is never fed back
assert torch.equal(out_static, out2)
assert [(c["self_k"].data_ptr(), c["self_v"].data_ptr()) for c in static2] == ptrs
for mine, cat in zip(static2, caches2):
    for key in ("self_k", "self_v"):
        torch.testing.assert_close(mine[key][:, :, :t2], cat[key])
        assert not mine[key][:, :, t2:].any()  # never written
print(
    f"layer 0 buffer {tuple(static2[0]['self_k'].shape)}: the first {t2} positions hold the "
    f"torch.cat cache {tuple(caches2[0]['self_k'].shape)}, the rest is unwritten"
)
assert torch.equal(greedy_decode_static(model, src_val), naive_val)
print(f"validation: identical tokens on all {src_val.size(0)} sequences")
for i, c in enumerate(configs):
    torch.manual_seed(100 + i)
    rand = Transformer(VOCAB_SIZE, VOCAB_SIZE, max_len=24, **c).eval()
    for stop in (True, False):
        a = greedy_decode(rand, src_r, use_cache=False, stop_at_eos=stop)
        assert torch.equal(greedy_decode_static(rand, src_r, stop_at_eos=stop), a), (c, stop)
print(f"random models: identical tokens for all {len(configs)} configurations, both ways")

# %% [markdown]
# The buffers reserve `L_max` positions from the first step: here 14 per sequence, where the
# `torch.cat` cache held the positions decoded so far. In section 7's formula, $t$ becomes `L_max`.
#
# Does removing the copy make decoding faster? By at most what the copies cost, and the
# dropdown below measures that on the long model of section 6.
#
# :::{dropdown} Going deeper: what the copy costs
# The next cell times the two operations that differ, for one layer's K at $t = 511$:
# `torch.cat` of the cache with one new position, and `write_kv` of that position. It also
# decodes one source for 512 new tokens with the `torch.cat` cache, to get the time of one
# step. One step of the long model makes four copies, K and V in each of its two layers, most of
# them shorter than 511 positions. The last line says what four copies of the largest size take
# of one average step.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["nbval-ignore-output", "hide-cell"]
def fastest_of(runs, repeats):
    """runs: {name: f()}. The fastest of `repeats` alternating calls of each, and the outputs."""
    best, outs = {k: float("inf") for k in runs}, {}
    for _ in range(repeats):
        for k, f in runs.items():
            t0 = time.perf_counter()
            outs[k] = f()
            best[k] = min(best[k], time.perf_counter() - t0)
    return best, outs


best, _ = fastest_of(
    {
        "cat": lambda: greedy_decode(
            long_model, src_t, max_len=513, use_cache=True, stop_at_eos=False
        )
    },
    2,
)
cat_1_s = best["cat"]  # batch 1, 512 new tokens, torch.cat cache
print(
    f"torch.cat cache, 512 new tokens: {1e3 * cat_1_s:.0f} ms, {1e3 * cat_1_s / 512:.2f} ms a step"
)
k_cache = torch.randn(1, lc.num_heads, 511, lc.d_model // lc.num_heads)
k_new = torch.randn(1, lc.num_heads, 1, lc.d_model // lc.num_heads)
k_buf = torch.zeros(1, lc.num_heads, 513, lc.d_model // lc.num_heads)
op_us, _ = fastest_of(
    {
        "torch.cat": lambda: [torch.cat([k_cache, k_new], dim=2) for _ in range(200)],
        "write_kv": lambda: [write_kv(k_buf, k_new, 511) for _ in range(200)],
    },
    3,
)
print(
    f"one layer's K at t = 511: torch.cat {op_us['torch.cat'] / 200 * 1e6:.1f} us, "
    f"write_kv {op_us['write_kv'] / 200 * 1e6:.1f} us"
)
n_copies = 2 * lc.num_layers  # K and V, in every layer
copy_share = n_copies * op_us["torch.cat"] / 200 / (cat_1_s / 512)
print(
    f"{n_copies} copies of that size: {copy_share:.0%} of one torch.cat step "
    "(batch 1, 512 new tokens)"
)
print(timing_label())

# %% [markdown]
# :::{dropdown} Going deeper: reading the copy's cost
# The preallocated cache removes the copies, and it fills its padding mask one column per step
# instead of building a new one. The last line printed bounds the copies' share of a step at
# batch 1: four copies of the largest size stand for the shorter ones of earlier steps. How
# much the copies cost depends on the batch, the length and the machine.
# :::
#
# ## 9. How long a cache lives
#
# A cache belongs to one batch of sources. Keeping it for the next batch saves allocations; the
# buffers of section 8 are made for that. But a kept cache still holds the last batch's keys and
# values. Our loop appends to `self_k` when it is there, and projects the cross-attention keys
# only when they are absent. The cell decodes 100 validation sources, then the next 100 with the
# same caches, three ways:
#
# - as they are: the self-attention part holds the first batch's positions;
# - with only the self-attention part dropped, as a preallocated cache overwrites it position by
#   position: the cross-attention keys of the first batch stay;
# - emptied (`cache.clear()` in every layer).

# %% tags=["nbval-ignore-output"]
first, second = src_val[:100], src_val[100:200]
want = greedy_decode(model, second, use_cache=False)
kept = [{} for _ in model.decoder.layers]
greedy_decode_by_hand(model, first, caches=kept)
try:
    greedy_decode_by_hand(model, second, caches=kept)
except ValueError as e:
    print(textwrap.fill(f"kept as it is: ValueError: {e}", 96, subsequent_indent="    "))
else:
    raise AssertionError("a kept self-attention cache should not fit the new mask")
for cache in kept:  # the first batch's keys, again, then only the self-attention part dropped
    cache.clear()
greedy_decode_by_hand(model, first, caches=kept)
stale_cross = kept[0]["cross_k"]
for cache in kept:
    del cache["self_k"], cache["self_v"]
stale, _ = greedy_decode_by_hand(model, second, caches=kept)
assert kept[0]["cross_k"] is stale_cross  # the first batch's cross-attention keys, reused
n_stale = int(sequences_equal(stale, tgt_val[100:200]).sum())
print(f"self-attention part dropped: {n_stale} of 100 right, no error")
for cache in kept:
    cache.clear()
fresh, _ = greedy_decode_by_hand(model, second, caches=kept)
n_fresh = int(sequences_equal(fresh, tgt_val[100:200]).sum())
print(f"emptied: {n_fresh} of 100 right, the naive loop's tokens")
assert torch.equal(fresh, want) and n_stale < n_fresh / 2

# %% [markdown]
# The first way raises an error: the mask covers the new batch's positions, the cache holds the old
# batch's too. The second is silent and wrong: every row attends to another source. A preallocated
# cache kept between batches overwrites its self-attention part, so it can run into the second.
# `helpers.decoding.static_cache` therefore projects the cross-attention keys at step 0 of every
# decode, and gives its caches a `reset()` that zeroes the buffers and drops the cross-attention
# keys; `greedy_decode_static` calls it on caches it is handed. The cell decodes both batches with
# one allocation, checks each against the naive loop, then calls `reset()`.

# %%
shared = allocate_static_caches(model, 100)
for name, batch in (("first", first), ("second", second)):
    got = greedy_decode_static(model, batch, caches=shared)
    ref = greedy_decode(model, batch, use_cache=False)
    n_diff = sum(a != b for a, b in zip(got.tolist(), ref.tolist()))
    print(f"{name} batch of 100, one allocation: {n_diff} rows differ from the naive loop")
    assert torch.equal(got, ref)
shared.reset()
left = sum(int(c[k].count_nonzero()) for c in shared for k in ("self_k", "self_v", "pad"))
print(f"after reset(): {left} nonzero entries; layer 0 holds {sorted(shared[0])}")
assert left == 0 and "cross_k" not in shared[0]

# %% [markdown]
# ## The finished piece
#
# `helpers.DecoderLayer` keeps the cache of section 3 when `greedy_decode(use_cache=True)` passes
# it a dict. `self_k`/`self_v` grow along `dim=2`; `cross_k`/`cross_v` are projected on the first
# call. Section 8's preallocated cache is `helpers.greedy_decode_static`. We drive the library
# decoder step by step with the tokens decoded in section 3, and compare every cached tensor with
# ours:

# %%
with torch.no_grad():
    memory2, src_mask2 = model.encode(src2)
    lib_caches = [{} for _ in model.decoder.layers]
    for step in range(out2.size(1) - 1):
        model.decoder(
            out2[:, step : step + 1],
            memory2,
            make_padding_mask(out2[:, : step + 1]),
            src_mask2,
            need_weights=False,
            caches=lib_caches,
            start_pos=step,
        )
for i, (mine, lib) in enumerate(zip(caches2, lib_caches)):
    assert mine.keys() == lib.keys()
    for key in mine:
        torch.testing.assert_close(lib[key], mine[key])
    print(f"layer {i}:", {key: tuple(v.shape) for key, v in lib.items()}, "-> same tensors as ours")

# %% [markdown]
# The library's cache holds the same tensors as ours, and section 5 showed that both decode
# the naive loop's tokens. The next chapter removes the encoder: a decoder-only character model.
# Its generation loop keeps the same self-attention cache, plus temperature and top-k sampling.
#
# ## Summary
#
# - A KV cache keeps each decoder layer's self-attention keys and values and feeds the decoder
#   only the newest token; the cross-attention keys and values are projected once.
# - Under the causal mask the earlier keys and values do not change, up to float rounding. The
#   cached decoders produced the naive loop's tokens on the trained and four random models.
# - The slips are one line each. Two raise no error and decode other tokens; only a check of the
#   output catches them.
# - The work saved grows with the output length (section 1). The cache costs
#   $2 \cdot d_{model}$ numbers per position and layer, for target and source positions.
# - A preallocated cache writes at a position index instead of copying (section 8). Its views
#   grow with every step, so unlike Hugging Face's `StaticCache` it does not keep shapes fixed
#   for `torch.compile`.
# - A cache belongs to one batch. Kept for the next one, it must be emptied first (section 9):
#   stale cross-attention keys decode wrong tokens without an error.
#
# ## Exercises
#
# ### Exercise 13.1 (predict, then run): the memory, projected again and again
#
# Section 1 decoded one source of $L_s = 14$ positions for 13 steps. In total, how many rows
# does the key projection of layer 0's *cross*-attention process in the naive loop, and how many
# with the cache? Predict, then count with `count_rows`.

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
# Solution to exercise 13.1
total_naive, total_cached = sum(naive[mem]), sum(cached[mem])
print(f"naive: {total_naive} rows (13 steps x {Ls}); cached: {total_cached} rows (once)")
assert total_naive == 13 * Ls and total_cached == Ls

# %% [markdown]
# ### Exercise 13.2 (predict, then run): sharing keys and values between heads
#
# Give the 32-layer model of section 7 32 query heads of $d_k = 128$ ($32 \cdot 128 = 4096$).
# With grouped-query attention {cite}`ainslie2023`, groups of 4 query heads share one key/value
# head, so each layer caches 8 key/value heads; with multi-query attention {cite}`shazeer2019`,
# all 32 share one. Predict the cache per token in KiB (16-bit floats) for 32, 8 and 1 key/value
# heads, and the size of the cache of 8 sequences of 4096 tokens in each case.

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
# Solution to exercise 13.2
def kv_bytes_per_token(num_layers, kv_heads, d_k, bytes_per=2):
    return num_layers * 2 * kv_heads * d_k * bytes_per  # K and V, per layer


for kv_heads in (32, 8, 1):
    per_tok = kv_bytes_per_token(32, kv_heads, 128)
    print(
        f"{kv_heads:>2} key/value head(s): {per_tok / 2**10:5.0f} KiB per token, "
        f"{per_tok * 4096 * 8 / 2**30:5.2f} GiB for 8 x 4096 tokens"
    )

# %% [markdown]
# ### Exercise 13.3 (implement): one decoder step with a KV cache
#
# Write `decode_step(model, tokens, memory, src_mask, caches)`. `tokens` `[B, t]` holds the
# tokens so far (`<bos>` first); `caches` holds one dict per decoder layer, empty at first. It
# feeds the decoder only the newest token, at position $t - 1$; in every layer it appends that
# position's self-attention keys and values to `cache["self_k"]` / `cache["self_v"]` along the
# sequence dimension, projects the memory to `cache["cross_k"]` / `cache["cross_v"]` on the
# first step only, blocks `<pad>` keys with `make_padding_mask(tokens)`, and returns the logits
# `[B, V]` for the next token. Use the layers' sub-modules (`ln1`, `self_mha.project_kv`,
# `self_mha.attend`, ...), not `model.decoder(..., caches=...)`. Write also
# `reset_caches(caches)`, which empties them in place for the next batch.
# `check_decode_step(decode_step, reset_caches)` decodes a batch on two random models, resets,
# and starts a second batch with the same list. It compares every step with the naive decoder
# and inspects the cache after every step and reset.

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 13.3
def decode_step(model, tokens, memory, src_mask, caches):
    dec = model.decoder
    x = dec.embed(tokens[:, -1:], start_pos=tokens.size(1) - 1)  # [B, 1, d]
    self_mask = make_padding_mask(tokens)  # [B, 1, 1, t]
    for layer, cache in zip(dec.layers, caches):
        h = layer.ln1(x)
        k, v = layer.self_mha.project_kv(h, h)  # [B, h, 1, d_k]
        if "self_k" in cache:
            k = torch.cat([cache["self_k"], k], dim=2)
            v = torch.cat([cache["self_v"], v], dim=2)
        cache["self_k"], cache["self_v"] = k, v
        a, _ = layer.self_mha.attend(h, k, v, attn_mask=self_mask, need_weights=False)
        x = x + a
        h = layer.ln2(x)
        if "cross_k" not in cache:
            cache["cross_k"], cache["cross_v"] = layer.cross_mha.project_kv(memory, memory)
        a, _ = layer.cross_mha.attend(
            h, cache["cross_k"], cache["cross_v"], attn_mask=src_mask, need_weights=False
        )
        x = x + a
        x = x + layer.ffn(layer.ln3(x))
    return model.out_proj(dec.ln_final(x)[:, -1])


def reset_caches(caches):
    for cache in caches:  # in place: the decoder keeps using this list
        cache.clear()  # self_k, self_v and the last batch's cross_k, cross_v


check_decode_step(decode_step, reset_caches)
