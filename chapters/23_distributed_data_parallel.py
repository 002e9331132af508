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
# # 23. Distributed data parallel: one model, two processes
#
# You will train the book's model with `DistributedDataParallel` (DDP), in two processes started by
# `torchrun`. Each process holds a replica of the model and trains on half of every batch.
# DDP averages their gradients. So one DDP step computes the gradient one process computes on the
# whole batch, to within float32 rounding. After the step, the weights of the two runs differ by
# less than a thousandth of the learning rate, except the key biases. Their gradient is rounding
# noise, which Adam's first step scales up, so they differ by more; the proof prints how much.
#
# ![One DDP step on two processes: replicas, an all-reduce of the gradients, the same Adam step](figures/23_distributed_data_parallel.png)

# %% [markdown] tags=["run-time"]
# **Run time:** about 2.1 min.

# %% [markdown]
# Chapter 10 trains the reversal model in one process with one thread (`BOOK_RECIPE.threads`).
# Larger models outgrow one process, and then one machine. PyTorch's answer is
# `torch.distributed` with DDP, started by `torchrun`. Here the script runs as two CPU processes,
# with the `gloo` backend. The same script is written to run on eight GPUs (`nccl`) or across
# machines; those commands are at the end, and are not run here.
#
# The chapter goes in five steps:
#
# 1. what DDP does: replicas, a gradient all-reduce in buckets, the same optimizer step everywhere;
# 2. how the data is split: `DistributedSampler`, `set_epoch`, and which seeds must agree;
# 3. a training script, `tools/train_ddp.py`, started by `torchrun` from a cell, and its proof;
# 4. what two processes buy on two cores, start-up included;
# 5. the commands for several GPUs and several machines.

# %%
import ast
import contextlib
import dataclasses
import inspect
import json
import math
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import matplotlib.pyplot as plt
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.distributed.run import get_args_parser
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data.distributed import DistributedSampler

from helpers import BOOK_RECIPE, PAD_ID, make_reversal_dataset
from helpers.training import train as train_module
from helpers.training.distributed import (
    TORCHRUN_VARS,
    make_optimizer,
    one_step_single,
    rank_batches,
    seed_rank_stream,
    shell,
    summed_loss,
    torchrun_command,
    train_reversal_ddp,
    trimmed,
)
from helpers.training.evaluation import exact_match_with_interval, test_set
from helpers.training.loop import update
from helpers.training.recipes import TrainConfig
from helpers.training.train import build_model, lr_factor, sequence_correct

ROOT = Path.cwd().parent  # the notebook runs in chapters/
SCRIPT = ROOT / "tools" / "train_ddp.py"
print(
    f"torch {torch.__version__.split('+')[0]}; "
    f"the book's recipe trains with {BOOK_RECIPE.threads} thread"
)
print(
    f"BOOK_RECIPE: global batch {BOOK_RECIPE.batch_size}, {BOOK_RECIPE.train_size:,} training "
    f"sequences, stops at {BOOK_RECIPE.target_exact_match:.1%} validation exact match, "
    f"dropout {BOOK_RECIPE.dropout}"
)
assert torch.distributed.is_available() and torch.distributed.is_gloo_available()

# %% [markdown]
# ## What DDP does
#
# DDP {cite}`li2020` runs one process per device. Every process holds a full **replica** of the
# model. All replicas start from the same weights: DDP's constructor broadcasts rank 0's weights
# to the others. Each process then trains on its own share of each batch. The forward and backward
# passes run independently. As backward produces gradients, DDP sums them across the processes and
# divides by their number. This is an **all-reduce**: every replica ends the backward pass with
# the same averaged gradient. Every process then takes the same optimizer step. So the replicas
# stay identical without sending weights again; the proof below checks it.
#
# DDP does not wait for the whole backward pass. It groups the gradients into **buckets** (25 MiB
# by default), roughly in the order backward produces them, last layer first. A bucket's
# all-reduce starts as soon as all its gradients are ready, while backward still works on earlier
# layers. Figure 23.1 shows one step on two processes.

# %% jupyter={"source_hidden": true} tags=["figure", "hide-input", "opening-figure"]
fig, ax = plt.subplots(figsize=(9, 4.2))
ax.set_xlim(0, 10)
ax.set_ylim(0, 6.2)
ax.axis("off")


def box(x, y, w, h, text, color):
    ax.add_patch(plt.Rectangle((x, y), w, h, facecolor=color, edgecolor="0.3"))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=9)


def arrow(x0, y0, x1, y1):
    ax.annotate("", (x1, y1), (x0, y0), arrowprops=dict(arrowstyle="->", color="0.3"))


for r, x in enumerate((0.3, 5.7)):
    box(x, 5.1, 4.0, 0.7, f"rank {r}: global batch rows {r}, {r + 2}, {r + 4}, ...", "#dbe9f6")
    box(x, 3.9, 4.0, 0.7, "replica of the model (same weights)", "#f2f2f2")
    box(x, 2.7, 4.0, 0.7, "forward, then backward: own gradients", "#f2f2f2")
    box(x, 0.3, 4.0, 0.7, "Adam step with the averaged gradient", "#e3f1e0")
    for y0, y1 in ((5.1, 4.6), (3.9, 3.4), (2.7, 2.2), (1.5, 1.0)):
        arrow(x + 2.0, y0, x + 2.0, y1)
