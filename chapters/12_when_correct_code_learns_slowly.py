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
# # 12. When correct code learns slowly
#
# A model can pass every unit test and still learn slowly.
# Here two initialisations were missing, and we take the effect apart.
# The picture shows the book's model and its twin with PyTorch's default initialisation,
# trained side by side on the same data and budget.
#
# ![The book's init and PyTorch's defaults, trained side by side](figures/12_when_correct_code_learns_slowly.png)

# %% [markdown] tags=["run-time"]
# **Run time:** about 15 s. The first time, it also trains chapter 12's badly initialised model (`default_init_recipe()`), chapter 12's well-initialised model (`fixed_budget_recipe()`) and two models of its own and caches them on disk (about 1.6 min more); later runs load them.

# %% [markdown]
# [The reference chapter](intro.md#the-reference-chapter) tells a story worth repeating. Its first
# version passed every unit test: the causality and padding tests of chapter 08. It trained
# without errors, and yet learned slowly. After 10 epochs it reversed only 60 % of its validation
# sequences, where its final version reached 99.6 %. By its account nothing in the code was
# wrong. Two initialisations were missing: that of the token embeddings (chapter 02), and the
# Xavier initialisation {cite}`glorot2010` of the linear layers (chapter 07). Without them
# PyTorch's defaults apply.
#
# This chapter reproduces the effect with the book's recipe, then takes it apart:
#
# 1. what each of the two initialisations changes in the starting weights;
# 2. the quantity the embedding fix changes: how loud the token signal is next to the position
#    signal at the input;
# 3. the book's model and its default-init twin, trained side by side on the same budget and
#    scored on the test set;
# 4. which of the two fixes matters, from a recorded study;
# 5. two short runs that separate two readings of the slow start;
# 6. whether training evens out the two signals.

# %%
import dataclasses

import matplotlib.pyplot as plt
import torch

from helpers import (
    COMPARISON_STEPS,
    PAD_ID,
    default_init_recipe,
    fixed_budget_recipe,
    load_or_train,
    make_reversal_dataset,
)
from helpers.core.model import Transformer, apply_default_init
from helpers.core.vocab import VOCAB_SIZE
from helpers.exercises import check_book_init
from helpers.repro.numerics import assert_within_measured_spread
from helpers.training.evaluation import TEST_SEED, TEST_SIZE, exact_match_with_interval, test_set
from helpers.training.recipes import embedding_scale_recipe
from helpers.training.train import build_model, lr_factor

_ = torch.manual_seed(0)
torch.set_num_threads(1)  # small tensors: one thread is enough
fixed_cfg, default_cfg = fixed_budget_recipe(), default_init_recipe()
diff = {
    k: (v, getattr(default_cfg, k))
    for k, v in dataclasses.asdict(fixed_cfg).items()
    if v != getattr(default_cfg, k)
}
print("the two configs differ only in:", diff)
print(
    f"both: {fixed_cfg.max_steps} steps, batch {fixed_cfg.batch_size}, seed {fixed_cfg.seed}, "
    f"data seed {fixed_cfg.data_seed}, no early stop; validation every {fixed_cfg.eval_every} "
    f"steps on {fixed_cfg.eval_size:,} sequences"
)
assert diff == {"init": ("fixed", "default")} and fixed_cfg.max_steps == COMPARISON_STEPS
assert fixed_cfg.target_exact_match is None

