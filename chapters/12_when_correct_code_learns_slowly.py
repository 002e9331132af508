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
# # When correct code learns slowly
#
# The reference chapter tells a story worth repeating. Its first version passed every unit test
# (the causality and padding tests of chapter 08), trained without errors, and yet learned
# painfully slowly: after 10 epochs it reversed only about 60 % of the validation sequences, where
# the final version reaches 99.6 %. Nothing in the code was wrong. Two lines were missing: the
# initialisation of the token embeddings (chapter 02) and the Xavier initialisation of the linear
# layers (chapter 07). Without them PyTorch's defaults apply.
#
# This chapter reproduces the effect with the book's recipe: the same model, data, seed, schedule
# and number of steps, once with the book's initialisation ("fixed") and once with PyTorch's
# defaults ("default"). Then it measures the quantity that explains the gap: how loud the token
# signal is compared with the position signal when the two are added at the input.

# %%
import dataclasses

import matplotlib.pyplot as plt
import torch

from helpers import (
    COMPARISON_STEPS,
    PAD_ID,
    default_init_recipe,
    exact_match,
    fixed_budget_recipe,
    load_or_train,
    make_reversal_dataset,
)
from helpers.train import build_model

torch.manual_seed(0)
fixed_cfg, default_cfg = fixed_budget_recipe(), default_init_recipe()
diff = {
    k: (v, getattr(default_cfg, k))
    for k, v in dataclasses.asdict(fixed_cfg).items()
    if v != getattr(default_cfg, k)
}
print("the two configs differ only in:", diff)
print(
    f"both: {fixed_cfg.max_steps} steps, batch {fixed_cfg.batch_size}, seed {fixed_cfg.seed}, "
    f"data seed {fixed_cfg.data_seed}, no early stop"
)
assert diff == {"init": ("fixed", "default")} and fixed_cfg.max_steps == COMPARISON_STEPS
assert fixed_cfg.target_exact_match is None

# %% [markdown]
# ## What the two initialisations do
#
# Before any training, compare the weights the two configs start from:
#
# - **Token embeddings.** `nn.Embedding` starts with standard normal entries (standard deviation 1).
#   The model multiplies the embedding by $\sqrt{d_\text{model}}$ (as in the original paper), so the
#   token vectors entering the first layer have a standard deviation of about $\sqrt{d_\text{model}}$.
#   The fix draws the embedding with standard deviation $d_\text{model}^{-1/2}$: after the scaling,
#   standard deviation 1.
# - **Linear layers** with $n_\text{in}$ inputs and $n_\text{out}$ outputs. `nn.Linear` defaults to
#   Kaiming-uniform with $a=\sqrt 5$, a uniform distribution with bound $1/\sqrt{n_\text{in}}$, so
#   standard deviation $1/\sqrt{3\,n_\text{in}}$.
#   Xavier-uniform has standard deviation $\sqrt{2/(n_\text{in}+n_\text{out})}$: for a square
#   layer, $\sqrt{3}$ times larger.

# %%
fixed0, default0 = build_model(fixed_cfg), build_model(default_cfg)
d = fixed_cfg.d_model
for name, m in (("fixed", fixed0), ("default", default0)):
    emb = m.encoder.embed.emb.weight[PAD_ID + 1 :]  # the <pad> row is zero in both
    w = m.encoder.layers[0].mha.W_q.weight
    print(
        f"{name:>7}: embedding std {emb.std().item():.3f}, x sqrt(d) = {emb.std().item() * d**0.5:.2f};"
        f"  W_q ({w.shape[1]}->{w.shape[0]}) std {w.std().item():.3f}"
    )
e_fixed = fixed0.encoder.embed.emb.weight[1:].std().item()
e_default = default0.encoder.embed.emb.weight[1:].std().item()
assert abs(e_fixed * d**0.5 - 1) < 0.15 and abs(e_default - 1) < 0.15
w_fixed = fixed0.encoder.layers[0].mha.W_q.weight.std().item()
w_default = default0.encoder.layers[0].mha.W_q.weight.std().item()
assert abs(w_fixed / w_default - 3**0.5) < 0.15  # Xavier vs Kaiming(a=sqrt 5) on a square layer

# %% [markdown]
# ## Token signal vs position signal
#
# The reversal task is all about positions: output position $i$ must copy input position $L-1-i$.
# At the input, each vector is the scaled token embedding **plus** the sinusoidal position code,
# whose entries lie in $[-1, 1]$. If the token part is much louder,
# the position is a small ripple on top, and the attention layers have to learn to dig it out
# before they can learn the task.
#
# The cell measures, on a batch of real sources, the standard deviation of the token part and of
# the position part of the encoder's input, for both initialisations.

