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
# # Data: the reversal task
#
# The model is built (chapters 01-08); now it needs something to learn. The task is to reverse
# a string of digits: `7 3 0 9 5` becomes `5 9 0 3 7`. It is a good first task for an
# encoder-decoder Transformer for three reasons:
#
# - **Data is free and exact.** A few lines of NumPy generate as many pairs as we want, and every
#   answer is known, so "98 % exact match" means exactly what it says.
# - **Only attention can solve it.** Output position $i$ must copy input position $L-1-i$, where
#   $L$ is the length of this particular input. A model that ignores positions, or cannot move
#   information between positions, cannot do better than guessing digits.
# - **It trains in seconds on a CPU**, which makes every later experiment cheap.
#
# This chapter builds the data set by hand, looks at it from a few angles (one sample, the lengths,
# the padding), and checks the train/validation split honestly: how many validation sequences
# also occur in the training set?

# %%
import matplotlib.pyplot as plt
import numpy as np
import torch

from helpers import BOS_ID, EOS_ID, NUM_OFFSET, PAD_ID, VOCAB_SIZE, decode_digits, describe

print(f"PAD={PAD_ID} BOS={BOS_ID} EOS={EOS_ID}; digit d is id d + {NUM_OFFSET}; vocabulary size {VOCAB_SIZE}")

# %% [markdown]
# ## Building the data set
#
# The vocabulary has 13 tokens: three special ones and the ten digits, shifted by `NUM_OFFSET = 3`
# so that digit 0 does not collide with `<pad>` (id 0).
#
# Each sample draws a length $L$ uniformly from 3 to 12, then $L$ random digits. Both sequences
# have the same fixed width, 12 + 2 = 14, filled up with `<pad>`:
#
# - `src` = the digits, then `<eos>`. The encoder needs no `<bos>`: it reads the whole input at once.
# - `tgt` = `<bos>`, the reversed digits, `<eos>`. The decoder needs `<bos>` as the input for its
#   first step, and `<eos>` is how it says "done".
#
# Everything is drawn from one `np.random.default_rng(seed)`, so a seed fully determines a data set.

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
        tgt[i, 1:L + 1] = digits[::-1]
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
# Every pair must satisfy the same invariants, not only the one we looked at. The cell checks all
# 21,000: the target's digits are the source's reversed, each row has exactly one `<eos>`, the
# target starts with `<bos>`, and padding only ever trails (no `<pad>` before a real token).

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
# 20,000 training samples. The cell asserts that every length is within 10 % of 2,000.

# %%
lengths_train = (src_train != PAD_ID).sum(1) - 1  # minus <eos>
counts = torch.bincount(lengths_train, minlength=MAX_LEN + 1)[MIN_LEN:]
print({L: int(c) for L, c in zip(range(MIN_LEN, MAX_LEN + 1), counts)})
assert lengths_train.min() == MIN_LEN and lengths_train.max() == MAX_LEN
assert ((counts - 2000).abs() < 200).all()

fig, ax = plt.subplots(figsize=(6.5, 3))
ax.bar(range(MIN_LEN, MAX_LEN + 1), counts.tolist(), color="tab:blue")
ax.axhline(2000, color="k", lw=1, ls="--", label="uniform: 2,000 each")
ax.set_xlabel("number of digits L")
ax.set_ylabel("training samples")
ax.set_title("Sequence lengths in the training set")
ax.set_xticks(range(MIN_LEN, MAX_LEN + 1))
ax.legend(loc="lower right")
plt.show()

# %% [markdown]
# Because the tensors have a fixed width of 14, short samples carry a lot of `<pad>`. The average
# source holds $7.5 + 1$ real tokens out of 14, so roughly 40 % of the source positions (and a third
# of the target positions) are padding. Two
# consequences come up in the training chapter (10): the loss must ignore padded positions
# (`ignore_index`), and a batch of similar lengths can be cut to a narrower width to save work.

