"""Chapter 8's checkers run the reader's property test on correct and broken models."""

import pytest
import torch
import torch.nn.functional as F

from helpers import NUM_OFFSET, PAD_ID
from helpers.exercises import ExerciseError, check_causality_test, check_padding_test


@torch.no_grad()
def causal(model, src, tgt_in, *, eval_mode=True, start=1):
    if eval_mode:
        model.eval()
    a = model(src, tgt_in)
    for t in range(tgt_in.size(1) - start):
        changed = tgt_in.clone()
        changed[:, t + start :] = NUM_OFFSET + (tgt_in[:, t + start :] + 1) % 10
        b = model(src, changed)
        if not torch.allclose(a[:, : t + 1], b[:, : t + 1], atol=1e-5):
            return False
    return True


@torch.no_grad()
def pad_invariant(model, src, tgt_in, *, eval_mode=True, pad_tgt=False):
    if eval_mode:
        model.eval()
    a = model(src, tgt_in)
    padded_tgt = F.pad(tgt_in, (0, 3), value=PAD_ID) if pad_tgt else tgt_in
    b = model(F.pad(src, (0, 3), value=PAD_ID), padded_tgt)[:, : tgt_in.size(1)]
    return torch.allclose(a, b, atol=1e-5)


def test_causality_accepts_the_solution(capsys):
    check_causality_test(causal)
    assert "check_causality_test: all" in capsys.readouterr().out


def test_causality_rejects_a_test_in_training_mode():
    with pytest.raises(ExerciseError, match="model.eval"):
        check_causality_test(lambda *a: causal(*a, eval_mode=False))


def test_causality_rejects_an_off_by_one_test():
    # changes the tokens from t + 2 on: misses the one-step-ahead leak
    with pytest.raises(ExerciseError, match="position i also sees token i \\+ 1"):
        check_causality_test(lambda *a: causal(*a, start=2))


def test_causality_rejects_a_test_that_always_passes():
    with pytest.raises(ExerciseError, match="no causal mask"):
        check_causality_test(lambda *a: True)


def test_causality_rejects_a_non_bool():
    with pytest.raises(ExerciseError, match="should return True or False"):
        check_causality_test(lambda *a: "yes")


def test_padding_accepts_the_solution(capsys):
    check_padding_test(pad_invariant)
    assert "check_padding_test: all" in capsys.readouterr().out


def test_padding_rejects_training_mode():
    with pytest.raises(ExerciseError, match="model.eval"):
        check_padding_test(lambda *a: pad_invariant(*a, eval_mode=False))


def test_padding_rejects_a_test_that_always_passes():
    with pytest.raises(ExerciseError, match="depends on the padding"):
        check_padding_test(lambda *a: True)
