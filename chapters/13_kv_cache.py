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
# # The KV cache: decoding without recomputing the past
#
# Greedy decoding (chapter 11) writes one token per step. At step $t$ it runs the whole decoder
# over all $t$ tokens written so far, and then uses only the last row of the output. Every other
# row was already computed, with exactly the same result, at the step before. A **KV cache** keeps
# what those rows contribute to later steps, their attention keys and values, and feeds the
# decoder only the newest token.
#
# This chapter
#
# 1. counts the work each step does, naive and cached, by instrumenting the model;
# 2. proves *why* caching is allowed: under the causal mask, the keys and values of earlier
#    positions never change;
# 3. builds the encoder-decoder cache by hand, one dict per decoder layer, and prints its shapes
#    as it grows;
# 4. reproduces the classic cache bugs (a wrong position, a wrong mask row, a wrong `torch.cat`
#    dimension);
# 5. checks that the hand-built cache is **token-identical** to naive decoding and to
#    `helpers.greedy_decode(use_cache=True)`, on the trained reversal model and on random models;
# 6. measures speed against output length, and the cache's memory.

# %%
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

torch.manual_seed(0)
torch.set_num_threads(
    1
)  # every tensor here is small: one CPU thread is enough, and steady on a busy machine

# %% [markdown]
# The trained reversal model of chapter 10 (loaded from the checkpoint cache; the first call in a
# fresh clone trains it), and the 1000 validation sequences of its recipe (drawn with another seed
# than the training data).

# %%
model = trained_reversal_model(progress=False, verbose=False)
cfg = model.config
print({k: getattr(cfg, k) for k in ("d_model", "num_heads", "num_layers", "max_len")})
src_val, tgt_val = make_reversal_dataset(1000, seed=BOOK_RECIPE.val_seed)
print("validation src", tuple(src_val.shape), "| e.g.", describe(src_val[0]))

# %% [markdown]
# ## 1. What the naive loop recomputes
#
# We count, at every step, how many rows go through three places of the decoder, using forward
# hooks on the linear layers (they fire whichever code path calls them):
#
# - the token embedding: how many target tokens the decoder processes;
# - the query projection of layer 0's self-attention: how many **query rows** attend;
# - the key projection of layer 0's **cross**-attention: how many rows of the encoder's memory are
#   projected to keys.
#
# One source of 12 digits, decoded for all 13 steps (`stop_at_eos=False`), naive and cached.