# %%
src_val, tgt_val = make_reversal_dataset(1000, seed=1)


def token_and_position_std(model, src):
    emb = model.encoder.embed
    real = src != PAD_ID
    tokens = emb.emb(src) * d**0.5  # [B, L, d]
    positions = emb.pe[: src.size(1)].expand_as(tokens)
    return tokens[real].std().item(), positions[real].std().item()


ratios = {}
for name, m in (("fixed", fixed0), ("default", default0)):
    tok, pos = token_and_position_std(m, src_val)
    ratios[name] = tok / pos
    print(f"{name:>7} init: token std {tok:5.2f}, position std {pos:.2f}, ratio {tok / pos:5.1f}")
assert ratios["default"] > 4 * ratios["fixed"] and ratios["fixed"] < 2.5

# %% [markdown]
# With the fix, the token part is about twice as loud as the position part: both are clearly
# audible. With PyTorch's defaults it is about five times louder again, and the positions are a
# ripple. The reference chapter used $d_\text{model} = 128$, so its ratio was larger
# still ($\sqrt{128} \approx 11$ against our $\sqrt{32} \approx 5.7$): the effect grows with the width.
#
# ## Training both, side by side
#
# Same data, seed, schedule and step budget; only the init differs. Both are cached like every
# other model of the book (the heatmap chapter reuses the default-init one).

# %% tags=["nbval-ignore-output"]
fixed_run = load_or_train(fixed_cfg)
default_run = load_or_train(default_cfg)
for name, run in (("fixed", fixed_run), ("default", default_run)):
    h = run.history
    print(
        f"{name:>7} init: {h['step'][-1]} steps, final loss {h['loss'][-1]:.3f}, "
        f"validation exact match {h['exact_match'][-1]:.3f}"
    )
assert fixed_run.history["step"][-1] == default_run.history["step"][-1] == COMPARISON_STEPS

# %% [markdown]
# The exact-match gap, measured from scratch by greedy decoding on the 1,000 held-out sequences:

# %% tags=["nbval-ignore-output"]
em_fixed = exact_match(fixed_run.model, src_val, tgt_val)
em_default = exact_match(default_run.model, src_val, tgt_val)
print(
    f"after {COMPARISON_STEPS} steps: fixed init {em_fixed:.3f}, default init {em_default:.3f}, "
    f"gap {em_fixed - em_default:.3f}"
)
assert em_fixed >= 0.98 and em_fixed - em_default >= 0.1

# %%
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.6))
for name, run, color in (
    ("fixed init", fixed_run, "tab:blue"),
    ("default init", default_run, "tab:orange"),
):
    h = run.history
    k = 10
    smooth = [
        sum(h["loss"][max(0, i - k + 1) : i + 1]) / len(h["loss"][max(0, i - k + 1) : i + 1])
        for i in range(len(h["loss"]))
    ]
    ax1.plot(h["step"], smooth, color=color, label=name)
    ax2.plot(h["eval_step"], h["exact_match"], "o-", ms=3, color=color, label=name)
ax1.set_yscale("log")
ax1.set_xlabel("step")
ax1.set_ylabel("training loss (log scale)")
ax1.set_title("Loss")
ax2.axhline(0.995, color="tab:red", lw=1, ls="--", label="99.5 %")
ax2.set_xlabel("step")
ax2.set_ylabel("validation exact match")
ax2.set_ylim(0, 1.02)
ax2.set_title("Exact match, same data, seed and budget")
for ax in (ax1, ax2):
    ax.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# The default-init model does learn, like the reference chapter's first version, but it needs
# many more steps for the same result.
#
# ## Does training repair the imbalance?
#
# The model could learn to shrink its token embeddings. Measured after training:

# %% tags=["nbval-ignore-output"]
after = {}
for name, run in (("fixed", fixed_run), ("default", default_run)):
    tok, pos = token_and_position_std(run.model, src_val)
    after[name] = tok / pos
    print(
        f"{name:>7} init, trained: token std {tok:5.2f}, position std {pos:.2f}, ratio {tok / pos:5.1f}"
    )
assert after["default"] > 3 * after["fixed"]

# %% [markdown]
# It hardly does: after training, the token signal of the default-init model is still several
# times louder than the fixed model's. The model spends its budget working around a bad starting
# point instead of learning the task. Chapter 18 looks at where each of the two models attends.
#
# **The lesson.** Unit tests check that the code computes the function you meant. They say nothing
# about whether that function is easy to learn from its starting point. When a port from another
# framework "works but learns slowly", compare the defaults: initialisation, epsilons, activation
# approximations, and print the standard deviations of what gets added together.
