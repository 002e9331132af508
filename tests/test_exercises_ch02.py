"""The checkers of chapter 2's exercises accept the book's answers and explain wrong ones."""

import math

import pytest
import torch
import torch.nn as nn

from helpers import sinusoidal_position_encoding
from helpers.exercises import ExerciseError, check_learned_positions, check_sinusoidal_table


def table(max_len, d, *, swap=False, halves=False, start=0):
    p = torch.arange(start, start + max_len, dtype=torch.float32)[:, None]
    angle = p / 10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    sin, cos = (angle.cos(), angle.sin()) if swap else (angle.sin(), angle.cos())
    if halves:
        return torch.cat([sin, cos], dim=1)
    t = torch.zeros(max_len, d)
    t[:, 0::2], t[:, 1::2] = sin, cos
    return t


def test_table_accepts_the_book_answer(capsys):
    check_sinusoidal_table(table)
    check_sinusoidal_table(sinusoidal_position_encoding)
    assert "all 3 checks passed" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (dict(swap=True), "swapped"),
        (dict(halves=True), "interleaved"),
        (dict(start=1), "positions start at 0"),
    ],
)
def test_table_rejects_a_wrong_table(wrong, hint):
    with pytest.raises(ExerciseError, match=hint):
        check_sinusoidal_table(lambda max_len, d: table(max_len, d, **wrong))


def test_table_rejects_a_wrong_frequency():
    def wrong(max_len, d):  # 10000^(i/d) with i = 0, 1, 2, ...
        p = torch.arange(max_len, dtype=torch.float32)[:, None]
        angle = p / 10000 ** (torch.arange(d // 2, dtype=torch.float32) / d)
        t = torch.zeros(max_len, d)
        t[:, 0::2], t[:, 1::2] = angle.sin(), angle.cos()
        return t

    with pytest.raises(ExerciseError, match="the exponent is 2i/d"):
        check_sinusoidal_table(wrong)


class Learned(nn.Module):
    def __init__(
        self,
        vocab_size,
        d_model,
        max_len,
        *,
        add=True,
        scale=True,
        by_ids=False,
        check=True,
        tok_std=None,
        pos_std=1.0,
    ):
        super().__init__()
        self.d, self.max_len = d_model, max_len
        self.add, self.scale, self.by_ids, self.check = add, scale, by_ids, check
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.tok.weight, std=d_model**-0.5 if tok_std is None else tok_std)
        nn.init.normal_(self.pos.weight, std=pos_std)

    def forward(self, ids):
        if self.check and ids.size(1) > self.max_len:
            raise ValueError(f"length {ids.size(1)} > max_len={self.max_len}")
        x = self.tok(ids) * (math.sqrt(self.d) if self.scale else 1.0)
        if self.add:
            x = x + self.pos(ids if self.by_ids else torch.arange(ids.size(1)))
        return x


def test_learned_accepts_the_book_answer(capsys):
    check_learned_positions(Learned)
    assert "check_learned_positions: all 5 checks passed" in capsys.readouterr().out


def test_learned_accepts_a_zeroed_padding_row():
    class Padded(Learned):
        def __init__(self, vocab_size, d_model, max_len):
            super().__init__(vocab_size, d_model, max_len)
            with torch.no_grad():
                self.tok.weight[0].zero_()

    check_learned_positions(Padded)


def test_learned_leaves_the_global_random_stream_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check_learned_positions(Learned)
    torch.testing.assert_close(torch.rand(3), expected, rtol=0, atol=0)


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (dict(add=False), "positions are not added"),
        (dict(scale=False), "not multiplied by sqrt"),
        (dict(by_ids=True), "indexed by the token ids"),
        (dict(check=False), "IndexError"),
    ],
)
def test_learned_rejects_a_wrong_module(wrong, hint):
    with pytest.raises(ExerciseError, match=hint):
        check_learned_positions(lambda v, d, m: Learned(v, d, m, **wrong))


def test_learned_rejects_the_loud_default_token_table():
    # the old reference answer: nn.Embedding's N(0, 1) token table times sqrt(d) drowns the
    # N(0, 1) positions (RMS about 11.3 against 1.0 at d_model = 128)
    with pytest.raises(ExerciseError) as err:
        check_learned_positions(lambda v, d, m: Learned(v, d, m, tok_std=1.0))
    message = str(err.value)
    assert "too loud" in message and "drowns the positions" in message
    token_rms = float(message.split("starts with RMS ")[1].split(",")[0])
    assert 10.5 < token_rms < 12.0  # sqrt(128) = 11.3
    assert "std=d_model**-0.5" in message


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (dict(tok_std=1 / 128), "the token part is too quiet"),  # std 1/d instead of d^-1/2
        (dict(tok_std=0.12), "the token part is too loud"),  # RMS 1.36
        (dict(tok_std=0.1), "the token part is too loud"),  # RMS 1.13: a round-number near miss
        (dict(tok_std=0.08), "the token part is too quiet"),  # RMS 0.91
        (dict(pos_std=128**-0.5), "the position part should start near 1"),
    ],
)
def test_learned_rejects_unbalanced_initial_scales(wrong, hint):
    with pytest.raises(ExerciseError, match=hint):
        check_learned_positions(lambda v, d, m: Learned(v, d, m, **wrong))


def test_learned_rejects_a_module_without_a_position_table():
    class NoTable(nn.Module):
        def __init__(self, vocab_size, d_model, max_len):
            super().__init__()
            self.tok = nn.Embedding(vocab_size, d_model)

    with pytest.raises(ExerciseError, match=r"module.pos should be an nn.Embedding"):
        check_learned_positions(NoTable)
