"""Exercise 10.2's and 10.3's checkers accept the book's solutions and reject the usual slips."""

import pytest
import torch.nn.functional as F

from helpers import PAD_ID, VOCAB_SIZE
from helpers.exercises import (
    ExerciseError,
    check_smoothed_cross_entropy,
    check_teacher_forcing_loss,
)


def smoothed_cross_entropy(logits, labels, eps, ignore_index):
    """The book's solution to exercise 10.3."""
    logp = logits.log_softmax(-1)
    real = labels != ignore_index
    safe = labels.masked_fill(~real, 0)
    nll = -logp.gather(1, safe[:, None])[:, 0]
    per_position = (1 - eps) * nll + eps * -logp.mean(-1)
    return per_position[real].sum() / real.sum()


def teacher_forcing_loss(model, src, tgt):
    """The book's solution to exercise 10.2."""
    logits = model(src, tgt[:, :-1])
    return F.cross_entropy(
        logits.reshape(-1, VOCAB_SIZE), tgt[:, 1:].reshape(-1), ignore_index=PAD_ID
    )


def test_solutions_pass(capsys):
    check_smoothed_cross_entropy(smoothed_cross_entropy)
    check_teacher_forcing_loss(teacher_forcing_loss)
    out = capsys.readouterr().out
    assert "check_smoothed_cross_entropy: all 4 checks passed" in out
    assert "check_teacher_forcing_loss: all 2 checks passed" in out


def _smoothing(spread, pad_in_mean=False, pad_term_kept=False, weight=True, mean=True):
    def fn(logits, labels, eps, ignore_index):
        V = logits.size(-1)
        logp = logits.log_softmax(-1)
        real = labels != ignore_index
        nll = -logp.gather(1, labels.masked_fill(~real, 0)[:, None])[:, 0]
        if spread == "others":
            smooth = (-logp.sum(-1) - nll) / (V - 1)
        else:
            smooth = -logp.mean(-1)
        true_term = (1 - eps) * nll if weight else nll
        if pad_term_kept:
            return ((true_term * real).sum() + (eps * smooth).sum()) / real.sum()
        per = true_term + eps * smooth
        if pad_in_mean:
            return per.mean()
        return per[real].sum() / real.sum() if mean else per[real].sum()

    return fn


@pytest.mark.parametrize(
    "wrong,match",
    [
        (_smoothing("others"), "spread over the V - 1 wrong classes"),
        (_smoothing("all", pad_in_mean=True), "ignored positions are averaged in"),
        (_smoothing("all", pad_term_kept=True), "smoothing term of the ignored positions"),
        (_smoothing("all", weight=False), r"missing its weight \(1 - eps\)"),
        (_smoothing("all", mean=False), "summed over the positions"),
    ],
)
def test_smoothing_mistakes_are_named(wrong, match):
    with pytest.raises(ExerciseError, match=match):
        check_smoothed_cross_entropy(wrong)


def test_plain_cross_entropy_is_rejected():
    def no_smoothing(logits, labels, eps, ignore_index):
        return F.cross_entropy(logits, labels, ignore_index=ignore_index)

    with pytest.raises(ExerciseError, match="eps 0.1"):
        check_smoothed_cross_entropy(no_smoothing)


def test_target_not_shifted_is_rejected():
    def not_shifted(model, src, tgt):
        logits = model(src, tgt)
        return F.cross_entropy(logits.reshape(-1, VOCAB_SIZE), tgt.reshape(-1), ignore_index=PAD_ID)

    with pytest.raises(ExerciseError, match="the target is not shifted"):
        check_teacher_forcing_loss(not_shifted)


def test_shift_the_wrong_way_is_rejected():
    def backwards(model, src, tgt):
        logits = model(src, tgt[:, 1:])
        return F.cross_entropy(
            logits.reshape(-1, VOCAB_SIZE), tgt[:, :-1].reshape(-1), ignore_index=PAD_ID
        )

    with pytest.raises(ExerciseError, match="the shift goes the wrong way"):
        check_teacher_forcing_loss(backwards)


def test_padding_scored_is_rejected():
    def with_padding(model, src, tgt):
        logits = model(src, tgt[:, :-1])
        return F.cross_entropy(logits.reshape(-1, VOCAB_SIZE), tgt[:, 1:].reshape(-1))

    with pytest.raises(ExerciseError, match="padding is scored"):
        check_teacher_forcing_loss(with_padding)


def test_a_float_is_rejected():
    with pytest.raises(ExerciseError, match="torch.Tensor"):
        check_teacher_forcing_loss(lambda m, s, t: teacher_forcing_loss(m, s, t).item())


def test_a_detached_loss_is_rejected():
    with pytest.raises(ExerciseError, match="does not require grad"):
        check_teacher_forcing_loss(lambda m, s, t: teacher_forcing_loss(m, s, t).detach())


def test_a_near_miss_in_half_precision_is_rejected():
    """Logits rounded to a 16-bit float before the loss (float16 for 10.3, bfloat16, as autocast
    leaves them, for 10.2): off by about 6e-5 relative, which the old tolerance (1e-4) let
    through; a right answer is off by about 1e-7."""

    def half_smoothed(logits, labels, eps, ignore_index):
        return smoothed_cross_entropy(logits.half().float(), labels, eps, ignore_index)

    def half_teacher_forcing(model, src, tgt):
        logits = model(src, tgt[:, :-1]).bfloat16().float()
        return F.cross_entropy(
            logits.reshape(-1, VOCAB_SIZE), tgt[:, 1:].reshape(-1), ignore_index=PAD_ID
        )

    with pytest.raises(ExerciseError, match="expected"):
        check_smoothed_cross_entropy(half_smoothed)
    with pytest.raises(ExerciseError, match="expected"):
        check_teacher_forcing_loss(half_teacher_forcing)