# %%
def count_rows(model, run):
    """Call run(); return per call of each hooked module the number of rows it processed."""
    layer0 = model.decoder.layers[0]
    where = {
        "tokens": model.decoder.embed.emb,
        "self queries": layer0.self_mha.W_q,
        "memory rows -> cross keys": layer0.cross_mha.W_k,
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


src1 = src_val[[i for i in range(1000) if src_val[i, 11] != PAD_ID][:1]]  # a 12-digit source
Ls = src1.size(1)
naive = count_rows(model, lambda: greedy_decode(model, src1, use_cache=False, stop_at_eos=False))
cached = count_rows(model, lambda: greedy_decode(model, src1, use_cache=True, stop_at_eos=False))
steps = len(naive["tokens"])
print(f"source length Ls = {Ls}, steps = {steps}")
print(
    f"{'step':>4} | {'tokens':>13} | {'self queries':>13} | {'self scores':>13} | {'memory rows':>13}"
)
print(
    f"{'':>4} | {'naive cached':>13} | {'naive cached':>13} | {'naive cached':>13} | {'naive cached':>13}"
)
mem_cached = (
    cached["memory rows -> cross keys"] + [0] * steps
)  # the cached path projects memory once
for t in range(1, steps + 1):
    nq, cq = naive["self queries"][t - 1], cached["self queries"][t - 1]
    print(
        f"{t:>4} | {naive['tokens'][t - 1]:>6} {cached['tokens'][t - 1]:>6} | {nq:>6} {cq:>6} | "
        f"{nq * t:>6} {cq * t:>6} | {naive['memory rows -> cross keys'][t - 1]:>6} {mem_cached[t - 1]:>6}"
    )

assert naive["tokens"] == list(range(1, steps + 1)) and cached["tokens"] == [1] * steps
assert naive["memory rows -> cross keys"] == [Ls] * steps  # memory re-projected every step
assert cached["memory rows -> cross keys"] == [Ls]  # ... versus exactly once

# %% [markdown]
# At step $t$ the naive loop processes $t$ tokens, computes $t \times t$ self-attention scores
# (per head and layer), and projects the whole source memory to cross-attention keys and values
# again. The cached loop processes one token, computes one row of $t$ scores, and projects the
# memory once, before the first step.
#
# Summed over an output of $n$ tokens, the naive decoder processes
# $1 + 2 + \dots + n = n(n+1)/2$ tokens and $\sum t^2 \approx n^3/3$ score entries; the cached one
# processes $n$ tokens and $n(n+1)/2$ scores. The hook counts above are these formulas for
# $n = 13$; the plot extends them to $n = 512$.

# %%
n = torch.arange(1, 513, dtype=torch.float64)
work = {
    "naive: tokens": n.cumsum(0),
    "cached: tokens": n.clone(),
    "naive: self-attention scores": (n**2).cumsum(0),
    "cached: self-attention scores": n.cumsum(0),
}
assert work["naive: tokens"][12] == sum(naive["tokens"]) and work["cached: tokens"][12] == sum(
    cached["tokens"]
)

fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
for ax, what in zip(axes, ("tokens", "self-attention scores")):
    for path, style in (("naive", "-"), ("cached", "--")):
        ax.plot(n, work[f"{path}: {what}"], style, label=path)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("new tokens n")
    ax.set_ylabel(f"total {what} (per layer)")
    ax.set_title(f"{what} processed for n new tokens")
    ax.legend()
plt.tight_layout()
plt.show()
for m_ in (16, 64, 256, 512):
    print(
        f"n = {m_:>3}: naive processes {int(work['naive: tokens'][m_ - 1]):>6} tokens, "
        f"cached {m_:>3}  ({work['naive: tokens'][m_ - 1] / m_:.1f}x fewer)"
    )

# %% [markdown]
# Tokens processed is what costs time in the linear layers (the projections and the feed-forward
# network, most of the arithmetic in a model this shape): the cached loop does $(n+1)/2$ times
# less of it. Whether the *clock* shows that ratio is another matter, measured in section 6.
#
# ## 2. Why the past does not change
#
# Caching is only correct if the keys and values of positions $0..t-1$ are the same at step $t$
# as they were at step $t-1$. They are, because of the causal mask: position $i$ attends only to
# positions $\le i$, in every layer, so nothing computed at position $i$ can depend on a token
# that arrives later. (In a model without a causal mask, an encoder for instance, every new token
# would change every earlier row and there would be nothing to cache.)
#
# The check: run the decoder over a prefix of 5 tokens and over the same prefix plus one token,
# capture the keys and values every self-attention layer computes, and compare the first 5 rows.

# %%
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
        f"{name}: step 5 {tuple(b.shape)}, step 6 {tuple(a.shape)}, first 5 rows unchanged (< 1e-5): {diff < 1e-5}"
    )
    torch.testing.assert_close(a[:, :5], b, atol=1e-5, rtol=1e-5)

