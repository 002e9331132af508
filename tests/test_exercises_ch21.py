"""The checkers of chapter 21 accept the book's solutions and reject plausible wrong answers."""

import math

import pytest
import torch

from helpers.analysis.visualize import mirrored_columns
from helpers.exercises import ExerciseError, check_mirror_weight, check_row_entropy

# ------------------------------------------------------------------ check_mirror_weight


def mirror_weight(weights, n):
    rows = torch.arange(n + 1)
    cols = torch.tensor([n - 1 - i for i in range(n)] + [n])
    return weights[rows, cols].mean()


def test_mirror_weight_solution_passes(capsys):
    check_mirror_weight(mirror_weight)
    assert "all 5 checks passed" in capsys.readouterr().out


def test_mirror_weight_accepts_numpy_style_answers():
    check_mirror_weight(lambda w, n: float(w.numpy()[range(n + 1), mirrored_columns(n)].mean()))


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda w, n: w.diagonal().mean(), "the diagonal"),
        (
            lambda w, n: torch.stack([w[i, n - i] for i in range(n)]).mean(),
            "one to the right",
        ),
        (
            lambda w, n: torch.stack([w[i, n - 1 - i] for i in range(n)]).mean(),
            "the last row, which predicts <eos>",
        ),
        (lambda w, n: w[torch.arange(n + 1), mirrored_columns(n)].sum(), "not the sum"),
        (
            lambda w, n: (w.argmax(-1) == torch.as_tensor(mirrored_columns(n))).float().mean(),
            "not whether the row's maximum",
        ),
        (lambda w, n: w.flip(-1).diagonal().mean(), "flipping the columns"),
        (lambda w, n: w[torch.arange(n + 1), mirrored_columns(n)], "one number per map"),
        (lambda w, n: w.max(-1).values.mean(), "mirrored_columns"),
    ],
)
def test_mirror_weight_rejects_wrong_answers(wrong, hint):
    with pytest.raises(ExerciseError, match=hint):
        check_mirror_weight(wrong)


def test_mirror_weight_reports_an_exception_with_the_input():
    def broken(w, n):
        raise IndexError("index 5 is out of bounds")

    with pytest.raises(ExerciseError, match="a perfect map of 4 digits.*IndexError"):
        check_mirror_weight(broken)


# ------------------------------------------------------------------ check_row_entropy


def test_row_entropy_solution_passes(capsys):
    check_row_entropy(lambda w: -torch.special.xlogy(w, w).sum(-1) / math.log(2))
    assert "all 3 checks passed" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda w: -(w * w.log2()).sum(-1), "0 \\* log\\(0\\) is NaN"),
        (lambda w: -torch.special.xlogy(w, w).sum(-1), "natural log"),
        (lambda w: torch.special.xlogy(w, w).sum(-1) / math.log(2), "MINUS"),
        (lambda w: -(w * w.clamp_min(1e-12).log2()).sum(-2), "the keys"),
        (lambda w: -(w * w.clamp_min(1e-12).log2()).sum(-1, keepdim=True), "without keepdim"),
        (lambda w: -(w * w.clamp_min(1e-12).log2()).mean(-1), "the entropies\\["),
    ],
)
def test_row_entropy_rejects_wrong_answers(wrong, hint):
    with pytest.raises(ExerciseError, match=hint):
        check_row_entropy(wrong)


# ------------------------------------------------------------------ near misses


def test_mirror_weight_refuses_a_near_miss():
    """0.1 % off on every map (a mean that is almost right) is still refused."""
    with pytest.raises(ExerciseError, match="expected"):
        check_mirror_weight(lambda w, n: 1.001 * mirror_weight(w, n))


def test_row_entropy_refuses_a_near_miss():
    """log2 approximated as ln / 0.69 (0.5 % off) is refused; an epsilon inside the log is not
    a mistake and passes."""
    with pytest.raises(ExerciseError, match="the entropies"):
        check_row_entropy(lambda w: -torch.special.xlogy(w, w).sum(-1) / 0.69)
    check_row_entropy(lambda w: -(w * (w + 1e-9).log2()).sum(-1))
