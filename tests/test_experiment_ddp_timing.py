"""The DDP timings (appendix/experiment_ddp_timing.py) and chapter 23's citation of them:
every number their prose quotes agrees with chapters/data/ch23_ddp_timing.json."""

import statistics
from pathlib import Path

import pytest
from twin_prose import prose

from helpers.analysis.experiments import load_record, mean_interval

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "appendix" / "experiment_ddp_timing.py").read_text()
CHAPTER = (ROOT / "chapters" / "23_distributed_data_parallel.py").read_text()
ONE, THREADS, TWO = "1 process x 1 thread", "1 process x 2 threads", "2 processes x 1 thread"


@pytest.fixture(scope="module")
def rec():
    return load_record("ch23_ddp_timing")


def values(rec, config, key):
    """config's values of key, in the order of the seeds."""
    runs = sorted((r for r in rec["runs"] if r["config"] == config), key=lambda r: r["seed"])
    return [r[key] for r in runs]


def paired(rec, a, b, key):
    """Mean and 95 % t interval of a minus b, seed by seed."""
    return mean_interval([x - y for x, y in zip(values(rec, a, key), values(rec, b, key))])


def median_range(xs, fmt=".1f"):
    return f"{statistics.median(xs):{fmt}} ms ({min(xs):{fmt}} to {max(xs):{fmt}})"


def test_design_five_seeds_each(rec):
    seeds = {c: sorted(values(rec, c, "seed")) for c in (ONE, THREADS, TWO)}
    assert all(s == [0, 1, 2, 3, 4] for s in seeds.values())
    assert "5 per configuration (0 to 4)" in prose(PAGE)


def test_time_per_step(rec):
    text = prose(PAGE)
    ms = {c: values(rec, c, "ms_per_step") for c in (ONE, THREADS, TWO)}
    assert max(ms[THREADS]) < min(ms[TWO]) and max(ms[TWO]) < min(ms[ONE])  # no overlap
    assert "The ranges do not overlap" in text
    assert f"of {median_range(ms[THREADS])}" in text
    assert f"two processes {median_range(ms[TWO])}" in text
    assert f"one thread {median_range(ms[ONE])}" in text
    for s in range(5):
        assert ms[THREADS][s] < ms[TWO][s] < ms[ONE][s]
    assert "for all 5 seeds" in text
    less, more = paired(rec, TWO, ONE, "ms_per_step"), paired(rec, TWO, THREADS, "ms_per_step")
    assert less.high < 0 < more.low  # both intervals exclude 0, as the page says
    assert (
        f"two processes took {-less.mean:.1f} ms less per step than one thread (95 % interval "
        f"{-less.high:.1f} to {-less.low:.1f}) and {more.mean:.1f} ms more than two threads "
        f"({more.low:.1f} to {more.high:.1f})" in text
    )
    order = [r["config"] for r in rec["runs"]]
    assert order == [ONE, THREADS, TWO] * 5  # interleaved, two processes last in every seed
    assert "Two processes always ran last within a seed" in text
    loads = [rec["load_average_before"][0]] + [r["load_average"] for r in rec["runs"]]
    assert f"load average of {min(loads):.1f} to {max(loads):.1f}" in text
    assert rec["numerics"]["cpu"] == "not recorded" and "The record does not name the CPU" in text
    chapter = prose(CHAPTER)
    assert "../appendix/experiment_ddp_timing.ipynb" in chapter
    for c, words in ((TWO, "two processes"), (ONE, "one process and one thread")):
        assert f"{words} took a median of {median_range(ms[c])}" in chapter or (
            f"{words} {median_range(ms[c])}" in chapter
        ), c
    assert f"one process and two threads {median_range(ms[THREADS])}" in chapter
    assert "On one two-core machine with PyTorch's default kernels" in chapter
    assert rec["numerics"]["pinned"] is False and rec["cpu_count"] == 2
    assert "slower than two threads, in all five runs" in chapter  # the order checked above


def test_seconds_and_start_up(rec):
    text = prose(PAGE)
    secs = {c: values(rec, c, "seconds") for c in (ONE, THREADS, TWO)}
    ranges = sorted((min(v), max(v)) for v in secs.values())
    assert all(lo2 < hi1 for (_, hi1), (lo2, _) in zip(ranges, ranges[1:]))  # they overlap
    steps = [r["steps"] for r in rec["runs"]]
    assert f"between {min(steps)} and {max(steps)} over all runs" in text
    outside = {c: statistics.median(values(rec, c, "outside_training_seconds")) for c in secs}
    assert f"median of {outside[TWO]:.2f} s outside training, against {outside[ONE]:.2f} s" in text
    # paired by seed, only two threads against one thread excludes 0
    pairs = ((TWO, ONE), (TWO, THREADS), (THREADS, ONE))
    d = {pair: paired(rec, *pair, "seconds") for pair in pairs}
    assert [x.low < 0 < x.high for x in d.values()] == [True, True, False]
    x = d[THREADS, ONE]
    assert f"{-x.mean:.1f} s less ({-x.high:.1f} to {-x.low:.1f})" in text


def test_test_exact_match(rec):
    text = prose(PAGE)
    lowest = min(r["test_exact_match"] for r in rec["runs"])
    assert f"at least {lowest:.2%}".replace("%", " %") in text
    for a, b in ((TWO, ONE), (TWO, THREADS), (THREADS, ONE)):
        ta, tb = values(rec, a, "test_exact_match"), values(rec, b, "test_exact_match")
        d = mean_interval([x - y for x, y in zip(ta, tb)])
        assert d.low < 0 < d.high, (a, b)
    assert "each interval includes 0" in text
