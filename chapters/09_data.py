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
# # 9. Data: the reversal task
#
# We build the data the model learns from: strings of digits and their reversals. We look at
# the lengths and the padding, and split the data into training, validation and test sets.
# The picture shows how many training samples have each length.
#
# ![Training samples per length, 3 to 12 digits](figures/09_data.png)

# %% [markdown] tags=["run-time"]
# **Run time:** about 10 s.

# %% [markdown]
# The model is built (chapters 01-08); now it needs something to learn. The task is to reverse
# a string of digits: `7 3 0 9 5` becomes `5 9 0 3 7`. It is a good first task for an
# encoder-decoder Transformer for three reasons:
#
# - **Data is free and exact.** A few lines of NumPy generate as many pairs as we want. Every
#   answer is known, so "98 % exact match" means exactly what it says.
# - **It exercises attention.** Output position $i$ must copy input position $L-1-i$, where
#   $L$ is the length of this particular input. Information has to move between positions, and
#   where it comes from depends on the input. That is what attention computes.
# - **It trains on a CPU** in a few hundred steps of a small model (chapter 10). That keeps
#   every later experiment cheap.
#
# The splits have three jobs. A **training** set is what the model learns from. A
# **validation** set decides when training stops. A **test** set of 10,000 sequences measures
# finished models: no training step and no stopping decision reads it. Each split is drawn
# independently, so the same sequence can land in two of them. We count how many validation and
# test sequences also occur in the training set.

# %%
import matplotlib.pyplot as plt
import numpy as np
import torch

from helpers import BOS_ID, EOS_ID, NUM_OFFSET, PAD_ID, VOCAB_SIZE, decode_digits, describe

print(f"PAD={PAD_ID} BOS={BOS_ID} EOS={EOS_ID}; digit d is id d + {NUM_OFFSET}")
print(f"vocabulary size {VOCAB_SIZE}")

# %% [markdown]
# ## Building the data set
#
# The vocabulary has 13 tokens: three special ones and the ten digits. The digits are shifted
# by `NUM_OFFSET = 3`, so that digit 0 does not collide with `<pad>` (id 0).
#
# Each sample draws a length $L$ uniformly from 3 to 12, then $L$ random digits. Both sequences
# have the same fixed width, 12 + 2 = 14, filled up with `<pad>`:
#
# - `src` = the digits, then `<eos>`. The encoder needs no `<bos>`: it reads the whole input
#   at once.
# - `tgt` = `<bos>`, the reversed digits, `<eos>`. The decoder needs `<bos>` as the input for
#   its first step, and `<eos>` is how it says "done".
#
# Everything is drawn from one `np.random.default_rng(seed)`, so a seed fully determines a data
# set.

# %%
MIN_LEN, MAX_LEN = 3, 12
WIDTH = MAX_LEN + 2  # room for <bos> and <eos>


def make_dataset(n: int, seed: int):
    rng = np.random.default_rng(seed)
    src = np.full((n, WIDTH), PAD_ID, dtype=np.int64)
    tgt = np.full((n, WIDTH), PAD_ID, dtype=np.int64)
    for i in range(n):
        L = int(rng.integers(MIN_LEN, MAX_LEN + 1))  # upper bound exclusive: 3..12
        digits = rng.integers(0, 10, L) + NUM_OFFSET
        src[i, :L] = digits
        src[i, L] = EOS_ID
        tgt[i, 0] = BOS_ID
        tgt[i, 1 : L + 1] = digits[::-1]
        tgt[i, L + 1] = EOS_ID
    return torch.from_numpy(src), torch.from_numpy(tgt)


src_train, tgt_train = make_dataset(20000, seed=0)
src_val, tgt_val = make_dataset(1000, seed=1)
print("train:", tuple(src_train.shape), tuple(tgt_train.shape), src_train.dtype)
print("valid:", tuple(src_val.shape), tuple(tgt_val.shape))

# %% [markdown]
# ## One sample, as ids and as text
#
# The model only ever sees the integer ids; `helpers.describe` turns them back into readable tokens.

# %%
i = 0
print("src ids:", src_train[i].tolist())
print("tgt ids:", tgt_train[i].tolist())
print("src    :", describe(src_train[i]))
print("tgt    :", describe(tgt_train[i]))
digits = decode_digits(src_train[i])
print("digits :", digits, "->", decode_digits(tgt_train[i]))
assert decode_digits(tgt_train[i]) == digits[::-1]

