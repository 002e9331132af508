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
# # 18. Cross-attention heatmaps: watching the model read backwards
#
# To reverse `7 3 0 9 5 1 8`, the decoder must find, at every step, the source digit to copy next.
# Cross-attention shows where it looks. This chapter loads a model with a sharp map, draws it
# layer by layer and head by head, and lets you explore it.
# Then it shows that an accurate model can have a blurred map, and how the sharp recipe was found.
#
# ![The sharp model's cross-attention map of 7 3 0 9 5 1 8](figures/18_cross_attention_heatmaps.png)

# %% [markdown] tags=["run-time"]
# **Run time:** about 1.3 min. The first time, it also trains the book's reversal model (`BOOK_RECIPE`) and caches it on disk (about 40 s more); later runs load it.

# %%
import dataclasses
import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
from IPython.display import display

from helpers import (
    BOOK_RECIPE,
    MEAN_OF_HEADS,
    SEED_RECIPE,
    SHARP_ATTENTION_RECIPE,
    AttentionExplorer,
    AttentionMap,
    Interval,
    alignment_stats,
    attention_sharpness,
    count_parameters,
    cross_attention,
    decode_digits,
    encode_digits,
    exact_match_with_interval,
    greedy_decode,
    make_reversal_dataset,
    mirrored_columns,
    plot_attention,
    plot_attention_grid,
    test_set,
    token_name,
    train_reversal,
    train_test_overlap,
    trained_reversal_model,
)
from helpers.exercises import check_mirror_weight, check_row_entropy
from helpers.numerics import kernel_spread, largest_gap, path_label, tolerance
from helpers.recipes import TrainConfig
from helpers.train import build_model

_ = torch.manual_seed(0)

# %% [markdown]
# ## 1. A sharp model and its map
#
# Cross-attention weights form a matrix with one row per decoder step (the query) and one column
# per source token (the key). Each row sums to 1. Bahdanau et al. introduced such weights as a
# learned soft *alignment* between output and input {cite}`bahdanau2015`. The Transformer's
# encoder-decoder attention computes them with scaled dot products {cite}`vaswani2017`. Nobody
# tells the model where to look; the loss only rewards correct outputs.
#
# For a model that reverses, the perfect alignment is the anti-diagonal. The heatmap in
# [the reference chapter](intro.md#the-reference-chapter) (last decoder layer, mean of its four heads)
# comes close: at least 0.94 on the mirrored source token in every row.
#
# `SHARP_ATTENTION_RECIPE` (in `helpers.recipes`) is the book's recipe of chapter 10 with
# $d_{model} = 64$ split into two heads of $d_k = 32$, dropout 0.15, twice the learning rate,
# and a fixed budget of 1000 steps. Its cooldown ends at the last step; there is no early stop.
# It has about four times the book model's parameters. Training it takes more than a minute (a
# dropdown in section 4 times it), so the chapter loads its stored weights (seed 0, in
# `chapters/data/`). To train it yourself, call `load_or_train(SHARP_ATTENTION_RECIPE)`.

# %%
data = json.loads(Path("data/ch18_sharpness.json").read_text())  # recorded runs
runs = {(r["name"], r["seed"]): r for r in data["runs"]}
SHOWN = -1  # the layer this chapter shows, as the reference chapter does: the last one
stored = torch.load("data/ch18_sharp_model.pt", weights_only=True)
assert stored["key"] == SHARP_ATTENTION_RECIPE.key()  # the weights of this very recipe
model = build_model(SHARP_ATTENTION_RECIPE)
model.load_state_dict(stored["state_dict"])
model.eval()
sharp_run = runs[("sharp1000d15", 0)]
diff = {
    f.name: getattr(SHARP_ATTENTION_RECIPE, f.name)
    for f in dataclasses.fields(BOOK_RECIPE)
    if getattr(SHARP_ATTENTION_RECIPE, f.name) != getattr(BOOK_RECIPE, f.name)
}
book_params = count_parameters(build_model(BOOK_RECIPE))
print("changes from BOOK_RECIPE:", diff)
print(f"parameters: {count_parameters(model):,} (book model: {book_params:,})")
print(f"trained for {sharp_run['points'][-1]['step']} steps on {path_label(stored['numerics'])}")
n_layers, n_heads = len(model.decoder.layers), model.decoder.layers[0].cross_mha.h
assert sharp_run["key"] == stored["key"] and sharp_run["points"][-1]["step"] == 1000

# %% [markdown]
# The chapter shows the map of the last decoder layer, as the reference chapter does. First the
# model reverses the input:

# %%
digits = [7, 3, 0, 9, 5, 1, 8]
src = encode_digits(digits)
pred = greedy_decode(model, src)
print("src :", tuple(src.shape), [token_name(t) for t in src[0]])
print("pred:", tuple(pred.shape), [token_name(t) for t in pred[0]])
assert decode_digits(pred[0]) == digits[::-1]

# %% [markdown]
# To get the weights, run the decoder once more on its own output minus the final `<eos>`
# (the decoder *input* at each step: `<bos>` to predict the first digit, ..., the last digit to
# predict `<eos>`). `decode` returns the logits and one cross-attention tensor per layer,
# `[B, h, L_t, L_s]`: batch, heads, decoder positions, source positions.

# %%
with torch.no_grad():
    memory, src_mask = model.encode(src)
    logits, cross = model.decode(pred[:, :-1], memory, src_mask)
print("decoder input:", tuple(pred[:, :-1].shape), " logits:", tuple(logits.shape))
print("cross-attention:", len(cross), "layers of", tuple(cross[SHOWN].shape))
w = cross[SHOWN][0].mean(dim=0)  # the shown layer, mean over heads -> [L_t, L_s]
torch.testing.assert_close(w.sum(dim=-1), torch.ones(w.size(0)))

# %% [markdown]
# Take a source of $n$ digits followed by `<eos>`. Row $i$ of the map predicts output digit $i$,
# which is source digit $n - 1 - i$: that column is row $i$'s *mirrored column*. The last row
# predicts `<eos>` and should read the source's `<eos>`, column $n$. `mirrored_columns(n)` lists
# these columns. The weight each row puts on its mirrored column:

# %% tags=["nbval-ignore-output"]
n = len(digits)
on_mirror = w[torch.arange(n + 1), torch.as_tensor(mirrored_columns(n))]
print("weight on the mirrored column, row by row:", [round(v, 2) for v in on_mirror.tolist()])
low = [round(v, 3) for v in on_mirror[on_mirror < 0.94].tolist()]
print(f"rows below the reference's 0.94: {len(low)} of {n + 1}, to 3 decimals {low}")
assert (w.argmax(dim=-1).numpy() == mirrored_columns(n)).all()
assert (on_mirror < 0.94).sum() >= 1 and on_mirror[-1] < 0.9  # the <eos> row

# %% jupyter={"source_hidden": true} tags=["figure", "hide-input", "opening-figure"]
fig, ax = plt.subplots(figsize=(5.6, 4.6))
plot_attention(cross_attention(model, digits, layer=SHOWN), ax=ax, annotate=True)
ax.set_title("Figure 18.1: the sharp model, last layer, mean of heads", fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# Figure 18.1 draws the whole map. Every row peaks on its mirrored column, the anti-diagonal,
# and the last row on `<eos>`. But
# this map is less sharp than the reference chapter's, which had at least 0.94 in every row.
# Here some rows fall below 0.94, and the `<eos>` row puts less than 0.9 on `<eos>`.
#
# :::{dropdown} Going deeper: the packaged helper
# `helpers.cross_attention` packages this computation. The cell below checks that it gives the
# same matrix as the cells above, for the mean of heads and for a single head. Its companion
# `attention_sharpness` scores one such map as `alignment_stats` (section 4) scores a batch.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
amap = cross_attention(model, digits, layer=SHOWN, head=MEAN_OF_HEADS)
torch.testing.assert_close(torch.from_numpy(amap.weights), w)
rows = [token_name(t) for t in pred[0, :-1]]
assert amap.row_labels == rows and amap.col_labels == [str(d) for d in digits] + ["<eos>"]
per_head = cross_attention(model, digits, layer=n_layers - 1, head=n_heads - 1)
torch.testing.assert_close(torch.from_numpy(per_head.weights), cross[-1][0, n_heads - 1])
one = attention_sharpness(amap)
print(f"helpers.cross_attention reproduces the hand-built matrices: {amap.weights.shape}")
assert abs(one["on_mirror"] - on_mirror.mean().item()) < 1e-6

# %% [markdown]
# ## 2. Every layer and every head
#
# The mean of heads hides how the work is shared. Figure 18.2 shows each head of each decoder
# layer on the same input (rows: decoder input, columns: source).

# %%
grid = plot_attention_grid(model, digits)
print(f"{len(grid.axes)} panels = {n_layers} layers x {n_heads} heads")
assert len(grid.axes) == n_layers * n_heads
grid.suptitle(
    "Figure 18.2: cross-attention of every layer and head of the sharp model", fontsize=10
)
display(grid)

# %% [markdown]
# ## 3. An explorer
#
# Type digits, pick a layer and a head (or the mean of heads): the decoded output and the
# heatmap update live in JupyterLab. The logic lives in `helpers.visualize`.
# `AttentionExplorer.render(text, layer, head)` parses the text, decodes, and draws, or returns
# a clear message for bad input; the widgets only call it.

# %% tags=["nbval-ignore-output"]
explorer = AttentionExplorer(model, digits="7 3 0 9 5 1 8")
box = explorer.widget()
display(box)
assert explorer.last_figure is not None and explorer.last_message.endswith("correct")

# %% [markdown]
# <div class="html-attention-explorer" data-src="../_static/attention_explorer.json">
# <p><em>In the HTML version of this book, an explorer that needs no kernel appears here.</em></p>
# </div>
# <script src="../_static/attention_explorer.js"></script>

# %% [markdown]
# The HTML book cannot run widgets. It shows an explorer of its own instead, just above. That
# one draws weights computed beforehand. You pick one of twelve stored inputs, one of three
# models, a layer and a head, but you cannot type digits.
#
# Figure 18.3 is the widget's initial view, drawn as a static figure:

# %%
print(explorer.last_message)
display(explorer.last_figure)

# %% [markdown]
# Bad input never reaches the model: the explorer answers with a message instead of a
# traceback, and draws nothing. Calling `render` directly shows what the widget would display:

# %%
for text in ["", "12a4", "1234567890123"]:
    fig, message = explorer.render(text)
    print(f"{text!r:>17} -> {message}")
    assert fig is None and message.startswith("error:")
assert explorer.render("")[1] == "error: type at least one digit (0-9)"
assert "too long" in explorer.render("1" * (model.max_len - 1))[1]
assert explorer.render("1" * (model.max_len - 2))[0] is not None  # the longest input that fits

# %% [markdown]
# And the controls drive the picture: switching the layer dropdown redraws a different heatmap,
# and typing an invalid input replaces it with the error message.

# %% tags=["nbval-ignore-output"]
explorer.update()  # redraw from the controls (the cell above called render directly)
before = explorer.last_figure.axes[0].images[0].get_array().copy()
explorer.controls["layer"].value = 0
after = explorer.last_figure.axes[0].images[0].get_array()
assert not np.allclose(before, after)
explorer.controls["text"].value = "12x"
assert explorer.last_figure is None and "only the digits" in explorer.controls["status"].value
explorer.controls["text"].value = "7 3 0 9 5 1 8"
explorer.controls["layer"].value = n_layers - 1
assert explorer.last_message.endswith("correct")

# %% [markdown]
# ## 4. How sharp is it, measured?
#
# One map is one input. To measure a model, feed it many sources under teacher forcing. For a
# source of $n$ digits, the decoder input is `<bos>` and the $n$ reversed digits, so each map
# has $n + 1$ rows and $n + 1$ columns. Each row's mirrored column is the one of section 1.
# Three numbers say how sharp a layer is, each averaged over its heads (`helpers.alignment_stats`):
#
# - **mirror**: the mean weight on the mirrored column, over every row of every sequence
#   (1.0 = a perfect anti-diagonal);
# - **`<eos>` peak**: the share of sequences whose last row has its maximum on `<eos>`;
# - **neighbours**: the mean weight on the two columns beside the mirrored one.
#
# They are measured on 200 probe sequences drawn with their own seed (7), so every model is
# asked the same questions. Some short ones also occur in the training set (chapter 9 counts
# such repeats); the cell counts them.

# %%
print("mirrored columns for n = 4:", mirrored_columns(4).tolist())
src_p, tgt_p = make_reversal_dataset(200, seed=7)  # the probe set
n_p = (src_p != 0).sum(dim=1) - 1  # digits per sequence
uniform = (1.0 / (n_p + 1).float()).mean().item()
print(f"probe: {len(n_p)} sequences of {n_p.min()} to {n_p.max()} digits")
print(f"a map with uniform rows would score mirror = {uniform:.2f}")
train_src, _ = make_reversal_dataset(BOOK_RECIPE.train_size, seed=BOOK_RECIPE.data_seed)
seen = train_test_overlap(src_p, train_src)
print(f"probe sequences that also occur in the training set: {seen.sum().item()} of {len(seen)}")
assert mirrored_columns(4).tolist() == [3, 2, 1, 0, 4]
assert seen.sum().item() < 0.2 * len(seen)  # chapter 9: about 1 in 9 for the test set


def report(name, stats):
    for layer, (m, e, nb) in enumerate(
        zip(*(stats[k] for k in ("mirror", "eos_peak", "neighbours")))
    ):
        print(
            f"{name:>14}, layer {layer}: mirror {m:.2f}, <eos> peak {e:4.0%}, neighbours {nb:.2f}"
        )


# %% [markdown]
# The chapter's targets for the layer it shows: mirror at least 0.90, and the `<eos>` row peaking
# on `<eos>` in at least 90 % of sequences. The first is below the reference chapter's 0.94.
# A script trained this recipe once and recorded these numbers as it went (section 6). The cell
# compares the stored model with that record. It also prints the numbers of the seed-0 models
# trained on the other kernel paths of chapter 10 (the same code on other CPU kernels).

# %% tags=["nbval-ignore-output"]
paths = kernel_spread(Path("data/kernel_spread.json"))["results"]  # the kernel paths
sharp = alignment_stats(model, src_p, tgt_p)
report("sharp model", sharp)
recorded = runs[("sharp1000d15", 0)]["points"][-1]
print(
    f"recorded run (same recipe, seed 0): mirror {recorded['mirror']}, <eos> peak "
    f"{recorded['eos_peak']}"
)
assert recorded["mirror"][SHOWN] >= 0.90 and recorded["eos_peak"][SHOWN] >= 0.90
for r in paths.values():
    print(
        f"{path_label(r['numerics'])}: last layer mirror {r['sharp']['mirror'][SHOWN]:.3f}, "
        f"<eos> peak {r['sharp']['eos_peak'][SHOWN]:.1%}"
    )
    assert r["sharp"]["mirror"][SHOWN] >= 0.90 and r["sharp"]["eos_peak"][SHOWN] >= 0.90
for key in ("mirror", "eos_peak"):  # the stored weights, evaluated on each kernel path
    gap = largest_gap(paths, "sharp_loaded", key)
    allowed = tolerance(gap)
    print(f"{key}: largest gap between kernel paths {gap:.4f}; allowed here {allowed:.4f}")
    assert np.allclose(sharp[key].numpy(), recorded[key], atol=allowed)

# %% [markdown]
# This model meets both targets, and so did the models of the other kernel paths. Per head:

# %% tags=["nbval-ignore-output"]
for layer in range(n_layers):
    line = ", ".join(f"head {h}: {v:.2f}" for h, v in enumerate(sharp["mirror_heads"][layer]))
    print(f"layer {layer}, weight on the mirrored position: {line}")
assert sharp["mirror_heads"][SHOWN].min() > 0.85

# %% [markdown]
# Both heads of the last layer put more than 0.85 on the mirrored position: they agree, so their
# mean is sharp too.
#
# The sharp model's accuracy, on the 10,000 test sequences of chapter 9 that no choice in this chapter looked
# at (teacher-forced exact match, with a Wilson 95 % interval, chapter 10):

# %% tags=["nbval-ignore-output"]
test_result = exact_match_with_interval(model, *test_set())
print(f"test exact match: {test_result}")
assert test_result.exact_match > 0.999 and test_result.low > 0.99

# %% [markdown]
# The probe numbers are not an unbiased estimate. The 200 probe sequences measured every
# candidate recipe of section 6, and the recipe and seed 0 were chosen because they scored well
# on them. So the chapter also measures the model on 1000 fresh sequences, drawn with a seed
# (18) that chose nothing:

# %% tags=["nbval-ignore-output"]
FRESH_SEED = 18
src_f, tgt_f = make_reversal_dataset(1000, seed=FRESH_SEED)
print(f"fresh sequences that are also probe sequences: {train_test_overlap(src_f, src_p).sum()}")
fresh = alignment_stats(model, src_f, tgt_f)
report("probe (200)", sharp)
report("fresh (1000)", fresh)
assert fresh["mirror"][SHOWN] > 0.90 and fresh["eos_peak"][SHOWN] > 0.95
assert abs(fresh["mirror"][SHOWN] - sharp["mirror"][SHOWN]) < 0.01
assert fresh["eos_peak"][SHOWN] > sharp["eos_peak"][SHOWN] - 0.02  # within 4 of the 200

# %% [markdown]
# On the fresh sequences the last layer still puts more than 0.90 on the mirrored position and
# peaks on `<eos>` in more than 95 % of them. The mirror weight is within 0.01 of the probe
# set's, and the `<eos>` peak at most 0.02 below it. Choosing on the probe set did not inflate
# these numbers.
#
# :::{dropdown} Going deeper: are these the weights this code trains?
# The recipe's cooldown starts only after step 100. So a run of 100 steps without cooldown takes
# exactly the recorded run's first 100 steps. Trained live, it must match the record's point at
# step 100. On the book's pinned kernels it matches to the record's four decimals. Elsewhere the
# last bits differ, and 100 steps amplify them. There the allowed gap is twice the largest one
# measured between kernel paths for this recipe at the same step, for each number. It is never
# less than one probe sequence in 200 (0.005).
# :::


# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell", "nbval-ignore-output"]
def check_first_100(recipe, run, part):
    """Train recipe's first 100 steps live; compare with the record's step-100 point, within
    the tolerance that kernel_spread.json's `part` (the same 100 steps per path) justifies."""
    assert run["key"] == recipe.key()  # the record is this recipe, seed 0
    live_model = train_reversal(
        dataclasses.replace(recipe, max_steps=100, cooldown=0), progress=False
    ).model
    live = alignment_stats(live_model, src_p, tgt_p)
    at_100 = next(p for p in run["points"] if p["step"] == 100)
    for key in ("mirror", "eos_peak"):
        gap = largest_gap(paths, part, key)
        allowed = tolerance(gap)
        live_values = [round(v, 4) for v in live[key].tolist()]
        print(f"{key:>8} at step 100, per layer: live {live_values}, recorded {at_100[key]}")
        print(f"{'':>8} largest gap between kernel paths {gap:.3f}; allowed here {allowed:.4f}")
        assert np.allclose(live[key].numpy(), at_100[key], atol=allowed)


check_first_100(SHARP_ATTENTION_RECIPE, sharp_run, "sharp_step_100")

# %% [markdown]
# :::{dropdown} Going deeper: how long the 1000 steps take
# The recipe keeps the book's one thread. `tools/time_ch18_recipe.py` trained it from scratch
# on one thread, and again with `threads=2`. The steps and data are the same; only the order of
# the sums inside each operation changes. Each run was timed from the call to the trained model.
# It ran with the CPU's own kernels on an Intel Xeon, not in the book's pinned kernel. On one
# thread it took more than a minute (median 75 s). Only with `threads=2`, a change of recipe, did
# it take under a minute (median 54 s).
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
timing = json.loads(Path("data/ch18_training_time.json").read_text())
print(f"recorded {timing['date'][:10]} by `{timing['command']}`")
print(f"torch {timing['hardware']['torch'].split('+')[0]}, {timing['hardware']['cores']} cores")
print(f"CPU {timing['numerics']['cpu']}, MKL_CBWR {timing['numerics']['mkl_cbwr']}")
for threads in (1, 2):
    secs = [r["seconds"] for r in timing["runs"] if r["threads"] == threads]
    median = timing["median_seconds"][str(threads)]
    print(f"{threads} thread(s): runs {secs} s, median {median} s")
assert all(r["steps"] == SHARP_ATTENTION_RECIPE.max_steps for r in timing["runs"])
assert timing["median_seconds"]["2"] <= 60 < timing["median_seconds"]["1"]

# %% [markdown]
# ## 5. Accurate, yet blurred: the book's model
#
# The book's model of chapter 10 (`BOOK_RECIPE`: $d_{model} = 32$, four heads of $d_k = 8$, no
# dropout) stops training at the first evaluation with 99.5 % validation exact match. It is
# accurate; is it sharp? The cell also prints the numbers, and the test score, for the models
# that the four kernel paths of chapter 10 trained.

# %% tags=["nbval-ignore-output"]
book_model = trained_reversal_model(progress=False, verbose=False)
book = alignment_stats(book_model, src_p, tgt_p)
report("book model", book)
for r in paths.values():
    print(f"{path_label(r['numerics'])}:")
    print(
        f"    mirror per layer {r['book']['mirror']}, <eos> peak {r['book']['eos_peak']}, "
        f"test {r['book']['test_correct']:,} of 10,000"
    )
BOOK_MIRROR_BOUND, BOOK_EOS_BOUND = 0.7, 0.5  # the prose's claims; the paths reach 0.54, 0.20
highest_mirror = max(max(r["book"]["mirror"]) for r in paths.values())
highest_eos = max(r["book"]["eos_peak"][-1] for r in paths.values())
assert highest_mirror < BOOK_MIRROR_BOUND and highest_eos < BOOK_EOS_BOUND  # every path
assert book["mirror"].max() < BOOK_MIRROR_BOUND and book["eos_peak"][-1] < BOOK_EOS_BOUND
assert book["mirror"].min() > uniform

# %% [markdown]
# Its mirror weight is above what uniform rows score, but far from the sharp model's. No layer puts even 0.7 on
# the mirrored position. The last layer's `<eos>` row peaks on `<eos>` in fewer than half of the
# sequences, on every path. Yet these models reverse 98.9 % to 99.8 % of the test sequences
# correctly. Accuracy does not require a sharp alignment.
#
# :::{dropdown} Going deeper: which machines trained these models
# Three of the four kernel paths ran on an AMD EPYC, one earlier on an Intel Xeon.
# :::
#
# ## 6. How the recipe was found
#
# Which changes to the book's recipe make the map sharp? The sharp recipe alone takes more than
# a minute to train, and the runs cover sixteen recipes. So a script trained and measured each
# once, every 100 steps, and the chapter reads the records.
# Every run starts from `BOOK_RECIPE` and changes a few fields.
#
# :::{dropdown} Going deeper: the recorded runs, one table
# The runs were recorded with
#
# ```bash
# nice -n 10 .venv/bin/python tools/explore_ch18_sharpness.py NAME --set FIELD=VALUE ... --seed S
# ```
#
# It trains a `TrainConfig` exactly as `train_reversal` does (same data, batches and random
# streams) for a fixed number of steps, with the cooldown ending at the last step. It records
# the three numbers per layer, the validation exact match and the training loss into
# `chapters/data/ch18_sharpness.json`. The table lists each run's last point. Only
# `sharp1000d15` (seeds 0 to 2) and `sharp1000d15default` were recorded in the book's pinned
# kernel; the others are earlier records made with a CPU's own kernels. Section 4 shows how much
# the kernels alone move these numbers: at most 0.02 for the sharp recipe.
# :::


# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
def changes(config):
    skip = {"seed", "target_exact_match", "eval_every", "eval_gate", "max_steps", "cooldown"}
    return ", ".join(
        f"{k}={v}" for k, v in config.items() if k not in skip and getattr(BOOK_RECIPE, k) != v
    )


print(
    f"{'run':>16} {'seed':>4} {'params':>7} {'steps':>5}  mirror L0 L1  <eos> L0  L1  val   changes"
)
for (name, seed), r in runs.items():
    p = r["points"][-1]
    mirror = " ".join(f"{v:.2f}" for v in p["mirror"]).ljust(9)
    eos = " ".join(f"{v:4.0%}" for v in p["eos_peak"]).ljust(9)
    print(
        f"{name:>16} {seed:>4} {r['parameters']:>7,} {p['step']:>5}  {mirror}    {eos} "
        f"{p['val_exact']:.3f} {changes(r['config'])}"
    )

# %% [markdown]
# Figure 18.4 follows the sharpness during training for the runs that tell the story. First the
# book's architecture, trained for three times the book's step budget. Then one change at a time
# towards the sharp recipe (three seeds), and that recipe with PyTorch's default initialisation.

# %% jupyter={"source_hidden": true} tags=["figure", "hide-input"]
story = [
    ("d32h4", "book architecture (4 heads of d_k 8), no dropout", "0.6"),
    ("d32h1", "1 head of d_k 32", "tab:gray"),
    ("d32h1drop", "1 head, dropout 0.1", "tab:olive"),
    ("d64h1drop", "d_model 64, 1 head, dropout 0.1", "tab:cyan"),
    ("d64h2drop", "d_model 64, 2 heads of d_k 32, dropout 0.1", "tab:blue"),
    ("sharp1000d15", "... 2x learning rate, dropout 0.15, 1000 steps (this chapter)", "tab:red"),
    ("sharp1000d15default", "the same with PyTorch's default init", "tab:purple"),
]
fig, axes = plt.subplots(1, 3, figsize=(13, 5.0), sharex=True)
panels = [
    ("mirror", 0, "layer 0: weight on the mirrored position"),
    ("mirror", -1, "last layer: weight on the mirrored position"),
    ("eos_peak", -1, "last layer: <eos> row peaks on <eos>"),
]
for ax, (key, layer, title) in zip(axes, panels):
    for name, label, color in story:
        for (run_name, seed), r in runs.items():
            if run_name != name:
                continue
            steps = [p["step"] for p in r["points"]]
            values = [p[key][layer] for p in r["points"]]
            ax.plot(
                steps,
                values,
                color=color,
                lw=1.6 if seed == 0 else 0.8,
                label=label if seed == 0 else None,
            )
    ax.axhline(0.9, color="k", ls=":", lw=0.8)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("training step")
    ax.set_ylim(0, 1.02)
axes[0].set_ylabel("mean over the 200 probe sequences")
fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=4, fontsize=8)
fig.suptitle(
    "Figure 18.4: cross-attention sharpness during training (mean of heads; "
    "dotted: the 0.90 target; thin lines: seeds 1 and 2)",
    fontsize=11,
)
fig.tight_layout(rect=(0, 0.1, 1, 1))
plt.show()