# %% [markdown]
# ## 1. What the two initialisations do
#
# Before any training, compare the weights the configs start from:
#
# - **Token embeddings.** `nn.Embedding` starts with standard normal entries (standard deviation 1).
#   The model multiplies the embedding by $\sqrt{d_\text{model}}$, as in the original paper
#   {cite}`vaswani2017`. So the token vectors entering the first layer have a standard deviation
#   of about $\sqrt{d_\text{model}}$. The fix draws the embedding with standard deviation
#   $d_\text{model}^{-1/2}$: after the scaling, standard deviation 1.
# - **Linear layers** with $n_\text{in}$ inputs and $n_\text{out}$ outputs. `nn.Linear` defaults to
#   Kaiming-uniform {cite}`he2015` with $a=\sqrt 5$. That is a uniform distribution with bound
#   $1/\sqrt{n_\text{in}}$, so standard deviation $1/\sqrt{3\,n_\text{in}}$. Its bias is not zero
#   but uniform with the same bound (torch 2.13.0; the cell compares both with the formulas).
#   Xavier-uniform {cite}`glorot2010` has standard deviation $\sqrt{2/(n_\text{in}+n_\text{out})}$.
#   For a square layer that is $\sqrt{3}$ times larger. The book sets the biases to zero.
#
# Besides the book's init ("fixed") and PyTorch's defaults ("default"), `TrainConfig.init` has
# the two halves. "embedding_only" is the embedding fix with PyTorch's linears. "xavier_only" is
# Xavier linears with PyTorch's embedding. Section 4 cites a study that trained all four.

# %%
INITS = ("fixed", "embedding_only", "xavier_only", "default")
start = {init: build_model(fixed_budget_recipe(init=init)) for init in INITS}
d = fixed_cfg.d_model
stats = {}
print(f"{'init':>14} | {'embedding std x sqrt(d)':>23} | {'W_q std':>7} | {'max |W_q bias|':>14}")
for init, m in start.items():
    emb = m.encoder.embed.emb.weight[PAD_ID + 1 :]  # the <pad> row is zero in all four
    w = m.encoder.layers[0].mha.W_q
    stats[init] = (emb.std().item() * d**0.5, w.weight.std().item(), w.bias.abs().max().item())
    print(f"{init:>14} | {stats[init][0]:23.2f} | {stats[init][1]:7.3f} | {stats[init][2]:14.3f}")
assert all(m.encoder.embed.emb.weight[PAD_ID].eq(0).all() for m in start.values())
for init in ("fixed", "embedding_only"):
    assert abs(stats[init][0] - 1) < 0.15
for init in ("xavier_only", "default"):
    assert abs(stats[init][0] - d**0.5) < 0.15 * d**0.5
n_in = n_out = d  # W_q is square
print(f"torch {torch.__version__.split('+')[0]}")
print(
    f"formulas: Kaiming(a=sqrt 5) std 1/sqrt(3 n_in) = {(3 * n_in) ** -0.5:.3f}, bias bound "
    f"1/sqrt(n_in) = {n_in**-0.5:.3f}; Xavier std sqrt(2/(n_in+n_out)) = "
    f"{(2 / (n_in + n_out)) ** 0.5:.3f}"
)
for xavier, kaiming in (("fixed", "embedding_only"), ("xavier_only", "default")):
    assert abs(stats[kaiming][1] / (3 * n_in) ** -0.5 - 1) < 0.1
    assert abs(stats[xavier][1] / (2 / (n_in + n_out)) ** 0.5 - 1) < 0.1
    # on a square layer Xavier is sqrt(3) times Kaiming(a=sqrt 5); Xavier's biases are zero
    assert abs(stats[xavier][1] / stats[kaiming][1] - 3**0.5) < 0.15
    assert stats[xavier][2] == 0 and 0.8 * n_in**-0.5 < stats[kaiming][2] <= n_in**-0.5

# %% [markdown]
# ## 2. Token signal vs position signal
#
# The reversal task is all about positions: output position $i$ must copy input position $L-1-i$.
# At the input, each vector is the scaled token embedding **plus** the sinusoidal position code.
# The code's entries lie in $[-1, 1]$. If the token part is much louder, the position is a small
# ripple on top. The attention layers then have to tell it apart from the tokens before they can
# use it. That is a reading, not yet a measurement. This section measures the imbalance, and
# section 5 tests the reading against another one. How the layers use the positions, this
# chapter does not measure.
#
# The cell measures, on a batch of real sources, the standard deviation of the token part and of
# the position part of the encoder's input, for the two embeddings. It first checks that the two
# parts add up to what the encoder's embedding layer returns.

