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
# # 8. Test before you train
#
# We test two properties that a correct model has whatever its weights: causality and padding
# invariance. Then we break the masks on purpose, watch the tests fail, and wrap them in one
# reusable call.
# The picture shows causality: which outputs change when later tokens change.
#
# ![Largest logit change per position when the tokens after t are rewritten](figures/08_test_before_you_train.png)

# %% [markdown] tags=["run-time"]
# **Run time:** about 10 s.

# %% [markdown]
# A wrong mask does not crash: every broken model in this chapter runs without an error.
# Without a causal mask the decoder can read the next input token, the very label it must
# predict. Without a padding mask the encoder reads `<pad>`. Its output then depends on how much
# padding the batch happened to need. (A page of the Experiments part,
# [the cross-mask experiment](../appendix/experiment_cross_mask.ipynb), trains a model with a
# wrong cross-attention mask and measures what it costs.)
#
# So before training anything, we test two properties that a correct model has **whatever its
# weights**. They need no training, only a few forward passes:
#
# 1. **Causality.** The decoder output at position $t$ depends on the target tokens at
#    positions $\le t$ only. Rewrite every token after $t$: the outputs at $0..t$ stay the
#    same.
# 2. **Padding invariance.** Appending more `<pad>` to the source changes no output.
#
# The causality test also checks the other direction: the outputs after $t$ do change. That
# half is not a property of every correct model. It depends on the weights, as we will see.
#
# Then we break the masks on purpose and watch the tests fail. A test that has never been seen
# failing proves nothing. Figure 8.1 shows the first property as a picture.

# %%
import math
from contextlib import ExitStack
from unittest import mock

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

import helpers.core.model
from helpers import (
    NUM_OFFSET,
    PAD_ID,
    VOCAB_SIZE,
    MultiHeadAttention,
    Transformer,
    describe,
    fully_masked_rows,
    make_padding_mask,
    make_reversal_dataset,
)

_ = torch.manual_seed(0)
model = Transformer(VOCAB_SIZE, VOCAB_SIZE).eval()  # random weights: the properties hold for any
src, tgt = make_reversal_dataset(4, seed=7, max_len=8)
tgt_in = tgt[:, :-1]  # the decoder input: <bos> + reversed digits (+ <eos>, <pad>)
print("src", tuple(src.shape), "tgt_in", tuple(tgt_in.shape))
for i in range(2):
    print(f"  {describe(src[i]):<44} | {describe(tgt_in[i])}")

# %% [markdown]
# ## Property 1: causality
#
# `scramble(ids, t)` rewrites every token after position $t$ into a different digit, so every
# later position really changes. We compare the logits before and after. At positions $\le t$
# the largest change must be float rounding (below $10^{-5}$). **Each** later position should
# change by more than $10^{-3}$: its own input token changed. That second half shows that the
# test can see a change at all.
#
# One forward pass tests every $t$ at once. The scrambled copies for all $t$ are stacked along
# the batch dimension. That also checks that a sequence's output does not depend on its batch
# neighbours.


# %%
def scramble(ids: torch.Tensor, t: int) -> torch.Tensor:
    """Every token after position t becomes a different digit."""
    out = ids.clone()
    out[:, t + 1 :] = NUM_OFFSET + (ids[:, t + 1 :] + 1) % 10
    assert (out[:, t + 1 :] != ids[:, t + 1 :]).all()
    return out


@torch.no_grad()
def change_matrix(model, src, tgt_in):
    """[t, position]: largest |logit change| at each position when the tokens after t change."""
    B, Lt = tgt_in.shape
    ts = range(Lt - 1)
    a = model(src, tgt_in)  # [B, Lt, V]
    b = model(src.repeat(len(ts), 1), torch.cat([scramble(tgt_in, t) for t in ts]))
    return (b.view(len(ts), B, Lt, -1) - a).abs().amax(dim=(1, 3))


def causality(model, src, tgt_in):
    """For each t: (largest |logit change| at positions <= t, smallest at a later position)."""
    change = change_matrix(model, src, tgt_in)
    return [(row[: t + 1].max().item(), row[t + 1 :].min().item()) for t, row in enumerate(change)]


def causal_test_passes(model):
    return all(early < 1e-5 and late > 1e-3 for early, late in causality(model, src, tgt_in))


def small(v):
    """A float-rounding-sized difference, printed the same on every CPU."""
    return "< 1e-5" if v < 1e-5 else f"{v:.1e}"