# %% [markdown]
# The differences are zero or at the level of float rounding (a matrix product over 6 rows may sum
# in a different order than over 5). The cross-attention keys and values are even simpler: they
# are projections of the encoder's memory, which does not change at all while the decoder writes.
#
# ## 3. Building the cache by hand
#
# One decoding step with a cache, for each decoder layer (Pre-Norm, as in chapter 06):
#
# 1. **self-attention**: project the newest position's normalised vector to a key and a value,
#    `[B, h, 1, d_k]` each, append them to the cached ones **along the sequence dimension**
#    (`dim=2` of `[B, h, L, d_k]`), and let the one new query attend to all $t$ keys;
# 2. **cross-attention**: the keys and values of the memory, `[B, h, L_s, d_k]`, are computed on
#    the first step and reused afterwards; the new query attends to them with the source padding
#    mask, exactly as before;
# 3. the feed-forward network, on the one new position.
#
# **Which mask does the one-row query need?** The causal mask exists to hide keys that lie after
# the query. The single query *is* the newest position: every cached key is in its past. The last
# row of a causal mask is therefore all `False`:

# %%
for t in (1, 4, 9):
    last_row = make_causal_mask(t)[0, 0, -1]
    print(f"t = {t}: last row of the causal mask blocks {int(last_row.sum())} of {t} keys")
    assert not last_row.any()

# %% [markdown]
# What remains is key padding: the naive loop blocks `<pad>` keys in the target (rows that already
# finished are padded with `<pad>`), so the cached loop blocks them too, with
# `make_padding_mask(out)` of shape `[B, 1, 1, t]`: it broadcasts over heads and the single query
# row. (For a row that is still writing there is no `<pad>` among its keys unless the model itself
# emitted one; keeping the mask makes the two loops compute exactly the same function.)
#
# Also easy to forget: the new token's **position**. It is token number `step` of the target,
# so it is embedded with `start_pos=step`; otherwise it gets position 0's encoding at every step.
#
# The function below is the whole cached decoder, written with the layer's own sub-modules.
# The `mistake` argument switches in one classic bug at a time; section 4 uses it.

# %%
@torch.no_grad()
def greedy_decode_by_hand(model, src, max_len=None, stop_at_eos=True, mistake=None, trace=None):
    """Greedy decoding with a KV cache we manage ourselves: one dict per decoder layer.
    -> (tokens [B, <= max_len], caches). trace: a list that receives the shapes at each step."""
    model.eval()
    max_len = model.max_len if max_len is None else max_len
    dec = model.decoder
    memory, src_mask = model.encode(src)  # the encoder runs once
    B = src.size(0)
    out = torch.full((B, 1), BOS_ID, dtype=torch.long)
    finished = torch.zeros(B, dtype=torch.bool)
    caches = [{} for _ in dec.layers]
    for step in range(max_len - 1):
        # the newest token only, at its true position
        x = dec.embed(out[:, -1:], start_pos=0 if mistake == "position 0" else step)  # [B, 1, d]
        self_mask = make_padding_mask(out)  # [B, 1, 1, t]: padding keys only, no causal part
        if mistake == "first causal row":
            self_mask = self_mask | make_causal_mask(step + 1)[:, :, :1]
        if mistake == "full causal mask":
            self_mask = self_mask | make_causal_mask(step + 1)
        for layer, cache in zip(dec.layers, caches):
            h = layer.ln1(x)
            k, v = layer.self_mha.project_kv(h, h)  # [B, h, 1, d_k]
            if "self_k" in cache:
                dim = (
                    1 if mistake == "cat on heads" else 2
                )  # 2 = the sequence dim of [B, h, L, d_k]
                k, v = (
                    torch.cat([cache["self_k"], k], dim=dim),
                    torch.cat([cache["self_v"], v], dim=dim),
                )
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
# Watch the cache grow while the trained model reverses two sources of different lengths (the
# second is padded). Layer 0's self-attention keys gain one row per step; its cross-attention
# keys keep the shape `[B, h, L_s, d_k]` and are the very same tensor at every step.

