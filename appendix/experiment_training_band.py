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
# # Experiment: the training band
#
# ## Question
#
# What does a healthy run of the book's recipe look like, step by step? Chapter 17 holds a
# reader's run against this band with `helpers.compare_with_band` and says where it leaves it.
# The band must be as wide as the runs of the recipe really are: no wider, or it hides a broken
# run; no narrower, or it flags a healthy one.
#
# ## Design
#
# - **One arm**: the book's recipe (`BOOK_RECIPE`), trained from scratch.
# - **Seeds**: 1 to 6. The seed sets the initial weights and the order of the batches; the
#   data is the same. Seed 0 is the book's own model, which chapter 17 compares with the band,
#   so it is left out. Seeds 7 to 12, the **check seeds**, are trained the same way but take no
#   part in the band: each is held against it, as a reader's run would be.
# - **Budget**: the first 400 steps of the recipe's schedule, with no stopping rule, so that
#   every seed has a value at every step.
# - **Measured**: the loss of every training step, and the validation exact match every 10
#   steps (teacher-forced, on the 1,000 validation sequences that the stopping rule reads).
# - **The band**: the loss is averaged over windows of 10 steps and compared on a log scale.
#   At each point the band runs from the lowest seed to the highest, widened by a margin. The
#   margin is measured: each seed is held out in turn and compared with the band of the others.
#   The margin at a point is a factor times the largest distance by which a held-out seed left
#   that band, at that point or within 5 points of it. The runs spread little early and much
#   more in the middle, so the margin follows. The factor is measured too: the smallest of 1, 1.5, 2, ... at
#   which every seed, held out, stays inside the band the other five make with it. The loss
#   band's upper edge never rises above its first value: a run back at its starting loss has
#   undone its training. A run leaves the band only if it stays out at the next point too.
# - **Another CPU**: a run on another CPU has other low bits, so another trajectory. We treat it
#   like one more seed; the check seeds measure how often such a run leaves the band.
#
# ## Command

# %% [markdown]
# ```bash
# env $(python src/helpers/repro/pin.py pinned) nice -n 10 python -m tools.record.training_band
# ```
#
# It trains the 6 runs in the book's pinned numerics, one thread each; `--jobs 6` runs them in
# parallel, with the same bits. The check seeds are added to the same record by:
#
# ```bash
# env $(python src/helpers/repro/pin.py pinned) nice -n 10 python -m tools.record.training_band \
#     --check --jobs 2
# ```
#
# ## Provenance

# %%
import matplotlib.pyplot as plt
import numpy as np

from helpers import wilson_interval
from helpers.analysis.experiments import load_record, mean_interval
from helpers.debugging import compare_with_band, training_band
from helpers.debugging.band import FACTORS, WINDOW, held_out_outside


def as_history(run):
    """A recorded run as compare_with_band reads a reader's history."""
    steps = [record["eval_every"] * (k + 1) for k in range(len(run["exact_match"]))]
    return {"loss": run["loss"], "eval_step": steps, "exact_match": run["exact_match"]}


record = load_record("training_band")
band = training_band(record)
print(f"recorded {record['date'][:10]}; numerics:")
for key, value in record["numerics"].items():
    print(f"  {key}: {value}")
print("design:", record["design"])
print("seeds:", record["seeds"], "| check seeds:", record["check"]["seeds"])
same = record["check"]["numerics"] == record["numerics"]
print("check seeds' numerics:", "as above" if same else record["check"]["numerics"])
cpu = sum(r["cpu_seconds"] for r in record["runs"] + record["check"]["runs"])
print(f"CPU time of all runs: {cpu / 60:.1f} min")

# %% [markdown]
# ## Results
#
# The band at some of its points. For the loss (the mean of the 10 steps ending at the step):
# the mean over the seeds with its 95 % t interval, then the band. For the validation exact
# match: the same (with six seeds, a t interval can pass 0 or 1). Last, the margins at that
# point, measured on the seeds held out in turn.

# %%
runs = record["runs"]
n_windows = record["steps"] // WINDOW
loss_w = np.array([np.reshape(r["loss"][: n_windows * WINDOW], (n_windows, WINDOW)).mean(1)
                   for r in runs])  # fmt: skip
em = np.array([r["exact_match"] for r in runs])
print(f"{'step':>5} | {'loss: mean (95 % interval)':<29} {'band':<15} | "
      f"{'exact match: mean (95 % interval)':<35} {'band':<11} | margins")  # fmt: skip
