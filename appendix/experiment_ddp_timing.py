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
# # Experiment: two processes or two threads on two cores
#
# ## Question
#
# Chapter 23 trains the book's recipe with `DistributedDataParallel` on two processes. On a
# machine with two cores, is that faster than one process, with one thread or with two? And is
# the model it trains as good?
#
# ## Design
#
# - **Arms.** Three configurations of two cores: 1 process x 1 thread, 1 process x 2 threads,
#   and 2 processes x 1 thread (DDP with the `gloo` backend, started by `torchrun`).
# - **Equal across arms.** All three run the same loop, `helpers.train_reversal_ddp`; one
#   process runs it without a process group. The recipe (`helpers.BOOK_RECIPE`), its global
#   batch of 128, the data, the stopping rule (99.5 % validation exact match) and the test set of
#   10,000 sequences are the same. For one seed the three configurations draw the same global
#   batches; they differ in the order of the sums, so their weights differ in the low bits and a
#   seed need not stop at the same step in all three.
# - **Seeds.** 5 per configuration (0 to 4), interleaved seed by seed, so that a slow change in
#   the machine's load hits all three alike. Within a seed the order was always the same: two
#   processes ran last. For the times, the seeds are five repeat runs on one machine: they show
#   how much its runs vary, not how other machines behave.
# - **Measured.** Per run: the wall time of the whole command (interpreter, imports, `torchrun`
#   and the rendezvous included), the mean time of a training step (evaluations excluded), the
#   time spent outside the training function (interpreter and imports; for two processes also
#   `torchrun` and the rendezvous), the steps to the target, and the test exact match. Timings have no test set:
#   each configuration's median is shown with the range over its 5 runs.

# %%
import statistics

import matplotlib.pyplot as plt

from helpers.analysis.experiments import load_record, mean_interval

rec = load_record("ch23_ddp_timing")
configs = list(dict.fromkeys(r["config"] for r in rec["runs"]))
seeds = sorted({r["seed"] for r in rec["runs"]})
by = {(r["config"], r["seed"]): r for r in rec["runs"]}
print(rec["what"])
print(f"configurations: {configs}; seeds {seeds}")

# %% [markdown]
# ## Command
#
# The record was made by this command, from the repository root. The record stores it under the
# script's name before the tools moved into packages, `tools/bench_ch20_ddp.py`.
#
# ```bash
# python -m tools.bench.ch23_ddp --seeds 0,1,2,3,4
# ```
#
# It writes `chapters/data/ch23_ddp_timing.json`. Each run is a fresh command; the two-process
# runs start `tools/train_ddp.py` under `torchrun`, as chapter 23 does.
#
# ## Provenance

# %%
print(f"recorded {rec['date']} by `{rec['command']}`")
print(f"torch {rec['torch']}, Python {rec['python']}, {rec['cpu_count']} cores")
loads = [r["load_average"] for r in rec["runs"]]
print(
    f"load average {rec['load_average_before'][0]:.1f} before; {min(loads):.1f} to "
    f"{max(loads):.1f} at the end of the runs"
)
for key, value in rec["numerics"].items():
    print(f"  {key}: {value}")

# %% [markdown]
# The record predates the book's pinned numerics, and does not name its CPU. Chapter 23's live
# run uses the pinned kernel, on whatever machine runs it, so its times are not comparable with
# these.
#
# ## Results
#
# ### Time
#
# Per configuration: the median over the 5 seeds, then the range from the fastest to the
# slowest run, in brackets.

# %%
KEYS = {
    "seconds": "seconds to the target",
    "ms_per_step": "ms per training step",
    "outside_training_seconds": "seconds outside training",
    "steps": "steps to the target",
}


def median_range(values, fmt):
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}} to {max(values):{fmt}})"


print(f"{'':26s}" + "".join(f"{c:>26s}" for c in configs))
for key, label in KEYS.items():
    fmt = ".0f" if key == "steps" else ".2f" if "outside" in key else ".1f"
    cells = [median_range([by[c, s][key] for s in seeds], fmt) for c in configs]
    print(f"{label:26s}" + "".join(f"{x:>26s}" for x in cells))

# %% [markdown]
# The same seed ran in every configuration, one after the other, so the configurations can also
# be compared seed by seed. The cell prints, per pair, the difference for each seed, then their
# mean with its 95 % $t$ interval over the 5 seeds: first the time per step, then the seconds
# to the target.

