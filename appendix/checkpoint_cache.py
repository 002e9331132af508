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
# # The checkpoint cache
#
# Chapter 10 trains the reversal model, and later chapters use it or variants of it trained
# by the same code (the first cell lists those chapters). Training takes seconds to minutes on
# a CPU, and the chapters are run again and again, so each chapter asks `helpers.load_or_train(cfg)` for
# its model: the first call trains and stores the weights under `.cache/checkpoints/`, every
# later call loads them. This page shows the four properties that make
# that safe, each with a cell that checks it:
#
# 1. **One file per config.** The file name is a hash of every field of the `TrainConfig` (and
#    of a format number), so the same config finds the same file and any change trains anew. A
#    model trained without the book's pinned numerics gets its own name (`-unpinned`), so a
#    plain kernel never hands its weights to a pinned chapter.
# 2. **No half-written checkpoints.** A file is written under a temporary name and renamed into
#    place; a file that does not load anyway (cut short, corrupted) is reported and retrained.
# 3. **Loading runs no code.** `torch.load(weights_only=True)` accepts tensors, plain containers
#    and a short list of allowed types, and refuses any other object.
# 4. **Two callers train once.** When two callers ask for the same untrained config at the
#    same time, one trains and the other waits for its file.
#
# Every cell works on a tiny config (a model of a few thousand parameters, a few training steps)
# in a temporary folder, so the page trains only tiny models and leaves the real cache alone.

# %% tags=["nbval-ignore-output"]
import contextlib
import dataclasses
import io
import re
import shutil
import tempfile
import threading
from pathlib import Path

import torch

from helpers import BOOK_RECIPE, TrainConfig, load_or_train
from helpers.repro.numerics import pin_problems
from helpers.training import recipes
from helpers.training.checkpoints import checkpoint_path, load_checkpoint, save_checkpoint
from helpers.training.recipes import CHECKPOINT_FORMAT

tiny = TrainConfig(
    d_model=16,
    num_heads=2,
    dff=32,
    num_layers=1,
    dropout=0.0,
    train_size=256,
    val_size=64,
    batch_size=32,
    warmup=10,
    max_steps=4,
    eval_every=4,
    eval_size=64,
    threads=1,
)
cache = Path(tempfile.mkdtemp(prefix="checkpoints-"))
name = checkpoint_path(BOOK_RECIPE).name
print("the book's model is stored as", re.sub("[0-9a-f]{16}", "<16 hex digits>", name))
assert re.fullmatch(r"reversal-[0-9a-f]{16}(-unpinned)?\.pt", name)
assert name.endswith("-unpinned.pt") == bool(pin_problems())
assert checkpoint_path(tiny, cache).parent == cache
users = sorted(
    c.name[:2]
    for c in Path("../chapters").glob("[0-9][0-9]_*.py")
    if re.search(r"load_or_train\(|trained_\w+_model\(", c.read_text())
)
print("chapters that ask the cache for a trained model:", ", ".join(users))
assert users[0] == "10"

# %% [markdown]
# ## One file per config
#
# `TrainConfig.key()` hashes the config's fields, as JSON with sorted keys, together with
# `CHECKPOINT_FORMAT`, a number that is raised whenever the training code changes what a config
# produces. The cell changes each field in turn, and then the format number, and checks that
# every change gives another name.


# %%
def changed(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, str):
        return value + "x"
    if value is None:
        return 0.5
    return value + 1


fields = dataclasses.fields(TrainConfig)
keys = {dataclasses.replace(tiny, **{f.name: changed(getattr(tiny, f.name))}).key() for f in fields}
print("each field of TrainConfig changed on its own gives a name of its own")
assert len(keys) == len(fields) and tiny.key() not in keys
recipes.CHECKPOINT_FORMAT += 1  # as the next change to the training code would
try:
    bumped = tiny.key()
finally:
    recipes.CHECKPOINT_FORMAT -= 1
print(f"format {CHECKPOINT_FORMAT + 1} instead of {CHECKPOINT_FORMAT}: another name as well")
assert bumped != tiny.key() and bumped not in keys

# %% [markdown]
# The first call trains and writes the file; the second finds it and loads the same weights.

# %%
first = load_or_train(tiny, cache_dir=cache, progress=False, verbose=False)
second = load_or_train(tiny, cache_dir=cache, progress=False, verbose=False)
print(f"first call : from the cache {first.from_cache}")
print(f"second call: from the cache {second.from_cache}")
assert not first.from_cache and second.from_cache
for a, b in zip(first.model.state_dict().values(), second.model.state_dict().values()):
    assert torch.equal(a, b)
print("the loaded weights equal the trained ones, tensor for tensor")