print("  t | largest change at positions <= t | smallest change at a position > t")
for t, (early, late) in enumerate(causality(model, src, tgt_in)):
    print(f"{t:>3} | {small(early):>32} | {late:>34.3f}")
    assert early < 1e-5 and late > 1e-3

# %% [markdown]
# The two halves are different claims. The first holds for a correct model whatever its weights.
# The second holds for these random weights, not for all weights. A model whose parameters are
# all zero is still correctly masked, yet its logits do not move when its input does:

# %%
zero_model = Transformer(VOCAB_SIZE, VOCAB_SIZE).eval()
with torch.no_grad():
    for p in zero_model.parameters():
        p.zero_()
zero_rows = causality(zero_model, src, tgt_in)
zero_early, zero_late = max(e for e, _ in zero_rows), max(v for _, v in zero_rows)
print(f"all-zero weights: largest change at positions <= t: {zero_early}, after t: {zero_late}")
assert zero_early == 0 and zero_late == 0  # invariance holds, sensitivity fails

# %% [markdown]
# So a failure of the second half says "this model does not react to its input", not "the mask
# is wrong".

# %% [markdown]
# Figure 8.1 draws the same measurement as a grid: one row per $t$, one column per output
# position, the colour the largest logit change. A causal decoder leaves the lower-left
# triangle (positions $\le t$) untouched. The same weights without the causal mask change
# every position in every row, each by more than 0.1.

# %% jupyter={"source_hidden": true} tags=["figure", "hide-input", "opening-figure"]
with mock.patch.object(
    helpers.core.model,
    "make_causal_mask",
    lambda L, device=None: torch.zeros(1, 1, L, L, dtype=bool),
):
    leaky = change_matrix(model, src, tgt_in)
grids = [("with the causal mask", change_matrix(model, src, tgt_in)), ("without it", leaky)]
fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True)
for ax, (title, grid) in zip(axes, grids):
    shown = grid.clamp(min=1e-7).log10()
    im = ax.imshow(shown, cmap="magma", vmin=-7, vmax=1)
    n_t, n_pos = grid.shape
    ax.plot(range(n_t), range(n_t), "c-", lw=1.2)  # the last position that must stay unchanged
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("output position")
    ax.set_xticks(range(n_pos))
axes[0].set_ylabel("t (every token after t rewritten)")
fig.colorbar(im, ax=axes, label="log10 largest |logit change| (floor 1e-7)", shrink=0.85)
fig.suptitle("Figure 8.1: which outputs change when the tokens after t change", fontsize=11)
plt.show()
assert leaky.min() > 0.1

# %% [markdown]
# ## Property 2: padding invariance
#
# Appending `<pad>` to every source sequence changes the source length $L_s$ and the shape of
# every encoder tensor. It must change no logit by more than float rounding ($10^{-5}$). We try
# 1, 3 and 10 extra pads.


# %%
@torch.no_grad()
def padding_change(model, src, tgt_in, extra):
    """Largest |logit change| when `extra` <pad> columns are appended to the source."""
    padded = F.pad(src, (0, extra), value=PAD_ID)
    return (model(src, tgt_in) - model(padded, tgt_in)).abs().max().item()


def padding_invariant(model, src, tgt_in, extra):
    return padding_change(model, src, tgt_in, extra) < 1e-5


for extra in (1, 3, 10):
    change = padding_change(model, src, tgt_in, extra)
    print(
        f"src padded from {src.size(1)} to {src.size(1) + extra} columns:"
        f" largest |logit change| {small(change)}"
    )
    assert change < 1e-5

# %% [markdown]
# The same property in the form that matters in training: a sequence's output must not depend
# on which other sequences share its batch. Alone, the shortest sequence needs no padding.
# Batched, it is padded up to the longest one.

# %%
lengths = (src != PAD_ID).sum(1)
i = int(lengths.argmin())
alone_src = src[i : i + 1, : int(lengths[i])]  # trimmed: no <pad> at all
alone_tgt = tgt_in[i : i + 1, : int((tgt_in[i] != PAD_ID).sum())]
with torch.no_grad():
    alone = model(alone_src, alone_tgt)
    batched = model(src, tgt_in)[i : i + 1, : alone_tgt.size(1)]
alone_vs_batched = (alone - batched).abs().max().item()
print(f"sequence {i} alone: src {tuple(alone_src.shape)}; in the batch: src {tuple(src.shape)}")
print(f"largest |logit difference| alone vs in the padded batch: {small(alone_vs_batched)}")
torch.testing.assert_close(alone, batched, atol=1e-5, rtol=1e-5)