# %% [markdown]
# Training longer alone does not make the map sharp: the book's architecture, after 1500 steps,
# stays low. The next cell measures each change against the seed's own spread. Heads of
# $d_k = 32$ rather than 8 raise both numbers far beyond it. Dropout helps some models and not
# others.
#
# :::{dropdown} Going deeper: one change at a time
# The cell sets the runs side by side, one change at a time. The runs before and after differ
# only in the fields named. It reports both numbers for the last layer, and the first layer's
# mirror weight beside them. Each lever is one run with seed 0. How far can the seed alone move
# these numbers? Three seeds of the sharp recipe give a band, printed first: a change smaller
# than it may be the seed's doing. What the runs show, on the last layer:
#
# - **Training longer alone does not do it.** The book's architecture trained for 1500 steps,
#   three times the book's budget, to a validation exact match of 1.000, still puts less than
#   0.65 on the mirrored position.
# - **Heads of $d_k = 32$ rather than 8.** One head of $d_k = 32$ instead of four of 8 raised
#   both numbers well beyond the band. So did two heads of 32 instead of one of 64, at
#   $d_{model} = 64$ (with 200 more steps). The second change adds a head, so the runs do not
#   say "fewer heads". They say: heads of at least 32 dimensions.
# - **Dropout 0.1 depends on the model.** It sharpened the last layer of the four-head model
#   on both numbers. In the one-head model it lifted the first layer by more than 0.3, but not
#   the last: its mirror weight moved within the band, and its `<eos>` peak fell. Dropout 0.2
#   cost the one-head model its accuracy.
# - **Label smoothing** left the mirror weight within the band and took the `<eos>` peak to 0.
# - **One layer per stack**: its only layer is sharper than the two-layer model's last one and
#   peaks on `<eos>` everywhere, but less sharp than that model's first layer, and less
#   accurate.
# - **Twice the learning rate** moved nothing beyond the band at $d_{model} = 32$. At 64 it
#   raised both numbers, each by just over the band.
# - **1000 steps instead of 1200** lowered both. **Dropout 0.15 instead of 0.1** at 1000 steps
#   then raised the `<eos>` peak beyond the band and left the mirror weight inside it.
# - **Length bucketing** (batches of similar length, chapter 10) lowered the mirror weight by
#   more than 0.1.
#
# Only one run of the table reaches the reference chapter's 0.94 on the last layer:
# `d64h2droplr2`, with 1200 steps. Every other run falls below it, the sharp recipe included.
# :::


# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
def final(name, key="mirror", layer=-1, seed=0):
    return runs[(name, seed)]["points"][-1][key][layer]


seed_points = [r["points"][-1] for (name, _), r in runs.items() if name == "sharp1000d15"]
band = {k: max(p[k][-1] for p in seed_points) - min(p[k][-1] for p in seed_points)
        for k in ("mirror", "eos_peak")}  # fmt: skip
print(
    f"seed band (sharp1000d15, seeds 0-2, last layer): mirror {band['mirror']:.2f}, "
    f"<eos> peak {band['eos_peak']:.0%}\n"
)
levers = [  # (change, run before, run after)
    ("one head of d_k 32 instead of four of 8", "d32h4", "d32h1"),
    ("dropout 0.1, four heads of d_k 8", "d32h4", "d32h4drop"),
    ("dropout 0.1, one head of d_k 32", "d32h1", "d32h1drop"),
    ("dropout 0.2 instead of 0.1, one head", "d32h1drop", "d32h1drop2"),
    ("label smoothing 0.1", "d32h1drop", "d32h1dropls"),
    ("one layer per stack instead of two", "d32h1drop", "d32h1dropL1"),
    ("2x learning rate, d_model 32", "d32h1drop", "d32h1droplr2"),
    ("d_model 64, 1 head of d_k 64; 1000 not 1500 steps", "d32h1drop", "d64h1drop"),
    ("2 heads of d_k 32, not 1 of 64; 1200 not 1000 steps", "d64h1drop", "d64h2drop"),
    ("2x learning rate, d_model 64", "d64h2drop", "d64h2droplr2"),
    ("dropout 0.15 instead of 0.1, 1200 steps", "d64h2drop", "d64h2drop15"),
    ("1000 steps instead of 1200", "d64h2droplr2", "sharp1000"),
    ("dropout 0.15 instead of 0.1, 1000 steps", "sharp1000", "sharp1000d15"),
    ("length bucketing, 1200 steps", "d64h2droplr2", "sharp1200bucket"),
]
print(f"{'change':>52} | last layer: mirror    <eos> peak | layer 0 mirror | val")
delta = {}
for change, a, b in levers:
    m_a, m_b, e_a, e_b = final(a), final(b), final(a, "eos_peak"), final(b, "eos_peak")
    delta[b] = {
        "mirror": m_b - m_a,
        "eos_peak": e_b - e_a,
        "first": final(b, layer=0) - final(a, layer=0),
    }
    print(
        f"{change:>52} | {m_a:.2f} -> {m_b:.2f}  {e_a:4.0%} -> {e_b:4.0%} | "
        f"{final(a, layer=0):.2f} -> {final(b, layer=0):.2f}   | "
        f"{runs[(b, 0)]['points'][-1]['val_exact']:.3f}"
    )