# %% [markdown]
# ## No half-written checkpoints
#
# `save_checkpoint` writes to a temporary file in the same folder, flushes it to disk
# (`os.fsync`) and renames it with `os.replace`, which replaces the target in one step when both
# names are in the same folder. A reader therefore sees the old file or the complete new one,
# never a mixture, and a writer killed mid-write leaves at most a stray temporary file, never a
# half-written checkpoint under the real name. After a save, the folder holds the checkpoint and
# its lock file, and no temporary file:

# %%
save_checkpoint(first, checkpoint_path(tiny, cache))
file = checkpoint_path(tiny, cache).name  # reversal-<key>.pt (or -unpinned.pt, see above)
names = sorted(p.name.replace(file, "reversal-<key>.pt") for p in cache.iterdir())
print(names)
assert names == ["reversal-<key>.pt", "reversal-<key>.pt.lock"]

# %% [markdown]
# A file can still be damaged after it was written (a full disk, a copy cut short). The cell cuts
# the checkpoint in half and asks for the model again: loading fails, the cache says why (its
# first line of output, printed without the error's details), and trains anew.

# %%
path = checkpoint_path(tiny, cache)
path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
try:
    load_checkpoint(path, tiny)
    raise AssertionError("half a checkpoint loaded")
except Exception as exc:  # which error torch raises depends on where the cut falls
    print("torch.load on half a file raises", type(exc).__name__)
report = io.StringIO()
with contextlib.redirect_stdout(report):
    retrained = load_or_train(tiny, cache_dir=cache, progress=False)
said = report.getvalue().splitlines()[0].replace(file, "reversal-<key>.pt")
print("load_or_train says:", re.sub(r"\((\w+): .*\)", r"(\1: ...)", said))
print(f"load_or_train afterwards: from the cache {retrained.from_cache}")
assert "is unusable" in said and said.endswith("retraining")
assert not retrained.from_cache and load_checkpoint(path, tiny).from_cache

# %% [markdown]
# A checkpoint written for another config is refused the same way: the file stores its config,
# and `load_checkpoint` compares it with the one asked for.

# %%
other = dataclasses.replace(tiny, seed=1)
try:
    load_checkpoint(path, other)
    raise AssertionError("a checkpoint for another config loaded")
except ValueError as exc:
    print("ValueError:", str(exc).replace(file, "reversal-<key>.pt"))

# %% [markdown]
# ## Loading runs no code
#
# A `.pt` file is a zip of pickles, and unpickling can call any function the file names. With
# `weights_only=True`, which `load_checkpoint` passes, `torch.load` accepts tensors, plain
# containers and a short list of allowed types. The cell stores an object of a class of its own
# next to the weights, as a tampered file could. Its unpickling calls `print`, a harmless
# stand-in for any function: `torch.load(weights_only=False)` runs it, and `load_checkpoint`
# refuses the file before anything is built (torch 2.13.0):


# %%
class Payload:
    def __reduce__(self):  # what unpickling would call: here a harmless print
        return (print, ("unpickling ran code",))


tampered = cache / "tampered.pt"
torch.save({"format": CHECKPOINT_FORMAT, "payload": Payload()}, tampered)
try:
    load_checkpoint(tampered, tiny)
    raise AssertionError("a file with an arbitrary object loaded")
except Exception as exc:
    version = torch.__version__.split("+")[0]
    print(f"load_checkpoint refused it (torch {version}): {type(exc).__name__}")
    assert "weights only" in str(exc).lower().replace("_", " ")
print("torch.load(weights_only=False) on the same file:")
unsafe = torch.load(tampered, weights_only=False)  # prints: code from the file ran
assert unsafe["payload"] is None  # what print returned

# %% [markdown]
# ## Two callers train once
#
# `load_or_train` holds an exclusive lock on `<checkpoint>.lock` (`fcntl.flock`) while it looks
# for the file and, if needed, trains and writes it. A second caller for the same config waits
# for the lock, then finds the finished file and loads it. (On Windows, which has no `fcntl`,
# there is no lock, and both callers may train the same model.) The cell starts two threads of
# this one process that ask for a config nobody has trained yet, at the same time:

# %%
fresh = dataclasses.replace(tiny, seed=2)
results = []


def ask():
    results.append(load_or_train(fresh, cache_dir=cache, progress=False, verbose=False))


threads = [threading.Thread(target=ask) for _ in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
trained = sum(not r.from_cache for r in results)
print(f"two simultaneous calls: {trained} trained, {len(results) - trained} loaded the file")
assert len(results) == 2 and trained == 1

# %% [markdown]
# Where the cache lives: `.cache/checkpoints/` at the repository root, or the folder named by the
# environment variable `TRANSFORMER_BOOK_CACHE`. Deleting the folder costs only time: the next
# run trains again.

# %%
shutil.rmtree(cache)  # the temporary folder of this page
