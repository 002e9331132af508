"""The checkers of chapter 3's exercises accept the book's answers and explain wrong ones."""

import math

import mistakes_ch03 as mistakes
import pytest
import torch
import torch.nn.functional as F

from helpers.exercises import (
    ExerciseError,
    check_additive_mask_attention,
    check_alibi_bias,
    check_multi_head_attention,
    check_scaled_dot_product_attention,
)


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


# --- Exercises 3.4 and 3.5: every catalogued mistake named, the book's answers accepted ---


def test_sdpa_accepts_the_book_answer(capsys):
    check_scaled_dot_product_attention(mistakes.sdpa_correct)
    assert "all 4 checks passed" in capsys.readouterr().out


def test_sdpa_accepts_minus_inf():  # no query of the checker's inputs has every key blocked
    def minus_inf(q, k, v, padding_mask=None, causal=False):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        mask = mistakes._mask(q, k, padding_mask, causal)
        weights = scores.masked_fill(mask, float("-inf")).softmax(-1)
        return weights @ v, weights

    check_scaled_dot_product_attention(minus_inf)


def _name(param):
    return getattr(param, "__name__", "message")


@pytest.mark.parametrize("mistake, message", mistakes.SDPA_MISTAKES.items(), ids=_name)
def test_sdpa_names_each_catalogued_mistake(mistake, message):
    with pytest.raises(ExerciseError, match=message):
        check_scaled_dot_product_attention(mistake)


def test_sdpa_messages_are_distinct():
    assert len(set(mistakes.SDPA_MISTAKES.values())) == len(mistakes.SDPA_MISTAKES) - 1  # -inf


def test_sdpa_unknown_mistake_says_what_differs():
    def doubled(q, k, v, padding_mask=None, causal=False):
        out, w = mistakes.sdpa_correct(q, k, v, padding_mask, causal)
        return 2 * out, w

    with pytest.raises(ExerciseError, match=r"on input 1 .*the output\[.*values differ"):
        check_scaled_dot_product_attention(doubled)


def test_mha_accepts_the_book_answer(capsys):
    check_multi_head_attention(mistakes.MHACorrect)
    assert "all 4 checks passed" in capsys.readouterr().out


@pytest.mark.parametrize("mistake, message", mistakes.MHA_MISTAKES.items(), ids=_name)
def test_mha_names_each_catalogued_mistake(mistake, message):
    with pytest.raises(ExerciseError, match=message):
        check_multi_head_attention(mistake)


def test_mha_refuses_other_parameter_names():
    class Fused(mistakes.MHACorrect):
        def __init__(self, d_model, num_heads):
            super().__init__(d_model, num_heads)
            self.qkv = torch.nn.Linear(d_model, 3 * d_model)

    with pytest.raises(ExerciseError, match="do not load into your module"):
        check_multi_head_attention(Fused)


def test_mha_accepts_a_buffer_of_its_own():  # e.g. a causal mask kept as a buffer
    class WithBuffer(mistakes.MHACorrect):
        def __init__(self, d_model, num_heads):
            super().__init__(d_model, num_heads)
            self.register_buffer("future", torch.ones(8, 8, dtype=torch.bool).triu(1))

    check_multi_head_attention(WithBuffer)


def test_mha_refuses_linear_layers_without_bias():
    class NoBias(mistakes.MHACorrect):
        def __init__(self, d_model, num_heads):
            super().__init__(d_model, num_heads)
            self.W_q, self.W_k, self.W_v, self.W_o = (
                torch.nn.Linear(d_model, d_model, bias=False) for _ in range(4)
            )

    with pytest.raises(ExerciseError, match="unexpected: W_q.bias"):
        check_multi_head_attention(NoBias)


def test_sdpa_names_a_swapped_return_pair():
    def swapped(q, k, v, padding_mask=None, causal=False):
        out, weights = mistakes.sdpa_correct(q, k, v, padding_mask, causal)
        return weights, out

    with pytest.raises(ExerciseError, match=r"return \(output, weights\), in that order"):
        check_scaled_dot_product_attention(swapped)
