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
# # Greedy decoding
#
# Training (chapter 10) never lets the decoder read its own output: teacher forcing feeds it the
# true prefix and scores every position in one pass. At inference there is no true prefix. The
# decoder must produce one token, append it to its own input, and run again, until it says
# `<eos>`. The simplest rule for "produce one token" is to take the most likely one, the
# **argmax**: greedy decoding.
#
# This chapter writes that loop by hand on one example, printing the output as it grows; then
# makes it work on a batch whose rows finish at different steps; defines exact match; and shows
# what happens when the model is left in training mode, one of the most common inference bugs.

# %%
import dataclasses

import torch

from helpers import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    Transformer,
    decode_digits,
    describe,
    encode_digits,
    make_reversal_dataset,
    trained_reversal_model,
)

torch.manual_seed(0)

# %% tags=["nbval-ignore-output"]
model = trained_reversal_model()  # cached after the first training run (chapter 10)
print(type(model).__name__, "training mode:", model.training)
assert not model.training

# %% [markdown]
# ## One example, step by step
#
# The encoder runs **once**: its output (`memory`) depends only on the source. The decoder then
# runs once per output token. Its input starts as `[<bos>]`; at each step we take the logits of
# the **last** position only (the earlier positions predict tokens we already have), pick the
# argmax, and append it.

# %%
src = encode_digits("730951", width=14)  # digits, <eos>, <pad>...
print("src:", describe(src[0]), tuple(src.shape))

with torch.no_grad():
    memory, src_mask = model.encode(src)
    print("memory", tuple(memory.shape), "src_mask", tuple(src_mask.shape))
    out = torch.tensor([[BOS_ID]])
    for step in range(13):
        logits, _ = model.decode(
            out, memory, src_mask, need_weights=False
        )  # [1, t, V]: a row per position
        probs = logits[0, -1].softmax(-1)
        nxt = probs.argmax()
        out = torch.cat([out, nxt.view(1, 1)], dim=1)
        print(
            f"step {step:2d}: logits {tuple(logits.shape)}  picked {describe([int(nxt)]):>5}"
            f"  -> {describe(out[0])}"
        )
        assert probs[nxt] > 0.5  # the trained model is confident at every step
        if nxt == EOS_ID:
            break

print("reversed:", decode_digits(out[0]))
assert decode_digits(out[0]) == [1, 5, 9, 0, 3, 7]

# %% [markdown]
# The logits grow by one row per step: the loop above re-runs the decoder over the whole prefix
# every time, recomputing keys and values it already computed at the previous step. That is the
# textbook loop and the easiest to get right; the KV cache (a later chapter) removes the
# recomputation and must produce the same tokens.

# %% [markdown]
# ## A batch whose rows finish at different times
#
# In a batch, rows have different lengths, so they emit `<eos>` at different steps. The loop must
# keep going until **every** row is done, and what a finished row produces after its `<eos>` is
# meaningless. First, the loop without any bookkeeping, on three sources of lengths 3, 6 and 10:

# %% tags=["nbval-ignore-output"]
batch = torch.cat([encode_digits(d, width=14) for d in ("123", "480265", "9081726354")])


@torch.no_grad()
def greedy_no_bookkeeping(model, src, steps):
    memory, src_mask = model.encode(src)
    out = torch.full((src.size(0), 1), BOS_ID)
    for _ in range(steps):
        nxt = model.decode(out, memory, src_mask, need_weights=False)[0][:, -1].argmax(-1)
        out = torch.cat([out, nxt[:, None]], dim=1)
    return out


raw = greedy_no_bookkeeping(model, batch, steps=11)
for row in raw:
    print(describe(row))
after_eos = [row[(row == EOS_ID).nonzero()[0, 0] + 1 :] for row in raw[:2]]
print("tokens produced after <eos> in the two short rows:", [describe(t) for t in after_eos])
assert all((t != PAD_ID).any() for t in after_eos)  # junk, not padding

# %% [markdown]
# The short rows keep generating after their `<eos>`: whatever the model likes to produce there
# (the printout shows what this one does), but never `<pad>`. Positions after `<eos>` are
# padding in every training target, and the loss ignores them (chapter 10), so the model was never
# taught what to put there, and `<pad>` is never a target, so its logit only ever got pushed down. The fix is two lines: keep a `finished` flag per row, overwrite the next token of
# a finished row with `<pad>`, and stop as soon as every row is finished.

# %%
@torch.no_grad()
def greedy(model, src, max_len=14):
    model.eval()  # dropout off: see the last section
    memory, src_mask = model.encode(src)
    out = torch.full((src.size(0), 1), BOS_ID)
    finished = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_len - 1):
        nxt = model.decode(out, memory, src_mask, need_weights=False)[0][:, -1].argmax(-1)
        nxt = nxt.masked_fill(finished, PAD_ID)  # finished rows only get padding
        out = torch.cat([out, nxt[:, None]], dim=1)
        finished |= nxt == EOS_ID
        if finished.all():
            break
    return out


pred = greedy(model, batch)
for row in pred:
    print(describe(row))
print("output shape", tuple(pred.shape), "- the loop stopped when the longest row was done")
assert pred.shape == (3, 12)  # <bos> + 10 digits + <eos>
for row, digits in zip(pred, ("123", "480265", "9081726354")):
    eos = int((row == EOS_ID).nonzero()[0, 0])
    assert (row[eos + 1 :] == PAD_ID).all()
    assert decode_digits(row) == [int(c) for c in reversed(digits)]

# %% [markdown]
# ## Exact match
#
# Token accuracy is forgiving: a 12-digit answer with one wrong digit is still 92 % right. The
# task's real metric is **exact match**: the fraction of sequences whose output equals the target
# at every position up to and including `<eos>` (what comes after `<eos>` is padding and does not
# count). One wrong digit, a missing `<eos>`, or an extra digit all make the sequence wrong.