beyond = lambda b, k: abs(delta[b][k]) > band[k]  # noqa: E731
assert 0.02 < band["mirror"] < 0.03 and 0.10 < band["eos_peak"] < 0.15
assert delta["d32h1"]["mirror"] > 0.1 and delta["d32h1"]["eos_peak"] > 0.4  # d_k 8 -> 32
assert delta["d64h2drop"]["mirror"] > 0.1 and delta["d64h2drop"]["eos_peak"] > 0.3  # 1 -> 2 heads
assert delta["d32h4drop"]["mirror"] > 0.1 and delta["d32h4drop"]["eos_peak"] > 0.4
assert not beyond("d32h1drop", "mirror") and delta["d32h1drop"]["eos_peak"] < -band["eos_peak"]
assert delta["d32h1drop"]["first"] > 0.3
assert runs[("d32h1drop2", 0)]["points"][-1]["val_exact"] < 0.9  # too much dropout: not learnt
assert not beyond("d32h1dropls", "mirror") and delta["d32h1dropls"]["eos_peak"] < -0.3
assert delta["d32h1dropL1"]["mirror"] > band["mirror"] and delta["d32h1dropL1"]["first"] < -0.05
assert not beyond("d32h1droplr2", "mirror") and not beyond("d32h1droplr2", "eos_peak")
assert delta["sharp1000d15"]["eos_peak"] > band["eos_peak"] and not beyond("sharp1000d15", "mirror")
assert beyond("d64h2droplr2", "mirror") and delta["d64h2droplr2"]["eos_peak"] > band["eos_peak"]
assert delta["sharp1000"]["mirror"] < -band["mirror"] and delta["sharp1000"]["eos_peak"] < -0.15
assert delta["sharp1200bucket"]["mirror"] < -0.1
assert final("d32h4") < 0.65  # the book's architecture, three times the book's budget
names = {n for n, _ in runs}
below = [n for n in names if final(n) < 0.94]
print(f"\nruns below the reference's 0.94 on the last layer (seed 0): {len(below)} of {len(names)}")
assert set(below) == names - {"d64h2droplr2"}  # the one run at 0.94 or above