# %%
src2 = src_val[:2]
print("src:", describe(src2[0]), "|", describe(src2[1]))
trace = []
out2, caches2 = greedy_decode_by_hand(model, src2, trace=trace)
print(
    f"{'step':>4}  {'new x':>12}  {'self mask':>14}  {'self K (layer 0)':>18}  {'cross K (layer 0)':>18}"
)
for r in trace:
    print(
        f"{r['step']:>4}  {str(r['x']):>12}  {str(r['mask']):>14}  {str(r['self_k']):>18}  {str(r['cross_k']):>18}"
    )
print("output:", describe(out2[0]), "|", describe(out2[1]))

h_, dk = cfg.num_heads, cfg.d_model // cfg.num_heads
assert [r["self_k"] for r in trace] == [(2, h_, s + 1, dk) for s in range(len(trace))]
assert len({r["cross_ptr"] for r in trace}) == 1  # computed once, reused
assert torch.equal(out2, greedy_decode(model, src2, use_cache=False))
assert sequences_equal(out2, tgt_val[:2]).all()  # and both rows are correct reversals

# %% [markdown]
# The output matches the naive loop (the last line of the cell asserts it). The decoding stops
# when both rows have produced `<eos>`; the first row finished earlier and was padded with
# `<pad>`, which the padding mask hides from later steps.
#
# ## 4. Four cache bugs, reproduced
#
# Each of these is a one-line slip. Two of them raise an error; two of them run and quietly
# decode the wrong tokens, which only a comparison with the naive loop reveals. We measure each
# on the 1000 validation sequences by the fraction of rows decoded exactly like the naive loop
# (the exact fractions depend on the trained weights, so the tests do not compare this cell's
# output; they check its assertions).

# %% tags=["nbval-ignore-output"]
naive_val = greedy_decode(model, src_val, use_cache=False)


def agreement(tokens):
    L = max(tokens.size(1), naive_val.size(1))
    pad = lambda t: torch.nn.functional.pad(t, (0, L - t.size(1)), value=PAD_ID)  # noqa: E731
    return (pad(tokens) == pad(naive_val)).all(1).float().mean().item()


for mistake in ("position 0", "first causal row", "full causal mask", "cat on heads"):
    try:
        toks, _ = greedy_decode_by_hand(model, src_val, mistake=mistake)
        frac = agreement(toks)
        print(f"{mistake:>16}: runs, and decodes {frac:.1%} of the rows like the naive loop")
        assert frac < 0.5
    except RuntimeError as e:
        print(f"{mistake:>16}: {type(e).__name__}: {str(e).splitlines()[0][:90]}")

ours, _ = greedy_decode_by_hand(model, src_val)
print(f"{'no mistake':>16}: {agreement(ours):.1%}")
assert agreement(ours) == 1.0

# %% [markdown]
# - **position 0**: every new token is embedded at position 0. Nothing crashes; the model sees a
#   sequence whose tokens all sit at the same place, and the reversal falls apart.
# - **first causal row**: someone keeps the causal mask "to be safe" but slices its *first* row.
#   That row blocks every key except the first, so the new query sees only `<bos>`. Silent.
# - **full causal mask**: the `[1, 1, t, t]` mask does not broadcast against the `[B, h, 1, t]`
#   scores of a single query. At least it fails loudly, from the second step on.
# - **cat on heads**: appending along `dim=1` (heads) instead of `dim=2` (positions) makes a key
#   tensor with $2h$ "heads" of one position each, which no longer lines up with the $h$ query
#   heads. Here it errors; in code that reshapes before it checks, it can run and be wrong.
#
# ## 5. Token-identical: the trained model and random models
#
# Three decoders: the naive loop, our hand-built cache, and `helpers.greedy_decode(use_cache=True)`
# (the library version of the same cache, built into `DecoderLayer`). On the trained model and the
# 1000 validation sequences:

# %%
cached_val = greedy_decode(model, src_val, use_cache=True)
print(
    "naive",
    tuple(naive_val.shape),
    "| by hand",
    tuple(ours.shape),
    "| helpers cached",
    tuple(cached_val.shape),
)
assert torch.equal(ours, naive_val) and torch.equal(cached_val, naive_val)
print("identical tokens on all 1000 sequences")