# %% [markdown]
# Every pair must satisfy the same invariants, not only the one we looked at. We check all
# 21,000. The target's digits are the source's reversed, and each row has exactly one `<eos>`.
# The target starts with `<bos>`, and padding only ever trails (no `<pad>` before a real token).

# %%
def check_pairs(src, tgt):
    for s, t in zip(src.tolist(), tgt.tolist()):
        assert decode_digits(t) == decode_digits(s)[::-1]
        assert s.count(EOS_ID) == 1 and t.count(EOS_ID) == 1 and t[0] == BOS_ID
    for x in (src, tgt):
        real = x != PAD_ID
        # trailing padding: once a row hits <pad>, it stays <pad>
        assert torch.equal(real, real.cummin(dim=1).values)
        assert x.min() >= 0 and x.max() < VOCAB_SIZE


check_pairs(src_train, tgt_train)
check_pairs(src_val, tgt_val)
print("all", len(src_train) + len(src_val), "pairs pass")

# %% [markdown]
# ## Lengths and padding
#
# Lengths are uniform over 3..12, so each of the ten lengths should hold about a tenth of the
# 20,000 training samples. Every length is within 10 % of 2,000. Figure 9.1 draws the counts.

# %%
lengths_train = (src_train != PAD_ID).sum(1) - 1  # minus <eos>
counts = torch.bincount(lengths_train, minlength=MAX_LEN + 1)[MIN_LEN:]
print({L: int(c) for L, c in zip(range(MIN_LEN, MAX_LEN + 1), counts)})
assert lengths_train.min() == MIN_LEN and lengths_train.max() == MAX_LEN
assert ((counts - 2000).abs() < 200).all()

# %% jupyter={"source_hidden": true} tags=["figure", "hide-input", "opening-figure"]
fig, ax = plt.subplots(figsize=(6.5, 3))
ax.bar(range(MIN_LEN, MAX_LEN + 1), counts.tolist(), color="tab:blue")
ax.axhline(2000, color="k", lw=1, ls="--", label="uniform: 2,000 each")
ax.set_xlabel("number of digits L")
ax.set_ylabel("training samples")
ax.set_title("Figure 9.1: sequence lengths in the training set")
ax.set_xticks(range(MIN_LEN, MAX_LEN + 1))
ax.legend(loc="lower right")
plt.show()

# %% [markdown]
# Because the tensors have a fixed width of 14, short samples carry a lot of `<pad>`. With $L$
# uniform over 3..12 the mean length is 7.5. So a source holds on average $7.5 + 1$ real tokens
# (the digits and `<eos>`) out of 14, and a target $7.5 + 2$ (with `<bos>`). The expected
# padding shares are $1 - 8.5/14 \approx 39.3\,\%$ and $1 - 9.5/14 \approx 32.1\,\%$. The cell
# counts the `<pad>` tokens and compares. These numbers follow from the length distribution
# alone: a generator that drew lengths from 3 to 11, or wrote one token too many, would fail.
#
# Two consequences come up in chapter 10. The loss must ignore padded positions
# (`ignore_index`). And a batch of short sequences can be cut to a narrower width to save work
# (exercise 9.2).

# %%
pad_share_src = (src_train == PAD_ID).float().mean().item()
pad_share_tgt = (tgt_train == PAD_ID).float().mean().item()
mean_len = (MIN_LEN + MAX_LEN) / 2  # 7.5 for lengths uniform over 3..12
std_len = ((MAX_LEN - MIN_LEN + 1) ** 2 - 1) ** 0.5 / 12**0.5  # of one length
tolerance = 4 * std_len / len(src_train) ** 0.5 / WIDTH  # 4 standard errors of a share
for name, share, real in (
    ("src", pad_share_src, mean_len + 1),
    ("tgt", pad_share_tgt, mean_len + 2),
):
    expected = 1 - real / WIDTH
    print(f"padding share of {name}: {share:.2%} (expected {expected:.2%} +- {tolerance:.2%})")
    assert abs(share - expected) < tolerance

# %% [markdown]
# The digits themselves are uniform too: each of the ten appears about 10 % of the time.

# %%
digit_ids = src_train[src_train >= NUM_OFFSET] - NUM_OFFSET
freq = torch.bincount(digit_ids, minlength=10).float() / digit_ids.numel()
print("digit frequencies:", [round(f, 3) for f in freq.tolist()])
assert (freq - 0.1).abs().max() < 0.01