# %% tags=["nbval-ignore-output"]
def my_exact_match(pred, tgt):
    correct = 0
    for p, t in zip(pred.tolist(), tgt.tolist()):
        n = t.index(EOS_ID) + 1  # compare up to and including <eos>
        correct += p[:n] == t[:n]
    return correct / len(tgt)


src_val, tgt_val = make_reversal_dataset(1000, seed=1)  # the held-out set of chapter 09
ours = greedy(model, src_val)
em = my_exact_match(ours, tgt_val)
print(f"exact match on 1000 validation sequences: {em:.3f}")
assert em >= 0.995

# %% [markdown]
# `helpers.greedy_decode` and `helpers.exact_match` are the finished versions of these two
# functions; `exact_match` decodes with the KV cache by default. They must agree with ours, token
# for token.

# %%
from helpers import exact_match, greedy_decode

theirs = greedy_decode(model, src_val)
cached = greedy_decode(model, src_val, use_cache=True)
assert torch.equal(ours, theirs) and torch.equal(ours, cached)
assert exact_match(model, src_val, tgt_val) == em
print("greedy == helpers.greedy_decode == cached decoding; exact match agrees")

# %% [markdown]
# Which sequences does the model still get wrong? With at least 99.5 % right there are at most five.

# %% tags=["nbval-ignore-output"]
wrong = [
    i
    for i, (p, t) in enumerate(zip(ours.tolist(), tgt_val.tolist()))
    if p[: t.index(EOS_ID) + 1] != t[: t.index(EOS_ID) + 1]
]
print(len(wrong), "wrong")
for i in wrong:
    print(
        f"  src {describe(src_val[i][src_val[i] != PAD_ID])}\n  got {describe(ours[i][ours[i] != PAD_ID])}"
    )
assert len(wrong) == round((1 - em) * 1000) <= 5

# %% [markdown]
# ## The pitfall: forgetting `model.eval()`
#
# Dropout zeroes a random subset of activations **in training mode** and does nothing in
# evaluation mode. A model left in training mode at inference is therefore a random function:
# the same input gives different outputs on every call. It is a classic bug because nothing
# fails: the outputs look plausible, only worse and not reproducible. `torch.no_grad()` does not
# help either: it turns off gradient tracking, not dropout.
#
# (The exact numbers below depend on the trained weights, which differ in their low bits from one
# CPU to another; the asserts state what holds everywhere.)
#
# The book's model was trained without dropout (chapter 10 measures why), so its dropout layers
# have probability 0 and the bug would be invisible here. To see it, we load the same weights
# into a model built with dropout 0.1, as in the reference chapter. Dropout has no weights, so the
# state dict fits as is.

# %% tags=["nbval-ignore-output"]
leaky = Transformer.from_config(dataclasses.replace(model.config, dropout=0.1))
leaky.load_state_dict(model.state_dict())
x, y = src_val[:200], tgt_val[:200]

leaky.eval()
with torch.no_grad():
    a, b = leaky(x, y[:, :-1]), leaky(x, y[:, :-1])
print("eval mode,  two calls: max |logit difference| =", (a - b).abs().max().item())
assert torch.equal(a, b)

leaky.train()  # the bug: still in training mode
with torch.no_grad():  # no_grad does not switch dropout off
    a, b = leaky(x, y[:, :-1]), leaky(x, y[:, :-1])
diff = (a - b).abs().max().item()
print(f"train mode, two calls: max |logit difference| = {diff:.2f}")
assert diff > 0.1

# %% [markdown]
# What this does to decoding: the hand-written loop below has no `model.eval()` in it, so it keeps
# whatever mode the model is in. In training mode, decoding the same sequences twice gives different
# outputs, and exact match drops. Because this model never saw dropout during training, the drop
# is brutal; a model trained with dropout suffers less, but its outputs are just as random from
# one call to the next.

# %% tags=["nbval-ignore-output"]
@torch.no_grad()
def greedy_keeps_mode(model, src, max_len=14):
    memory, src_mask = model.encode(src)
    out = torch.full((src.size(0), 1), BOS_ID)
    finished = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_len - 1):
        nxt = model.decode(out, memory, src_mask, need_weights=False)[0][:, -1].argmax(-1)
        nxt = nxt.masked_fill(finished, PAD_ID)
        out = torch.cat([out, nxt[:, None]], dim=1)
        finished |= nxt == EOS_ID
        if finished.all():
            break
    return out


torch.manual_seed(0)
x, y = src_val[:300], tgt_val[:300]
leaky.train()
first, second = greedy_keeps_mode(leaky, x), greedy_keeps_mode(leaky, x)
n_diff = sum(p != q for p, q in zip(first.tolist(), second.tolist()))
em_train_mode = my_exact_match(first, y)
leaky.eval()
eval_pred = greedy_keeps_mode(leaky, x)
em_eval_mode = my_exact_match(eval_pred, y)
print(
    f"train mode: {n_diff} of {len(x)} outputs differ between two runs; exact match {em_train_mode:.3f}"
)
print(f"eval mode : exact match {em_eval_mode:.3f}")
assert n_diff > 0 and em_train_mode < em_eval_mode
assert em_eval_mode == my_exact_match(ours[:300], y)  # same weights, dropout off: the trained model

# %% [markdown]
# The fix is the first line of `greedy` above: call `model.eval()` inside the decoding function
# (as `helpers.greedy_decode` does), so that callers cannot forget it. Remember to switch back with
# `model.train()` when training resumes, as the training loop of chapter 10 does after each
# evaluation.