reduce_text = "all-reduce, bucket by bucket during backward: g = (g0 + g1) / 2"
box(1.3, 1.5, 7.4, 0.7, reduce_text, "#fde2c8")
ax.set_title("Figure 23.1: one DDP step on two processes")
plt.show()

# %% [markdown]
# ## Sharding the data: `DistributedSampler`
#
# Each process must see a different share of every batch. Together, the shares must be the whole
# batch. `torch.utils.data.distributed.DistributedSampler` does this. Every rank draws the same
# random permutation of the dataset, from `seed + epoch`. Each rank takes every `world_size`-th
# index of it, starting at its own rank. `helpers.rank_batches` cuts a rank's indices into batches
# of `batch_size // world_size`. So the recipe's global batch of 128 splits into two halves of 64.
# Rank 0 holds its positions 0, 2, 4, ..., rank 1 the odd ones. Together they are exactly the
# batch one process would draw:

# %%
n, batch = BOOK_RECIPE.train_size, BOOK_RECIPE.batch_size
one = rank_batches(n, batch, world_size=1, rank=0, seed=0, epoch=0)
two = [rank_batches(n, batch, world_size=2, rank=r, seed=0, epoch=0) for r in range(2)]
print(f"one process: {len(one)} batches of {len(one[0])}")
print(f"two processes: {len(two[0])} batches of {len(two[0][0])} on each rank")
print("global batch 0, first indices:   ", one[0][:6].tolist())
print("rank 0's half of it, first ones: ", two[0][0][:3].tolist())
print("rank 1's half of it, first ones: ", two[1][0][:3].tolist())
same = all(
    sorted(torch.cat([two[0][k], two[1][k]]).tolist()) == sorted(one[k].tolist())
    for k in range(len(one))
)
overlap = len(set(torch.cat(two[0]).tolist()) & set(torch.cat(two[1]).tolist()))
print(f"indices both ranks train on in this epoch: {overlap}")
assert same and overlap == 0

# %% [markdown]
# Two details decide whether the shards stay right over many epochs.
#
# **`set_epoch`.** The sampler's permutation depends on `seed + epoch`. The epoch is whatever the
# training loop last passed to `sampler.set_epoch(epoch)`. A loop that never calls it trains every
# epoch in the same order:

# %%
sampler = DistributedSampler(range(12), num_replicas=2, rank=0, shuffle=True, seed=0)
epoch0, again = list(sampler), list(sampler)  # no set_epoch between the two epochs
sampler.set_epoch(1)
epoch1 = list(sampler)
print("epoch 0:              ", epoch0)
print("epoch 1 without set_epoch:", again)
print("epoch 1 with set_epoch:   ", epoch1)
assert again == epoch0 and epoch1 != epoch0

# %% [markdown]
# **Seeds per rank.** The sampler's seed must be the *same* on every rank, so that the ranks split
# one permutation. With a different seed per rank (say `seed + rank`), the shards overlap, and some
# sequences are never seen in an epoch. The weights' seed can be the same too, since DDP broadcasts
# rank 0's weights anyway.
#
# What must differ per rank is the randomness *inside* each rank's batch, such as dropout masks.
# `build_model` seeds torch's generator. Ranks that stop there draw the same masks for their
# different sequences. So `helpers.train_reversal_ddp` calls `seed_rank_stream` after building the
# model. It reseeds every rank but rank 0. Rank 0 keeps the stream `build_model` left, as a single
# process does. The cell builds a model with dropout 0.1 once per rank, and feeds both the same
# sequence in training mode:

# %%
shards = [
    set(DistributedSampler(range(n), num_replicas=2, rank=r, seed=r, drop_last=True))
    for r in range(2)
]
print(
    f"sampler seeded with seed + rank: the two shards share {len(shards[0] & shards[1]):,} "
    f"indices; {n - len(shards[0] | shards[1]):,} of {n:,} are never drawn"
)
with_dropout = dataclasses.replace(BOOK_RECIPE, dropout=0.1)
one_src, one_tgt = make_reversal_dataset(1, seed=1)
rank0_out = []
for reseed in (False, True):
    outs, weights = [], []
    for rank in range(2):
        replica = build_model(with_dropout).train()  # what every rank does first
        if reseed:
            seed_rank_stream(with_dropout, rank)
        weights.append(replica.state_dict())
        outs.append(replica(one_src, one_tgt[:, :-1]))
    out_diff = (outs[0] - outs[1]).abs().max().item()
    w_differ = sum(not torch.equal(weights[0][k], w) for k, w in weights[1].items())
    how = "seed_rank_stream per rank" if reseed else "one seed for all"
    outputs = "differ by more than 0.1" if out_diff > 0.1 else f"differ by {out_diff:.1f}"
    print(
        f"{how:26s}: weights differ in {w_differ} of {len(weights[0])} tensors; outputs {outputs}"
    )
    assert w_differ == 0 and (out_diff > 0.1 if reseed else out_diff == 0)
    rank0_out.append(outs[0])
same0 = torch.equal(*rank0_out)
print(f"rank 0's output with and without seed_rank_stream: {'equal' if same0 else 'different'}")
assert same0 and len(shards[0] & shards[1]) > 0