# %% [markdown]
# A trained model decodes with large margins between its top two logits, which makes agreement
# easy. Random models are a harder test: their logits are close together, so any real difference
# between the paths would flip some argmax. Four configurations, 64 padded sources each, decoded
# both until `<eos>` and for the full length without stopping:

# %%
configs = [
    dict(d_model=32, num_heads=2, dff=64, num_layers=1),
    dict(d_model=64, num_heads=4, dff=256, num_layers=2),
    dict(d_model=96, num_heads=8, dff=192, num_layers=3),
    dict(d_model=128, num_heads=4, dff=512, num_layers=4),
]
src_r, _ = make_reversal_dataset(64, seed=5, min_len=1, max_len=20)
for i, c in enumerate(configs):
    torch.manual_seed(100 + i)
    rand = Transformer(VOCAB_SIZE, VOCAB_SIZE, max_len=24, **c).eval()
    for stop in (True, False):
        a = greedy_decode(rand, src_r, use_cache=False, stop_at_eos=stop)
        b = greedy_decode(rand, src_r, use_cache=True, stop_at_eos=stop)
        h, _ = greedy_decode_by_hand(rand, src_r, stop_at_eos=stop)
        assert torch.equal(a, b) and torch.equal(a, h), (c, stop)
    print(c, "-> identical tokens,", tuple(a.shape), "with stop_at_eos=False")

# %% [markdown]
# ## 6. Speed against output length
#
# Outputs of 16, 64, 256 and 512 new tokens need a model whose position table is that long: the
# trained model has `max_len` 14. Timing does not need a trained model, so we use an **untrained**
# one with the book's default shape ($d = 128$, 4 heads, 2 layers) and `max_len = 513`, and pass
# `stop_at_eos=False` so that an early `<eos>` cannot end a run. One source sequence (batch 1, the
# usual generation case). `tools/bench_decoding.py` runs the same measurement with more repeats.
#
# The timings depend on the machine and on whatever else it runs, so the cell's output is not
# compared by the tests; it asserts only what is robust: the tokens are identical, and the cache is
# faster at 256 and 512 tokens.

# %% tags=["nbval-ignore-output"]
torch.manual_seed(0)
long_model = Transformer(VOCAB_SIZE, VOCAB_SIZE, max_len=513).eval()
src_t = src_val[:1]
lengths = [16, 64, 256, 512]
(
    greedy_decode(long_model, src_t, max_len=9, use_cache=True),
    greedy_decode(long_model, src_t, max_len=9),
)  # warm-up
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
        f"{n_new:>4} new tokens: naive {1e3 * best[False][0]:8.1f} ms, cached {1e3 * best[True][0]:7.1f} ms, "
        f"speed-up {best[False][0] / best[True][0]:5.1f}x, identical tokens"
    )
assert timing[256][1] < timing[256][0] and timing[512][1] < timing[512][0]

# %% [markdown]
# The right panel shows the milliseconds per generated token. The cached loop's cost per token stays
# roughly flat: every step does the same amount of work except the attention row, which grows by
# one key. The naive loop's cost per token grows with the length, because step $t$ reprocesses $t$
# tokens. (The output of this cell is not compared by the tests either.)

# %% tags=["nbval-ignore-output"]
fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
for j, (label, style) in enumerate((("naive", "o-"), ("KV cache", "s--"))):
    axes[0].plot(lengths, [timing[n_new][j] for n_new in lengths], style, label=label)
    axes[1].plot(lengths, [1e3 * timing[n_new][j] / n_new for n_new in lengths], style, label=label)