# %%
pad_share_src = (src_train == PAD_ID).float().mean().item()
pad_share_tgt = (tgt_train == PAD_ID).float().mean().item()
print(f"padding share: src {pad_share_src:.1%}, tgt {pad_share_tgt:.1%}")
expected_src = 1 - (lengths_train.float().mean().item() + 1) / WIDTH
assert abs(pad_share_src - expected_src) < 1e-6 and 0.35 < pad_share_src < 0.42

# %% [markdown]
# The digits themselves are uniform too: each of the ten appears about 10 % of the time.

# %%
digit_ids = src_train[src_train >= NUM_OFFSET] - NUM_OFFSET
freq = torch.bincount(digit_ids, minlength=10).float() / digit_ids.numel()
print("digit frequencies:", [round(f, 3) for f in freq.tolist()])
assert (freq - 0.1).abs().max() < 0.01

# %% [markdown]
# ## Train and validation: split by seed
#
# The training set uses seed 0 and the validation set seed 1. The same seed always gives the same
# data (so a checkpoint trained today was trained on exactly these samples), and a different seed
# gives different data.

# %%
again_src, again_tgt = make_dataset(20000, seed=0)
assert torch.equal(again_src, src_train) and torch.equal(again_tgt, tgt_train)
assert not torch.equal(make_dataset(1000, seed=0)[0], src_val)
print("seed 0 twice: identical; seed 0 vs seed 1: different")

# %% [markdown]
# "Different seed" does **not** mean "no overlap". A different seed draws independently, and
# independent draws can repeat a sequence. How often? There are only $10^3 = 1000$ strings of three
# digits, and the training set holds about 2,000 three-digit samples, so nearly every three-digit
# validation sequence also occurs in training. For length $L$ with $n_L$ training samples the
# chance that a given validation sequence appears among them is $1-(1-10^{-L})^{n_L}$: large for
# $L=3$, about 18 % for $L=4$, 2 % for $L=5$, and from $L=6$ on a fraction of one sequence in the
# whole validation set.
#
# The next cell counts the overlap exactly and compares it with that estimate.

# %%
train_set = {tuple(row) for row in src_train.tolist()}
in_train = torch.tensor([tuple(row) in train_set for row in src_val.tolist()])
lengths_val = (src_val != PAD_ID).sum(1) - 1
n_per_len = torch.bincount(lengths_train, minlength=MAX_LEN + 1)

expected = sum(1 - (1 - 10.0 ** -int(L)) ** int(n_per_len[L]) for L in lengths_val)
print(f"validation sequences that also occur in training: {int(in_train.sum())} of {len(src_val)}"
      f" (estimate {expected:.0f})")
for L in range(MIN_LEN, 8):
    sel = lengths_val == L
    print(f"  length {L}: {int(in_train[sel].sum()):3d} of {int(sel.sum()):3d}")
assert int(in_train[lengths_val >= 7].sum()) == 0
assert 0.07 < in_train.float().mean() < 0.14  # about one in ten
assert abs(int(in_train.sum()) - expected) < 3 * expected ** 0.5  # within sampling noise

# %% [markdown]
# So about one validation sequence in ten was also seen in training, nearly all of them with three
# or four digits. That does not make validation meaningless: the task has $10^{12}$ twelve-digit
# inputs, and the model cannot memorise its way to high accuracy on the long ones. It does flatter
# the exact-match score a little, so the training chapter also reports the score on the **unseen**
# validation sequences only. We keep the overlapping ones in the validation set because the
# reference chapter's recipe (train: 20,000 with seed 0, validation: 1,000 with seed 1) is the
# benchmark this book compares against.
#
# Inside the training set, the same arithmetic predicts duplicates as well:

# %%
dupes = len(src_train) - len(train_set)
print(f"duplicate rows inside the training set: {dupes} ({dupes / len(src_train):.1%})")
assert 0 < dupes < 0.1 * len(src_train)

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
# Next, chapter 10 trains the model on these 20,000 pairs until it reverses at least 99.5 % of the
# 1,000 validation sequences exactly, and measures what it takes to get there fast on a CPU.
