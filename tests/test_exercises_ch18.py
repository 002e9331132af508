"""Chapter 18's checkers accept the book's answers and name each catalogued mistake
(tests/mistakes_ch18.py) with its own message."""

import mistakes_ch18 as m
import pytest
import torch
import torch.nn.functional as F

from helpers.core.modern import apply_rope, rope_angles
from helpers.exercises import (
    ExerciseError,
    check_gqa_attention,
    check_rope,
)


def test_rope_accepts_the_book_answer_and_the_library(capsys):
    check_rope(m.rope_correct)
    assert "all 3 checks passed" in capsys.readouterr().out

    def library(x, start_pos=0):
        positions = torch.arange(start_pos, start_pos + x.size(-2))
        return apply_rope(x, rope_angles(positions, x.size(-1)), layout="half")

    check_rope(library)


NAME = lambda v: getattr(v, "__name__", "")  # noqa: E731
ROPE_CATALOGUE = [
    (m.rope_interleaved, "RoFormer layout"),
    (m.rope_wrong_direction, "wrong way"),
    (m.rope_exponent_without_2, "exponent has a 2"),
    (m.rope_repeat_interleave_angles, r"cat\(angles, angles\)"),
    (m.rope_ignores_start_pos, "start_pos \\+ l"),
    (m.rope_positions_from_one, "not one later"),
]


@pytest.mark.parametrize(
    "mistake, message", ROPE_CATALOGUE, ids=lambda v: getattr(v, "__name__", "")
)
def test_rope_names_each_catalogued_mistake(mistake, message):
    with pytest.raises(ExerciseError, match=message):
        check_rope(mistake)


def test_gqa_accepts_the_book_answer_and_sdpa(capsys):
    check_gqa_attention(m.gqa_correct)
    assert "all 4 checks passed" in capsys.readouterr().out
    check_gqa_attention(
        lambda q, k, v, causal=False: F.scaled_dot_product_attention(
            q, k, v, is_causal=causal, enable_gqa=True
        )
    )


GQA_CATALOGUE = [
    (m.gqa_tiled, "repeat_interleave"),
    (m.gqa_no_scale, "divide the scores by sqrt"),
    (m.gqa_scale_d_k, "not by d_k"),
    (m.gqa_ignores_causal, "sees keys 0..i only"),
    (m.gqa_softmax_over_queries, "over the keys"),
    (m.gqa_no_repeat, "RuntimeError"),
    (m.gqa_masks_the_diagonal, "every key is masked gives NaN"),
]


@pytest.mark.parametrize(
    "mistake, message", GQA_CATALOGUE, ids=lambda v: getattr(v, "__name__", "")
)
def test_gqa_names_each_catalogued_mistake(mistake, message):
    with pytest.raises(ExerciseError, match=message):
        check_gqa_attention(mistake)
