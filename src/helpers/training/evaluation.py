"""The test set and the one accuracy number the book reports. Built in chapters 09 and 10.

Validation (seed 1, 1,000 sequences) decides when training stops; the number a chapter
reports comes from a separate test split, drawn with its own seed, that stopping never looks at
(independent draws repeat short inputs: about one test sequence in nine also occurs in the
training set, and chapter 09 counts them):

TEST_SEED, TEST_SIZE     the test split: 10,000 sequences drawn with a seed no other split uses;
test_set(n)              its (src, tgt);
exact_match_with_interval(model, src, tgt)
                         the share of sequences reversed exactly, with a Wilson score interval;
wilson_interval(k, n)    the interval alone;
train_test_overlap(test_src, train_src)
                         how many test sequences also occur in the training set (chapter 09
                         counts the same for validation).
"""

import math
from dataclasses import dataclass
from statistics import NormalDist

import torch

from helpers.core.data import make_reversal_dataset
from helpers.decoding.greedy import greedy_decode, restores_mode, sequences_equal
from helpers.training.train import sequence_correct

TEST_SEED = 2027  # training uses seed 0 and validation seed 1 (helpers.training.recipes)
TEST_SIZE = 10_000


def test_set(n: int = TEST_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """The first n sequences of the test split, as (src, tgt) int64 [n, 14]. Built in chapter 09.

    Drawn by make_reversal_dataset with TEST_SEED, so it is the same set on every machine, and a
    smaller n gives a prefix of the full set.
    """
    if not 1 <= n <= TEST_SIZE:
        raise ValueError(f"n must be in [1, {TEST_SIZE}] (the test set's size), got {n}")
    src, tgt = make_reversal_dataset(TEST_SIZE, seed=TEST_SEED)
    return src[:n], tgt[:n]


# pytest would otherwise collect test_set as a test when a test module imports it
test_set.__test__ = False


@dataclass(frozen=True)
class Interval:
    """A measured share with its confidence interval. Used in chapters 10-12.

    exact_match = correct / n; [low, high] is the Wilson score interval at `confidence`.
    """

    exact_match: float
    correct: int
    n: int
    low: float
    high: float
    confidence: float = 0.95

    def __str__(self) -> str:
        pct = round(100 * self.confidence)
        return (
            f"{self.exact_match:.2%} ({self.correct:,} of {self.n:,}; "
            f"{pct} % interval {self.low:.2%} to {self.high:.2%})"
        )


def wilson_interval(correct: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval {cite}`wilson1927` for a binomial share correct / n. Chapter 10.

    The interval holds every p for which |correct/n - p| <= z * sqrt(p (1 - p) / n), with z the
    normal quantile for `confidence` (1.96 at 0.95). Unlike the textbook p +- z * sqrt(p(1-p)/n),
    it never leaves [0, 1] and does not collapse to a single point at 0 or n correct, which
    matters here: a trained model gets nearly every test sequence right.
    """
    if n <= 0:
        raise ValueError(f"n must be positive, got {n}")
    if not 0 <= correct <= n:
        raise ValueError(f"correct must be in [0, n={n}], got {correct}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = correct / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    # at 0 or n correct one end is exactly 0 or 1 (the formula leaves a rounding error there)
    low = 0.0 if correct == 0 else centre - half
    high = 1.0 if correct == n else centre + half
    return low, high


@restores_mode
@torch.no_grad()
def exact_match_with_interval(
    model,
    src: torch.Tensor,
    tgt: torch.Tensor,
    confidence: float = 0.95,
    greedy: bool = False,
    batch_size: int = 1000,
) -> Interval:
    """Exact match of model on (src, tgt) with its Wilson interval. Used in chapters 10-12.

    A sequence counts as correct when every token up to and including the target's <eos> is
    right. greedy=False scores the teacher-forced argmax in one batched forward pass per
    batch; chapter 11 shows that this is the same count as greedy decoding (greedy=True, one
    decoder pass per output token): while every argmax is right, greedy decoding feeds itself
    exactly the prefix teacher forcing feeds, and at the first wrong argmax both are wrong.
    Scores in eval mode (dropout off), then gives back the caller's mode.
    """
    if src.dim() != 2 or tgt.dim() != 2:
        raise ValueError(
            f"src and tgt must be [n, L] token ids, got {tuple(src.shape)}, {tuple(tgt.shape)}"
        )
    if src.size(0) != tgt.size(0):
        raise ValueError(f"src and tgt hold {src.size(0)} and {tgt.size(0)} sequences")
    model.eval()
    device = next(model.parameters()).device
    correct = 0
    for i in range(0, src.size(0), batch_size):
        s, t = src[i : i + batch_size].to(device), tgt[i : i + batch_size].to(device)
        if greedy:
            ok = sequences_equal(greedy_decode(model, s, use_cache=True), t)
        else:
            ok = sequence_correct(model(s, t[:, :-1]), t[:, 1:])
        correct += int(ok.sum())
    n = src.size(0)
    low, high = wilson_interval(correct, n, confidence)
    return Interval(correct / n, correct, n, low, high, confidence)


def train_test_overlap(test_src: torch.Tensor, train_src: torch.Tensor) -> torch.Tensor:
    """bool [n_test]: which test sources also occur (as whole rows) in the training sources.

    Chapter 09 counts this for the validation set and the test set; `.sum()` gives the count.
    Independent draws repeat short inputs: there are only 1,000 three-digit strings.
    """
    if test_src.dim() != 2 or train_src.dim() != 2 or test_src.size(1) != train_src.size(1):
        raise ValueError(
            "test_src and train_src must be [n, L] with the same L, got "
            f"{tuple(test_src.shape)} and {tuple(train_src.shape)}"
        )
    seen = {tuple(row) for row in train_src.tolist()}
    return torch.tensor([tuple(row) in seen for row in test_src.tolist()], dtype=torch.bool)