# %%
src_val, tgt_val = make_reversal_dataset(1000, seed=fixed_cfg.val_seed)


def token_and_position_std(model, src):
    """Std of the scaled token embeddings and of the position codes, over real (non-pad) tokens."""
    emb = model.encoder.embed
    real = src != PAD_ID
    tokens = emb.emb(src) * emb.token_scale  # [B, L, d]; token_scale is sqrt(d) by default
    positions = (emb.pe[: src.size(1)] * emb.position_scale).expand_as(tokens)
    with torch.no_grad():  # the encoder's input is exactly these two parts added
        torch.testing.assert_close(emb.eval()(src), tokens + positions)
    return tokens[real].std().item(), positions[real].std().item()


ratios = {}
for name in ("fixed", "default"):
    tok, pos = token_and_position_std(start[name], src_val)
    ratios[name] = tok / pos
    print(f"{name:>7} init: token std {tok:5.2f}, position std {pos:.2f}, ratio {tok / pos:5.1f}")
louder = ratios["default"] / ratios["fixed"]
print(f"default / fixed: {louder:.1f} times louder; sqrt(d_model) = {d**0.5:.1f}")
assert ratios["default"] > 5 * ratios["fixed"] and ratios["fixed"] < 2.5
assert abs(louder / d**0.5 - 1) < 0.1

# %% [markdown]
# With the fix, the token part is about twice as loud as the position part (by standard
# deviation): both are clearly present. With PyTorch's defaults it is more than five times louder
# again, and the positions are a ripple. That factor is about $\sqrt{d_\text{model}}$, within
# 10 %. So the effect grows with the width. The reference chapter's model has
# $d_\text{model} = 128$, twice ours in $\sqrt{d}$. Exercise 12.1 measures its ratio. It compares
# it with the reference chapter's claim that the position signal is less than a tenth of the
# token signal.
#
# ## 3. Training both, side by side
#
# Same data, seed, schedule and step budget; only the init differs. Both come from the book's
# checkpoint cache, like every other trained model. The training history records the validation
# exact match (teacher-forced, on the sequences and at the interval the first cell printed).

# %% tags=["nbval-ignore-output"]
fixed_run = load_or_train(fixed_cfg, progress=False, verbose=False)
default_run = load_or_train(default_cfg, progress=False, verbose=False)
for name, run in (("fixed", fixed_run), ("default", default_run)):
    h = run.history
    print(
        f"{name:>7} init: {h['step'][-1]} steps, final loss {h['loss'][-1]:.3f}, "
        f"validation exact match {h['exact_match'][-1]:.3f}"
    )
assert fixed_run.history["step"][-1] == default_run.history["step"][-1] == COMPARISON_STEPS

# %% [markdown]
# Validation was looked at during training, so the score to report comes from the test set.
# The test set is 10,000 sequences, drawn with a seed that neither the training data nor the
# validation set uses. `exact_match_with_interval` counts a sequence as right when the
# teacher-forced argmax is right at every position up to `<eos>`. It also gives a 95 % Wilson
# interval {cite}`wilson1927`. Chapter 11 checks that this count equals what greedy decoding
# gets right.

# %% tags=["nbval-ignore-output"]
test_src, test_tgt = test_set()
seeds = {"test": TEST_SEED, "training data": fixed_cfg.data_seed, "validation": fixed_cfg.val_seed}
print(f"{len(test_src):,} test sequences; seeds: {seeds}")
assert len(set(seeds.values())) == 3 and len(test_src) == TEST_SIZE
test_em = {
    name: exact_match_with_interval(run.model, test_src, test_tgt)
    for name, run in (("fixed", fixed_run), ("default", default_run))
}
for name, iv in test_em.items():
    print(f"{name:>7} init, test set: {iv}")
