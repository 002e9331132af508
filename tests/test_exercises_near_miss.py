"""Every numeric exercise checker refuses a near miss: the book's accepted answer with every
number it returns moved by 0.1 %.

A checker whose tolerance is loose enough to accept that would also accept many real
mistakes that change the answer a little (a wrong epsilon, z = 1.95, a scale off by a
rounding): float32 needs no more than about 1e-5 relative slack for these computations.
"""

import math

import pytest
import test_exercises_ch02 as ch02
import test_exercises_ch03 as ch03
import test_exercises_ch06 as ch06
import test_exercises_ch10 as ch10
import test_exercises_ch11 as ch11
import test_exercises_ch13 as ch13
import test_exercises_ch21 as ch21
import test_exercises_ch22 as ch22
import test_exercises_ch23 as ch23
import torch

from helpers.exercises import (
    ExerciseError,
    check_additive_mask_attention,
    check_alibi_bias,
    check_blocked_attention,
    check_decode_step,
    check_decoder_layer_forward,
    check_mirror_weight,
    check_rank_loss,
    check_row_entropy,
    check_sinusoidal_table,
    check_smoothed_cross_entropy,
    check_teacher_forcing_loss,
    check_wilson_interval,
)

MISS = 1e-3  # relative


def nudged(x):
    """x with every floating-point number in it moved by MISS (relative), structure kept."""
    if isinstance(x, torch.Tensor):
        return x * (1 + MISS) if x.is_floating_point() else x
    if isinstance(x, float):
        return x * (1 + MISS)
    if isinstance(x, tuple):
        return tuple(nudged(v) for v in x)
    if isinstance(x, list):
        return [nudged(v) for v in x]
    if isinstance(x, dict):
        return {k: nudged(v) for k, v in x.items()}
    return x


def near_miss(fn):
    def wrapper(*args, **kwargs):
        return nudged(fn(*args, **kwargs))

    return wrapper


CASES = {
    "check_sinusoidal_table": (check_sinusoidal_table, ch02.table),
    "check_additive_mask_attention": (check_additive_mask_attention, ch03.additive),
    "check_alibi_bias": (check_alibi_bias, ch03.alibi),
    "check_decoder_layer_forward": (check_decoder_layer_forward, ch06.forward),
    "check_smoothed_cross_entropy": (check_smoothed_cross_entropy, ch10.smoothed_cross_entropy),
    "check_teacher_forcing_loss": (check_teacher_forcing_loss, ch10.teacher_forcing_loss),
    "check_wilson_interval": (check_wilson_interval, ch11.wilson),
    "check_decode_step": (check_decode_step, ch13.decode_step),
    "check_mirror_weight": (check_mirror_weight, ch21.mirror_weight),
    "check_row_entropy": (
        check_row_entropy,
        lambda w: -torch.special.xlogy(w, w).sum(-1) / math.log(2),
    ),
    "check_blocked_attention": (check_blocked_attention, ch22.blocked_attention),
    "check_rank_loss": (check_rank_loss, ch23.rank_loss),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_accepted_answer_passes_and_its_near_miss_does_not(name, capsys):
    checker, answer = CASES[name]
    checker(answer)
    with pytest.raises(ExerciseError):
        checker(near_miss(answer))