# %% [markdown]
# How much would cutting the padding save? Chapter 10 trains on shuffled batches of 128. A batch can
# be cut only to its longest row, and a 12-digit row is likely in every batch: a row misses length
# 12 with chance 0.9, all 128 with chance $0.9^{128}$. The cell cuts one epoch of chapter 10's
# batches (`helpers.training.train.epoch_batches`) to their longest rows. Then it does the same with
# batches that group similar lengths (its `bucket` option).

# %%
from helpers.training.train import epoch_batches

src_real, tgt_real = (src_train != PAD_ID).sum(1), (tgt_train != PAD_ID).sum(1)
print(f"chance that 128 rows hold no 12-digit row: {0.9**128:.1e}")
widths_by_bucket = {}
for bucket in (0, 8):
    batches = epoch_batches(src_real, 128, bucket, torch.Generator().manual_seed(0))
    w_src = torch.tensor([int(src_real[b].max()) for b in batches]).float()
    w_tgt = torch.tensor([int(tgt_real[b].max()) for b in batches]).float()
    has_12 = sum(bool((lengths_train[b] == MAX_LEN).any()) for b in batches)
    widths_by_bucket[bucket] = (w_src, w_tgt)
    print(
        f"bucket={bucket}: {len(batches)} batches, {has_12} with a 12-digit row;"
        f" mean width after the cut: src {w_src.mean():.1f}, tgt {w_tgt.mean():.1f} of {WIDTH}"
    )
w_src, w_tgt = widths_by_bucket[0]
assert (w_src == WIDTH - 1).all() and (w_tgt == WIDTH).all()  # shuffled: one src column cut

# %% [markdown]
# In shuffled batches the cut removes one source column (the longest source is 12 digits and
# `<eos>`, 13 tokens) and no target column. With batches grouped by length, the mean source
# width after the cut falls to about 9 of 14 columns.

# %% [markdown]
# ## Train, validation and test: split by seed
#
# The training set uses seed 0 and the validation set seed 1, as in
# [the reference chapter](intro.md#the-reference-chapter). The same seed always gives the same data,
# so a checkpoint trained today was trained on exactly these samples. A different seed gives
# different data.

# %%
again_src, again_tgt = make_dataset(20000, seed=0)
assert torch.equal(again_src, src_train) and torch.equal(again_tgt, tgt_train)
assert not torch.equal(make_dataset(1000, seed=0)[0], src_val)
print("seed 0 twice: identical; seed 0 vs seed 1: different")

# %% [markdown]
# "Different seed" does **not** mean "no overlap". A different seed draws independently, and
# independent draws can repeat a sequence. How often? There are only $10^3 = 1000$ strings of
# three digits. The training set holds about 2,000 three-digit samples. So most three-digit
# validation sequences also occur in training. Take length $L$ with $n_L$ training samples. A
# given validation sequence of that length appears among them with chance
# $p_L = 1-(1-10^{-L})^{n_L}$. The expected overlap is the sum of $p_L$ over the validation
# sequences.
#
# The next cell prints $p_L$, counts the overlap exactly, and compares the count with that
# estimate.

# %%
train_set = {tuple(row) for row in src_train.tolist()}
in_train = torch.tensor([tuple(row) in train_set for row in src_val.tolist()])
lengths_val = (src_val != PAD_ID).sum(1) - 1
n_per_len = torch.bincount(lengths_train, minlength=MAX_LEN + 1)


def p_seen(L):
    """Chance that one random L-digit sequence occurs among the n_L training samples."""
    return 1 - (1 - 10.0 ** -int(L)) ** int(n_per_len[L])


expected = sum(p_seen(L) for L in lengths_val)
print(
    f"validation sequences that also occur in training: {int(in_train.sum())} of {len(src_val)}"
    f" (estimate {expected:.0f})"
)
for L in range(MIN_LEN, 8):
    sel = lengths_val == L
    print(
        f"  length {L}: {int(in_train[sel].sum()):3d} of {int(sel.sum()):3d}"
        f"  (p_L = {p_seen(L):.1%})"
    )
assert int(in_train[lengths_val >= 7].sum()) == 0
assert 0.07 < in_train.float().mean() < 0.14  # about one in nine
assert abs(int(in_train.sum()) - expected) < 3 * expected**0.5  # within sampling noise