gap = test_em["fixed"].exact_match - test_em["default"].exact_match
print(f"gap after {COMPARISON_STEPS} steps: {gap:.3f}")
for name, part in (("fixed", "fixed_budget"), ("default", "default_init")):  # shares of 10,000
    assert_within_measured_spread(f"{part}.test_correct", test_em[name].exact_match, scale=1e-4)
assert test_em["fixed"].low > test_em["default"].high  # the intervals are far apart

# %% [markdown]
# The two intervals do not overlap. Figure 12.1 shows the two runs step by step: the training
# loss and the validation exact match.


# %% jupyter={"source_hidden": true} tags=["figure", "hide-input", "opening-figure"]
def smooth(values, k=10):
    """Running mean over the last k values."""
    return [
        sum(values[max(0, i - k + 1) : i + 1]) / len(values[max(0, i - k + 1) : i + 1])
        for i in range(len(values))
    ]


fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.6))
for name, run, color in (
    ("fixed init", fixed_run, "tab:blue"),
    ("default init", default_run, "tab:orange"),
):
    h = run.history
    ax1.plot(h["step"], smooth(h["loss"]), color=color, label=name)
    ax2.plot(h["eval_step"], h["exact_match"], "o-", ms=3, color=color, label=name)
ax1.set_yscale("log")
ax1.set_xlabel("step")
ax1.set_ylabel("training loss (log scale, mean of 10 steps)")
ax1.set_title("Loss")
ax2.set_xlabel("step")
ax2.set_ylabel("validation exact match")
ax2.set_ylim(0, 1.02)
ax2.set_title("Exact match, same data, seed and budget")
ax1.legend(fontsize=8)
ax2.legend(fontsize=8, loc="lower right")
fig.suptitle("Figure 12.1: the book's init and PyTorch's defaults, seed 0", fontsize=11)
plt.tight_layout()
plt.show()


# %% [markdown]
# ## 4. Which fix matters
#
# The two runs above change both initialisations at once.
# [The initialisation study](../appendix/experiment_initialisation.ipynb) trained all four
# combinations on this budget, three seeds each. With the embedding fix alone, the mean test
# exact match was 0.9997 (95 % interval 0.9993 to 1.0000); with Xavier alone, 0.7824 (0.5546 to
# 1.0102). Three seeds make these intervals wide: the second even passes 1. Xavier's own
# effect was not distinguishable from zero with three seeds.
#
# ## 5. Loud tokens, or a loud input?
#
# Section 2 read the slow start as "the tokens drown the positions". The study's numbers fit
# another reading too. Each layer adds an update to its input, the **residual stream**:
# $x + f(\operatorname{LN}(x))$. The LayerNorm fixes the scale of what $f$ sees, so the update's
# size does not grow with $x$. With PyTorch's default embedding the stream starts about
# $\sqrt{d_\text{model}}$ times louder, so the update is smaller next to it by about that
# factor (the next cell measures the first layer's).
# The embedding fix quietens both at once: tokens against positions, and the input against the
# updates.
#
# Two options of `TokenAndPosition` take them apart. `token_scale` replaces the factor
# $\sqrt{d_\text{model}}$ on the tokens; `position_scale` multiplies the position codes.
# `embedding_scale_recipe` sets both in a recipe. Two twins of the default-init model:
#
# - **tokens unscaled** (`token_scale=1`): the input is as quiet as with the fix, and the
#   positions are as audible as with the fix.
# - **quiet input** (`token_scale=1`, `position_scale` $= d_\text{model}^{-1/2}$): the input is
#   as quiet as with the fix, but the positions are as faint, next to the tokens, as with the
#   defaults.
#
# The options change no weight, so both twins start from the default-init model's weights. The
# cell measures, before training, the token-to-position ratio and the size of the first encoder
# layer's update next to its input (root mean square over real tokens).


