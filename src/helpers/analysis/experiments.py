"""Statistics for the Experiments pages: intervals over seeds and paired tests on a test set.

A recorded experiment compares arms (configurations) trained with the same seeds and budget,
each seed scored on the same test set. The record keeps, per arm and seed, which test
sequences came out right (`pack_bits`), so that two arms can be compared sequence by sequence
with McNemar's exact test instead of by the overlap of two intervals.

Record layout (one JSON file in chapters/data/, read by `load_record`):

    {"question": "...", "design": "...", "command": "python -m tools.record...", "numerics": {...},
     "test_set": {"seed": 1234, "n": 10000},
     "arms": {"pre_norm": [{"seed": 0, "test_correct": 9959, "correct_bits": "...", ...}, ...],
              "post_norm": [...]}}
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from helpers.repro.paths import records_dir

DATA_DIR = records_dir()

# Two-sided 95 % quantiles of Student's t for 1..30 degrees of freedom (beyond: 1.96 is within
# 2 % of the true value). A table keeps the library free of SciPy.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def load_record(name: str, data_dir: Path | None = None) -> dict:
    """The recorded experiment chapters/data/<name>.json (name without the extension)."""
    path = Path(data_dir or DATA_DIR) / f"{name}.json"
    if not path.exists():
        raise FileNotFoundError(f"no recorded experiment {name!r}: {path} is missing")
    return json.loads(path.read_text())


def pack_bits(correct) -> str:
    """A bool vector (per test sequence: right or not) as a hex string, 1 bit per sequence."""
    bits = np.asarray(correct, dtype=bool).ravel()
    return np.packbits(bits).tobytes().hex()


def unpack_bits(text: str, n: int) -> np.ndarray:
    """The inverse of `pack_bits`: a bool vector of length n."""
    raw = np.frombuffer(bytes.fromhex(text), dtype=np.uint8)
    if raw.size * 8 < n:
        raise ValueError(f"the packed string holds {raw.size * 8} bits, fewer than n={n}")
    return np.unpackbits(raw)[:n].astype(bool)


def t_quantile(df: int) -> float:
    """The 97.5 % quantile of Student's t with df degrees of freedom (df >= 1)."""
    if df < 1:
        raise ValueError(f"a t interval needs at least 2 values (df >= 1), got df={df}")
    return _T975[df - 1] if df <= len(_T975) else 1.96


@dataclass(frozen=True)
class MeanInterval:
    """The mean of per-seed values with its 95 % t interval."""

    mean: float
    low: float
    high: float
    n: int

    def __str__(self) -> str:
        return f"{self.mean:.4g} (95 % interval {self.low:.4g} to {self.high:.4g}, {self.n} seeds)"


def mean_interval(values) -> MeanInterval:
    """Mean and 95 % t interval of per-seed values (at least 2)."""
    x = np.asarray(values, dtype=float)
    if x.size < 2:
        raise ValueError(f"an interval over seeds needs at least 2 values, got {x.size}")
    half = t_quantile(x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
    return MeanInterval(float(x.mean()), float(x.mean() - half), float(x.mean() + half), x.size)


def percent_interval(ci: MeanInterval) -> str:
    """A difference of shares as a page's conclusion quotes it: '+0.16 % (95 % interval +0.00 %
    to +0.32 %)' (percentage points)."""
    return f"{100 * ci.mean:+.2f} % (95 % interval {100 * ci.low:+.2f} % to {100 * ci.high:+.2f} %)"


def in_words(ci: MeanInterval, above: str, below: str, agrees: bool = True) -> str:
    """The conclusion a seed-level interval of a difference allows, in a page's words: `above`
    when the interval lies above 0, `below` when below 0, else "not distinguishable with n
    seeds"; "no conclusion" under 5 seeds. agrees: whether a second test also rejects "no
    difference" (Comparison.in_words passes pooled McNemar p < 0.05)."""
    if ci.n < 5:
        return f"no conclusion with {ci.n} seeds"
    if ci.low > 0 and agrees:
        return above
    if ci.high < 0 and agrees:
        return below
    return f"not distinguishable with {ci.n} seeds"


@dataclass(frozen=True)
class McNemar:
    """McNemar's exact test on paired right/wrong outcomes of two arms on the same sequences.

    only_a: sequences arm A got right and arm B wrong; only_b: the reverse. Sequences both got
    right or both wrong carry no information about which arm is better.
    """

    only_a: int
    only_b: int
    p_value: float

    def __str__(self) -> str:
        return f"only A right {self.only_a}, only B right {self.only_b}, p = {self.p_value:.3g}"


def mcnemar_exact(a_correct, b_correct) -> McNemar:
    """Two-sided exact McNemar test: under "no difference" each discordant pair is a fair coin."""
    a = np.asarray(a_correct, dtype=bool).ravel()
    b = np.asarray(b_correct, dtype=bool).ravel()
    if a.shape != b.shape:
        raise ValueError(f"paired outcomes need the same length, got {a.size} and {b.size}")
    only_a, only_b = int((a & ~b).sum()), int((~a & b).sum())
    n, k = only_a + only_b, min(only_a, only_b)
    if n == 0:
        return McNemar(0, 0, 1.0)
    # P(X <= k) for X ~ Binomial(n, 1/2), in logs so that n in the thousands does not overflow
    logs = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) for i in range(k + 1)]
    top = max(logs)
    tail = math.exp(top + math.log(sum(math.exp(v - top) for v in logs)) - n * math.log(2))
    return McNemar(only_a, only_b, min(1.0, 2 * tail))


