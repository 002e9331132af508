"""Chapter 22's checker accepts the book's blocked (online-softmax) attention and rejects the
likely mistakes, each with its own hint."""

import math

import pytest
import torch

from helpers.exercises import ExerciseError, check_blocked_attention

NEG_INF = float("-inf")


def blocked_attention(Q, K, V, mask=None, block_size=64, scale=True, rescale=True, guard=True,
                      running_max=True, flip_mask=False):  # fmt: skip
    """The book's solution, with switches that introduce one mistake each."""
    B, h, Lq, d_k = Q.shape
    m = Q.new_full((B, h, Lq, 1), NEG_INF)
    s = Q.new_zeros((B, h, Lq, 1))
    acc = Q.new_zeros((B, h, Lq, V.size(-1)))
    for start in range(0, K.size(-2), block_size):
        k, v = K[..., start : start + block_size, :], V[..., start : start + block_size, :]
        scores = Q @ k.transpose(-2, -1)
        if scale:
            scores = scores / math.sqrt(d_k)
        if mask is not None:
            blocked = mask[..., start : start + block_size]
            scores = scores.masked_fill(~blocked if flip_mask else blocked, NEG_INF)
        m_new = torch.maximum(m, scores.amax(-1, keepdim=True)) if running_max else 0 * s
        safe = m_new.masked_fill(m_new == NEG_INF, 0.0) if guard else m_new
        p = torch.exp(scores - safe)
        correction = torch.exp(m - safe) if rescale else torch.ones_like(m)
        s = s * correction + p.sum(-1, keepdim=True)
        acc = acc * correction + p @ v
        m = m_new
    if guard:
        return acc / s.clamp_min(torch.finfo(s.dtype).tiny)
    return acc / s


def test_the_books_solution_passes(capsys):
    check_blocked_attention(blocked_attention)
    assert "check_blocked_attention: all 7 checks passed" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, hint",
    [
        (dict(scale=False), "not divided by sqrt"),
        (dict(rescale=False), "multiply the running sum"),
        (dict(flip_mask=True), "polarity is reversed"),
        (dict(guard=False), "exp\\(-inf - \\(-inf\\)\\) is NaN"),
        (dict(running_max=False), "subtract the running maximum"),
    ],
)
def test_mistakes_are_named(mistake, hint):
    with pytest.raises(ExerciseError, match=hint):
        check_blocked_attention(lambda *a: blocked_attention(*a, **mistake))


def test_softmax_over_the_queries_is_rejected():
    def wrong_axis(Q, K, V, mask=None, block_size=64):
        scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(mask, -1e9)
        return scores.softmax(-2) @ V

    with pytest.raises(ExerciseError, match="over the last dimension"):
        check_blocked_attention(wrong_axis)


def test_wrong_shape_and_exceptions_are_explained():
    with pytest.raises(ExerciseError, match=r"\[B, h, Lq, d_v\]"):
        check_blocked_attention(lambda Q, K, V, mask=None, block_size=64: Q)
    with pytest.raises(ExerciseError, match="your code raised ZeroDivisionError"):
        check_blocked_attention(lambda *a: 1 / 0)


def test_a_full_matrix_solution_is_rejected():
    """Right outputs, but the whole [Lq, Lk] score matrix built at once (block_size ignored)."""

    def full_matrix(Q, K, V, mask=None, block_size=64):
        scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(mask, NEG_INF)
        weights = scores.softmax(-1)
        if mask is not None:
            weights = weights.masked_fill(mask.all(-1, keepdim=True), 0.0)
        return weights @ V

    with pytest.raises(ExerciseError, match=r"whole score matrix") as err:
        check_blocked_attention(full_matrix)
    assert "96 queries, 96 keys" in str(err.value)  # it passed every case before the last


def test_a_full_matrix_per_head_is_rejected():
    """One head at a time, but all of its keys in one block: one head's whole score matrix."""

    def full_per_head(Q, K, V, mask=None, block_size=64):
        out = torch.empty(*Q.shape[:-1], V.size(-1), dtype=Q.dtype)
        for b in range(Q.size(0)):
            for h in range(Q.size(1)):
                blocked = (
                    None
                    if mask is None
                    else mask.expand(*Q.shape[:2], -1, -1)[b : b + 1, h : h + 1]
                )
                out[b, h] = blocked_attention(
                    Q[b : b + 1, h : h + 1], K[b : b + 1, h : h + 1], V[b : b + 1, h : h + 1],
                    blocked, block_size=K.size(-2),
                )[0, 0]  # fmt: skip
        return out

    with pytest.raises(ExerciseError, match=r"bmm made a tensor of shape \[1, 96, 96\]"):
        check_blocked_attention(full_per_head)


def test_the_largest_intermediate_is_reported(capsys):
    check_blocked_attention(blocked_attention)
    assert "the largest: [2, 2, 96, 10], from new_zeros" in capsys.readouterr().out