# %%
def update_ratio(model, src):
    """RMS of the first encoder layer's update over the RMS of its input, on real tokens."""
    real = src != PAD_ID
    with torch.no_grad():
        x = model.encoder.embed.eval()(src)
        y, _ = model.encoder.layers[0].eval()(x, (~real)[:, None, None, :], need_weights=False)
    rms = lambda t: t[real].pow(2).mean().sqrt().item()  # noqa: E731
    return rms(y - x) / rms(x)


short = dataclasses.replace(default_cfg, max_steps=100, cooldown=0)  # the first 100 steps
twins = {
    "tokens unscaled": embedding_scale_recipe(short, token_scale=1.0),
    "quiet input": embedding_scale_recipe(short, token_scale=1.0, position_scale=d**-0.5),
}
arms = {"fixed": fixed_cfg, "default": default_cfg, **twins}
loudness = {}
print(f"{'model':>15} | token std / position std | update RMS / input RMS")
for name, cfg in arms.items():
    m = build_model(cfg)
    tok, pos = token_and_position_std(m, src_val)
    loudness[name] = (tok / pos, update_ratio(m, src_val))
    print(f"{name:>15} | {loudness[name][0]:24.1f} | {loudness[name][1]:22.3f}")
default_start = dict(build_model(default_cfg).named_parameters())
for cfg in twins.values():  # the same starting weights as the default-init model
    assert all(torch.equal(p, default_start[n]) for n, p in build_model(cfg).named_parameters())
assert all(lr_factor(short)(s) == lr_factor(default_cfg)(s) for s in range(100))  # same lr
ratio_, update_ = {k: v[0] for k, v in loudness.items()}, {k: v[1] for k, v in loudness.items()}
assert abs(ratio_["tokens unscaled"] / ratio_["fixed"] - 1) < 0.1  # the fix's ratio
assert abs(ratio_["quiet input"] / ratio_["default"] - 1) < 0.1  # the defaults' ratio
assert abs(update_["quiet input"] / update_["tokens unscaled"] - 1) < 0.15  # alike
assert min(update_[twin] for twin in twins) > 4 * update_["default"]

# %% [markdown]
# In both twins the first layer's update, next to its input, is more than four times the
# default-init model's, and the two twins are alike in it. (The fix's update is larger
# still.) The twins differ in the token-to-position ratio: the fix's in
# "tokens unscaled", the defaults' in "quiet input". The cell trains both twins for 100 steps
# (the recipe's warmup; its cooldown starts after it). It compares them with the two models of
# section 3 at step 100, when they had had the same batches and learning rates: validation
# exact match, and the mean training loss of steps 81 to 100.


# %% tags=["nbval-ignore-output"]
def at_100(history):
    """(validation exact match at step 100, mean training loss of steps 81-100)."""
    return history["exact_match"][history["eval_step"].index(100)], sum(
        history["loss"][80:100]
    ) / 20


runs_100 = {"fixed": fixed_run, "default": default_run}
runs_100.update(
    {name: load_or_train(cfg, progress=False, verbose=False) for name, cfg in twins.items()}
)
step_100 = {name: at_100(run.history) for name, run in runs_100.items()}
print(f"{'model':>15} | step 100: validation exact match | loss, steps 81-100")
for name, (em, loss) in step_100.items():
    print(f"{name:>15} | {em:31.3f} | {loss:17.3f}")
loss = {name: v[1] for name, v in step_100.items()}
closed = {
    twin: (loss["default"] - loss[twin]) / (loss["default"] - loss["fixed"]) for twin in twins
}
print("share of the default-to-fixed loss gap closed at step 100: "
      + ", ".join(f"{twin} {share:.0%}" for twin, share in closed.items()))  # fmt: skip
assert closed["quiet input"] < 0.5 < closed["tokens unscaled"]

