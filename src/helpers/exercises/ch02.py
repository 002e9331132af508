"""Checkers for the exercises of chapter 2 (embeddings and positions)."""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from helpers.core.embeddings import sinusoidal_position_encoding

from ._common import call, expect_close, expect_shape, expect_tensor, fail, passed

__all__ = ["check_sinusoidal_table", "check_learned_positions"]


def _wrong_tables(max_len: int, d: int) -> list[tuple[torch.Tensor, str]]:
    """Tables that common slips produce, each with the hint that explains it."""
    p = torch.arange(max_len, dtype=torch.float64)[:, None]
    i = torch.arange(d // 2, dtype=torch.float64)
    angle = p / 10000 ** (2 * i / d)
    shifted = (p + 1) / 10000 ** (2 * i / d)  # positions counted from 1

    def interleave(even, odd):
        t = torch.empty(max_len, d, dtype=torch.float64)
        t[:, 0::2], t[:, 1::2] = even, odd
        return t

    return [
        (interleave(angle.cos(), angle.sin()), "sine and cosine are swapped: sin on even dims"),
        (
            torch.cat([angle.sin(), angle.cos()], dim=1),
            "the sines and cosines are interleaved (dims 2i and 2i+1), not two halves",
        ),
        (
            interleave((p / 10000 ** (i / d)).sin(), (p / 10000 ** (i / d)).cos()),
            "the exponent is 2i/d, where 2i is the even dimension index (0, 2, 4, ...)",
        ),
        (
            interleave((p / 10000 ** (4 * i / d)).sin(), (p / 10000 ** (4 * i / d)).cos()),
            "pair i uses 10000^(2i/d) with i = 0, 1, 2, ...: you doubled the exponent",
        ),
        (
            interleave(shifted.sin(), shifted.cos()),
            "positions start at 0: row 0 is sin 0 = 0 and cos 0 = 1",
        ),
    ]


def check_sinusoidal_table(fn) -> None:
    """Exercise 2.3: fn(max_len, d) -> float tensor [max_len, d], the sinusoidal table.

    Compared with helpers.sinusoidal_position_encoding. Used in chapter 2.
    """
    sizes = [(6, 4), (50, 16), (64, 128)]
    for max_len, d in sizes:
        where = f"max_len={max_len}, d={d}"
        got = expect_tensor("the table", call(fn, max_len, d, where=where), where)
        expected = sinusoidal_position_encoding(max_len, d)
        expect_shape("the table", got, expected.shape, where, "one row per position, d columns")
        if not got.dtype.is_floating_point:
            fail(f"the table has dtype {got.dtype}, expected a float dtype", where)
        if (got.double() - expected.double()).abs().max() > 1e-4:
            for wrong, hint in _wrong_tables(max_len, d):
                if (got.double() - wrong).abs().max() < 1e-4:
                    expect_close("the table", got, expected, atol=1e-4, where=where, hint=hint)
            expect_close(
                "the table",
                got,
                expected,
                atol=1e-4,
                where=where,
                hint="PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(p / 10000^(2i/d))",
            )
    passed("check_sinusoidal_table", len(sizes))


def _rms(t: torch.Tensor) -> float:
    return t.detach().double().pow(2).mean().sqrt().item()


def _check_initial_scales(cls, vocab: int = 1000, d: int = 128, max_len: int = 1000) -> None:
    """The token part and the position part start with an RMS near 1 each (within 5 %).

    Tables of 1000 rows make the measured RMS precise to about 0.2 %, so a zeroed padding row
    passes and a near miss such as std=0.1 (RMS 1.13) does not.
    """
    where = f"cls({vocab}, {d}, {max_len}), freshly built"
    with torch.random.fork_rng():  # leave the reader's random stream as it was
        torch.manual_seed(0)
        module = call(cls, vocab, d, max_len, where=where)
    tok, pos = getattr(module, "tok", None), getattr(module, "pos", None)
    if not isinstance(tok, nn.Embedding) or not isinstance(pos, nn.Embedding):
        return  # the structure check below names what is missing
    token_rms, position_rms = _rms(tok.weight) * math.sqrt(d), _rms(pos.weight)
    scales = (
        f"the token part tok(ids) * sqrt(d_model) starts with RMS {token_rms:.2f}, "
        f"the position part pos(positions) with RMS {position_rms:.2f}"
    )
    if abs(token_rms - 1) > 0.05:
        loud = token_rms > 1
        fail(
            f"{scales}: the token part is {'too loud' if loud else 'too quiet'}; "
            "both should start near 1",
            where,
            "draw tok with standard deviation d_model**-0.5, as TokenAndPosition does: "
            "nn.init.normal_(self.tok.weight, std=d_model**-0.5)"
            + (
                "; nn.Embedding's default N(0, 1) times sqrt(d_model) drowns the positions"
                if loud
                else ""
            ),
        )
    if abs(position_rms - 1) > 0.05:
        fail(
            f"{scales}: the position part should start near 1, like the token part",
            where,
            "leave pos at nn.Embedding's default initialisation, N(0, 1)",
        )


def check_learned_positions(cls) -> None:
    """Exercise 2.2: cls(vocab_size, d_model, max_len) is a module with `tok`
    (nn.Embedding(vocab_size, d_model)) and `pos` (nn.Embedding(max_len, d_model)); calling
    it on ids [B, L] returns tok(ids) * sqrt(d_model) + pos(positions 0..L-1), [B, L, d_model],
    and an input longer than max_len raises a ValueError that names max_len.

    The two parts must start equally loud: `tok` drawn with standard deviation d_model**-0.5,
    so that tok(ids) * sqrt(d_model) has an RMS near 1, and `pos` at nn.Embedding's N(0, 1)
    (within 5 % each). Checked at d_model = 128, where PyTorch's N(0, 1) token table times
    sqrt(128) has an RMS near 11.3. Five checks: the starting scales, the two tables and the
    parameter count, the output at two lengths, and the error past max_len. The reader's
    global random stream is left as it was.

    Used in chapter 2.
    """
    with torch.random.fork_rng():  # leave the reader's random stream as it was
        _check_learned_positions(cls)


def _check_learned_positions(cls) -> None:
    vocab, d, max_len = 13, 16, 10
    _check_initial_scales(cls)
    checks = 1
    where = f"cls({vocab}, {d}, {max_len})"
    torch.manual_seed(0)
    module = call(cls, vocab, d, max_len, where=where)
    for name, rows in (("tok", vocab), ("pos", max_len)):
        table = getattr(module, name, None)
        if not isinstance(table, nn.Embedding):
            fail(
                f"module.{name} should be an nn.Embedding, got {type(table).__name__}",
                where,
                "name the token table `tok` and the position table `pos`",
            )
        expect_shape(
            f"module.{name}.weight", table.weight, (rows, d), where, f"{name}: one row per index"
        )
    n_params = sum(p.numel() for p in module.parameters())
    if n_params != (vocab + max_len) * d:
        fail(
            f"the module has {n_params} parameters, expected (vocab + max_len) * d = "
            f"{(vocab + max_len) * d}",
            where,
        )
    checks += 1
    with torch.no_grad():  # make every row distinct, so that mix-ups show
        module.tok.weight.normal_()
        module.pos.weight.normal_()

    for L in (7, max_len):
        # ids below max_len too, so that a lookup of the position table by token id runs
        ids = torch.randint(0, max_len, (3, L), generator=torch.Generator().manual_seed(L))
        where = f"ids of shape (3, {L})"
        got = call(module, ids, where=where)
        expect_shape("the output", got, (3, L, d), where, "[B, L] ids -> [B, L, d_model]")
        with torch.no_grad():
            tokens = module.tok(ids)
            positions = module.pos.weight[:L]
            expected = tokens * math.sqrt(d) + positions
            wrong = [
                (tokens * math.sqrt(d), "the positions are not added to the tokens"),
                (tokens + positions, "the token part is not multiplied by sqrt(d_model)"),
                (
                    tokens * math.sqrt(d) + module.pos(ids),
                    "the position table is indexed by the token ids; index it by position "
                    "(torch.arange(L))",
                ),
                (
                    tokens * math.sqrt(d) + positions * math.sqrt(d),
                    "only the token part is scaled by sqrt(d_model), not the positions",
                ),
            ]
        hint = next((h for w, h in wrong if torch.allclose(got, w, atol=1e-5)), "")
        expect_close("the output", got, expected, where=where, hint=hint)
        checks += 1

    too_long = torch.zeros(1, max_len + 1, dtype=torch.long)
    where = f"ids of shape (1, {max_len + 1}), one position past max_len={max_len}"
    try:
        module(too_long)
    except ValueError as err:
        if "max_len" not in str(err):
            fail(
                f"the ValueError says {str(err)!r}",
                where,
                "name max_len in the message, so the reader knows what to change",
            )
    except Exception as err:
        fail(
            f"your module raised {type(err).__name__}: {err}",
            where,
            "check the length before the lookup and raise a ValueError that names max_len",
        )
    else:
        fail(
            "no error was raised",
            where,
            "there is no row for this position: raise a ValueError that names max_len",
        )
    checks += 1
    passed("check_learned_positions", checks)