# %% [markdown]
# Is the sharp model's score the recipe or the seed? Over three seeds the recipe sits at the edge
# of both targets; only seed 0 clears both.
#
# :::{dropdown} Going deeper: three seeds of the sharp recipe
# Seeds 0, 1 and 2 differ in initial weights and batch order; the same script recorded them.
# On average over the three seeds the last layer meets the `<eos>` target and falls just short
# of 0.90 on the mirror weight. Seeds 1 and 2 fall just short of 0.90 on the mirror weight (both
# above 0.88), and seed 2 also of 90 % on the `<eos>` peak. This recipe sits at the edge of what
# its 1000 steps buy. The recorded 1200-step run with dropout 0.1 and twice the learning rate
# (`d64h2droplr2` in the table, an earlier record on other kernels) went further on the mirror
# weight with seed 0 (0.94 against 0.91), at 1.2 times the training steps (one seed only). The
# book keeps 1000 steps.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
seeds = [r["points"][-1] for (name, _), r in runs.items() if name == "sharp1000d15"]
for seed, p in enumerate(seeds):
    print(
        f"seed {seed}: last layer mirror {p['mirror'][-1]:.3f}, <eos> peak {p['eos_peak'][-1]:.1%}"
    )
for key, label in (("mirror", "mirror"), ("eos_peak", "<eos> peak")):
    for layer in range(n_layers):
        v = np.array([p[key][layer] for p in seeds])
        print(
            f"{label:>10}, layer {layer}: mean {v.mean():.3f}, min {v.min():.3f}, max {v.max():.3f}"
            f" over {len(v)} seeds"
        )
last_mirror = np.array([p["mirror"][-1] for p in seeds])
last_eos = np.array([p["eos_peak"][-1] for p in seeds])
assert len(seeds) == 3 and last_mirror.min() >= 0.85 and last_eos.min() >= 0.85
assert last_mirror.mean() < 0.90 <= last_eos.mean()
assert ((last_mirror >= 0.90) & (last_eos >= 0.90)).sum() == 1  # seed 0 only
assert last_mirror.min() > 0.88 and (last_eos < 0.90).sum() == 1
assert final("d64h2droplr2") > last_mirror.max()

# %% [markdown]
# The reference chapter's own recipe, `SEED_RECIPE`, is larger and trains for ten epochs. One
# recorded run of it puts more than 0.94 on the mirrored position in its last layer, as the
# reference chapter shows.
#
# :::{dropdown} Going deeper: the reference chapter's own recipe
# `SEED_RECIPE` is larger than the sharp model and trains for more steps: ten epochs, with no
# early stop. The same script recorded one run of it (seed 0, the book's pinned kernels),
# measured on the same probe set. It was trained in float32 on a CPU, where the reference used
# bf16 on a GPU. On its last layer it puts more than the reference chapter's 0.94 on the mirrored
# position, and its `<eos>` peak is above 95 %. On the chapter's input every mirrored weight of
# its map is above 0.94, as in the reference's figure. Its first layer is blurrier than the sharp
# recipe's. This is one seed; its recipe was fixed by the reference, not chosen on these probe
# sequences. The two timing records come from two different CPUs; in them the reference's recipe
# cost more than three times as long to train. So the reference chapter's map is what its own
# recipe gives. The sharp recipe gets close to it with a smaller model and fewer than a third of
# the steps (of twice the batch).
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
ref = json.loads(Path("data/ch18_seed_recipe.json").read_text())["runs"][0]
ref_cfg = TrainConfig(**ref["config"])
assert ref_cfg == SEED_RECIPE  # the recorded run used the reference's recipe, unchanged
assert ref["key"] == ref_cfg.key() and ref["seed"] == 0
for name, cfg, params in (
    ("SEED_RECIPE", ref_cfg, ref["parameters"]),
    ("SHARP_ATTENTION_RECIPE", SHARP_ATTENTION_RECIPE, count_parameters(model)),
):
    print(
        f"{name:>22}: d_model {cfg.d_model}, {cfg.num_heads} heads of d_k "
        f"{cfg.d_model // cfg.num_heads}, {cfg.max_steps} steps of batch {cfg.batch_size}, "
        f"{params:,} parameters"
    )
