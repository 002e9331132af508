"""The checker of chapter 5's exercise accepts the book's RMSNorm and explains wrong ones."""

import pytest
import torch
import torch.nn as nn

from helpers.exercises import ExerciseError, check_rms_norm


def rms_norm_class(mistake=None):
    class RMSNorm(nn.Module):
        def __init__(self, d_model, eps=1e-6):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(d_model))

        def forward(self, x):
            if mistake == "centred":
                x = x - x.mean(-1, keepdim=True)
            if mistake == "eps outside":
                return x / (x.pow(2).mean(-1, keepdim=True).sqrt() + self.eps) * self.weight
            if mistake == "std":
                return x / (x.std(-1, keepdim=True) + self.eps) * self.weight
            dim = 0 if mistake == "dim 0" else -1
            y = x / torch.sqrt(x.pow(2).mean(dim, keepdim=True) + self.eps)
            return y if mistake == "no weight" else y * self.weight

    return RMSNorm


def test_accepts_the_solution(capsys):
    check_rms_norm(rms_norm_class())
    assert "check_rms_norm: all" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, hint",
    [
        ("centred", "that is LayerNorm"),
        ("eps outside", "eps goes inside the square root"),
        ("no weight", "multiply by self.weight"),
        ("dim 0", "over the last dimension"),
        ("std", r"x.std\(\) is not the root mean square"),
    ],
)
def test_rejects_plausible_mistakes(mistake, hint):
    with pytest.raises(ExerciseError, match=hint):
        check_rms_norm(rms_norm_class(mistake))


def test_rejects_a_layer_without_weight():
    class NoWeight(nn.Module):
        def __init__(self, d_model, eps=1e-6):
            super().__init__()

        def forward(self, x):
            return x

    with pytest.raises(ExerciseError, match="no parameter named `weight`"):
        check_rms_norm(NoWeight)


def test_rejects_a_bias():
    cls = rms_norm_class()

    class WithBias(cls):
        def __init__(self, d_model, eps=1e-6):
            super().__init__(d_model, eps)
            self.bias = nn.Parameter(torch.zeros(d_model))

    with pytest.raises(ExerciseError, match="a scale \\(weight\\) only, no bias"):
        check_rms_norm(WithBias)