# %% [markdown]
# The last line measures each twin's loss at step 100 on the way from the default init's (0 %)
# to the fixed init's (100 %). A share above 100 % is a loss below the fixed init's. The run
# whose positions are audible closed more than half of that gap. The quiet input, whose
# positions are drowned as with the defaults, closed less than half. So on this seed, at step
# 100, quietening the input against the layers' updates is not enough; letting the positions be
# heard closes more than half of the gap. This is one seed and 100 steps. It does not show how
# the layers use the positions.
#
# ## 6. Does training repair the imbalance?
#
# The model could learn to shrink its token embeddings. Measured on the two trained models of
# section 3:

# %% tags=["nbval-ignore-output"]
after = {}
for name, run in (("fixed", fixed_run), ("default", default_run)):
    tok, pos = token_and_position_std(run.model, src_val)
    after[name] = tok / pos
    print(
        f"{name:>7} init, trained: token std {tok:5.2f}, position std {pos:.2f}, "
        f"ratio {tok / pos:5.1f}"
    )
shrink = 1 - after["default"] / ratios["default"]
print(f"default init: ratio {ratios['default']:.1f} at the start, {after['default']:.1f} trained")
print(f"(it shrank by {shrink:.0%}); the fixed init, trained: {after['fixed']:.1f}")
assert after["default"] > after["fixed"]

# %% [markdown]
# In these 300 steps (seed 0) the default-init model's ratio shrinks by the share printed. Its
# token signal is still louder, relative to the positions, than the trained fixed model's.
#
# **The lesson.** Unit tests check that the code computes the function you meant. They say
# nothing about whether that function is easy to learn from its starting point. When a model
# "works but learns slowly", compare the defaults it starts from with those of a version that
# learns well. Then print the standard deviations of what gets added together.
#
# :::{dropdown} Going deeper: what the reference chapter compared
# The reference chapter's TensorFlow version of the same model learned fast. It names
# initialisation, epsilons and activation approximations as defaults that differ between
# frameworks. Here the initialisation was enough.
# :::
#
# ## Summary
#
# - PyTorch's defaults (embedding $\mathcal N(0, 1)$, Kaiming-uniform linears) and the book's
#   init (embedding with standard deviation $d_\text{model}^{-1/2}$, Xavier linears, zero
#   biases) start from weights that differ in scale. With the defaults, the token signal at the
#   input is about $\sqrt{d_\text{model}}$ times louder, relative to the positions, than with
#   the fix.
# - On the same 300-step budget, the book's init scores higher on the 10,000 test sequences;
#   the two 95 % intervals do not overlap.
# - A recorded study of the four combinations (three seeds each) found the embedding fix alone
#   close to both fixes; Xavier's effect was not distinguishable from zero.
# - Two short runs separate two readings. Quietening the whole input without letting the
#   positions be heard closed less than half of the loss gap; letting the positions be heard
#   closed more than half (one seed, 100 steps).
# - Remember: tests prove the code computes the intended function, not that it is easy to learn.
#   Print the scale of what gets added together.
#
# ## Exercises
#
# ### Exercise 12.1 (predict, then run): the reference chapter's width
#
# The reference chapter's model has $d_\text{model} = 128$. With PyTorch's default embedding,
# what is its token-to-position ratio at the input (section 2 measured it for
# $d_\text{model} = 32$)? Predict from the formulas of section 1, then build an untrained
# `Transformer(VOCAB_SIZE, VOCAB_SIZE, d_model=128, max_len=14)`, apply
# `apply_default_init`, and measure with `token_and_position_std`.
#
# The reference chapter puts its token std at about 11 and says the position signal is less
# than a tenth of it: a ratio of about 10 times. Which measure of the position part gives
# that: its bound (the entries lie in $[-1, 1]$), its RMS, or its standard deviation (what
# `token_and_position_std` returns)?

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
# Solution to exercise 12.1
# Token std: sqrt(128) = 11.3 (N(0, 1) entries, times sqrt(d)), twice the sqrt(32) = 5.7 of
# section 2. The position part does not grow with d (its entries are sines and cosines in
# [-1, 1]), so the ratio doubles too: about 2 x 11 = 22.
# The reference chapter's "less than a tenth" divides the token std (about 11) by the bound 1 of the
# position entries. The RMS of the sinusoids is sqrt(1/2) = 0.71. Their standard deviation is
# lower still (0.52): it subtracts their mean, which is far from 0 (printed), because over 14
# positions the slow cosines stay near 1.
_ = torch.manual_seed(0)
wide = apply_default_init(Transformer(VOCAB_SIZE, VOCAB_SIZE, d_model=128, max_len=14))
tok, pos = token_and_position_std(wide, src_val)
print(
    f"d_model 128, default init: token std {tok:.1f}, position std {pos:.2f}, ratio {tok / pos:.0f}"
)
assert abs(tok / 128**0.5 - 1) < 0.1 and abs(tok / pos / ratios["default"] - 2) < 0.3
pe = wide.encoder.embed.pe[: src_val.size(1)].expand(src_val.size(0), -1, -1)[src_val != PAD_ID]
measures = {"bound": pe.abs().max().item(), "RMS": pe.pow(2).mean().sqrt().item(), "std": pos}
for name, value in measures.items():
    print(f"token std / position {name} ({value:.2f}): {tok / value:.0f}")