# %% [markdown]
# So 113 of the 1,000 validation sequences, about one in nine, were also seen in training.
# Nearly all of them have three or four digits. That does not make validation useless. The task
# has $10^{12}$ twelve-digit inputs, far more than any training set could hold. Chapter 10
# reports the score on unseen sequences separately.
#
# The overlap can flatter the score a little. There is a second problem with reporting it.
# Training stops at the first evaluation where the validation score reaches the target
# (chapter 10). A score that decided when to stop is chosen to be high. Reporting it as the
# model's accuracy is optional stopping. So the validation set keeps one job, deciding when to
# stop. It keeps the reference chapter's split (train: 20,000 with seed 0, validation: 1,000
# with seed 1).
#
# ## The test set
#
# The accuracy the book reports comes from a third split. No training step and no stopping
# decision reads it. `helpers.test_set()` holds 10,000 sequences drawn by the same generator,
# with a seed no other split uses (`helpers.TEST_SEED`). Drawn independently, it still shares
# sequences with the training set, like the validation set. Ten times as many sequences make
# the interval around the reported number about three times narrower. Its width shrinks roughly as
# $1/\sqrt{n}$, and $\sqrt{10} \approx 3.2$. The cell shows the 95 % interval of a score of
# 99.5 % on 1,000 and on 10,000 sequences, and the ratio of their widths. This is the Wilson
# interval {cite}`wilson1927`, which chapter 10 explains. The same arithmetic as above predicts
# the test set's overlap with the training set, and `helpers.train_test_overlap` counts it:

# %%
from helpers import TEST_SEED, TEST_SIZE, test_set, train_test_overlap, wilson_interval

widths = []
for n in (1000, 10_000):
    low, high = wilson_interval(round(0.995 * n), n)
    widths.append(high - low)
    print(f"99.5 % of {n:>6,}: 95 % interval {low:.2%} to {high:.2%} (width {high - low:.2%})")
print(f"ten times the sequences: an interval {widths[0] / widths[1]:.1f} times narrower")
src_test, tgt_test = test_set()
check_pairs(src_test, tgt_test)
test_in_train = train_test_overlap(src_test, src_train)
lengths_test = (src_test != PAD_ID).sum(1) - 1
expected_test = sum(p_seen(L) for L in lengths_test)
print(f"test set: {TEST_SIZE:,} sequences, seed {TEST_SEED} (training 0, validation 1)")
print(
    f"test sequences that also occur in training: {int(test_in_train.sum()):,} of {TEST_SIZE:,}"
    f" ({test_in_train.float().mean():.1%}; estimate {expected_test:.0f})"
)
print(f"unseen test sequences: {int((~test_in_train).sum()):,}")
assert torch.equal(train_test_overlap(src_val, src_train), in_train)  # the count above
assert int(test_in_train[lengths_test >= 7].sum()) == 0
assert abs(int(test_in_train.sum()) - expected_test) < 3 * expected_test**0.5

# %% [markdown]
# The test set overlaps the training set as much as the validation set does: about one
# sequence in nine, all of them with at most six digits. A model has trained on those
# sequences, even though it never saw the test set as such. So chapter 10 reports the test score
# twice: on all 10,000 sequences, and on the unseen ones only.
#
# :::{dropdown} Going deeper: duplicates inside one split
# The same arithmetic predicts duplicates inside one split as well. Of $n_L$ draws from $10^L$
# equally likely strings, $10^L\,(1-(1-10^{-L})^{n_L})$ are distinct on average. The rest
# repeat one drawn before. The cell below counts them.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
dupes = len(src_train) - len(train_set)
expected_dupes = sum(int(n_per_len[L]) - 10.0**L * p_seen(L) for L in range(MIN_LEN, MAX_LEN + 1))
print(
    f"duplicate rows inside the training set: {dupes} ({dupes / len(src_train):.1%}),"
    f" expected {expected_dupes:.0f}"
)
assert abs(dupes - expected_dupes) < 3 * expected_dupes**0.5

# %% [markdown]
# ## The finished piece
#
# `helpers.make_reversal_dataset(n, seed)` is the function the rest of the book uses. It must
# produce exactly the tensors built above, bit for bit.

# %%
from helpers import make_reversal_dataset

for n, seed in ((20000, 0), (1000, 1)):
    ref_src, ref_tgt = make_reversal_dataset(n, seed=seed)
    mine_src, mine_tgt = (src_train, tgt_train) if seed == 0 else (src_val, tgt_val)
    assert torch.equal(ref_src, mine_src) and torch.equal(ref_tgt, mine_tgt)
print("helpers.make_reversal_dataset == make_dataset for both splits")

# %% [markdown]
# Its companion `helpers.decode_digits` reads the digits of one sequence back, up to `<eos>`.
# An id outside the vocabulary is a bug upstream: a model with the wrong output size, or ids
# shifted by one. So it raises instead of turning id 13 into a "digit" 10:

# %%
print("digits of", describe(tgt_test[0]), "->", decode_digits(tgt_test[0]))
bad = [NUM_OFFSET + 7, VOCAB_SIZE, EOS_ID]
try:
    decode_digits(bad)
    raise AssertionError("decode_digits accepted an id outside the vocabulary")
except ValueError as err:
    print(f"decode_digits({bad}) raises ValueError: {err}")

# %% [markdown]
# ## Summary
#
# - The reversal data is generated. `make_reversal_dataset(n, seed)` draws lengths uniform
#   over 3..12 and digits uniform over 0..9; a seed fixes the data bit for bit.
# - Three splits by seed. Training has 20,000 sequences (seed 0). Validation has 1,000 (seed
#   1) and decides when training stops. The test set has 10,000 (`TEST_SEED`); it scores
#   finished models and decides nothing, but shares its short sequences with training.
# - Measured: padding is about 39 % of the source and 32 % of the target positions, as the
#   length distribution predicts. About one validation or test sequence in nine also occurs in
#   training, all with at most six digits, as $1-(1-10^{-L})^{n_L}$ predicts.
# - The one thing to remember: independent draws are not disjoint, and a score that decided when
#   to stop is not a fair report. Count the overlap, and report on data that made no decision.
#
# ## Exercises
#
# ### Exercise 9.1 (predict, then run): the short test sequences
#
# The test set holds about 1,000 three-digit sequences, and the training set about 2,000. Before
# running anything, predict how many of the three-digit test sequences also occur in the training
# set. Then count them.

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
# Solution to exercise 9.1
# About 2,000 training samples have three digits, each a uniform draw from 1,000 strings, so a
# given three-digit string is among them with chance 1 - 0.999^2000, about 86 %: expect about
# 0.86 x 1,000 overlapping test sequences.
three = lengths_test == 3
predicted = int(three.sum()) * p_seen(3)
counted = int(test_in_train[three].sum())
print(f"three-digit test sequences: {int(three.sum())}; n_3 = {int(n_per_len[3])} in training")
print(f"predicted overlap {predicted:.0f} (p_3 = {p_seen(3):.1%}), counted {counted}")
assert abs(counted - predicted) < 3 * predicted**0.5

# %% [markdown]
# ### Exercise 9.2 (implement): cut the padding off a batch
#
# When every row of a batch is short, its last columns are `<pad>` in every row. The masks keep
# them from changing any real position's output, so they only add work (the solution checks
# that the loss of a small model is the same with and without them). In chapter 10's shuffled
# batches of 128 the cut removes one source column, as counted above; in a batch of short rows
# it removes many. Write
# `trim_padding(src, tgt)` that returns `src` and `tgt` with those columns cut off: each tensor
# keeps exactly as many columns as its longest row has real tokens (padding trails, so these are
# the first columns). `check_trim_padding` runs it on three batches and compares.

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 9.2
import torch.nn.functional as F

from helpers import Transformer
from helpers.exercises import check_trim_padding


def trim_padding(src, tgt):
    # <eos> and <bos> are real tokens; each tensor is measured on its own longest row
    width_src = int((src != PAD_ID).sum(1).max())
    width_tgt = int((tgt != PAD_ID).sum(1).max())
    return src[:, :width_src], tgt[:, :width_tgt]


check_trim_padding(trim_padding)

# the cut columns changed nothing: the same untrained model, the same loss on both widths
# (in float64, so that the printed digits do not depend on float32 rounding)
_ = torch.manual_seed(0)
tiny = Transformer(VOCAB_SIZE, VOCAB_SIZE, d_model=16, num_heads=2, dff=32, max_len=WIDTH)
tiny = tiny.double().eval()
short = lengths_train <= 5
s_full, t_full = src_train[short][:32], tgt_train[short][:32]
s_cut, t_cut = trim_padding(s_full, t_full)
with torch.no_grad():
    losses = [
        F.cross_entropy(
            tiny(s, t[:, :-1]).reshape(-1, VOCAB_SIZE), t[:, 1:].reshape(-1), ignore_index=PAD_ID
        )
        for s, t in ((s_full, t_full), (s_cut, t_cut))
    ]
print(f"32 rows of <= 5 digits: src {s_full.size(1)} -> {s_cut.size(1)} columns, ", end="")
print(f"tgt {t_full.size(1)} -> {t_cut.size(1)}")
print(f"loss of an untrained model: {losses[0]:.5f} on 14 columns, {losses[1]:.5f} cut")
assert losses[0].dtype == torch.float64
assert s_cut.size(1) < WIDTH and abs(losses[0] - losses[1]) < 1e-12
