"""The checkers of chapter 3's exercises accept the book's answers and explain wrong ones."""

import math

import pytest
import torch
import torch.nn.functional as F

from helpers.exercises import ExerciseError, check_additive_mask_attention, check_alibi_bias


def additive(q, k, v, mask, *, scale=True, dim=-1, reverse=False, zero_rows=True):
    blocked = ~mask if reverse else mask
    float_mask = torch.zeros(blocked.shape, dtype=q.dtype).masked_fill(blocked, float("-inf"))
    scores = q @ k.transpose(-2, -1) / (math.sqrt(q.size(-1)) if scale else 1.0)
    weights = (scores + float_mask).softmax(dim=dim)
    if zero_rows:
        weights = weights.nan_to_num(0.0)
    return weights @ v


def test_additive_accepts_the_book_answer(capsys):
    check_additive_mask_attention(additive)
    assert "all 4 checks passed" in capsys.readouterr().out


def test_additive_accepts_sdpa():  # torch 2.13: zeros on fully masked rows
    check_additive_mask_attention(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, ~m))


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (dict(scale=False), "not divided by sqrt"),
        (dict(dim=-2), "wrong dimension"),
        (dict(reverse=True), "polarity is reversed"),
        (dict(zero_rows=False), "NaN"),
    ],
)
def test_additive_rejects_a_wrong_attention(wrong, hint):
    with pytest.raises(ExerciseError, match=hint):
        check_additive_mask_attention(lambda q, k, v, m: additive(q, k, v, m, **wrong))


def test_additive_rejects_finfo_min_uniform_rows():
    def finfo_min(q, k, v, mask):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        return scores.masked_fill(mask, torch.finfo(q.dtype).min).softmax(-1) @ v

    with pytest.raises(ExerciseError, match="uniform average"):
        check_additive_mask_attention(finfo_min)


def alibi(num_heads, L, *, sign=-1, reverse=False, signed=False):
    slopes = torch.tensor([2 ** (-8 * (i + 1) / num_heads) for i in range(num_heads)])
    if reverse:
        slopes = slopes.flip(0)
    pos = torch.arange(L)
    dist = (pos[:, None] - pos[None, :]).float()
    return sign * slopes[:, None, None] * (dist if signed else dist.abs())


def test_alibi_accepts_the_book_answer(capsys):
    check_alibi_bias(alibi)
    assert "all 2 checks passed" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (dict(sign=1), "must be a penalty"),
        (dict(reverse=True), "reverse order"),
        (dict(signed=True), r"\|i - j\|"),
    ],
)
def test_alibi_rejects_a_wrong_bias(wrong, hint):
    with pytest.raises(ExerciseError, match=hint):
        check_alibi_bias(lambda h, L: alibi(h, L, **wrong))


def test_alibi_rejects_a_wrong_shape():
    with pytest.raises(ExerciseError, match="shape"):
        check_alibi_bias(lambda h, L: alibi(h, L)[0])
