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
def causal_only_t0(model, src, tgt_in):
    """Weak: changes every token after position 0, but compares position 0 only."""
    model.eval()
    changed = tgt_in.clone()
    changed[:, 1:] = NUM_OFFSET + (tgt_in[:, 1:] + 1) % 10
    return torch.allclose(model(src, tgt_in)[:, :1], model(src, changed)[:, :1], atol=1e-5)


@torch.no_grad()
def causal_next_token_only(model, src, tgt_in):
    """Weak: for every t, changes only token t + 1 and compares position t only."""
    model.eval()
    a = model(src, tgt_in)
    for t in range(tgt_in.size(1) - 1):
        changed = tgt_in.clone()
        changed[:, t + 1] = NUM_OFFSET + (tgt_in[:, t + 1] + 1) % 10
        if not torch.allclose(a[:, t], model(src, changed)[:, t], atol=1e-5):
            return False
    return True


@torch.no_grad()
def pad_invariant(model, src, tgt_in, *, eval_mode=True, pad_tgt=False, positions=None):
    if eval_mode:
        model.eval()
    a = model(src, tgt_in)
    padded_tgt = F.pad(tgt_in, (0, 3), value=PAD_ID) if pad_tgt else tgt_in
    b = model(F.pad(src, (0, 3), value=PAD_ID), padded_tgt)[:, : tgt_in.size(1)]
    if positions is not None:  # weak: compare only these target positions
        a, b = a[:, :positions], b[:, :positions]
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


def test_causality_rejects_a_test_of_t0_only():
    # every broken model the checker had before leaks at position 0: this test caught them all
    with pytest.raises(ExerciseError, match="position 0 is masked correctly"):
        check_causality_test(causal_only_t0)


def test_causality_rejects_a_test_that_changes_only_the_next_token():
    with pytest.raises(ExerciseError, match="sees token i \\+ 2"):
        check_causality_test(causal_next_token_only)


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


def test_padding_rejects_a_test_of_position_0_only():
    # both broken models the checker had before change the logits at position 0 too
    with pytest.raises(ExerciseError, match="target position 0 only"):
        check_padding_test(lambda *a: pad_invariant(*a, positions=1))
