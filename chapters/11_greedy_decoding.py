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
# # 11. Greedy decoding
#
# We write the loop that lets the trained model answer on its own. It picks one token at a
# time, the most likely, and appends it to the decoder's input. Then we score it on the test
# set.
# The picture shows one source decoded step by step.
#
# ![Greedy decoding of one source, step by step](figures/11_greedy_decoding.png)

# %% [markdown] tags=["run-time"]
# **Run time:** about 35 s. The first time, it also trains the book's reversal model (`BOOK_RECIPE`) and caches it on disk (about 35 s more); later runs load it.

# %% [markdown]
# Training (chapter 10) never lets the decoder read its own output. Teacher forcing feeds it the
# true prefix and scores every position in one pass. At inference there is no true prefix. The
# decoder must produce one token, append it to its own input, and run again, until it says
# `<eos>`. The simplest rule for "produce one token" is to take the most likely one, the
# **argmax**: greedy decoding.
#
# We write that loop by hand on one example and watch the output grow. Then we make it work on
# a batch whose rows finish at different steps. We define exact match and measure it on the
# 10,000 test sequences of chapter 09. Last, we see what happens when the model is left in
# training mode, an inference bug that raises no error.

# %%
import dataclasses
from contextlib import contextmanager

import matplotlib.pyplot as plt
import torch

from helpers import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SHARP_ATTENTION_RECIPE,
    Transformer,
    decode_digits,
    describe,
    encode_digits,
    exact_match_with_interval,
    make_reversal_dataset,
    test_set,
    trained_reversal_model,
)
from helpers.repro.numerics import assert_within_measured_spread
from helpers.training.train import build_model

_ = torch.manual_seed(0)

# %%
model = trained_reversal_model(progress=False, verbose=False)  # cached after its first training
print(type(model).__name__, "training mode:", model.training)
assert not model.training

# %% [markdown]
# ## One example, step by step
#
# The encoder runs **once**: its output (`memory`) depends only on the source. The decoder
# then runs once per output token. Its input starts as `[<bos>]`. At each step we take the
# logits of the **last** position only; the earlier positions predict tokens we already have.
# We pick the argmax and append it. The cell counts the encoder and decoder calls as it goes.
# Figure 11.1 after it draws the same run.

# %%
src = encode_digits("730951", width=14)  # digits, <eos>, <pad>...
print("src:", describe(src[0]), tuple(src.shape))
want = encode_digits("159037", width=7)[0].tolist()  # the reversal: digits, then <eos>

calls = {"encode": 0, "decode": 0}
trace = []  # (decoder input, picked token, its probability) per step, for Figure 11.1
with torch.no_grad():
    memory, src_mask = model.encode(src)
    calls["encode"] += 1
    print("memory", tuple(memory.shape), "src_mask", tuple(src_mask.shape))
    out = torch.tensor([[BOS_ID]])
    for step in range(13):
        logits, _ = model.decode(out, memory, src_mask, need_weights=False)  # [1, t, V]
        calls["decode"] += 1
        probs = logits[0, -1].softmax(-1)
        nxt = probs.argmax()
        trace.append((describe(out[0]), describe([int(nxt)]), probs[nxt].item()))
        out = torch.cat([out, nxt.view(1, 1)], dim=1)
        print(
            f"step {step:2d}: logits {tuple(logits.shape)}  picked {describe([int(nxt)]):>5}"
            f"  -> {describe(out[0])}"
        )
        assert int(nxt) == want[step]  # the right token at every step, <eos> last
        if nxt == EOS_ID:
            break

print("reversed:", decode_digits(out[0]), "| calls:", calls)
assert decode_digits(out[0]) == [1, 5, 9, 0, 3, 7]
assert calls == {"encode": 1, "decode": 7}  # six digits and <eos>