# %%
PAIRS = [
    ("2 processes x 1 thread", "1 process x 1 thread"),
    ("2 processes x 1 thread", "1 process x 2 threads"),
    ("1 process x 2 threads", "1 process x 1 thread"),
]
for key, unit in (("ms_per_step", "ms per step"), ("seconds", "seconds to the target")):
    for a, b in PAIRS:
        diffs = [by[a, s][key] - by[b, s][key] for s in seeds]
        d = mean_interval(diffs)
        print(f"{a} minus {b}, {unit}")
        print(f"  seeds {seeds}: " + ", ".join(f"{x:+.1f}" for x in diffs))
        print(f"  mean {d.mean:+.1f} (95 % interval {d.low:+.1f} to {d.high:+.1f}, {d.n} seeds)")

# %% [markdown]
# Figure 1 shows every run as a dot and each configuration's median as a bar, on linear axes.

# %% jupyter={"source_hidden": true} tags=["figure", "hide-input"]
fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
for ax, key in zip(axes, ("seconds", "ms_per_step")):
    for i, c in enumerate(configs):
        vals = [by[c, s][key] for s in seeds]
        ax.plot(statistics.median(vals), i, "|", color="#3182bd", markersize=24, mew=3)
        ax.plot(vals, [i] * len(vals), "k.", alpha=0.6)
    ax.set_yticks(range(len(configs)), configs)
    ax.set_xlim(0, None)
    ax.set_xlabel(KEYS[key] + (" (start-up included)" if key == "seconds" else ""))
    ax.set_ylim(len(configs) - 0.5, -0.5)  # first configuration on top
fig.suptitle(f"Figure 1: the book's recipe on {rec['cpu_count']} cores, seeds {seeds}")
fig.tight_layout()
plt.show()

# %% [markdown]
# ### Test exact match
#
# The record keeps each run's test exact match, not which test sequences it got right. So two
# configurations can be paired seed by seed, not sequence by sequence (McNemar's test needs
# the latter). The cell prints each configuration's mean over the seeds with its 95 % $t$
# interval, and the paired difference between configurations, seed by seed.

# %%
for c in configs:
    print(f"{c:24s}: {mean_interval([by[c, s]['test_exact_match'] for s in seeds])}")
for a, b in PAIRS:
    diffs = [by[a, s]["test_exact_match"] - by[b, s]["test_exact_match"] for s in seeds]
    d = mean_interval(diffs)
    print(
        f"{a} minus {b}: {d.mean:+.2%} (95 % interval {d.low:+.2%} to {d.high:+.2%}, {d.n} seeds)"
    )
print(f"lowest test exact match of any run: {min(r['test_exact_match'] for r in rec['runs']):.2%}")

# %% [markdown]
# ## Conclusion
#
# Five runs per configuration on one machine with two cores, PyTorch's default kernels, and a
# load average of 0.5 to 1.6. The record does not name the CPU. So the times below describe that
# machine; they say nothing about other CPUs, kernels or loads.
#
# - **Time per step.** The ranges do not overlap. One process with two threads took a median
#   of 27.0 ms (25.5 to 27.3), two processes 31.5 ms (28.5 to 36.0), one process with one thread
#   39.2 ms (38.1 to 39.8). Seed by seed, two processes were faster than one thread and slower
#   than two threads, for all 5 seeds. Paired by seed, two processes took 7.7 ms less per step
#   than one thread (95 % interval 4.7 to 10.7) and 4.8 ms more than two threads (1.7 to 7.9).
#   Two processes always ran last within a seed. A load that rose within a seed would have slowed
#   them most: it cannot explain their lead over one thread, but it may add to their gap behind
#   two threads. Why threads beat processes on that machine, this record does not say: it times
#   no all-reduce.
# - **Seconds to the target.** The ranges overlap. Each run stops at its own step, between 230
#   and 410 over all runs. Paired by seed, only two threads against one thread differ from zero:
#   4.7 s less (2.2 to 7.3). Two processes spent a median of 3.38 s outside training, against
#   1.71 s for one process with one thread; for two processes that time also holds `torchrun`'s
#   own process and the rendezvous.
# - **Test exact match.** Every run scored at least 99.28 %. No paired difference is
#   distinguishable from zero with 5 seeds: each interval includes 0.
