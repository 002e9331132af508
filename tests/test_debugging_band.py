"""compare_with_band on synthetic histories: a run like the seeds is inside; each way of leaving
the band gets its own reading; the margin comes from the seeds held out in turn."""

import math

import numpy as np
import pytest

from helpers.debugging import compare_with_band, training_band
from helpers.debugging.band import FACTORS, NEIGHBOURS, WINDOW, held_out_outside, measured_factor

STEPS, EVERY = 200, 10


def curve(seed, scale=1.0):
    """A loss falling from ~2.8 to ~0.05 with per-step noise; exact match rising late."""
    rng = np.random.default_rng(seed)
    t = np.arange(1, STEPS + 1)
    loss = scale * (0.05 + 2.75 * np.exp(-t / 40)) * np.exp(rng.normal(0, 0.05, STEPS))
    em = 1 / (1 + np.exp(-(t[EVERY - 1 :: EVERY] - 120) / 15)) + rng.normal(0, 0.01, STEPS // EVERY)
    return loss.tolist(), np.clip(em, 0, 1).tolist()


def record(seeds=range(1, 7)):
    runs = []
    for s in seeds:
        loss, em = curve(s)
        runs.append({"seed": s, "loss": loss, "exact_match": em})
    return {"steps": STEPS, "eval_every": EVERY, "runs": runs}


@pytest.fixture(scope="module")
def band():
    return training_band(record())


def history(loss, em=None):
    h = {"loss": list(loss)}
    if em is not None:
        h["eval_step"] = list(range(EVERY, EVERY * len(em) + 1, EVERY))
        h["exact_match"] = list(em)
    return h


def test_another_seed_is_inside(band):
    loss, em = curve(42)
    rep = compare_with_band(history(loss, em), band, verbose=False)
    assert rep.ok, str(rep)
    assert "inside the band" in str(rep)
    assert rep.compared_to == STEPS


def test_every_seed_of_the_band_is_inside(band):
    for s in range(1, 7):
        loss, em = curve(s)
        assert compare_with_band(history(loss, em), band, verbose=False).ok


def test_a_loss_that_explodes_reads_as_a_learning_rate_too_high(band):
    loss = [3.0, 20.0, 40.0] + [45.0] * 57
    rep = compare_with_band(history(loss), band, verbose=False)
    assert (rep.loss_left, rep.loss_side) == (10, "above")
    assert "learning rate is too high" in str(rep)


def test_a_flat_loss_reads_as_optimiser_or_labels(band):
    rep = compare_with_band(history([2.9] * 100), band, verbose=False)
    assert rep.loss_side == "above"
    assert "not falling" in str(rep) and "opt.step()" in str(rep)


def test_a_loss_above_from_the_start_reads_as_the_schedule(band):
    loss, _ = curve(42, scale=1.0)
    slow = [x * 1.8 if i < 30 else 2.0 * x for i, x in enumerate(loss)]
    slow[0:30] = [2.8 * 1.8 - 0.02 * i for i in range(30)]  # falls, but slowly, from above
    rep = compare_with_band(history(slow[:60]), band, verbose=False)
    assert rep.loss_left == WINDOW and rep.loss_side == "above"
    assert "from the start" in str(rep)


def test_a_late_rise_reads_as_too_high_a_rate_late(band):
    loss, _ = curve(42)
    late = loss[:100] + [x * 5 for x in loss[100:]]
    rep = compare_with_band(history(late), band, verbose=False)
    assert rep.loss_side == "above" and rep.loss_left > 2 * WINDOW
    assert "followed the band, then rose" in str(rep)


def test_a_loss_far_below_with_exact_match_stuck_reads_as_copying(band):
    loss = [2.8 * math.exp(-t / 3) + 1e-4 for t in range(STEPS)]
    rep = compare_with_band(history(loss, [0.0] * (STEPS // EVERY)), band, verbose=False)
    assert rep.loss_side == "below" and rep.em_side == "below"
    assert "copies the token" in str(rep)


def test_exact_match_stuck_with_a_healthy_loss_reads_as_the_evaluation(band):
    loss, _ = curve(42)
    rep = compare_with_band(history(loss, [0.0] * (STEPS // EVERY)), band, verbose=False)
    assert rep.loss_left is None and rep.em_side == "below"
    assert "evaluation differs from training" in str(rep)


def test_a_loss_back_at_its_start_midway_is_above_the_band(band):
    loss, em = curve(42)
    loss[100:140] = [3.0] * 40  # diverged back to the untrained loss for 40 steps
    rep = compare_with_band(history(loss, em), band, verbose=False)
    assert (rep.loss_left, rep.loss_side) == (110, "above")
    assert np.all(band.loss_high <= band.loss_high[0])


def test_a_single_spike_is_not_leaving_the_band(band):
    loss, em = curve(42)
    loss[50:60] = [40.0] * 10  # one window far above, the next back inside
    assert compare_with_band(history(loss, em), band, verbose=False).loss_left is None


def test_the_margin_comes_from_the_seeds_held_out():
    flat = {"steps": 20, "eval_every": 10}
    runs = [{"seed": s, "loss": [1.0] * 20, "exact_match": [0.5, 0.5]} for s in range(4)]
    runs.append({"seed": 9, "loss": [10.0] * 20, "exact_match": [0.6, 0.6]})
    b = training_band({**flat, "runs": runs}, factor=2.0)
    # held out, the last seed is 1 decade above the others and 0.1 above their exact match
    assert b.loss_margin == pytest.approx([2.0 * 1.0] * 2)
    assert b.em_margin == pytest.approx([2.0 * 0.1] * 2)
    assert b.loss_high[0] == pytest.approx(10.0 * 10 ** b.loss_margin[0])
    assert b.seeds == (0, 1, 2, 3, 9)


def test_the_margin_is_local():
    n = 40
    runs = [{"seed": s, "loss": [1.0] * 10 * n, "exact_match": [0.5] * n} for s in range(4)]
    late = [1.0] * 10 * (n - 10) + [100.0] * 100  # one seed 2 decades above, late only
    runs.append({"seed": 9, "loss": late, "exact_match": [0.5] * n})
    b = training_band({"steps": 10 * n, "eval_every": 10, "runs": runs}, factor=2.0)
    assert b.loss_margin[-1] == pytest.approx(2.0 * 2.0)
    assert b.loss_margin[: n - 10 - NEIGHBOURS] == pytest.approx([0.0] * (n - 10 - NEIGHBOURS))


def test_the_factor_is_the_smallest_that_keeps_every_held_out_seed_inside():
    rec = record()
    factor = measured_factor(rec)
    assert factor in FACTORS and not held_out_outside(rec, factor)
    smaller = [f for f in FACTORS if f < factor]
    assert all(held_out_outside(rec, f) for f in smaller)
    assert training_band(rec).factor == factor


def test_an_outlying_seed_raises_the_factor():
    def run(seed, level, late=None):
        loss = [level] * 300 + [late or level] * 100
        return {"seed": seed, "loss": loss, "exact_match": [0.5] * 40}

    calm = [run(s, 1.0) for s in range(4)] + [run(4, 2.0), run(5, 2.0)]
    rec = {"steps": 400, "eval_every": 10, "runs": calm}
    assert measured_factor(rec) == FACTORS[0] == 1.0  # each level is held by two seeds
    wild = run(9, 2.0, late=8.0)  # late, 0.6 decade above every other seed
    assert measured_factor({**rec, "runs": calm + [wild]}) > FACTORS[0]


def test_too_short_a_history_is_a_clear_error(band):
    with pytest.raises(ValueError, match="at least 10 steps"):
        compare_with_band(history([2.5] * 9), band, verbose=False)


def test_the_books_band_has_enough_seeds():
    b = training_band()
    assert len(b.seeds) >= 5 and 0 not in b.seeds  # seed 0 is the book's own model
    assert np.all(b.loss_low < b.loss_high) and np.all(b.em_low <= b.em_high)
    assert b.loss_high[0] > b.loss_low[-1] * 10  # the loss falls by more than a decade