# %% jupyter={"source_hidden": true} tags=["figure", "hide-input", "opening-figure"]
fig, ax = plt.subplots(figsize=(11, 3.6))
box = dict(boxstyle="round,pad=0.4", fc="white", ec="0.5")
n = len(trace)
ax.plot([0, 1.5 * n + 1], [2.0, 2.0], color="tab:orange", lw=2, zorder=1)  # memory, every step
ax.text(1.25, 2.12, "memory", ha="center", color="tab:orange", fontsize=8)
ax.text(0, 2.0, "encoder\n(runs once)", ha="center", va="center", fontsize=9, bbox=box, zorder=2)
ax.text(0, 0.9, describe(src[0][src[0] != PAD_ID]), ha="center", va="center", fontsize=8)
ax.annotate("", (0, 1.6), (0, 1.1), arrowprops=dict(arrowstyle="->", color="0.4"))
for i, (prefix, picked, p) in enumerate(trace):
    x = 1.5 * (i + 1) + 1
    ax.text(x, 2.0, f"decoder\nstep {i}", ha="center", va="center", fontsize=8, bbox=box, zorder=2)
    ax.text(x, 1.1, prefix.replace(" ", "\n"), ha="center", va="top", fontsize=7, color="0.3")
    ax.annotate("", (x, 1.6), (x, 1.15), arrowprops=dict(arrowstyle="->", color="0.4"))
    ax.text(
        x, 3.1, f"{picked}\np = {p:.2f}", ha="center", va="center", fontsize=8, color="tab:blue"
    )
    ax.annotate("", (x, 2.85), (x, 2.4), arrowprops=dict(arrowstyle="->", color="tab:blue"))
ax.text(0, 3.1, "argmax:", ha="center", va="center", fontsize=8, color="tab:blue")
ax.text(1.6, 1.1, "decoder\ninput:", ha="right", va="top", fontsize=7, color="0.3")
ax.set_xlim(-1.0, 1.5 * n + 1.8)
ax.set_ylim(-0.3, 3.5)
ax.axis("off")
ax.set_title(
    "Figure 11.1: greedy decoding of 7 3 0 9 5 1: the encoder runs once, the decoder once per\n"
    "output token on the whole prefix so far; each argmax (blue) is appended to the next input",
    fontsize=9,
)
plt.show()

# %% [markdown]
# The logits grow by one row per step. The loop re-runs the decoder over the whole prefix every
# time, recomputing keys and values it already computed at the previous step. That is the
# simplest loop. The KV cache (chapter 13) removes the recomputation and must produce the same
# tokens.
#
# In the HTML book, [chapter 21's live explorer](21_cross_attention_heatmaps.ipynb) (section 3)
# runs greedy decoding on this model in the page, with chapter 13's KV cache: type digits and
# step through it one token at a time.

# %% [markdown]
# ## A batch whose rows finish at different times
#
# In a batch, rows have different lengths, so they emit `<eos>` at different steps. The loop
# must keep going until **every** row is done. What a finished row produces after its `<eos>`
# is meaningless. First, the loop without any bookkeeping, on three sources of lengths 3, 6 and
# 10:

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
assert all((t != PAD_ID).all() for t in after_eos)  # never padding

# %% [markdown]
# The short rows keep generating after their `<eos>`. In the output above they repeat `<eos>`;
# a model trained differently may write digits there. They never write `<pad>`.
#
# :::{dropdown} Going deeper: why the model never learned what follows `<eos>`
# Positions after `<eos>` are padding in every training target, and the loss ignores them
# (chapter 10). So the model was never taught what to put there.
# :::
#
# The fix takes a few lines. Keep a `finished` flag per row, overwrite the next token of a
# finished row with `<pad>`, and stop as soon as every row is finished.
#
# The loop also runs the model in evaluation mode (dropout off). It gives the caller's mode
# back at the end, even when it raises. The small context manager `eval_mode` does both. The
# last section shows why.


