"""helpers.experiments (the Experiments pages' statistics) and
helpers.repro.numerics.assert_within_measured_spread (the one call a chapter makes for a bound)."""

import math

import numpy as np
import pytest

import helpers.repro.numerics as numerics
from helpers.analysis.experiments import (
    compare_arms,
    mcnemar_exact,
    mean_interval,
    pack_bits,
    t_quantile,
    unpack_bits,
)


def test_bits_round_trip_any_length():
    rng = np.random.default_rng(0)
    for n in (1, 7, 8, 9, 10_000):
        bits = rng.random(n) < 0.7
        assert unpack_bits(pack_bits(bits), n).tolist() == bits.tolist()
    with pytest.raises(ValueError, match="fewer than n"):
        unpack_bits(pack_bits([True] * 8), 9)


def test_mcnemar_matches_the_binomial_by_hand():
    # 10 sequences only A gets right, 2 only B: p = 2 P(X <= 2), X ~ Bin(12, 1/2)
    a = [True] * 10 + [False] * 2 + [True] * 50 + [False] * 5
    b = [False] * 10 + [True] * 2 + [True] * 50 + [False] * 5
    result = mcnemar_exact(a, b)
    assert (result.only_a, result.only_b) == (10, 2)
    assert result.p_value == pytest.approx(2 * (1 + 12 + 66) / 4096, rel=1e-12)
    assert mcnemar_exact(b, a).p_value == pytest.approx(result.p_value)
    assert mcnemar_exact(a, a).p_value == 1.0  # no discordant pair
    balanced = mcnemar_exact([True, False] * 50, [False, True] * 50)
    assert balanced.p_value == 1.0  # capped: 2 P(X <= 50) > 1 for n = 100
    big = mcnemar_exact([True] * 3000 + [False] * 2000, [False] * 3000 + [True] * 2000)
    assert 0 < big.p_value < 1e-40  # thousands of pairs, no overflow
    with pytest.raises(ValueError):
        mcnemar_exact([True], [True, False])


def test_mean_interval_is_the_t_interval():
    x = [1.0, 2.0, 3.0, 4.0, 5.0]
    m = mean_interval(x)
    half = 2.776 * math.sqrt(2.5) / math.sqrt(5)
    assert (m.mean, m.low, m.high, m.n) == pytest.approx((3.0, 3.0 - half, 3.0 + half, 5))
    assert t_quantile(1) == 12.706 and t_quantile(100) == 1.96
    with pytest.raises(ValueError):
        mean_interval([1.0])


def record(arms: dict, n: int) -> dict:
    return {
        "test_set": {"seed": 0, "n": n},
        "arms": {
            name: [{"seed": s, "correct_bits": pack_bits(bits)} for s, bits in runs.items()]
            for name, runs in arms.items()
        },
    }


def test_compare_arms_verdicts():
    rng = np.random.default_rng(1)
    n = 2000
    strong = {s: rng.random(n) < 0.95 for s in range(5)}
    weak = {s: rng.random(n) < 0.85 for s in range(5)}
    same = {s: rng.random(n) < 0.95 for s in range(5)}
    rec = record({"strong": strong, "weak": weak, "same": same}, n)
    c = compare_arms(rec, "strong", "weak")
    assert c.seeds == (0, 1, 2, 3, 4) and c.verdict.startswith("A is better")
    assert compare_arms(rec, "weak", "strong").verdict.startswith("B is better")
    assert compare_arms(rec, "strong", "same").verdict == "not distinguishable with 5 seeds"
    few = record({"a": {0: strong[0], 1: strong[1]}, "b": {0: weak[0], 1: weak[1]}}, n)
    assert compare_arms(few, "a", "b").verdict.startswith("no conclusion: 2 seeds")
    with pytest.raises(ValueError, match="share 1 seeds"):
        compare_arms(record({"a": {0: strong[0]}, "b": {0: weak[0]}}, n), "a", "b")


SPREAD = {
    "results": {
        "pinned": {"numerics": {}, "book": {"test_correct": 9900, "mirror": [0.5, 0.6]}},
        "other": {"numerics": {}, "book": {"test_correct": 9950, "mirror": [0.5, 0.62]}},
    }
}


def test_assert_within_measured_spread(monkeypatch):
    monkeypatch.setattr(numerics, "kernel_spread", lambda path=None: SPREAD)
    monkeypatch.setattr(numerics, "pin_problems", lambda *a, **k: ["not pinned"])
    # off the pin: twice the largest gap between paths (0.005 as a share), at least 0.005
    allowed = numerics.assert_within_measured_spread("book.test_correct", 0.995, scale=1e-4)
    assert allowed == pytest.approx(0.01)
    with pytest.raises(AssertionError, match="more than the 0.01"):
        numerics.assert_within_measured_spread("book.test_correct", 0.975, scale=1e-4)
    assert numerics.assert_within_measured_spread("book.mirror", 0.63, index=1) == pytest.approx(
        0.04
    )
    with pytest.raises(AssertionError):
        numerics.assert_within_measured_spread("book.mirror", 0.7, index=1)
    with pytest.raises(KeyError, match="known: book.mirror, book.test_correct"):
        numerics.assert_within_measured_spread("book.nope", 1.0)
    # on the pin, with the book's bits: only the record's rounding
    monkeypatch.setattr(numerics, "pin_problems", lambda *a, **k: [])
    monkeypatch.setattr(numerics, "compare_fingerprint", lambda mine, book: [])
    monkeypatch.setattr(numerics, "fingerprint", lambda: {})
    monkeypatch.setattr(numerics, "book_fingerprint", lambda: {})
    with pytest.raises(AssertionError):
        numerics.assert_within_measured_spread("book.test_correct", 0.9902, scale=1e-4)
    numerics.assert_within_measured_spread("book.test_correct", 0.99, scale=1e-4)
