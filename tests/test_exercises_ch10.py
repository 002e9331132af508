"""Exercise 10.2's, 10.3's and 10.4's checkers accept the book's solutions and reject the usual
slips; exercise 10.4's catalogue (tests/mistakes_ch10.py) is rejected mistake by mistake, each
with its own message."""

import functools

import mistakes_ch10
import pytest
import torch
import torch.nn.functional as F

from helpers import PAD_ID, VOCAB_SIZE
from helpers.exercises import (
    ExerciseError,
    check_smoothed_cross_entropy,
    check_teacher_forcing_loss,
    check_training_loop,
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


# ---------------------------------------------------------------- exercise 10.4


def test_the_training_loop_solution_passes(capsys):
    check_training_loop(mistakes_ch10.loop)
    assert "check_training_loop: all 3 checks passed" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong,match",
    list(mistakes_ch10.CATALOGUE.items()),
    ids=[f.__name__ for f in mistakes_ch10.CATALOGUE],
)
def test_each_training_loop_mistake_is_named(wrong, match):
    with pytest.raises(ExerciseError, match=match):
        check_training_loop(wrong)


def test_the_training_loop_messages_are_all_different():
    fragments = list(mistakes_ch10.CATALOGUE.values())
    assert len(set(fragments)) == len(fragments)


def test_a_loss_summed_in_another_order_is_close_but_not_bit_for_bit():
    """The right mean over the real labels, summed in another order than F.cross_entropy's:
    the checker says the numbers agree up to float rounding rather than naming a mistake."""
    with pytest.raises(ExerciseError, match="up to float rounding, not bit for bit"):
        check_training_loop(functools.partial(mistakes_ch10.loop, loss_by_hand=True))


def test_the_checkers_configs_show_the_gate_and_the_stop():
    """The three configs the checker trains: the first evaluates at every 4th step and at the
    end, the second's gate is never met (only the last step is scored), the third stops at
    its first evaluation. Each catalogued mistake changes one of these runs."""
    from helpers.exercises.ch10 import _loop, _loop_configs
    from helpers.training.train import train_reversal

    expected = [[4, 8, 12], [12], [4]]
    for (where, cfg), steps in zip(_loop_configs(), expected):
        run = train_reversal(cfg, progress=False, confirm=False)
        assert run.history["eval_step"] == steps, where
        model, losses, eval_steps = _loop(cfg)
        assert losses == run.history["loss"] and eval_steps == steps, where
        state = run.model.state_dict()
        assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items()), where
