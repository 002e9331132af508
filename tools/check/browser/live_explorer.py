"""Chapter 21's live explorer in the HTML book: the trained model run in the page's own
JavaScript (book_assets/book_model.js), compared with PyTorch on the same weights."""

from __future__ import annotations

import functools
import math
from pathlib import Path

from tools.check.browser.devtools import CDP, Script
from tools.check.browser.report import log

EXPLORER = Script(Path(__file__).with_name("live_explorer.js"))
MODELS = ("book", "sharp", "twin")
PER_LENGTH = 200  # inputs of each length 3..12 (the task's lengths); all of 1 and 2 digits
LOGIT_TOL = 1e-4
# the page's erf is compared with math.erf on [-7, 7] in steps of 0.005
ERF_GRID = [round(-7 + 0.005 * k, 3) for k in range(2801)]


def blues_rgb(v: float) -> tuple[int, int, int]:
    """matplotlib's Blues at v (what helpers.plot_attention draws), as 0-255 integers."""
    from matplotlib import colormaps

    return tuple(round(255 * c) for c in colormaps["Blues"](v)[:3])


def live_inputs() -> tuple[list[list[int]], list[int]]:
    """(inputs, indices of those whose logits are compared): every input of 1 and 2 digits
    and 200 random ones (seeded) of each length 3 to 12; logits for 3 of each length."""
    import numpy as np

    rng = np.random.default_rng(29)
    inputs = [[d] for d in range(10)] + [[a, b] for a in range(10) for b in range(10)]
    for n in range(3, 13):
        inputs += [rng.integers(0, 10, n).tolist() for _ in range(PER_LENGTH)]
    inputs.insert(0, [7, 3, 0, 9, 5, 1, 8])  # the chapter's example first
    logits, seen = [], {}
    for i, d in enumerate(inputs):
        if seen.get(len(d), 0) < 3:
            logits.append(i)
            seen[len(d)] = seen.get(len(d), 0) + 1
    return inputs, logits


@functools.cache
def live_reference(static: Path) -> dict:
    """PyTorch's greedy tokens (helpers.greedy_decode) and the logits of every step, for every
    input of live_inputs, from the weights files the page loads (the exporter's unit test
    proves those files hold the checkpoints bit for bit): no model is trained here."""
    import torch

    from helpers import encode_digits, greedy_decode
    from helpers.core.vocab import EOS_ID
    from tools.build.export_live_models import model_from_file

    inputs, logit_ids = live_inputs()
    ref = {}
    with torch.no_grad():
        for mid in MODELS:
            model = model_from_file(static / f"weights_{mid}.js")
            tokens: list = [None] * len(inputs)
            for n in sorted({len(d) for d in inputs}):  # a batch per length: no padding
                rows = [i for i, d in enumerate(inputs) if len(d) == n]
                src = torch.cat([encode_digits(inputs[i]) for i in rows])
                for i, row in zip(rows, greedy_decode(model, src).tolist()):
                    # a finished row is padded while others decode: cut after its <eos>
                    tokens[i] = row[: row.index(EOS_ID) + 1] if EOS_ID in row else row
            logits = {}
            for i in logit_ids:
                memory, mask = model.encode(encode_digits(inputs[i]))
                tgt_in = torch.tensor([tokens[i][:-1]])
                logits[i] = model.decode(tgt_in, memory, mask, need_weights=False)[0][0]
            ref[mid] = {"tokens": tokens, "logits": logits}
    return ref


def check_live_explorer(page: CDP, static: Path) -> list[str]:
    """Proves that the live explorer on the loaded page starts, labels its controls, draws the
    step and the map, steps forward and back with a growing KV cache, and shows a cell's
    weight (in matplotlib's Blues) on focus; that it decodes as PyTorch does (the tokens of
    every input, the logits of every step of some, erf as math.erf); and that an invalid input
    gets a plain message. `static` is the book's _static folder (the weights files)."""
    try:
        state = page.wait_for(
            EXPLORER("state"),
            timeout=30,
            until=lambda s: s["found"] is False or s["state"] in ("ready", "failed"),
        )
    except TimeoutError as err:
        return [f"live explorer: not ready ({err})"]
    if not state.get("found"):
        return ["no live explorer (.html-attention-explorer) on the page"]
    if state["state"] != "ready":
        return [f"live explorer did not start: {state}"]
    return interface_problems(page, state) + decoding_problems(page, static) + input_problems(page)