print(f"mean of the position entries: {pe.mean().item():.2f}")
assert measures["bound"] == 1.0 and round(tok / measures["bound"]) in (10, 11, 12)

# %% [markdown]
# ### Exercise 12.2 (predict, then run): Xavier is not always $\sqrt 3$ times larger
#
# Section 1 found Xavier's standard deviation $\sqrt 3$ times PyTorch's default on the square
# query projection. The feed-forward network's first layer maps 32 inputs to 128 outputs, its
# second 128 to 32. Predict the ratio (Xavier std over default std) for each, then measure it on
# the `fixed` and `default` models of section 1 (`encoder.layers[0].ffn.net[0]` and
# `.net[2]`).

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
# Solution to exercise 12.2
# Xavier / default = sqrt(2 / (n_in + n_out)) * sqrt(3 n_in) = sqrt(6 n_in / (n_in + n_out)):
# 32 -> 128: sqrt(192 / 160) = 1.10; 128 -> 32: sqrt(768 / 160) = 2.19.
for idx, (n_in, n_out) in ((0, (32, 128)), (2, (128, 32))):
    xavier = start["fixed"].encoder.layers[0].ffn.net[idx].weight.std().item()
    default = start["default"].encoder.layers[0].ffn.net[idx].weight.std().item()
    predicted = (6 * n_in / (n_in + n_out)) ** 0.5
    print(
        f"{n_in:>3} -> {n_out:>3}: measured ratio {xavier / default:.2f}, predicted {predicted:.2f}"
    )
    assert abs(xavier / default / predicted - 1) < 0.05

# %% [markdown]
# ### Exercise 12.3 (implement): the book's initialisation by hand
#
# Write `book_init(model)`, which takes a `Transformer` that has PyTorch's default
# initialisation and gives it, in place, the book's: every `nn.Embedding` drawn from a normal
# distribution with mean 0 and standard deviation $d_\text{model}^{-1/2}$, its `<pad>` row
# (`PAD_ID`) zero, every `nn.Linear` weight Xavier-uniform and every bias zero, and nothing else
# touched. `check_book_init` runs it on a default-initialised model with $d_\text{model} = 64$
# and compares the statistics of every layer with what the book's init gives.


# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 12.3
def book_init(model):
    d = model.config.d_model
    for m in model.modules():
        if isinstance(m, torch.nn.Embedding):
            torch.nn.init.normal_(m.weight, mean=0.0, std=d**-0.5)
            with torch.no_grad():
                m.weight[PAD_ID].zero_()  # normal_ overwrote the padding row too
        elif isinstance(m, torch.nn.Linear):
            torch.nn.init.xavier_uniform_(m.weight)
            torch.nn.init.zeros_(m.bias)


check_book_init(book_init)