for step in (10, 50, 100, 150, 200, 250, 300, 350, 400):
    k = step // WINDOW - 1
    li, ei = mean_interval(loss_w[:, k]), mean_interval(em[:, k])
    loss_cell = f"{li.mean:.3g} ({li.low:.3g} to {li.high:.3g})"
    em_cell = f"{ei.mean:.3f} ({ei.low:.3f} to {ei.high:.3f})"
    band_cell = f"{band.loss_low[k]:.2g}-{band.loss_high[k]:.3g}"
    print(f"{step:>5} | {loss_cell:<29} {band_cell:<15} | "
          f"{em_cell:<35} {band.em_low[k]:.2f}-{band.em_high[k]:<6.2f} | "
          f"x{10 ** band.loss_margin[k]:.3g}, {band.em_margin[k]:.3f}")  # fmt: skip

# %% [markdown]
# The first step at which each seed's validation exact match reached 99.5 %, the recipe's
# target (the stopping rule would have stopped there, or at a later step if that step's training
# batch was below the gate):

# %%
first = [int(record["eval_every"] * (np.argmax(np.array(r["exact_match"]) >= 0.995) + 1))
         for r in runs]  # fmt: skip
print("per seed:", dict(zip(record["seeds"], first)))
print(f"mean {mean_interval(first)}")
falls = {r["seed"]: max(max(r["exact_match"][: k + 1]) - x for k, x in enumerate(r["exact_match"]))
         for r in runs}  # fmt: skip
print("largest fall of exact match below its best so far, per seed:",
      {seed: round(fall, 3) for seed, fall in falls.items()})  # fmt: skip

# %% [markdown]
# The factor. For each factor tried: the seeds that, held out, leave the band of the other five
# (this picks the factor), then the check seeds that leave the band of seeds 1 to 6 (this tests
# it on runs it never saw):

# %%
for factor in FACTORS[: FACTORS.index(band.factor) + 2]:
    with_factor = training_band(record, factor=factor)
    check_out = [r["seed"] for r in record["check"]["runs"]
                 if not compare_with_band(as_history(r), with_factor, False).ok]  # fmt: skip
    print(f"factor {factor:<4} held out, outside: {str(held_out_outside(record, factor)):<14} "
          f"check seeds outside: {check_out}")  # fmt: skip
print(f"measured factor: {band.factor}")
n_check = len(record["check"]["runs"])
n_out = sum(not compare_with_band(as_history(r), band, verbose=False).ok
            for r in record["check"]["runs"])  # fmt: skip
low, high = wilson_interval(n_out, n_check)
print(f"check seeds outside the band: {n_out} of {n_check}; share of healthy runs that leave "
      f"it, 95 % Wilson interval: {low:.2f} to {high:.2f}")  # fmt: skip

# %% [markdown]
# Figure: each seed (thin lines) and the band (shaded), the loss on a log scale.

# %%
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
for w in loss_w:
    ax1.plot(band.steps, w, lw=0.8, color="tab:blue", alpha=0.7)
ax1.fill_between(band.steps, band.loss_low, band.loss_high, color="tab:blue", alpha=0.15)
ax1.set_yscale("log")
ax1.set_xlabel("step")
ax1.set_ylabel(f"training loss (mean of {WINDOW} steps)")
for e in em:
    ax2.plot(band.em_steps, e, lw=0.8, color="tab:green", alpha=0.7)
ax2.fill_between(band.em_steps, band.em_low, band.em_high, color="tab:green", alpha=0.15)
ax2.set_xlabel("step")
ax2.set_ylabel("validation exact match")
fig.suptitle(f"The band of the book's recipe: {len(runs)} seeds and the margin")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Conclusion
#
# Six seeds of the book's recipe give the band above. It is narrow early, while every run is far
# from the target. In the middle the runs reach the target at different steps, and every seed at
# some point lost much of its exact match and recovered. There the band is so wide that it catches
# only a loss that climbs back to where it started. The measured factor is 3. With 2, one seed
# held out and one check seed left the band; with 3, none of the six check seeds did. Six of six
# is a small sample: it bounds the share of healthy runs that leave the band below 0.39, no
# tighter. So a healthy run, on this CPU or another, may still leave the band now and then. A run
# inside it is like the book's runs. A run outside it is not proof of a bug; chapter 17 shows the
# usual causes.