# %% [markdown]
# ## Why the tests run in eval mode
#
# Dropout zeroes a random subset of activations on every forward pass in training mode. Two
# forward passes over the *same* input then differ, and a causality test would "fail" on a
# correct model. `model.eval()` turns dropout off. `torch.no_grad()` skips building the
# autograd graph, which the tests do not need: its outputs have no `grad_fn`.

# %%
model.train()
with torch.no_grad():
    r1, r2 = model(src, tgt_in), model(src, tgt_in)
train_early = max(early for early, _ in causality(model, src, tgt_in))
model.eval()
with torch.no_grad():
    e1, e2 = model(src, tgt_in), model(src, tgt_in)
train_diff, eval_diff = (r1 - r2).abs().max().item(), (e1 - e2).abs().max().item()
print(
    f"train mode: two forwards differ by up to {train_diff:.2f};"
    f" largest change at positions <= t: {train_early:.2f}"
)
print(f"eval mode:  two forwards differ by up to {eval_diff}")
assert train_diff > 1e-2 and train_early > 1e-2  # the causality test would "fail"
assert eval_diff == 0
assert e1.grad_fn is None and model(src, tgt_in).grad_fn is not None  # no graph under no_grad

# %% [markdown]
# ## Breaking the causal mask
#
# `helpers.Transformer.decode` builds its self-attention mask with `make_causal_mask`, looked
# up in the module `helpers.core.model`. Patching that name (`unittest.mock.patch.object`) swaps in
# a broken mask for the duration of a `with` block. The library's source stays untouched.
# Three mistakes:
#
# - `diagonal=0` instead of `diagonal=1`: the diagonal is blocked too. Each position is blind
#   to itself, and position 0 sees nothing at all.
# - `triu` forgotten: `torch.ones(L, L)`, every key blocked.
# - no causal mask at all (only padding): every position sees the future.


# %%
def causal_diag0(L, device=None):
    return torch.triu(torch.ones(L, L, dtype=torch.bool, device=device), diagonal=0)[None, None]


def causal_no_triu(L, device=None):
    return torch.ones(L, L, dtype=torch.bool, device=device)[None, None]


def causal_none(L, device=None):
    return torch.zeros(L, L, dtype=torch.bool, device=device)[None, None]


causal_variants = {
    "triu(diagonal=1), correct": helpers.core.model.make_causal_mask,
    "triu(diagonal=0)": causal_diag0,
    "no triu (all ones)": causal_no_triu,
    "no causal mask": causal_none,
}
for name, fn in causal_variants.items():
    print(f"{name:<26}\n{fn(4)[0, 0].int()}")

# %% [markdown]
# Run the causality test with each. It fails if it fails for any $t$.

# %%
results = {}
for name, fn in causal_variants.items():
    with mock.patch.object(helpers.core.model, "make_causal_mask", fn):
        early = max(e for e, _ in causality(model, src, tgt_in))
        results[name] = causal_test_passes(model)
    verdict = "passes" if results[name] else "FAILS"
    print(f"{name:<26} largest change at positions <= t: {small(early):>7}  -> test {verdict}")
assert results["triu(diagonal=1), correct"] and not results["no causal mask"]

# %% [markdown]
# Dropping the causal mask is caught, as expected. But `diagonal=0` and the missing `triu`
# **pass**. Are they harmless? No. Both block more than they should. Both create query rows in
# which *every* key is blocked: position 0 with `diagonal=0`, every position without `triu`.
# What happens next depends on how the attention treats such a row (chapters 03 and 07):
#
# - `helpers.MultiHeadAttention` and `F.scaled_dot_product_attention` (in torch 2.13.0) give a
#   fully masked row **zero** attention weights. The query takes nothing from the other
#   positions; its output is `W_o`'s bias (chapter 03). Nothing leaks, and the causality test
#   cannot tell. The model is merely crippled: without `triu`, decoder self-attention is dead.
# - Masking with `finfo.min` but without that guard turns a fully masked row into **uniform**
#   attention over all keys, the future included: a leak.
# - Masking with `-inf` turns it into NaN, which then spreads everywhere.
#
# We check this by swapping the attention primitive as well. The model's `forward` runs
# `MultiHeadAttention._attention_sdpa` in every attention, so patching that method changes all
# of them.