def interface_problems(page: CDP, first: dict) -> list[str]:
    """The drawn explorer (its state `first`): labels, buttons, bars and heatmaps; Step, Back
    and the KV cache; a focused cell's fill, tooltip and ArrowRight."""
    problems: list[str] = []
    bad = [name for name, ok in first["labels"] if not ok]
    if len(first["labels"]) != 4 or bad:
        problems.append(f"explorer controls not all labelled: {first['labels']}")
    if not all(first["buttons"]):
        problems.append(f"a button without text: {first['buttons']}")
    if first["bars"] != 13 or not first["step_cells"] or not first["map_cells"]:
        problems.append(f"explorer did not draw bars and heatmaps: {first}")
    page.evaluate(EXPLORER("click", "step"))
    page.evaluate(EXPLORER("click", "step"))
    stepped = page.evaluate(EXPLORER("state"))
    if stepped["status"] == first["status"] or stepped["map_cells"] <= first["map_cells"]:
        problems.append(f"Step did not advance: {first['status']!r} -> {stepped['status']!r}")
    if stepped["kv"] == first["kv"]:
        problems.append("the KV cache did not grow with a step")
    page.evaluate(EXPLORER("click", "back"))
    back = page.evaluate(EXPLORER("state"))
    if back["map_cells"] >= stepped["map_cells"]:
        problems.append("Back did not go back a step")
    cell = page.evaluate(EXPLORER("focusCell", 0, 1))
    drawn = tuple(int(x) for x in cell["fill"][4:-1].split(","))
    want = blues_rgb(float(cell["weight"]))
    if max(abs(a - b) for a, b in zip(drawn, want)) > 3:
        problems.append(f"cell fill {drawn}, matplotlib's Blues {want}")
    if not (
        cell["focused"] and cell["tip_shown"] and f"{float(cell['weight']):.3f}" in cell["tip"]
    ):
        problems.append(f"focused cell's tooltip {cell['tip']!r} lacks its weight")
    if cell["after_right"] != "0,2":
        problems.append(f"ArrowRight from (0, 1) focused {cell['after_right']}")
    return problems


def decoding_problems(page: CDP, static: Path) -> list[str]:
    """Every model decodes every input of live_inputs in the page: its tokens must be
    greedy_decode's, the logits of every step within LOGIT_TOL of PyTorch's, its erf
    math.erf's to 1e-14."""
    problems: list[str] = []
    inputs, logit_ids = live_inputs()
    got = page.evaluate(
        EXPLORER("decodeAll", inputs, logit_ids, list(MODELS), ERF_GRID), timeout=300
    )
    ref = live_reference(static)
    erf_gap = max(abs(a - math.erf(x)) for a, x in zip(got["erf"], ERF_GRID))
    if erf_gap > 1e-14:
        problems.append(f"the page's erf differs from math.erf by {erf_gap:.1e}")
    worst = 0.0
    for mid in MODELS:
        same = sum(a == b for a, b in zip(got[mid]["tokens"], ref[mid]["tokens"]))
        if same != len(inputs):
            i = next(
                k for k, (a, b) in enumerate(zip(got[mid]["tokens"], ref[mid]["tokens"])) if a != b
            )
            problems.append(
                f"{mid}: {len(inputs) - same} of {len(inputs)} inputs decode otherwise than "
                f"greedy_decode, e.g. {inputs[i]}: page {got[mid]['tokens'][i]}, "
                f"PyTorch {ref[mid]['tokens'][i]}"
            )
        gap = 0.0
        for i in logit_ids:
            mine, theirs = got[mid]["logits"][i], ref[mid]["logits"][i]
            if len(mine) != theirs.shape[0]:
                gap = math.inf
                continue
            gap = max(
                gap, max(abs(a - b) for r, s in zip(mine, theirs.tolist()) for a, b in zip(r, s))
            )
        worst = max(worst, gap)
        log(
            f"  live explorer, {mid}: {same} of {len(inputs)} inputs (all of 1 and 2 digits, "
            f"{PER_LENGTH} of each length 3-12) decode to greedy_decode's tokens; logits "
            f"of every step of {len(logit_ids)} inputs: max abs difference {gap:.2e}; "
            f"{got[mid]['ms']:.2f} ms per decode in the page"
        )
    if worst > LOGIT_TOL:
        problems.append(f"logits differ from PyTorch's by {worst:.2e} > {LOGIT_TOL}")
    log(f"  live explorer: erf against math.erf on {len(ERF_GRID)} points: max gap {erf_gap:.1e}")
    return problems


def input_problems(page: CDP) -> list[str]:
    """Another model, then invalid inputs (each must get a message and no heatmap), then a
    valid one again (drawn)."""
    problems: list[str] = []
    page.evaluate(EXPLORER("set", "model", "sharp", "change"))
    sharp = page.wait_for(
        EXPLORER("state"),
        timeout=30,
        until=lambda s: s["state"] == "ready" and s["model"] == "sharp",
    )
    for bad_text in ("12a", "1234567890123", ""):
        page.evaluate(EXPLORER("set", "digits", bad_text, "input"))
        try:
            msg = page.wait_for(
                EXPLORER("state"),
                timeout=10,
                until=lambda s: s["state"] == "invalid" and s["message"],
            )
        except TimeoutError:
            problems.append(f"invalid input {bad_text!r}: no message")
            continue
        if msg["step_cells"] or msg["bars"]:
            problems.append(f"invalid input {bad_text!r} left a heatmap drawn")
        log(f"  invalid input {bad_text!r} -> {msg['message']!r}")
    page.evaluate(EXPLORER("set", "digits", "5281", "input"))
    again = page.wait_for(
        EXPLORER("state"), timeout=10, until=lambda s: s["state"] == "ready" and not s["message"]
    )
    log(
        f"  explorer: {sharp['model']} model drawn ({sharp['step_cells']} cells at a step); "
        f"after the invalid inputs, 5281 -> {again['status']!r}"
    )
    if not again["status"] or not again["step_cells"]:
        problems.append(f"a valid input after the invalid ones did not draw: {again}")
    return problems