# %% [markdown]
# ## One loss for the whole global batch
#
# One process takes the mean cross-entropy over the real (non-padding) target tokens of its
# batch. Suppose two ranks each take the mean over their *own* tokens, and DDP averages their
# gradients. That is a mean of two means. It equals the whole batch's mean only if both halves hold
# the same number of tokens. Here the sequences differ in length:

# %%
src, tgt = make_reversal_dataset(64, seed=BOOK_RECIPE.data_seed)  # the batch of the proof below
tokens = [int((tgt[r * 32 : (r + 1) * 32, 1:] != PAD_ID).sum()) for r in range(2)]
digits = (src != PAD_ID).sum(1) - 1  # the source's tokens, less its <eos>
print(f"{len(src)} sequences of {int(digits.min())} to {int(digits.max())} digits")
print(f"real target tokens: rank 0 {tokens[0]}, rank 1 {tokens[1]}, together {sum(tokens)}")
print(
    f"weight of one token of rank 0: mean of means 1/(2*{tokens[0]}) = "
    f"{1 / (2 * tokens[0]):.6f}, whole-batch mean 1/{sum(tokens)} = {1 / sum(tokens):.6f}"
)
assert tokens[0] != tokens[1]

# %% [markdown]
# So each rank in `helpers.training.distributed` sums its token losses. One small all-reduce per
# step adds up the token counts of all ranks. A rank backpropagates `loss_sum * world_size /
# global_tokens`. DDP's average over the ranks then divides by `world_size` again. What is left is
# the gradient of the whole batch's mean token loss.
#
# The same all-reduce carries what every rank needs to take the same decisions. That is the
# batch's exactly-right sequences (the gate of chapter 10's cheap evaluation) and each rank's own
# loss, for rank 0's log. The validation set is scored in shards too, and the counts are summed. So
# every rank sees the same exact match and stops at the same step.
#
# ## The script, launched by `torchrun`
#
# `tools/train_ddp.py` is what every process runs. It calls `helpers.init_distributed()`. That
# function reads the variables `torchrun` sets for each process: `RANK`, `WORLD_SIZE`,
# `LOCAL_RANK`, `MASTER_ADDR` and `MASTER_PORT`. It joins the process group with the `gloo`
# backend. When the launch is wrong, it stops with one clear line: no `torchrun`, a single
# process, or a port another program holds. Rank 0 alone prints the log and writes the checkpoint;
# the other ranks wait for it at a barrier. `--standalone` lets `torchrun` pick a free port, and
# `sys.executable -m torch.distributed.run` is `torchrun` of this notebook's Python.
#
# Started as a plain Python script, without `torchrun`, it says what is missing:

# %%
env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_VARS}  # no torchrun
bad = subprocess.run(
    [sys.executable, "tools/train_ddp.py", "--out", "/tmp/unused"],
    capture_output=True,
    text=True,
    cwd=ROOT,
    env=env,
)
print(f"exit status {bad.returncode}: {bad.stderr.strip()}")
assert bad.returncode == 2 and "start this script with torchrun" in bad.stderr

# %% [markdown]
# The first real run is the proof. It takes one step on a fixed batch of 64 sequences, 32 per
# rank, from the book's initial weights (`--one-step`). One step needs only one batch, and a fixed
# one lets a single process take the very same step below. Training, later, keeps the recipe's
# global batch of 128: 64 per rank. The proof's buckets are small, 0.05 MiB, for a later section:

# %% tags=["nbval-ignore-output"]
proof_dir = Path(tempfile.mkdtemp())
cmd = torchrun_command(SCRIPT, 2, "--out", proof_dir, "--one-step", "--bucket-cap-mb", "0.05")
print(shell(cmd).replace(sys.executable, "python").replace(str(ROOT) + "/", ""))
run = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
print(run.stdout)
assert run.returncode == 0, run.stderr

# %%
ranks = json.loads((proof_dir / "result.json").read_text())
for r in ranks:
    print(
        f"rank {r['rank']} of {r['world_size']}: {r['rows']} rows, global mean loss "
        f"{r['loss']:.4f}, wrote the checkpoint: {'yes' if r['wrote_checkpoint'] else 'no'}"
    )
print(
    f"largest weight difference between the replicas after the step: "
    f"{max(r['replicas_max_diff'] for r in ranks)}"
)
assert [r["wrote_checkpoint"] for r in ranks] == [True, False]
assert ranks[0]["loss"] == ranks[1]["loss"]
assert max(r["replicas_max_diff"] for r in ranks) == 0.0

# %% [markdown]
# Both ranks report the same global loss, and only rank 0 wrote the checkpoint. The two replicas
# hold bit-for-bit the same weights after the step: both applied the same averaged gradient. Now
# the comparison that matters. One process takes one step on all 64 rows, with
# `F.cross_entropy`'s mean over the batch, as `helpers.train_reversal` does.

