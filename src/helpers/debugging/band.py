"""Is my run healthy? The band of the book's training curve, and a reader's run held against it.

The band comes from chapters/data/training_band.json (tools/record/training_band.py): the book's
recipe (BOOK_RECIPE) trained from scratch with several seeds, the loss of every step and the
validation exact match every 10 steps. Used in chapter 17; the Experiments page "The training
band" shows it.

The loss is compared in windows of WINDOW steps (the mean loss of steps k-9..k), on a log
scale; the exact match at the steps where it was recorded. At each point the band runs from the
lowest to the highest seed, widened by a margin measured on the seeds themselves: each seed is
held out in turn and compared with the band of the others, and the margin at a point is a
factor times the largest distance by which a held-out seed left that band within NEIGHBOURS
points either side (the runs spread little early and much more in the middle, so one margin
for all points would be too wide early or too narrow in the middle). The upper edge never
rises above its value at the first point: a run back at the loss of its first steps has undone
its training. The factor is measured too (measured_factor): the smallest of FACTORS at which
every seed, held out, stays inside the band that the other seeds make with that factor. A new
run, such as the book's recipe on another CPU (other low bits, another trajectory), is treated
like one more seed; the record's "check" seeds, kept out of the band, measure how often such a
run leaves it. A run leaves the band at a point only if it is also out at the next point (on
the same side): one spike is not a trend, and the held-out margin is measured with the same
rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from helpers.analysis.experiments import load_record
from helpers.core.vocab import VOCAB_SIZE

WINDOW = 10
FACTORS = tuple(1 + 0.5 * i for i in range(9))  # 1, 1.5, ..., 5: the factors measured_factor tries
NEIGHBOURS = 5
RECORD = "training_band"


def _windows(loss, n_windows: int) -> np.ndarray:
    """Mean loss of steps 1-10, 11-20, ... (only complete windows, at most n_windows)."""
    x = np.asarray(loss, dtype=float)
    k = min(len(x) // WINDOW, n_windows)
    return x[: k * WINDOW].reshape(k, WINDOW).mean(axis=1)


def _lasting(excess: np.ndarray) -> np.ndarray:
    """Per point, the excess that lasts: the smaller of this point's and the next one's (the
    last point stands alone). A single-point spike does not count as leaving the band."""
    nxt = np.append(excess[1:], excess[-1:])
    return np.minimum(excess, nxt)


def _held_out_margin(curves: np.ndarray, factor: float) -> np.ndarray:
    """Per point: `factor` times the largest lasting distance by which one curve leaves the
    min-max band of the others, at this point or within NEIGHBOURS points of it."""
    worst = np.zeros(curves.shape[1])
    for i in range(curves.shape[0]):
        others = np.delete(curves, i, axis=0)
        above = _lasting(curves[i] - others.max(axis=0))
        below = _lasting(others.min(axis=0) - curves[i])
        worst = np.maximum(worst, np.maximum(above, below).clip(min=0))
    n = worst.size
    near = [worst[max(0, t - NEIGHBOURS) : t + NEIGHBOURS + 1].max() for t in range(n)]
    return factor * np.asarray(near)


@dataclass(frozen=True)
class TrainingBand:
    """The band: per window end `steps`, log10-loss bounds; per `em_steps`, exact-match bounds.

    Built in chapter 17 from the record (training_band()).
    """

    steps: np.ndarray
    log_loss_low: np.ndarray
    log_loss_high: np.ndarray
    em_steps: np.ndarray
    em_low: np.ndarray
    em_high: np.ndarray
    loss_margin: np.ndarray  # per point, log10 units, added on each side
    em_margin: np.ndarray  # per point, exact-match units, added on each side
    seeds: tuple
    ln_v: float
    factor: float  # the margin's factor (measured_factor, unless given)

    @property
    def loss_low(self) -> np.ndarray:
        return 10**self.log_loss_low

    @property
    def loss_high(self) -> np.ndarray:
        return 10**self.log_loss_high


def _history(run: dict, eval_every: int) -> dict:
    """A recorded run as compare_with_band reads a history."""
    steps = list(range(eval_every, eval_every * len(run["exact_match"]) + 1, eval_every))
    return {"loss": run["loss"], "eval_step": steps, "exact_match": run["exact_match"]}


def held_out_outside(record: dict, factor: float) -> list:
    """The seeds that, held out, leave the band the other seeds make with `factor`.

    Used on the Experiments page "The training band" and by measured_factor.
    """
    runs = record["runs"]
    outside = []
    for i, run in enumerate(runs):
        others = training_band({**record, "runs": runs[:i] + runs[i + 1 :]}, factor=factor)
        rep = compare_with_band(_history(run, record["eval_every"]), others, verbose=False)
        if not rep.ok:
            outside.append(run["seed"])
    return outside


def measured_factor(record: dict) -> float:
    """The smallest of FACTORS at which no seed, held out, leaves the band of the others (the
    largest of FACTORS if none does). Used by training_band; shown on the Experiments page."""
    for factor in FACTORS:
        if not held_out_outside(record, factor):
            return factor
    return FACTORS[-1]


def training_band(record: dict | None = None, factor: float | None = None) -> TrainingBand:
    """The band of the book's training curve, from the record (default: training_band.json).

    The margin's factor is measured_factor(record) unless given. Used in chapter 17 and on the
    Experiments page "The training band".
    """
    if record is None:
        record = load_record(RECORD)
    if factor is None:
        factor = measured_factor(record)
    runs = record["runs"]
    n_windows = record["steps"] // WINDOW
    logs = np.log10(np.stack([_windows(r["loss"], n_windows) for r in runs]))
    em = np.asarray([r["exact_match"] for r in runs], dtype=float)
    loss_margin = _held_out_margin(logs, factor)
    em_margin = _held_out_margin(em, factor)
    # a healthy run never climbs back to the loss of its first steps: the upper edge never
    # rises above where it starts (where the margin is wide, in the middle, this is the edge)
    log_loss_high = np.minimum(logs.max(axis=0) + loss_margin, logs.max(axis=0)[0] + loss_margin[0])
    return TrainingBand(
        steps=WINDOW * np.arange(1, n_windows + 1),
        log_loss_low=logs.min(axis=0) - loss_margin,
        log_loss_high=log_loss_high,
        em_steps=record["eval_every"] * np.arange(1, em.shape[1] + 1),
        em_low=(em.min(axis=0) - em_margin).clip(0, 1),
        em_high=(em.max(axis=0) + em_margin).clip(0, 1),
        loss_margin=loss_margin,
        em_margin=em_margin,
        seeds=tuple(r["seed"] for r in runs),
        ln_v=math.log(VOCAB_SIZE),
        factor=float(factor),
    )


@dataclass
class BandReport:
    """What compare_with_band found: where the run left the band, and what that usually means.

    Built in chapter 17. .ok: the run stayed inside the band at every point compared.
    """

    loss_left: int | None = None  # the first window end (step) outside the band
    loss_side: str | None = None  # "above" / "below"
    em_left: int | None = None
    em_side: str | None = None
    compared_to: int = 0  # the last step compared
    lines: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.loss_left is None and self.em_left is None

    def __str__(self) -> str:
        return "\n".join(self.lines)

    __repr__ = __str__


def _first_out(values, low, high):
    """The first point outside the band that stays out at the next point (or is the last)."""
    v, low, high = np.asarray(values, dtype=float), np.asarray(low), np.asarray(high)
    if v.size == 0:
        return None, None
    above, below = _lasting(v - high) > 0, _lasting(low - v) > 0
    for i in range(v.size):
        if above[i]:
            return i, "above"
        if below[i]:
            return i, "below"
    return None, None


def compare_with_band(history: dict, band: TrainingBand | None = None, verbose=True) -> BandReport:
    """Hold a run's history against the band of the book's training curve; print and return it.

    Built in chapter 17. history: a dict with "loss" (one value per step, from step 1) and,
    optionally, "eval_step" and "exact_match" (validation exact match), as train_reversal
    returns it. Compares the mean loss of each complete 10-step window up to the band's last
    step, and the exact match at the band's steps; says where the run first leaves the band and
    what that usually means. A run that trains another recipe than BOOK_RECIPE has another band.
    """
    band = band or training_band()
    rep = BandReport()
    loss = _windows(history["loss"], len(band.steps))
    if len(loss) == 0:
        raise ValueError(f"the history needs at least {WINDOW} steps of loss to compare")
    log_loss = np.log10(np.maximum(loss, 1e-12))
    n = len(loss)
    rep.compared_to = int(band.steps[n - 1])
    i, side = _first_out(log_loss, band.log_loss_low[:n], band.log_loss_high[:n])
    if i is not None:
        rep.loss_left, rep.loss_side = int(band.steps[i]), side

    em_at = dict(zip(history.get("eval_step", []), history.get("exact_match", [])))
    em_idx = [k for k, s in enumerate(band.em_steps) if int(s) in em_at]
    em_vals = [em_at[int(band.em_steps[k])] for k in em_idx]
    j, em_side = _first_out(em_vals, band.em_low[em_idx], band.em_high[em_idx])
    if j is not None:
        rep.em_left, rep.em_side = int(band.em_steps[em_idx[j]]), em_side

    lines = rep.lines
    lines.append(
        f"compared with the band of {len(band.seeds)} seeds: the loss over steps 1-"
        f"{rep.compared_to} ({n} windows of {WINDOW}), the exact match at {len(em_idx)} steps"
    )
    if rep.ok:
        lines.append("inside the band everywhere: the run looks like the book's runs")
    if rep.loss_left is not None:
        k = rep.loss_left // WINDOW - 1
        lines.append(
            f"loss leaves the band {rep.loss_side} it at step {rep.loss_left}: {loss[k]:.3g} "
            f"where the band is {band.loss_low[k]:.3g}-{band.loss_high[k]:.3g}"
        )
        lines.append("  usually: " + _loss_meaning(rep, loss, band))
    if rep.em_left is not None:
        k = list(band.em_steps).index(rep.em_left)
        lines.append(
            f"exact match leaves the band {rep.em_side} it at step {rep.em_left}: "
            f"{em_at[rep.em_left]:.3f} where the band is {band.em_low[k]:.3f}-{band.em_high[k]:.3f}"
        )
        lines.append("  usually: " + _em_meaning(rep))
    if verbose:
        print(rep)
    return rep


def _loss_meaning(rep: BandReport, loss: np.ndarray, band: TrainingBand) -> str:
    if rep.loss_side == "below":
        return (
            "faster than the book's runs. Far below early on, the decoder may see the token it "
            "predicts (labels not shifted, or no causal mask): check the exact match"
        )
    if loss.max() > 2 * band.ln_v:
        return (
            f"the loss rose far above ln V = {band.ln_v:.2f} (up to {loss.max():.3g}): the "
            "learning rate is too high (no warmup, the schedule forgotten), or the run diverges"
        )
    if loss[-1] > 0.8 * loss[0]:
        return (
            f"the loss is not falling (first window {loss[0]:.2f}, last {loss[-1]:.2f}, "
            f"ln V = {band.ln_v:.2f}): the optimiser does not step (opt.step() missing, or "
            "zero_grad() between backward() and step()), or the labels do not belong to the inputs"
        )
    if rep.loss_left <= 2 * WINDOW:
        return (
            "above the band from the start: the learning rate or its schedule (no warmup, a rate "
            "too high or too low), or the initialisation"
        )
    return (
        "it followed the band, then rose above it: the learning rate is too high for this "
        "stage (no decay or cooldown), or the run is diverging (look for NaN)"
    )


def _em_meaning(rep: BandReport) -> str:
    if rep.em_side == "above":
        return "ahead of the book's runs"
    if rep.loss_left is None:
        return (
            "the loss is in the band but the score is not: the evaluation differs from training "
            "(eval() forgotten, another shift or mask when scoring, <eos> not handled)"
        )
    if rep.loss_side == "below":
        return (
            "the loss fell faster than the band while the score lags: the model learns another "
            "task, most often labels equal to the inputs (it copies the token it sees)"
        )
    return "the score follows the loss: fix the loss first"
