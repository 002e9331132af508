"""The checker of chapter 4's exercise accepts the book's answer and explains wrong ones."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers.exercises import ExerciseError, check_swiglu_ffn


class SwiGLU(nn.Module):
    def __init__(self, d_model, dff, *, act=F.silu, gate_on_up=False, bias=False):
        super().__init__()
        self.act, self.gate_on_up = act, gate_on_up
        self.w_gate = nn.Linear(d_model, dff, bias=bias)
        self.w_up = nn.Linear(d_model, dff, bias=bias)
        self.w_down = nn.Linear(dff, d_model, bias=bias)

    def forward(self, x):
        gate, up = self.w_gate(x), self.w_up(x)
        if self.gate_on_up:
            gate, up = up, gate
        return self.w_down(self.act(gate) * up)


def test_accepts_the_book_answer(capsys):
    check_swiglu_ffn(SwiGLU)
    assert "all 4 checks passed" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (dict(act=torch.sigmoid), "not sigmoid"),
        (dict(act=F.gelu), "not GELU"),
        (dict(gate_on_up=True), "goes on the gate"),
        (dict(bias=True), "has a bias"),
    ],
)
def test_rejects_a_wrong_block(wrong, hint):
    with pytest.raises(ExerciseError, match=hint):
        check_swiglu_ffn(lambda d, dff: SwiGLU(d, dff, **wrong))


def test_rejects_a_block_with_misnamed_layers():
    class Misnamed(nn.Module):
        def __init__(self, d_model, dff):
            super().__init__()
            self.lin1 = nn.Linear(d_model, dff)

    with pytest.raises(ExerciseError, match="w_gate, w_up and w_down"):
        check_swiglu_ffn(Misnamed)