# %% tags=["nbval-ignore-output"]
model, grads, loss = one_step_single(BOOK_RECIPE, src, tgt)
ddp = torch.load(proof_dir / "grads.pt")
ddp_weights = torch.load(proof_dir / "model.pt")["state_dict"]
g_diff = max((ddp["grads"][k] - g).abs().max().item() for k, g in grads.items())
g_max = max(g.abs().max().item() for g in grads.values())
w_diff = {k: (ddp_weights[k] - w).abs().max().item() for k, w in model.state_dict().items()}
key_bias = [k for k in w_diff if k.endswith("W_k.bias")]
rest = max(d for k, d in w_diff.items() if k not in key_bias)
lr = BOOK_RECIPE.lr_scale * lr_factor(BOOK_RECIPE)(0)  # the first step's learning rate
print(f"loss: one process {loss:.6f}, DDP {ddp['loss']:.6f}")
print(
    f"gradients: largest |difference| {g_diff:.1e}, {g_diff / g_max:.0e} of the largest "
    f"gradient ({g_max:.2f}); tolerance 1e-5 of it"
)
print(
    f"weights after the step, all but the key biases: largest |difference| {rest:.1e}, "
    f"{rest / lr:.0e} of the step's learning rate; tolerance 1e-3 of it"
)
eps = make_optimizer(model, BOOK_RECIPE)[0].defaults["eps"]  # Adam's epsilon in the recipe
start = build_model(BOOK_RECIPE).state_dict()  # the initial weights both runs started from
move = max((model.state_dict()[k] - start[k]).abs().max().item() for k in key_bias)
kb_grad = max(grads[k].abs().max().item() for k in key_bias)
kb_diff = max(w_diff[k] for k in key_bias)
print(
    f"the {len(key_bias)} key biases W_k.bias: largest |gradient| {kb_grad:.0e} "
    f"(Adam's eps {eps:.0e}); one process moved them by up to {move / lr:.0%} of the "
    f"learning rate {lr:.1e}; the runs differ by up to {kb_diff / lr:.0%} of it"
)
# float32 keeps about 7 digits: sums in another order differ in the last ones, relative to
# the largest terms; a rank that used its own token count would be off by percents
assert abs(loss - ddp["loss"]) < 1e-6 * loss and g_diff < 1e-5 * g_max and rest < 1e-3 * lr
assert kb_grad < 1e-6 * g_max and move > 1e3 * kb_grad

# %% [markdown]
# The gradients agree to within float rounding, and so does every weight but the key biases.
# Their gradient is zero in exact arithmetic, so in both runs they move by rounding noise only.
# Both runs are right.
#
# :::{dropdown} Going deeper: why the key biases differ
# The key biases' gradient is exactly zero in exact arithmetic. Adding $q \cdot b_k$ to every
# score of a query's row shifts the whole row, and the softmax ignores a shift. In floats the
# gradient is rounding noise, less than a millionth of the largest gradient. Adam's first step
# divides a gradient by its own size, plus Adam's $\epsilon$. That turns the noise into
# a move of a sizeable fraction of the learning rate, in a direction set by the rounding. The two
# runs round differently, so their key biases differ by the fraction printed. They disagree only
# where the gradient carries no information.
# :::
#
# ## Gradients travel in buckets during backward
#
# The proof run also recorded when each bucket's all-reduce started, with a DDP communication
# hook (`DistributedDataParallel.register_comm_hook`). It noted how many of the model's 92
# parameter gradients backward had not yet produced at that moment. With buckets
# of at most 0.05 MiB:

# %%
passes = ranks[0]["buckets"]
print(
    f"{len(list(model.parameters()))} parameter tensors; a 0.05 MiB bucket holds "
    f"{0.05 * 2**20 / 4:,.0f} float32 values"
)
for i, buckets in enumerate(passes):
    print(f"backward pass {i + 1}: {len(buckets)} bucket(s)")
    for b in buckets:
        print(
            f"  {len(b['params']):2d} tensors, {b['params'][0]} ... {b['params'][-1]}: "
            f"started with {b['grads_still_to_come']} gradients still to come"
        )
cap_mib = torch.nn.parallel.distributed._DEFAULT_BUCKET_CAP_MB  # DDP's default in torch 2.13
n_params = sum(p.numel() for p in model.parameters())
print(
    f"{n_params:,} parameters: {4 * n_params / 1e6:.2f} MB of float32 gradients; DDP's default "
    f"bucket: {cap_mib} MiB; a billion parameters would fill {4e9 / (cap_mib * 2**20):.0f}"
)
assert len(passes[0]) == 1 and len(passes[1]) > 1
assert passes[1][0]["grads_still_to_come"] > 0 and passes[1][0]["params"][0] == "out_proj.bias"

# %% [markdown]
# In the first backward pass, torch 2.13 puts every gradient in one bucket. Its source says why:
# it does not yet know the order in which backward produces them. After that pass it rebuilds the
# buckets in the observed order. From the second pass on, the first bucket starts its all-reduce
# while most gradients are still to come. (That bucket runs from the output projection back into
# the last decoder layer.) So communication overlaps computation. At the default 25 MiB, this
# model's 0.24 MB of gradients fit in a single bucket, so nothing overlaps. A model of a billion
# parameters would fill 153 of them.
#
# ## Training to the target on two processes
#
# Without `--one-step`, the script trains the book's recipe (`helpers.BOOK_RECIPE`) from seed 0.
# Every rank joins the process group and calls `helpers.train_reversal_ddp`. Here is that function's
# code up to the end of its training loop. It leaves out the docstring and the lines that only keep
# a record: the history, the log line and the timers. After the loop, rank 0 writes the checkpoint
# (`save_on_rank0`). Below the loop is `update`, the step `helpers.train_reversal` takes too:


# %% jupyter={"source_hidden": true} tags=["hide-input"]
def trimmed_source(fn, drop=("hist", "train_s", "t_step", "t0", "log_every")):
    """fn's source up to the end of its while loop, without its docstring and the statements
    that only keep a record (an assignment to, a call on, or a test of a name in `drop`)."""
    src = textwrap.dedent(inspect.getsource(fn))
    node = ast.parse(src).body[0]
    gone = set(range(node.body[0].lineno, node.body[0].end_lineno + 1))  # the docstring

    def names(tree):
        return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}

    def dropped(stmt) -> bool:
        if isinstance(stmt, (ast.Assign, ast.AugAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            out = set().union(*(names(t) for t in targets)) <= set(drop)
        elif isinstance(stmt, ast.Expr):
            out = bool(names(stmt) & set(drop))
        elif isinstance(stmt, ast.If) and names(stmt.test) & set(drop):
            out = True
        elif hasattr(stmt, "body"):
            kept = [s for s in stmt.body + getattr(stmt, "orelse", []) if not dropped(s)]
            out = isinstance(stmt, ast.If) and not kept
        else:
            out = False
        if out:
            gone.update(range(stmt.lineno, stmt.end_lineno + 1))
        return out

    for stmt in node.body[1:]:
        dropped(stmt)
    end = next(s.end_lineno for s in node.body if isinstance(s, ast.While))
    lines = src.splitlines()[:end]
    return "\n".join(line for i, line in enumerate(lines, 1) if i not in gone)


loop = trimmed_source(train_reversal_ddp)
print(loop)
for line in ("rank_batches(", "all_reduce_sum(stats)", "update(loss, opt, sched)"):
    assert line in loop, line
assert len(loop.splitlines()) < 60
step_lines = inspect.getsource(update).splitlines()
doc = ast.parse("\n".join(step_lines)).body[0].body[0]  # update's docstring, left out
step_body = [line for i, line in enumerate(step_lines, 1) if not doc.lineno <= i <= doc.end_lineno]
print("\n# helpers.training.loop.update\n" + "\n".join(step_body))
assert [line.strip() for line in step_lines[doc.end_lineno :]] == [
    "opt.zero_grad(set_to_none=True)",
    "loss.backward()",
    "opt.step()",
    "sched.step()",
]
assert "update(loss, opt, sched)" in inspect.getsource(train_module._train)  # train_reversal's loop

# %% [markdown]
# Every rank draws its share of each global batch (`rank_batches`), then computes its summed loss.
# One small all-reduce (`all_reduce_sum(stats)`) adds up the token counts, the losses and the
# exactly-right sequences. `update` knows nothing of DDP. But `loss` came through `net`, the DDP
# wrapper, so its `loss.backward()` all-reduces the gradients. So every rank takes the same Adam
# step. When an evaluation is due, each rank scores its shard of the validation set, and all stop at
# the same step. Training stops when the validation exact match reaches 99.5 % and greedy decoding
# confirms it. Rank 0 logs every 100 steps, with each rank's mean loss on its half of the batch:

# %% tags=["nbval-ignore-output"]
train_dir = Path(tempfile.mkdtemp())
cmd = torchrun_command(SCRIPT, 2, "--out", train_dir, "--log-every", "100")
run = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
print(run.stdout)
assert run.returncode == 0, run.stderr
ranks = json.loads((train_dir / "result.json").read_text())
assert [r["wrote_checkpoint"] for r in ranks] == [True, False]
assert ranks[0]["steps"] == ranks[1]["steps"]
assert ranks[0]["exact_match"] == ranks[1]["exact_match"] >= BOOK_RECIPE.target_exact_match
assert ranks[0]["final_rank_loss"][0] != ranks[0]["final_rank_loss"][1]

# %% [markdown]
# Both ranks stopped at the same step, with the same validation exact match. The two losses in the
# log differ, because each is the mean over a different half of the batch. The number the book
# reports comes from the test set of chapter 09: 10,000 sequences that stopping never looked at.
# (About one in nine also occurs in the training set; chapter 09 counts them.) It is scored on the
# checkpoint rank 0 wrote:

# %% tags=["nbval-ignore-output"]
ckpt = torch.load(train_dir / "model.pt")
ddp_model = build_model(TrainConfig(**ckpt["config"]))
ddp_model.load_state_dict(ckpt["state_dict"])
test_src, test_tgt = test_set()
ddp_test = exact_match_with_interval(ddp_model.eval(), test_src, test_tgt)
print(f"2 processes, seed 0: {ranks[0]['steps']} steps, test exact match {ddp_test}")
assert ddp_test.exact_match >= 0.98  # chapter 10's floor (its kernel paths: 98.9 % to 99.8 %)

# %% [markdown]
# ## What two processes buy here
#
# The last lines of the training log give each rank's mean time per step and its start-up time.
# Such times depend on the machine, its kernels and its load; one run gives no spread. [The DDP
# timings page](../appendix/experiment_ddp_timing.ipynb) ran five seeds on one two-core machine,
# with PyTorch's default kernels. There, two processes took a median of 31.5 ms (28.5 to 36.0)
# per step, one process and one thread 39.2 ms (38.1 to 39.8), and one process and two threads
# 27.0 ms (25.5 to 27.3). Other kernels at another load: these say nothing about the run above.
#
# **Is the two-process model as good?** Two scores on the same 10,000 test sequences are not
# independent samples. So comparing their separate intervals is not a test; a paired test is.
# The cell trains the same loop in this one process (seed 0) and pairs it with the two-process
# model above, using McNemar's exact test.
#
# :::{dropdown} Going deeper: McNemar's exact test
# A paired test looks at the sequences on which the two models disagree. McNemar's exact test
# counts the sequences only model A gets right ($b$) and only model B gets right ($c$). If both
# models were equally good, each disagreement would be a fair coin. Then $b$ would follow a
# binomial law with $b + c$ trials and probability 1/2. The two-sided $p$ is twice the chance of a
# split at least as uneven as $\min(b, c)$. The cell checks the test on a case small enough to
# count by hand.
# :::


# %% tags=["nbval-ignore-output"]
def correct_per_sequence(model, src, tgt):
    """bool [n]: the teacher-forced argmax is right up to <eos>, as in chapter 10."""
    with torch.no_grad():
        return sequence_correct(model.eval()(src, tgt[:, :-1]), tgt[:, 1:])


def mcnemar_exact(a_ok, b_ok):
    """(b, c, two-sided p): b = only A right, c = only B right; exact binomial test."""
    b, c = int((a_ok & ~b_ok).sum()), int((~a_ok & b_ok).sum())
    k, n = min(b, c), b + c
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return b, c, min(1.0, 2 * tail)


one_cfg = TrainConfig(**ckpt["config"])
one_model = train_reversal_ddp(one_cfg).model  # no process group: one process, same loop
one_ok = correct_per_sequence(one_model, test_src, test_tgt)
two_ok = correct_per_sequence(ddp_model, test_src, test_tgt)
b, c, p_value = mcnemar_exact(two_ok, one_ok)
print(
    f"test exact match: 2 processes {two_ok.float().mean():.2%}, "
    f"1 process {one_ok.float().mean():.2%} (same seed, same loop)"
)
print(f"only the 2-process model right: {b}; only the 1-process model right: {c}")
print(f"McNemar exact test: p = {p_value:.2g}")
wrong6, right6 = torch.zeros(6, dtype=torch.bool), torch.ones(6, dtype=torch.bool)
assert mcnemar_exact(wrong6, right6) == (0, 6, 2 / 64)  # by hand: 6 of 6 to B, p = 2 * (1/2)**6
assert mcnemar_exact(one_ok, two_ok) == (c, b, p_value)  # the test does not depend on the order
assert mcnemar_exact(two_ok, two_ok) == (0, 0, 1.0)  # a model against itself: no evidence
assert int(two_ok.sum()) == ddp_test.correct  # the count exact_match_with_interval printed

# %% [markdown]
# A small $p$ says that these two *models* differ. It says nothing about the two *ways of
# training*. A run that stops a few steps earlier or later ends with other weights, whatever the
# number of processes. That question needs many seeds. On the DDP timings page, with five seeds
# per configuration, no difference in test exact match between them is distinguishable from zero.
#
# ## Gradient accumulation with `no_sync`
#
# A global batch too large for one step can be split into micro-batches. Their gradients add up
# before one optimizer step. Under DDP every backward pass all-reduces by default. So each
# micro-batch would pay for a round of communication. `DistributedDataParallel.no_sync()` skips
# it. Inside the context, gradients only accumulate locally. The first backward pass outside it
# all-reduces the sum. The cell runs DDP in this one process, as a process group of one rank. A
# communication hook counts the all-reduces. The 64-row batch of the proof is split into four
# micro-batches of 16. Each one's summed loss is divided by the token count of all 64 rows, so the
# accumulated gradient is the full batch's:

# %%
calls = []


def counting_allreduce(state, bucket):
    calls.append(bucket.index())
    return allreduce_hook(state, bucket)


dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
try:
    n_tokens = int((tgt[:, 1:] != PAD_ID).sum())
    accumulated = {}
    for use_no_sync in (False, True):
        replica = build_model(BOOK_RECIPE)
        net = DistributedDataParallel(replica)
        net.register_comm_hook(dist.group.WORLD, counting_allreduce)
        calls.clear()
        for i in range(4):
            rows = slice(16 * i, 16 * (i + 1))
            last = i == 3
            with contextlib.nullcontext() if last or not use_no_sync else net.no_sync():
                loss_sum = summed_loss(net, *trimmed(src[rows], tgt[rows]))[0]
                (loss_sum / n_tokens).backward()
        accumulated[use_no_sync] = {k: p.grad for k, p in replica.named_parameters()}
        how = "with no_sync on the first three" if use_no_sync else "without no_sync"
        print(f"4 micro-batches, {how}: {len(calls)} all-reduce(s)")
        assert len(calls) == (1 if use_no_sync else 4)
finally:
    dist.destroy_process_group()
acc_diff = max((accumulated[True][k] - g).abs().max().item() for k, g in grads.items())
assert acc_diff < 1e-5 * g_max  # float32 rounding: the sums run in another order
print("accumulated gradient vs one step on all 64 rows: within 1e-5 of the largest gradient")

# %% [markdown]
# With several ranks, each all-reduce is a round of communication: `no_sync` saved three of the
# four.
#
# :::{dropdown} Going deeper: threads per process, torchrun's default
# Two processes with two threads each would ask for four threads of two cores. `torchrun` guards
# against that. When `OMP_NUM_THREADS` is not set and it starts more than one process, it sets it
# to 1 for every process and prints a warning. The cell below starts a two-line script under
# `torchrun`, with the thread variables (`OMP_NUM_THREADS`, `MKL_NUM_THREADS`) removed from the
# environment. Then it runs the same Python without `torchrun`.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["nbval-ignore-output", "hide-cell"]
probe = Path(tempfile.mkdtemp()) / "threads.py"
probe.write_text(
    "import os, torch\n"
    "print(os.environ['RANK'], os.environ.get('OMP_NUM_THREADS'), torch.get_num_threads())\n"
)
no_omp = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
launched = subprocess.run(
    torchrun_command(probe, 2), env=no_omp, capture_output=True, text=True, cwd=ROOT
)
assert launched.returncode == 0, launched.stderr
seen = sorted(line.split() for line in launched.stdout.splitlines())
for rank, omp, threads in seen:
    print(f"rank {rank}: OMP_NUM_THREADS={omp}, torch threads {threads}")
warning = next(line for line in launched.stderr.splitlines() if "OMP_NUM_THREADS" in line)
print("torchrun:", textwrap.fill(warning.split("] ")[-1], 90, subsequent_indent="    "))
plain = subprocess.run(
    [sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
    env=no_omp,
    capture_output=True,
    text=True,
)
print(
    f"without torchrun: torch threads {plain.stdout.strip()} ({os.cpu_count()} logical CPUs here)"
)
assert [r for r, _, _ in seen] == ["0", "1"]
assert all(omp == "1" and threads == "1" for _, omp, threads in seen)

# %% [markdown]
# ## Several GPUs, several machines
#
# The script does not change; the launch and the device do. The cell writes out two commands: one
# for a machine with 8 GPUs, one for two machines with 8 GPUs each. It hands their arguments to the
# parser of torch 2.13's `torchrun` (`torch.distributed.run.get_args_parser`), to check that it
# reads them as meant. It starts nothing.

# %%
launches = {  # what: torchrun's options, one group per line, then the script and its arguments
    "one machine, 8 GPUs": [
        "--standalone --nproc_per_node=8",
        "tools/train_ddp.py --out runs/ddp8",
    ],
    "two machines, 8 GPUs each (the same command on both; the first one is 10.0.0.1)": [
        "--nnodes=2 --nproc_per_node=8",
        "--rdzv_backend=c10d --rdzv_endpoint=10.0.0.1:29400 --rdzv_id=reversal-1",
        "tools/train_ddp.py --out runs/ddp16",
    ],
}
parsed = {}
for what, lines in launches.items():
    print(f"# {what}:")
    print("TRANSFORMER_BOOK_DEVICE=cuda python -m torch.distributed.run \\\n    ", end="")
    print(" \\\n    ".join(lines))
    parsed[what] = get_args_parser().parse_args(" ".join(lines).split())
one_m, two_m = parsed.values()
print(
    f"parsed: --standalone {one_m.standalone}, {one_m.nproc_per_node} processes per machine; "
    f"{two_m.nnodes} machines x {two_m.nproc_per_node}, rendezvous {two_m.rdzv_backend} at "
    f"{two_m.rdzv_endpoint}, id {two_m.rdzv_id!r}"
)
node_rank = next(a for a in get_args_parser()._actions if "--node_rank" in a.option_strings)
print(f"torchrun's help for --node_rank: {node_rank.help!r}")
assert one_m.standalone and one_m.nproc_per_node == two_m.nproc_per_node == "8"
assert (two_m.nnodes, two_m.rdzv_backend, two_m.rdzv_endpoint) == ("2", "c10d", "10.0.0.1:29400")
assert one_m.training_script == two_m.training_script == "tools/train_ddp.py"

# %% [markdown]
# On one machine, `torchrun` starts 8 processes. Each gets a `LOCAL_RANK` from 0 to 7, its index
# on that machine. `helpers.init_distributed` then picks the `nccl` backend, so collectives run on
# the GPUs. It places each process on its own GPU, `cuda:LOCAL_RANK`, with
# `torch.cuda.set_device`. `DistributedDataParallel(model, device_ids=[LOCAL_RANK])` wraps the
# model there, and every batch is moved to that device.
#
# On two machines, the same command runs on both. Instead of `--standalone`, it names the number
# of machines and one rendezvous endpoint: a host and port of the first machine that both can
# reach. `RANK` then runs from 0 to 15, while `LOCAL_RANK` stays 0 to 7 on each machine. Rank 0
# alone writes the checkpoint, on whichever machine holds it. The recipe's global batch of 128
# would be split 16 ways, 8 sequences per GPU. To keep every GPU busy, one would raise the global
# batch instead. A larger batch needs its own learning-rate care {cite}`goyal2017`. These commands
# are shown, not run.
#
# :::{dropdown} Going deeper: rendezvous, node ranks and sharded training
# The `c10d` rendezvous numbers the machines itself, so no `--node_rank` is needed. Torchrun's
# help, printed above, says that `--node_rank` is used only by the static rendezvous. That one
# takes `--master_addr`, `--master_port` and a different `--node_rank` on each machine instead.
# The other ranks' results reach rank 0 through the process group, not through files.
#
# DDP keeps a full copy of the weights, the gradients and Adam's two moments on every device. A
# model whose copy does not fit on one device needs them split across the devices instead. ZeRO
# {cite}`rajbhandari2020` shards the optimizer state, then the gradients, then the weights.
# PyTorch's Fully Sharded Data Parallel (FSDP) {cite}`zhao2023` implements that idea. It gathers
# the full weights of each wrapped block (for example one layer) only while that block runs.
# :::
#
# ## Summary
#
# - DDP runs one replica per process. The backward pass all-reduces the gradients in buckets, and
#   every replica takes the same optimizer step. In torch 2.13 the first pass uses one bucket.
#   Later passes use buckets rebuilt in backward's order, which overlaps communication with
#   computation. After one step, the two replicas here were identical to the bit.
# - `DistributedSampler` gives each rank every `world_size`-th index of one shared permutation.
#   It needs `set_epoch` each epoch and the same seed on every rank.
# - With sequences of different lengths, the per-rank loss must be normalised by the global token
#   count. Then two processes with 32 rows each computed the gradient of one process with 64 rows,
#   to within float32 rounding. The weights after the step agreed to within a thousandth of the
#   learning rate, except the key biases, whose gradient is rounding noise.
# - Every rank builds the same weights. Every rank but rank 0 then reseeds torch's generator, so
#   each rank draws its own dropout masks.
# - Two scores on one test set are compared with a paired test (McNemar's). Whether two ways of
#   training differ needs many seeds.
# - `no_sync()` accumulates micro-batch gradients without an all-reduce each. `torchrun` sets
#   `OMP_NUM_THREADS=1` when it is unset and it starts several processes.
# - `tools/train_ddp.py`, started by `torchrun`, trained the book's recipe to the target on two
#   processes. Rank 0 alone logged and wrote the checkpoint.
# - On one two-core machine with PyTorch's default kernels, the DDP timings page found two
#   processes faster per step than one thread and slower than two threads, in all five runs.
#
# ## Exercises
#
# ### Exercise 23.1 (predict, then run): a dataset that does not split evenly
#
# `DistributedSampler` with its default `drop_last=False` gives every rank the same number of
# indices. With 10 samples and 3 ranks, how many indices does each rank get, and how many of
# the 10 samples are seen twice in one epoch? Predict, then run the solution.

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
# Solution to exercise 23.1
per_rank = [list(DistributedSampler(range(10), num_replicas=3, rank=r, seed=0)) for r in range(3)]
drawn = [i for part in per_rank for i in part]
twice = sorted({i for i in drawn if drawn.count(i) > 1})
print("indices per rank:", [len(p) for p in per_rank])
print(f"{len(drawn)} draws for 10 samples; seen twice: {twice}")
assert [len(p) for p in per_rank] == [math.ceil(10 / 3)] * 3 and len(twice) == 2

# %% [markdown]
# :::{dropdown} Answer to exercise 23.1
# Each rank gets $\lceil 10/3 \rceil = 4$ indices; the sampler pads the permutation to 12
# by repeating its first two indices, so two samples count twice in that epoch. An
# evaluation sharded this way would score those two sequences twice; that is why
# `helpers.training.distributed.sharded_exact_match` slices `src[rank::world_size]` instead: the
# shards may differ by one sequence, and every sequence counts once.
# :::

# %% [markdown]
# ### Exercise 23.2 (implement): shard the indices like `DistributedSampler`
#
# Write `shard_indices(n, world_size, rank, seed, epoch)` returning the list of indices that
# `DistributedSampler(range(n), num_replicas=world_size, rank=rank, shuffle=True, seed=seed)`
# gives after `set_epoch(epoch)`: a permutation from `torch.randperm(n, generator=g)` with
# `g = torch.Generator().manual_seed(seed + epoch)`, padded to a multiple of `world_size` by
# repeating its first indices, then every `world_size`-th index from position `rank`. Check
# it with `check_shard_indices(shard_indices)`.

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 23.2
from helpers.exercises import check_shard_indices


def shard_indices(n, world_size, rank, seed, epoch):
    g = torch.Generator().manual_seed(seed + epoch)
    perm = torch.randperm(n, generator=g).tolist()
    total = math.ceil(n / world_size) * world_size
    while len(perm) < total:  # pad by repeating the first indices (maybe several times)
        perm += perm[: total - len(perm)]
    return perm[rank:total:world_size]


check_shard_indices(shard_indices)

# %% [markdown]
# ### Exercise 23.3 (implement): the loss each rank backpropagates
#
# Write `rank_loss(loss_sum, rank_tokens, global_tokens, world_size)`: `loss_sum` is a rank's
# cross-entropy summed over its `rank_tokens` real target tokens, `global_tokens` the sum of
# the ranks' token counts. Return the scalar tensor the rank should call `.backward()` on so
# that DDP's average of the ranks' gradients equals the gradient of the mean token loss over
# the whole batch. `check_rank_loss(rank_loss)` simulates 2, 3 and 4 ranks in this process
# and compares with one process on all rows.

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 23.3
from helpers.exercises import check_rank_loss


def rank_loss(loss_sum, rank_tokens, global_tokens, world_size):
    # DDP divides the summed gradients by world_size: multiply by it once here
    return loss_sum * world_size / global_tokens


check_rank_loss(rank_loss)