# %%
def attention_finfo_min(self, Q, K, V, attn_mask):
    """finfo.min, and no special case for fully masked rows."""
    scores = Q @ K.transpose(-2, -1) / math.sqrt(self.d_k)
    if attn_mask is not None:
        scores = scores.masked_fill(attn_mask, torch.finfo(scores.dtype).min)
    return scores.softmax(-1) @ V


def attention_neg_inf(self, Q, K, V, attn_mask):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(self.d_k)
    if attn_mask is not None:
        scores = scores.masked_fill(attn_mask, float("-inf"))
    return scores.softmax(-1) @ V


attentions = {
    "zero rows (helpers, SDPA)": None,
    "finfo.min": attention_finfo_min,
    "-inf": attention_neg_inf,
}
table = {}
print("torch", torch.__version__.split("+")[0])
print(f"{'causal mask':<26}" + "".join(f"{a:>27}" for a in attentions))
for cname, cfn in causal_variants.items():
    row = []
    for aname, afn in attentions.items():
        with ExitStack() as stack:
            stack.enter_context(mock.patch.object(helpers.core.model, "make_causal_mask", cfn))
            if afn is not None:
                stack.enter_context(mock.patch.object(MultiHeadAttention, "_attention_sdpa", afn))
            with torch.no_grad():
                has_nan = model(src, tgt_in).isnan().any().item()
            passes = causal_test_passes(model)
        table[cname, aname] = passes
        row.append(("pass" if passes else "FAIL") + (" (NaN)" if has_nan else ""))
    print(f"{cname:<26}" + "".join(f"{r:>27}" for r in row))

for a in attentions:  # the correct mask passes whatever the attention; no mask always fails
    assert table["triu(diagonal=1), correct", a] and not table["no causal mask", a]
for c in ("triu(diagonal=0)", "no triu (all ones)"):  # over-masking: caught only when unsafe
    assert table[c, "zero rows (helpers, SDPA)"]
    assert not table[c, "finfo.min"] and not table[c, "-inf"]

# %% [markdown]
# :::{dropdown} Going deeper: why the reference chapter's test fails at once
# The [reference chapter](intro.md#the-reference-chapter) says that `diagonal=0`, or no `triu` at
# all, makes the causality test fail at once. For the reference chapter's own attention that
# is true. It fills blocked scores with `finfo.min` and has no special case for fully masked
# rows, like `attention_finfo_min` above, and that column fails. For an attention that zeroes
# those rows, as ours and SDPA (in torch 2.13.0) do, it is false: the test passes.
# :::
#
# ## A third property: every query can see something
#
# Over-masking needs its own test, and it is a cheap one. We capture the mask the decoder
# actually receives: a forward pre-hook on `model.decoder` sees its arguments. No query row may
# be fully masked, and every real (non-pad) query must be allowed to attend to itself. It
# passes on the correct mask and fails on both over-masked ones.


# %%
def decoder_self_mask(model, causal_fn):
    seen = {}
    hook = model.decoder.register_forward_pre_hook(lambda mod, args: seen.update(mask=args[2]))
    try:
        with mock.patch.object(helpers.core.model, "make_causal_mask", causal_fn), torch.no_grad():
            model(src, tgt_in)
    finally:
        hook.remove()
    return seen["mask"]


def every_query_sees_something(mask, ids):
    real = ids != PAD_ID  # [B, Lt]
    sees_itself = ~mask[:, 0].diagonal(dim1=-2, dim2=-1)  # [B, Lt]
    return not fully_masked_rows(mask).any().item() and bool(sees_itself[real].all())


mask_ok = {}
for name, fn in causal_variants.items():
    m = decoder_self_mask(model, fn)
    mask_ok[name] = every_query_sees_something(m, tgt_in)
    blind = int((m[:, 0].diagonal(dim1=-2, dim2=-1) & (tgt_in != PAD_ID)).sum())
    verdict = "holds" if mask_ok[name] else "FAILS"
    print(
        f"{name:<26} fully masked rows: {int(fully_masked_rows(m).sum()):>3},"
        f" real queries blind to themselves: {blind:>3}  -> property {verdict}"
    )
assert mask_ok["triu(diagonal=1), correct"]
assert not mask_ok["triu(diagonal=0)"] and not mask_ok["no triu (all ones)"]