# %%
@contextmanager
def eval_mode(model):
    """Evaluation mode inside the block; the caller's mode back afterwards."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


@torch.no_grad()
def greedy(model, src, max_len=14):
    with eval_mode(model):
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
# Token accuracy is forgiving: a 12-digit answer with one wrong digit is still 92 % right (12
# of its 13 tokens, counting `<eos>`). The task's real metric is **exact match**. It is the
# fraction of sequences whose output equals the target at every position up to and including
# `<eos>`. What comes after `<eos>` is padding and does not count. One wrong digit, a missing
# `<eos>`, or an extra digit all make the sequence wrong.


# %% tags=["nbval-ignore-output"]
def my_exact_match(pred, tgt):
    correct = 0
    for p, t in zip(pred.tolist(), tgt.tolist()):
        n = t.index(EOS_ID) + 1  # compare up to and including <eos>
        correct += p[:n] == t[:n]
    return correct / len(tgt)


src_val, tgt_val = make_reversal_dataset(1000, seed=1)  # the validation set of chapter 09
ours = greedy(model, src_val)
em = my_exact_match(ours, tgt_val)
print(f"exact match on the 1,000 validation sequences: {em:.3f}")
print(f"(one wrong digit of 12: token accuracy {12 / 13:.0%}, exact match 0)")
assert em >= 0.995  # training stopped once greedy decoding got there

# %% [markdown]
# That is the validation set, whose score decided when training stopped (chapter 10). So it is
# not the number to report. `helpers.greedy_decode` and `helpers.exact_match` are the finished
# versions of these two functions. They must give our tokens and our score.
#
# `exact_match` decodes with a KV cache by default: a faster way to run the same loop, which
# [chapter 13](13_kv_cache.ipynb) builds. Here we only check that it gives the same tokens.

# %%
from helpers import exact_match, greedy_decode, sequences_equal

theirs = greedy_decode(model, src_val)
cached = greedy_decode(model, src_val, use_cache=True)
n_diff = sum(not torch.equal(a, b) for a, b in zip(ours, theirs))
n_diff_cached = sum(not torch.equal(a, b) for a, b in zip(ours, cached))
print(
    f"rows that differ from ours: helpers.greedy_decode {n_diff}, with the KV cache {n_diff_cached}"
)
assert torch.equal(ours, theirs) and torch.equal(ours, cached)
assert exact_match(model, src_val, tgt_val) == em

# %% [markdown]
# ## The test set
#
# The number to report comes from the 10,000 test sequences of chapter 09, which stopping
# never looked at. The cell decodes all of them greedily (with the KV cache, in batches of
# 1,000). It shows the exact match with its 95 % Wilson interval {cite}`wilson1927`. It also
# checks a claim chapter 10 relies on during training: the teacher-forced count, one forward
# pass per batch, is the same number.
#
# :::{dropdown} Going deeper: seen sequences, and why the score depends on your CPU
# About one in nine of the test sequences also occurs in the training set (chapter 09 counts
# them); chapter 10 reports the others apart.
# [The kernel-path study](../appendix/experiment_kernel_paths.ipynb) trained the same recipe on
# four CPU kernel paths and got four different models, scoring 98.91 % to 99.77 % on the test
# set. A model trained on your CPU may be any of them, or another.
# :::

# %% tags=["nbval-ignore-output"]
src_test, tgt_test = test_set()
pred_test = torch.cat([greedy_decode(model, s, use_cache=True) for s in src_test.split(1000)])
right = torch.cat(
    [sequences_equal(p, t) for p, t in zip(pred_test.split(1000), tgt_test.split(1000))]
)
teacher_forced = exact_match_with_interval(model, src_test, tgt_test)
print(f"greedy decoding, test set: {int(right.sum()):,} of {len(right):,} exactly right")
print(f"teacher-forced, test set : {teacher_forced}")
assert int(right.sum()) == teacher_forced.correct
_ = assert_within_measured_spread("book.test_correct", teacher_forced.exact_match, scale=1e-4)

# %% [markdown]
# Which test sequences does the model still get wrong? The cell prints the error rate per source
# length and a few of the errors. It is the model in your kernel: a model trained on another
# CPU makes other mistakes (chapter 10). The last line compares short and long sources.

# %% tags=["nbval-ignore-output"]
lengths = (src_test != PAD_ID).sum(1) - 1
wrong = ~right
for L in range(3, 13):
    sel = lengths == L
    n_wrong, n = int(wrong[sel].sum()), int(sel.sum())
    print(f"{L:2d} digits: {n_wrong:3d} wrong of {n:5d}, error rate {n_wrong / n:6.2%}")
for i in torch.nonzero(wrong).flatten()[:3].tolist():
    print(f"  src {describe(src_test[i][src_test[i] != PAD_ID])}")
    print(f"  got {describe(pred_test[i][pred_test[i] != PAD_ID])}")
short, long = lengths <= 9, lengths >= 10
rate_short, rate_long = wrong[short].float().mean().item(), wrong[long].float().mean().item()
print(f"error rate, 3-9 digits: {rate_short:.2%}; 10-12 digits: {rate_long:.2%}")

# %% [markdown]
# ## The pitfall: forgetting `model.eval()`
#
# Dropout zeroes a random subset of activations **in training mode** and does nothing in
# evaluation mode. A model left in training mode at inference is a random function: the same
# input gives different outputs on every call. Nothing raises an error. The outputs still have
# the shape of an answer, only they are wrong more often and not reproducible.
# `torch.no_grad()` does not help either: it turns off gradient tracking, not dropout.
#
# The book's model was trained without dropout (chapter 10). Its dropout layers have
# probability 0, so training mode changes nothing: two calls agree. Two other models show the
# bug:
#
# - **trained with dropout**: chapter 21's model, trained with dropout 0.15 (its weights are
#   in `chapters/data/`).
# - **an extreme case**: the book's weights loaded into a model built with dropout 0.1, as in
#   [the reference chapter](intro.md#the-reference-chapter). These weights never saw dropout in
#   training. Dropout has no weights, so the state dict fits as is.

# %% tags=["nbval-ignore-output"]
stored = torch.load("data/ch21_sharp_model.pt", weights_only=True)
assert stored["key"] == SHARP_ATTENTION_RECIPE.key()  # chapter 21's recipe, dropout 0.15
with_dropout = build_model(SHARP_ATTENTION_RECIPE)
with_dropout.load_state_dict(stored["state_dict"])
assert with_dropout.config.dropout == 0.15
never_dropout = Transformer.from_config(dataclasses.replace(model.config, dropout=0.1))
never_dropout.load_state_dict(model.state_dict())
x, y = src_val[:200], tgt_val[:200]

model.train()  # the book's model, dropout 0: training mode changes nothing
with torch.no_grad():
    a, b = model(x, y[:, :-1]), model(x, y[:, :-1])
model.eval()
print(f"book's model (dropout {model.config.dropout}), train mode: max |difference| ", end="")
print(f"{(a - b).abs().max().item():.2f}")
assert model.config.dropout == 0 and torch.equal(a, b)

two_models = {
    "trained with dropout 0.15": with_dropout,
    "never trained with it, 0.1": never_dropout,
}
for name, m in two_models.items():
    m.eval()
    with torch.no_grad():
        a, b = m(x, y[:, :-1]), m(x, y[:, :-1])
    assert torch.equal(a, b)
    m.train()  # the bug: still in training mode
    with torch.no_grad():  # no_grad does not switch dropout off
        a, b = m(x, y[:, :-1]), m(x, y[:, :-1])
    diff = (a - b).abs().max().item()
    print(f"{name}: eval mode, two calls agree; train mode, max |logit difference| {diff:.2f}")
    assert diff > 0.1

# %% [markdown]
# What this does to decoding: the hand-written loop below has no `eval_mode` in it, so it
# keeps whatever mode the model is in. The cell decodes the 1,000 validation sequences in
# evaluation mode, then three times in training mode (three draws of the dropout masks). It
# counts how many outputs differ between the first two draws.


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
em_eval, em_train = {}, {}
for name, m in two_models.items():
    m.eval()
    em_eval[name] = my_exact_match(greedy_keeps_mode(m, src_val), tgt_val)
    m.train()
    draws = [greedy_keeps_mode(m, src_val) for _ in range(3)]
    m.eval()
    em_train[name] = [my_exact_match(d, tgt_val) for d in draws]
    n_diff = sum(p != q for p, q in zip(draws[0].tolist(), draws[1].tolist()))
    shaped = sum(  # <bos>, then only digits up to an <eos>
        EOS_ID in row and all(t > EOS_ID for t in row[1 : row.index(EOS_ID)])
        for row in draws[0].tolist()
    )
    print(f"{name}:")
    print(f"  eval mode : exact match {em_eval[name]:.3f}")
    print(f"  train mode: exact match {', '.join(f'{e:.3f}' for e in em_train[name])} (3 draws)")
    print(f"  train mode: {n_diff} of {len(src_val):,} outputs differ between two draws")
    print(f"  train mode: {shaped} of {len(src_val):,} outputs are digits followed by <eos>")
    wrong = next(i for i, (p, t) in enumerate(zip(draws[0], tgt_val)) if p.tolist() != t.tolist())
    print(f"  e.g. {describe(src_val[wrong][src_val[wrong] != PAD_ID])} -> ", end="")
    print(describe(draws[0][wrong][draws[0][wrong] != PAD_ID]))
    assert n_diff > 0 and shaped > len(src_val) / 2
realistic, extreme = two_models
assert em_eval[realistic] >= 0.99 and max(em_train[realistic]) < 0.95
assert em_eval[extreme] == em and max(em_train[extreme]) < 0.1  # same weights as the book's

# %% [markdown]
# In training mode, the model trained with dropout gets many more sequences wrong than in
# evaluation mode. The model that never saw dropout gets more than nine sequences in ten wrong.
# In both, two draws give different outputs for the same input.
#
# The fix is `eval_mode` in `greedy` above. The decoding function switches dropout off itself,
# so no caller can forget it. It also gives the caller's mode back when it returns. So a
# training loop that scores its model mid-run keeps training with dropout on. It gives the
# mode back even when decoding raises: that is what the `try`/`finally` is for.
# `helpers.greedy_decode` and `helpers.exact_match_with_interval` do the same. The cell checks
# all three on the model trained with dropout, left in training mode. Then it feeds `greedy` a
# source that is too long, and does the same with a version of `eval_mode` that has no
# `finally`.

# %% tags=["nbval-ignore-output"]
reference = greedy_keeps_mode(with_dropout.eval(), src_val[:300])
for name, decode in (("greedy", greedy), ("helpers.greedy_decode", greedy_decode)):
    with_dropout.train()
    out = decode(with_dropout, src_val[:300])
    n_rows = sum(p != q for p, q in zip(out.tolist(), reference.tolist()))
    mode = "training" if with_dropout.training else "eval"
    print(f"{name}: {n_rows} of {len(out)} rows differ from eval mode; mode after the call: {mode}")
    assert torch.equal(out, reference) and with_dropout.training
score = exact_match_with_interval(with_dropout, src_val, tgt_val)
mode = "training" if with_dropout.training else "eval"
print(f"exact_match_with_interval: {score.exact_match:.3f}; mode after the call: {mode}")
assert score.exact_match == em_eval[realistic] and with_dropout.training
too_long = torch.cat([src_val[:1], src_val[:1]], dim=1)  # 28 tokens; the model holds 14
try:
    greedy(with_dropout, too_long)
except ValueError:
    mode = "training" if with_dropout.training else "eval"
    print(f"greedy raised ValueError on 28 tokens; mode after it: {mode}")
else:
    raise AssertionError("greedy accepted a source longer than the model's max_len")
assert with_dropout.training


@contextmanager
def eval_mode_without_finally(model):  # the bug: an error skips the last line
    was_training = model.training
    model.eval()
    yield model
    model.train(was_training)


try:
    with eval_mode_without_finally(with_dropout):
        with_dropout.encode(too_long)
except ValueError:
    mode = "training" if with_dropout.training else "eval"
    print(f"without finally: ValueError on 28 tokens; mode after it: {mode}")
assert not with_dropout.training  # left in eval mode
_ = with_dropout.eval()

# %% [markdown]
# ## Summary
#
# - Built: greedy decoding by hand. The encoder runs once; the decoder runs once per output
#   token on the whole prefix, and the argmax is appended. Then the same for a batch whose rows
#   finish at different steps: finished rows get `<pad>`, and the loop stops when every row is
#   done.
# - Measured: exact match on the 10,000 test sequences with greedy decoding, with a 95 % Wilson
#   interval. One teacher-forced pass per batch gives the same count.
# - The same weights in training mode decode differently on every call. Dropout is on, and
#   `torch.no_grad()` does not switch it off.
# - The one thing to remember: switch to evaluation mode inside the decoding function, so no
#   caller can forget it. Give the caller's mode back when it returns (`try`/`finally`).
#
# ## Exercises
#
# ### Exercise 11.1 (predict, then run): how many decoder calls?
#
# `greedy` above decodes the batch of three sources with 3, 6 and 10 digits. How many times does it
# call `model.decode`, and how many times `model.encode`? And for a batch of one source with 12
# digits? Predict, then count by wrapping the two methods.


# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
# Solution to exercise 11.1
# The encoder runs once per batch. The decoder runs once per output token of the longest row:
# 10 digits + <eos> = 11 calls for the batch (the short rows are padded meanwhile), 12 + 1 = 13
# for the 12-digit source.
def count_calls(model, src):
    counts = {"encode": 0, "decode": 0}
    originals = {name: getattr(model, name) for name in counts}

    def counting(name):
        def call(*args, **kwargs):
            counts[name] += 1
            return originals[name](*args, **kwargs)

        return call

    for name in counts:
        setattr(model, name, counting(name))
    try:
        greedy(model, src)
    finally:
        for name in counts:
            delattr(model, name)  # the instance attribute goes; the class method is back
    return counts


three = count_calls(model, batch)
one_long = count_calls(model, encode_digits("730951284613", width=14))
print("batch of 3, 6 and 10 digits:", three)
print("one source of 12 digits    :", one_long)
assert three == {"encode": 1, "decode": 11} and one_long == {"encode": 1, "decode": 13}

# %% [markdown]
# ### Exercise 11.2 (implement): the interval around the test score
#
# The test score above comes with a 95 % Wilson interval {cite}`wilson1927`. For `correct` of `n`
# sequences right, the measured share is $\hat p = \text{correct}/n$, and the interval holds
# every $p$ for which $|\hat p - p| \le z\sqrt{p(1-p)/n}$, with $z$ the standard normal quantile
# at $(1 + \text{confidence})/2$ (`statistics.NormalDist().inv_cdf`). Squaring gives a quadratic
# in $p$; write `wilson(correct, n, confidence)` that returns its two roots `(low, high)`. The
# checker compares with `helpers.wilson_interval` and recognises the textbook Wald interval
# $\hat p \pm z\sqrt{\hat p(1-\hat p)/n}$ and a one-sided $z$.

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 11.2
import math
from statistics import NormalDist

from helpers.exercises import check_wilson_interval


def wilson(correct, n, confidence):
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


check_wilson_interval(wilson)

# %% [markdown]
# ### Exercise 11.3 (implement): beam search
#
# Greedy decoding keeps one hypothesis. Beam search {cite}`sutskever2014` keeps the `k` most
# probable partial sequences, the beam. At every step, each live hypothesis is extended by its
# `k` best next tokens. All the candidates are ranked by the **sum** of their tokens'
# log-probabilities, and the best `k` survive. A hypothesis that has produced `<eos>` is
# finished: it stays in the beam with its score and keeps competing. Write
# `beam_search(model, src, k)` for one source `src [1, Ls]` that returns the best sequence as
# `[1, L]` (starting with `<bos>`, at most `model.max_len` tokens). Like `greedy`, it decodes in
# evaluation mode and gives the caller's mode back: the checker calls it in training mode.
# With `k = 1` it must be greedy decoding, token for token. With `k > 1` the checker compares the
# log-probability of your result with that of the book's beam search on the same source, and
# says so when yours is below greedy's. When yours falls short, it tries to name the mistake.
# (Beam search does not promise to beat greedy decoding: greedy's prefix can drop out of the
# beam when `k` other prefixes score higher, and nothing keeps their completions ahead.) The
# checker runs it on small random models, whose flat distributions make greedy miss the most
# probable sequence on some sources.

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 11.3
from helpers.exercises import check_beam_search


@torch.no_grad()
def beam_search(model, src, k):
    with eval_mode(model):  # dropout off; the caller's mode back, even after an error
        memory, src_mask = model.encode(src)  # once, as in greedy decoding
        beams = [([BOS_ID], 0.0)]  # (tokens, sum of log-probabilities)
        for _ in range(model.max_len - 1):
            if all(seq[-1] == EOS_ID for seq, _ in beams):
                break
            candidates = []
            for seq, score in beams:
                if seq[-1] == EOS_ID:  # finished: competes with its score, unchanged
                    candidates.append((seq, score))
                    continue
                logits, _ = model.decode(torch.tensor([seq]), memory, src_mask, need_weights=False)
                top = logits[0, -1].log_softmax(-1).topk(k)
                for lp, tok in zip(top.values.tolist(), top.indices.tolist()):
                    candidates.append((seq + [tok], score + lp))
            beams = sorted(candidates, key=lambda c: c[1], reverse=True)[:k]
    return torch.tensor([max(beams, key=lambda c: c[1])[0]])


check_beam_search(beam_search)

# %% [markdown]
# ### Exercise 11.4 (implement): greedy decoding for a batch
#
# Without looking back at `greedy`, write `my_greedy_decode(model, src, max_len)` for a batch
# `src [B, Ls]`. It returns int64 `[B, L]` with `L <= max_len`, `<bos>` first (`max_len`
# counts it). A row that has produced `<eos>` gets `<pad>` from then on. The loop stops when
# every row has finished, or at `max_len`. It decodes in evaluation mode and gives the
# caller's mode back, even when it raises. The checker compares your tokens with
# `helpers.greedy_decode` on two small random models with dropout. It uses a batch of six
# sources whose rows finish at different steps, with `max_len` 10 and 5. It calls your
# function in training mode, and once in evaluation mode. When the tokens differ, it tries to
# name the mistake. Last, it calls your function in training mode on sources too long for the
# model, which raise an error, and checks the mode after it.

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 11.4
from helpers.exercises import check_greedy_decode


@torch.no_grad()
def my_greedy_decode(model, src, max_len):
    was_training = model.training
    model.eval()  # dropout off while decoding
    try:
        memory, src_mask = model.encode(src)  # once per batch
        out = torch.full((src.size(0), 1), BOS_ID)
        finished = torch.zeros(src.size(0), dtype=torch.bool)
        for _ in range(max_len - 1):  # max_len counts <bos>
            logits, _ = model.decode(out, memory, src_mask, need_weights=False)  # [B, t, V]
            nxt = logits[:, -1].argmax(-1)  # the last position, over the vocabulary
            nxt = nxt.masked_fill(finished, PAD_ID)  # finished rows only get padding
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == EOS_ID
            if finished.all():  # every row, not the first one
                break
    finally:
        model.train(was_training)  # the caller's mode, even after an error
    return out


check_greedy_decode(my_greedy_decode)