print(f"recorded with: {path_label(ref['numerics'])}")
for p in ref["points"][::3]:  # steps 312, 1248, 2184, 3120
    print(
        f"  step {p['step']:4d}: mirror {p['mirror'][0]:.3f} / {p['mirror'][-1]:.3f}, "
        f"<eos> peak {p['eos_peak'][0]:.1%} / {p['eos_peak'][-1]:.1%} (layer 0 / last layer)"
    )
ref_last = ref["points"][-1]
print(f"test exact match {ref['test']['exact_match']:.2%}")
ref_map = np.array(ref["maps"][-1]["weights"])  # last layer, mean of heads, on 7 3 0 9 5 1 8
on_ref = np.r_[np.fliplr(ref_map[:-1, :-1]).diagonal(), ref_map[-1, -1]]
digits_shown = " ".join(map(str, ref["maps"][-1]["digits"]))
print(f"its map of {digits_shown}: every mirrored weight >= {on_ref.min():.2f}")
print(f"sharp recipe, layer 0: mirror {final('sharp1000d15', layer=0):.3f}")
ref_run = json.loads(Path("data/seed_recipe_run.json").read_text())  # chapter 10's timing
print(
    f"training time with PyTorch's default kernels: SEED_RECIPE {ref_run['seconds_total']} s "
    f"({ref_run['numerics']['cpu']}), SHARP_ATTENTION_RECIPE {timing['median_seconds']['1']} s "
    f"({timing['numerics']['cpu']})"
)
assert ref["numerics"]["pinned"] and ref_last["step"] == SEED_RECIPE.max_steps
assert ref["maps"][-1]["layer"] == 1 and on_ref.min() > 0.94
assert ref_last["mirror"][-1] > 0.94 and ref_last["eos_peak"][-1] > 0.95
assert ref_last["mirror"][0] < 0.85 < final("sharp1000d15", layer=0)
assert ref_run["seconds_total"] > 3 * timing["median_seconds"]["1"]
assert 3 * SHARP_ATTENTION_RECIPE.max_steps < SEED_RECIPE.max_steps

# %% [markdown]
# ## 7. The default-init twin
#
# Chapter 12 showed what PyTorch's default initialisation does to this model. Its token
# embeddings, drawn from $\mathcal{N}(0, 1)$ and multiplied by $\sqrt{d_{model}}$, are several
# times louder relative to the positional encodings than with the book's initialisation. The
# model learns more slowly. The twin is `SHARP_ATTENTION_RECIPE` except `init="default"`: same
# data, seed, schedule and budget.
#
# The chapter reads the twin's record (`sharp1000d15default`, the purple line of Figure 18.4).
# The script measured it on the same 200 probe sequences, scored it on the test set, and stored
# its maps of `7 3 0 9 5 1 8`.
#
# :::{dropdown} Going deeper: tying the twin's record to this code
# The same check as for the sharp model (section 4): its first 100 steps, trained live, must
# match the record's point at step 100.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell", "nbval-ignore-output"]
twin_recipe = dataclasses.replace(SHARP_ATTENTION_RECIPE, init="default")
twin_run = runs[("sharp1000d15default", 0)]
check_first_100(twin_recipe, twin_run, "twin_step_100")

# %% [markdown]
# The record's last point, after all 1000 steps, next to the sharp model:

# %% tags=["nbval-ignore-output"]
final_point = twin_run["points"][-1]
twin_stats = {k: torch.tensor(final_point[k]) for k in ("mirror", "eos_peak", "neighbours")}
twin_maps = [AttentionMap(**{**m, "weights": np.array(m["weights"])}) for m in twin_run["maps"]]
report("sharp model", sharp)
report("default init", twin_stats)
twin_test = Interval(**twin_run["test"])
print(f"default init, test exact match: {twin_test}")
assert twin_maps[0].digits == digits and len(twin_maps) == n_layers


# uniform rows, for comparison: the share of the off-mirror weight that lands on the neighbours
def uniform_neighbours(k):  # k digits: mean weight a uniform row puts on the two neighbours
    cols = mirrored_columns(k)
    return np.mean([(int(c >= 1) + int(c + 1 <= k)) / (k + 1) for c in cols])


near_u = np.mean([uniform_neighbours(k) for k in n_p.tolist()])
share = {"uniform rows": near_u / (1 - uniform)}
for name, s in (("sharp model", sharp), ("default init", twin_stats)):
    off = 1 - s["mirror"][SHOWN]
    share[name] = s["neighbours"][SHOWN].item() / off
    print(
        f"{name:>14}: weight off the mirrored column {off:.2f}, of which on its two "
        f"neighbours {s['neighbours'][SHOWN]:.2f} ({share[name]:.0%})"
    )
print(
    f"  uniform rows: {1 - uniform:.2f} off the mirrored column, {share['uniform rows']:.0%} of it"
)
assert twin_test.exact_match < 0.5
assert twin_stats["mirror"][SHOWN] < 0.6 and twin_stats["mirror"][0] < 0.3
assert share["uniform rows"] < share["default init"] < 0.5 < share["sharp model"]