# %% [markdown]
# With "no causal mask", no row is fully masked and this property holds. The causality test is
# the one that catches that bug. The tests complement each other.
#
# ## Breaking the padding mask
#
# Two mistakes:
#
# - **PAD keys not masked**: the padding mask is all False (e.g. a wrong `pad_id`, or a mask
#   that was never passed on).
# - **Queries masked instead of keys**: the mask is built as `[B, 1, L, 1]` instead of
#   `[B, 1, 1, L]`. The rows of padded *queries* are blocked, while real queries still read
#   the padded *keys*. A small subclass puts it in the encoder: its `encode` builds the
#   transposed mask. Cross-attention keeps the right one; with $L_t = 9 \ne L_s = 10$ here,
#   the transposed mask would not even fit its scores.


# %%
def no_padding_mask(ids, pad_id=PAD_ID):
    return torch.zeros_like(ids, dtype=torch.bool)[:, None, None, :]


class QueryMaskingTransformer(Transformer):
    def encode(self, src):
        key_mask = make_padding_mask(src)  # [B, 1, 1, Ls]: right, used by cross-attention
        query_mask = key_mask.transpose(-1, -2)  # [B, 1, Ls, 1]: wrong, used by the encoder
        return self.encoder(src, query_mask), key_mask


query_model = QueryMaskingTransformer(VOCAB_SIZE, VOCAB_SIZE).eval()
query_model.load_state_dict(model.state_dict())  # the very same weights

padding_results = {"correct": padding_change(model, src, tgt_in, 3)}
with mock.patch.object(helpers.core.model, "make_padding_mask", no_padding_mask):
    padding_results["PAD keys not masked"] = padding_change(model, src, tgt_in, 3)
padding_results["queries masked, not keys"] = padding_change(query_model, src, tgt_in, 3)
for name, change in padding_results.items():
    verdict = "holds" if change < 1e-5 else "FAILS"
    print(
        f"{name:<26} largest |logit change| with 3 more pads: {small(change):>7}"
        f"  -> invariance {verdict}"
    )
assert padding_results["correct"] < 1e-5
assert (
    min(padding_results["PAD keys not masked"], padding_results["queries masked, not keys"]) > 0.1
)

# %% [markdown]
# Masking padded queries *as well as* keys is not wrong. But it creates fully masked rows (the
# `<pad>` queries), which are safe only with an attention that handles them (chapter 03).
# Masking keys is what matters: the key decides what information flows into a query.
#
# ## Check against `helpers`
#
# The properties hold on `helpers.Transformer` in the three configurations below. Each gets
# fresh weights. They hold with dropout configured too, since they are checked in eval mode.

# %%
configs = [
    dict(d_model=32, num_heads=2, dff=64, num_layers=1),
    dict(d_model=64, num_heads=4, dff=128, num_layers=3),
    dict(dropout=0.3),
]
for cfg in configs:
    torch.manual_seed(1)
    m = Transformer(VOCAB_SIZE, VOCAB_SIZE, **cfg).eval()
    rows = causality(m, src, tgt_in)
    early, late = max(e for e, _ in rows), min(v for _, v in rows)
    pad = max(padding_change(m, src, tgt_in, e) for e in (1, 5))
    causal = helpers.core.model.make_causal_mask
    full_rows = int(fully_masked_rows(decoder_self_mask(m, causal)).sum())
    print(
        f"{str(cfg):<52} causality: {small(early)} / {late:.3f}, padding: {small(pad)},"
        f" fully masked rows: {full_rows}"
    )
    assert early < 1e-5 and late > 1e-3 and pad < 1e-5
    assert every_query_sees_something(decoder_self_mask(m, causal), tgt_in)

# %% [markdown]
# ## One reusable call: `check_masks`
#
# The two tests of this chapter are worth running on every model you build. `helpers.check_masks`
# runs both in eval mode and reports each. Causality rewrites the tokens after every position
# $t$. Padding invariance appends 1 and 3 `<pad>` columns; when the position table has no room
# for them, it cuts the source to its longest row instead. Float rounding is relative to the
# size of the numbers, so the allowed change is $10^{-5}$ times the largest logit (or $10^{-5}$
# when no logit exceeds 1). Here it is on the model of this chapter, then on two of its broken
# variants:

# %%
from helpers import check_masks

report = check_masks(model, src, tgt_in)
print(report)
assert report.ok
with mock.patch.object(helpers.core.model, "make_causal_mask", causal_none):
    no_causal = check_masks(model, src, tgt_in)
print(no_causal)
query_masked = check_masks(query_model, src, tgt_in)
print(query_masked)
assert no_causal.failed_checks == ["causality"]
assert query_masked.failed_checks == ["padding invariance"]

