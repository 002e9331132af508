"""Chapter 4's checker accepts the book's SwiGLU block and names each catalogued mistake
(tests/mistakes_ch04.py) with its own message."""

import mistakes_ch04 as m
import pytest
import torch.nn as nn

from helpers.exercises import ExerciseError, check_swiglu_ffn


def swiglu_class(forward=m.swiglu_correct, bias=False):
    class SwiGLU(nn.Module):
        def __init__(self, d_model, dff):
            super().__init__()
            self.w_gate = nn.Linear(d_model, dff, bias=bias)
            self.w_up = nn.Linear(d_model, dff, bias=bias)
            self.w_down = nn.Linear(dff, d_model, bias=bias)

    SwiGLU.forward = forward
    return SwiGLU


def test_accepts_the_book_answer(capsys):
    check_swiglu_ffn(swiglu_class())
    assert "all 4 checks passed" in capsys.readouterr().out


CATALOGUE = [
    (m.swiglu_silu_on_up, "goes on the gate"),
    (m.swiglu_sigmoid, "not sigmoid"),
    (m.swiglu_gelu, "not GELU"),
    (m.swiglu_relu, "not ReLU"),
    (m.swiglu_no_activation, "the gate needs its SiLU"),
    (m.swiglu_no_gate, r"multiply the activated gate by w_up\(x\)"),
    (m.swiglu_silu_of_product, "apply SiLU to the gate alone"),
    (m.swiglu_sum_not_product, "multiplied elementwise"),
    (m.swiglu_no_w_down, "finish with w_down"),
]


@pytest.mark.parametrize("mistake, message", CATALOGUE, ids=lambda v: getattr(v, "__name__", ""))
def test_names_each_catalogued_mistake(mistake, message):
    with pytest.raises(ExerciseError, match=message):
        check_swiglu_ffn(swiglu_class(mistake))


def test_rejects_biases():
    with pytest.raises(ExerciseError, match="has a bias"):
        check_swiglu_ffn(swiglu_class(bias=True))


def test_rejects_a_block_with_misnamed_layers():
    class Misnamed(nn.Module):
        def __init__(self, d_model, dff):
            super().__init__()
            self.lin1 = nn.Linear(d_model, dff)

    with pytest.raises(ExerciseError, match="w_gate, w_up and w_down"):
        check_swiglu_ffn(Misnamed)


def test_refuses_a_near_miss():
    def nudged(self, x):
        return m.swiglu_correct(self, x) * 1.001

    with pytest.raises(ExerciseError, match="values differ"):
        check_swiglu_ffn(swiglu_class(nudged))