axes[0].set_yscale("log")
axes[0].set_ylabel("seconds (log scale)")
axes[0].set_title("Total decoding time")
axes[1].set_ylim(bottom=0)
axes[1].set_ylabel("ms per generated token")
axes[1].set_title("Time per generated token")
for ax in axes:
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [str(n_new) for n_new in lengths])
    ax.set_xlabel("new tokens")
    ax.legend()
fig.suptitle("Greedy decoding, untrained d=128 model, batch 1", fontsize=11)
plt.tight_layout()
plt.show()

# %% [markdown]
# For a handful of tokens the gain is modest: each step then costs mostly fixed overhead (dozens
# of small operator calls, the same for one token or sixteen), not arithmetic, so saving
# arithmetic saves little. The longer the
# output, the larger the share of the naive loop's time that is recomputation. The cache pays
# for long outputs, which is what language models produce; for a 13-token reversal it is a
# modest gain.
#
# ## 7. What the cache costs in memory
#
# Each decoder layer keeps, per sequence, one key and one value vector of size $d_{model}$ for every
# target position (the heads split $d_{model}$, they do not add to it), plus the cross-attention keys
# and values of the $L_s$ source positions. In float32 (4 bytes):
#
# $$
# \text{bytes} = N_{layers} \cdot B \cdot 2\, d_{model} \cdot 4 \cdot (t + L_s)
# $$
#
# so $2 \cdot d_{model} \cdot 4$ bytes per token per layer. Here $t$ counts the positions fed to the
# decoder: `<bos>` and every new token except the last, which is never fed back, so 512 new tokens
# leave 512 cached positions. We check the formula against the tensors our hand-built cache holds
# after decoding the two sources of section 3, and after 512 new tokens with the long model.

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
    f"after {t2} positions, B=2, Ls={src2.size(1)}: formula {formula(cfg, 2, t2, src2.size(1))} bytes, "
    f"tensors {cache_bytes(caches2)} bytes"
)
assert cache_bytes(caches2) == formula(cfg, 2, t2, src2.size(1))

_, caches_long = greedy_decode_by_hand(long_model, src_t, max_len=513, stop_at_eos=False)
t_long, lc = caches_long[0]["self_k"].size(2), long_model.config
print(
    f"long model after 512 new tokens, t={t_long} cached positions: "
    f"formula {formula(lc, 1, t_long, src_t.size(1)) / 2**20:.3f} MiB, tensors {cache_bytes(caches_long) / 2**20:.3f} MiB"
)
assert t_long == 512 and cache_bytes(caches_long) == formula(lc, 1, t_long, src_t.size(1))

# %% [markdown]
# Small here, but the formula scales with every factor. A model with 32 layers and
# $d_{model} = 4096$ in 16-bit floats needs, per sequence and per token:

# %%
big = SimpleNamespace(num_layers=32, d_model=4096)
per_tok_big = formula(big, 1, 1, 0, bytes_per=2)
print(
    f"{per_tok_big / 2**10:.0f} KiB per token; 4096 tokens x 8 sequences: {per_tok_big * 4096 * 8 / 2**30:.0f} GiB"
)
assert per_tok_big == 32 * 2 * 4096 * 2

# %% [markdown]
# That is why large models share keys and values between query heads (multi-query and
# grouped-query attention) and store the cache in 8 bits: at long contexts the cache, not the
# weights, fills the accelerator's memory.
#
# ## The finished piece
#
# `helpers.DecoderLayer` keeps exactly this cache when `greedy_decode(use_cache=True)` passes it a
# dict: `self_k`/`self_v` grow along `dim=2`, `cross_k`/`cross_v` are projected on the first call.
# Drive the library decoder step by step with the tokens we decoded in section 3, and compare every
# cached tensor with ours:

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
# The library's cache holds the same tensors as the one we built, and section 5 showed that both
# decode exactly what the naive loop decodes. The next decoding chapter (chapter 14) removes the
# encoder altogether: a decoder-only character model, whose generation loop uses the same
# self-attention cache, plus temperature and top-k sampling.