# %% [markdown]
# ## Summary
#
# - Two properties hold for a correct model whatever its weights, and need no training.
#   **Causality**: rewriting the tokens after $t$ leaves the logits at positions $\le t$
#   within $10^{-5}$ (Figure 8.1). **Padding invariance**: appending `<pad>` to the source
#   changes no logit by more than $10^{-5}$. That later positions *do* change depends on the
#   weights: an all-zero model changes nothing.
# - They are tested in eval mode. In training mode dropout made two forward passes differ by
#   more than 0.01.
# - Each test was seen failing. No causal mask fails the causality test. No padding mask, or a
#   padding mask on the queries, changed logits by more than 0.1.
# - Over-masking (`diagonal=0`, a missing `triu`) passes the causality test when fully masked
#   rows return zero, as in `helpers` and SDPA. A third property catches it: every query sees
#   some key, and real queries see themselves.
# - `helpers.check_masks(model, src, tgt_in)` runs both tests and reports each.
# - The one thing to remember: a test you have never seen fail proves nothing.
#
# ## Exercises
#
# ### Exercise 8.1 (predict, then run): the causal mask with the wrong polarity
#
# A colleague builds the causal mask with `torch.tril` instead of `torch.triu(..., diagonal=1)`:
# `torch.ones(L, L, dtype=torch.bool).tril()`, which is exactly the negation of the right
# mask. In this book's convention (True = blocked), which keys may position 0 attend to, and
# which may the last position? Does the causality test of this chapter catch it, and does the
# "every query sees something" property?


# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
# Solution to exercise 8.1
def causal_tril(L, device=None):
    return torch.ones(L, L, dtype=torch.bool, device=device).tril()[None, None]


print("the tril mask for L = 4 (1 = blocked):")
print(causal_tril(4)[0, 0].int())
assert torch.equal(causal_tril(6), ~helpers.core.model.make_causal_mask(6))
with mock.patch.object(helpers.core.model, "make_causal_mask", causal_tril):
    tril_causal = causal_test_passes(model)
tril_sees = every_query_sees_something(decoder_self_mask(model, causal_tril), tgt_in)
print(
    f"causality test {'passes' if tril_causal else 'FAILS'};"
    f" every-query-sees-something {'holds' if tril_sees else 'FAILS'}"
)
assert not tril_causal and not tril_sees

# %% [markdown]
# :::{dropdown} Answer to exercise 8.1
# Position 0 may attend only to the future (keys 1 to $L-1$), never to itself; the last
# position may attend to nothing, a fully masked row. Both tests catch it.
# :::

# %% [markdown]
# ### Exercise 8.2 (implement): a causality test
#
# Write `is_causal(model, src, tgt_in)` that returns `True` when the model's logits at
# positions $\le t$ do not change (within $10^{-5}$) when every target token after $t$ is
# rewritten, for every $t$, and `False` otherwise. The model you receive may be in training
# mode. `check_causality_test(is_causal)` runs your test on a correct model, which it must
# pass, and on five models with a broken causal mask, which it must fail: no mask, the wrong
# polarity, position $i$ sees token $i+1$, only the positions after 0 see token $i+1$, and
# position $i$ sees token $i+2$ but not $i+1$.

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 8.2
from helpers.exercises import check_causality_test


@torch.no_grad()
def is_causal(model, src, tgt_in):
    model.eval()  # dropout off: two forward passes must agree
    before = model(src, tgt_in)
    for t in range(tgt_in.size(1) - 1):
        after = model(src, scramble(tgt_in, t))
        if not torch.allclose(before[:, : t + 1], after[:, : t + 1], atol=1e-5, rtol=1e-5):
            return False
    return True


check_causality_test(is_causal)

# %% [markdown]
# ### Exercise 8.3 (implement): a padding test
#
# Write `is_padding_invariant(model, src, tgt_in)` that returns `True` when appending
# `<pad>` columns to the source changes no logit (within $10^{-5}$), else `False`.
# `check_padding_test(is_padding_invariant)` runs it on a correct model and on three models
# with a broken padding mask: none, one that masks padded queries instead of keys, and one whose
# cross-attention blocks `<pad>` for target position 0 only.

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 8.3
from helpers.exercises import check_padding_test


@torch.no_grad()
def is_padding_invariant(model, src, tgt_in):
    model.eval()
    before = model(src, tgt_in)
    for extra in (1, 4):
        after = model(F.pad(src, (0, extra), value=PAD_ID), tgt_in)
        if not torch.allclose(before, after, atol=1e-5, rtol=1e-5):
            return False
    return True


check_padding_test(is_padding_invariant)