# %% [markdown]
# With the same recipe and budget, the twin learned far less: under half of the test sequences
# right. Its maps are blurred. Its last layer puts less than 0.6 on the mirrored position, its
# first layer less than 0.3, not far above uniform rows.
#
# :::{dropdown} Going deeper: not the reference chapter's default-init model
# The reference chapter's default-init model is the reference's own recipe with PyTorch's
# default initialisation, and it reached 0.60 exact match. The twin is the sharp recipe with the
# same initialisation, and it reaches under half. The reference says its model's rows are smeared
# over 2 to 3 neighbouring positions. For the twin that is only partly true. Of the weight it puts
# off the mirrored column, a larger share lands on the two neighbouring columns than uniform rows
# would put there. But that share is under half, and smaller than in the sharp model, whose
# little off-mirror weight sits mostly next door. Most of the twin's blur is further away.
# :::
#
# Figure 18.5 sets the two side by side on the input of Figure 18.1, every decoder layer.

# %% jupyter={"source_hidden": true} tags=["figure", "hide-input"]
fig, axes = plt.subplots(2, n_layers, figsize=(4.6 * n_layers, 7.6), squeeze=False)
for r, name in enumerate(("sharp model", "default init")):
    for layer in range(n_layers):
        amap = cross_attention(model, digits, layer=layer) if r == 0 else twin_maps[layer]
        plot_attention(amap, ax=axes[r, layer], annotate=True)
        axes[r, layer].set_title(f"{name}: layer {layer}, mean of heads", fontsize=10)
fig.suptitle(
    "Figure 18.5: SHARP_ATTENTION_RECIPE (top) and its default-init twin (bottom, recorded), "
    "on 7 3 0 9 5 1 8",
    fontsize=11,
)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Summary
#
# - `SHARP_ATTENTION_RECIPE` ($d_{model}$ 64, two heads of $d_k$ 32, dropout 0.15, twice the
#   learning rate, 1000 steps) gives a map close to the reference chapter's, below its 0.94:
#   with seed 0, at least 0.90 on the mirrored position and `<eos>` peaks in at least 90 % of
#   sequences in its last layer, on the probe set that chose it and on 1000 fresh sequences,
#   and over 99.9 % test exact match. Over three seeds it sits at the edge of both targets.
# - Measured over 200 probe sequences under teacher forcing, the book's model of chapter 10
#   reverses correctly with a blurred alignment: on average less than 0.7 of a row's weight
#   on the mirrored position, in every layer.
# - Recorded runs (one seed per lever, read against a three-seed band) show that three times
#   the book's training budget alone does not make the last layer sharp. Heads of $d_k = 32$
#   instead of 8 raise both numbers. Dropout 0.1 did for four heads, not for one. Label
#   smoothing took the `<eos>` peak to 0. Only one of these runs reached the reference's 0.94.
# - The reference chapter's own recipe, `SEED_RECIPE` (four heads of $d_k = 32$, ten epochs),
#   in one run (seed 0), puts more than 0.94 on the mirrored position in its last layer, as
#   the reference chapter shows. It took more than three times as long as the sharp recipe to
#   train.
# - The sharp recipe's twin with PyTorch's default initialisation learns far less, and its map
#   is blurred: some of the blur sits on neighbouring positions, most of it further away. It is
#   not the reference chapter's 0.60 default-init model, and the reference's "smeared over 2 to
#   3 neighbours" holds for it only in part.
# - The one thing to remember: a heatmap shows what one trained model does, not what the task
#   requires. An accurate model can have a blurred map; how sharp it is depends on the recipe.
#
# ## Exercises
#
# ### Exercise 18.1 (predict, then run): the columns of a perfect map
#
# For the source `4 1 1 7`, which column should each of the five rows of a perfect map peak on?
# And what would a map whose rows are uniform score as "mirror"? Predict, then check with
# `mirrored_columns`.

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
# Solution to exercise 18.1
cols = mirrored_columns(4)
print("rows <bos>, 7, 1, 1, 4 peak on columns", cols.tolist(), "(digits 7 1 1 4, then <eos>)")
uniform_map = torch.full((5, 5), 1 / 5)
score = uniform_map[torch.arange(5), torch.as_tensor(cols)].mean().item()
print(f"uniform rows put 1/5 on every column, so mirror = {score:.2f}")
assert cols.tolist() == [3, 2, 1, 0, 4] and abs(score - 0.2) < 1e-6

# %% [markdown]
# ### Exercise 18.2 (implement): the weight on the mirrored position
#
# Write `mirror_weight(weights, n)`: `weights` is one attention map `[n + 1, n + 1]` (rows
# `<bos>` and the $n$ reversed digits, columns the $n$ source digits and `<eos>`); return the
# mean over the rows of the weight on each row's mirrored column, one number. Then apply it to
# the sharp model's map `w` of section 1. `check_mirror_weight` compares your function with the
# book's on a perfect map, a uniform map and three random ones, and names the likely mistake.


# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 18.2
def mirror_weight(weights, n):
    rows = torch.arange(n + 1)
    cols = torch.tensor([n - 1 - i for i in range(n)] + [n])  # the anti-diagonal, then <eos>
    return weights[rows, cols].mean()


print(f"sharp model, last layer, 7 3 0 9 5 1 8: {mirror_weight(w, len(digits)):.1f}")
check_mirror_weight(mirror_weight)

# %% [markdown]
# ### Exercise 18.3 (implement): how spread out is a row?
#
# The entropy of a row, $-\sum_j w_j \log_2 w_j$ bits, is 0 for a one-hot row and
# $\log_2 L_s$ for a uniform one. Write `row_entropy_bits(weights)` for a tensor of any shape
# `[..., L_s]` returning `[...]`, with $0 \log 0 = 0$. Then compare the mean row entropy of the
# last layer (mean of heads) of the sharp model and of its default-init twin (its recorded map,
# `twin_maps`) on `7 3 0 9 5 1 8`. `check_row_entropy` tests one-hot rows, uniform rows and a
# random batch.


# %% jupyter={"source_hidden": true} tags=["hide-input", "nbval-ignore-output"]
# Solution to exercise 18.3
def row_entropy_bits(weights):
    return -torch.special.xlogy(weights, weights).sum(dim=-1) / torch.log(torch.tensor(2.0))


entropy = {}
for name, amap_m in (
    ("sharp model", cross_attention(model, digits, layer=SHOWN)),
    ("default init", twin_maps[SHOWN]),
):
    entropy[name] = row_entropy_bits(torch.from_numpy(amap_m.weights)).mean().item()
    print(f"{name:>12}: mean row entropy {entropy[name]:.2f} bits (uniform rows: 3)")
assert entropy["sharp model"] < entropy["default init"] < 3
check_row_entropy(row_entropy_bits)
