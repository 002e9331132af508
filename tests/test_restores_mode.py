"""One implementation gives a model back its mode: helpers.restores_mode. The functions that
switch a model to eval mode to score or check it give the caller's mode back, also when the
model raises halfway, and no other module of the library saves `model.training` by hand."""

import re
from pathlib import Path

import pytest

import helpers
from helpers import check_model, make_reversal_dataset, teacher_forced_exact_match
from helpers.training.recipes import TrainConfig
from helpers.training.train import build_model

TINY = TrainConfig(d_model=16, num_heads=2, dff=32, num_layers=1, dropout=0.1)
PACKAGE = Path(helpers.__file__).resolve().parent


class Broken(Exception):
    pass


def breaking(model):
    """model, whose forward passes raise Broken from now on."""

    def fail(module, args):
        raise Broken

    model.register_forward_pre_hook(fail)
    return model


@pytest.mark.parametrize("training", [True, False])
def test_teacher_forced_exact_match_gives_the_mode_back_after_an_error(training):
    model = breaking(build_model(TINY).train(training))
    src, tgt = make_reversal_dataset(8, seed=0)
    with pytest.raises(Broken):
        teacher_forced_exact_match(model, src, tgt)
    assert all(m.training == training for m in model.modules())


@pytest.mark.parametrize("training", [True, False])
def test_check_model_gives_the_mode_back(training, capsys):
    model = build_model(TINY).train(training)
    check_model(model, make_reversal_dataset(4, seed=0), verbose=False)
    assert all(m.training == training for m in model.modules())
    check_model(breaking(model), make_reversal_dataset(4, seed=0), verbose=False)
    assert all(m.training == training for m in model.modules())


def test_no_module_saves_the_mode_by_hand():
    """`x = model.training` ... `model.train(x)` is restores_mode's job (helpers.decoding.greedy);
    the strings that teach the pattern (exercise messages) do not count."""
    saved = re.compile(r"^\s*\w+ = \w+\.training\b", re.MULTILINE)
    found = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if saved.search(path.read_text(encoding="utf-8"))
    ]
    assert found == ["decoding/greedy.py"], found