def common_seeds(record: dict, keys: tuple[str, ...] = ("arms",)) -> list[int]:
    """The seeds every arm of record[keys[0]] finished, sorted. Cuts record[key], for every key
    in keys (per-test-set copies of "arms"), to those seeds, in place: a recorder that runs seed
    by seed and is stopped midway leaves a seed only some arms finished."""
    arms = record[keys[0]]
    seeds = sorted(set.intersection(*({r["seed"] for r in runs} for runs in arms.values())))
    for key in keys:
        record[key] = {
            a: [r for r in runs if r["seed"] in seeds] for a, runs in record[key].items()
        }
    return seeds


def p_text(p: float) -> str:
    """A p-value as the pages print it; an exact test's p can underflow to 0.0."""
    return f"p = {p:.2g}" if p > 0 else "p < 1e-300"


_WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}


def seeds_in_words(seeds) -> str:
    """How a page's design names seeds 0..n-1: '0 to 4, five per arm'."""
    seeds = list(seeds)
    if seeds != list(range(len(seeds))) or not 2 <= len(seeds) <= max(_WORDS):
        raise ValueError(f"expected seeds 0 to n-1 with 2 <= n <= {max(_WORDS)}, got {seeds}")
    return f"0 to {seeds[-1]}, {_WORDS[len(seeds)]} per arm"


def arm_bits(record: dict, arm: str) -> dict[int, np.ndarray]:
    """{seed: bool vector over the test set} for one arm of a record."""
    n = record["test_set"]["n"]
    return {run["seed"]: unpack_bits(run["correct_bits"], n) for run in record["arms"][arm]}


@dataclass(frozen=True)
class Comparison:
    """Arm A against arm B over the seeds both ran."""

    seeds: tuple[int, ...]
    difference: MeanInterval  # per-seed exact match of A minus B
    # every (seed, sequence) pair; optimistic: it treats them as independent, but the pairs of
    # one seed share one pair of training runs. The verdict needs the seed interval too.
    pooled: McNemar
    per_seed: tuple[McNemar, ...]

    @property
    def verdict(self) -> str:
        """The conclusion the statistics allow, in words."""
        d = self.difference
        if len(self.seeds) < 5:
            return f"no conclusion: {len(self.seeds)} seeds (at least 5 are needed)"
        if d.low > 0 and self.pooled.p_value < 0.05:
            return (
                f"A is better (by {d.mean:.2%} exact match, interval {d.low:.2%} to {d.high:.2%})"
            )
        if d.high < 0 and self.pooled.p_value < 0.05:
            return (
                f"B is better (by {-d.mean:.2%} exact match, "
                f"interval {-d.high:.2%} to {-d.low:.2%})"
            )
        return f"not distinguishable with {len(self.seeds)} seeds"

    def in_words(self, above: str, below: str) -> str:
        """The verdict in a page's words: `above` where the verdict says A is better, `below`
        where B is (see the module's `in_words`)."""
        return in_words(self.difference, above, below, self.pooled.p_value < 0.05)


def compare_arms(record: dict, arm_a: str, arm_b: str) -> Comparison:
    """Pair arm A's and arm B's runs by seed and compare them on the shared test set.

    The seed-level paired difference gets a t interval (the seeds are the independent units);
    McNemar's exact test runs per seed and over all (seed, sequence) pairs pooled.
    """
    a, b = arm_bits(record, arm_a), arm_bits(record, arm_b)
    seeds = tuple(sorted(set(a) & set(b)))
    if len(seeds) < 2:
        raise ValueError(f"arms {arm_a!r} and {arm_b!r} share {len(seeds)} seeds; need >= 2")
    diffs = [a[s].mean() - b[s].mean() for s in seeds]
    per_seed = tuple(mcnemar_exact(a[s], b[s]) for s in seeds)
    pooled = mcnemar_exact(
        np.concatenate([a[s] for s in seeds]), np.concatenate([b[s] for s in seeds])
    )
    return Comparison(seeds, mean_interval(diffs), pooled, per_seed)


def largest_fall(curve, start: int, k: int = 5) -> tuple[float, int]:
    """The largest drop of the k-step running mean of a per-step curve from a high to a later
    low, looking from index start on, and the step (1-based) of that low. Used on the
    learning-rate Experiments page (how far training accuracy fell back after the warmup)."""
    mean = [sum(curve[max(0, i - k + 1) : i + 1]) / min(k, i + 1) for i in range(len(curve))]
    best, high, low_step = 0.0, mean[start], start + 1
    for i in range(start, len(mean)):
        high = max(high, mean[i])
        if high - mean[i] > best:
            best, low_step = high - mean[i], i + 1
    return best, low_step
