"""Checkers for the exercises of chapter 8 (test before you train).

A property test is checked by running it: on a correct model it must pass, on models with a
known mask bug it must fail. The models are small, random and left in training mode with
dropout, as a model usually is when a test receives it.
"""

from __future__ import annotations

import torch

from helpers.core.data import make_reversal_dataset
from helpers.core.masks import make_causal_mask, make_padding_mask
from helpers.core.model import Transformer
from helpers.core.vocab import VOCAB_SIZE

from ._common import call, fail, passed

__all__ = ["check_causality_test", "check_padding_test"]


def _self_mask(tgt_in, causal):
    return causal | make_padding_mask(tgt_in)


class _NoCausalMask(Transformer):
    """Decoder self-attention blocks padding only: every position sees the future."""

    def decode(self, tgt_in, memory, src_mask, need_weights=True):
        self_mask = make_padding_mask(tgt_in)
        h, w = self.decoder(tgt_in, memory, self_mask, src_mask, need_weights=need_weights)
        return self.out_proj(h), w


class _FlippedCausalMask(Transformer):
    """The causal mask with the wrong polarity: ~triu(1), so position i sees only j > i."""

    def decode(self, tgt_in, memory, src_mask, need_weights=True):
        flipped = ~make_causal_mask(tgt_in.size(1))
        h, w = self.decoder(
            tgt_in, memory, _self_mask(tgt_in, flipped), src_mask, need_weights=need_weights
        )
        return self.out_proj(h), w


class _PeeksOneAhead(Transformer):
    """triu(diagonal=2): position i also sees token i + 1, one step into the future."""

    def decode(self, tgt_in, memory, src_mask, need_weights=True):
        L = tgt_in.size(1)
        ahead = torch.ones(L, L, dtype=torch.bool).triu(2)[None, None]
        h, w = self.decoder(
            tgt_in, memory, _self_mask(tgt_in, ahead), src_mask, need_weights=need_weights
        )
        return self.out_proj(h), w


class _PeeksAheadAfterFirst(Transformer):
    """Position 0 is masked correctly; every later position i also sees token i + 1. A test
    that checks only t = 0 misses it."""

    def decode(self, tgt_in, memory, src_mask, need_weights=True):
        L = tgt_in.size(1)
        ahead = torch.ones(L, L, dtype=torch.bool).triu(2)
        ahead[0] = make_causal_mask(L)[0, 0, 0]  # row 0: the correct triu(1) row
        h, w = self.decoder(
            tgt_in,
            memory,
            _self_mask(tgt_in, ahead[None, None]),
            src_mask,
            need_weights=need_weights,
        )
        return self.out_proj(h), w


class _PeeksTwoAhead(Transformer):
    """Position i also sees token i + 2, but not i + 1: triu(1) with the diagonal j = i + 2
    open. A test that changes only token t + 1 and looks only at position t misses it."""

    def decode(self, tgt_in, memory, src_mask, need_weights=True):
        L = tgt_in.size(1)
        blocked = torch.ones(L, L, dtype=torch.bool).triu(1)
        blocked.diagonal(2).fill_(False)  # query i may read key i + 2
        h, w = self.decoder(
            tgt_in,
            memory,
            _self_mask(tgt_in, blocked[None, None]),
            src_mask,
            need_weights=need_weights,
        )
        return self.out_proj(h), w


class _NoPaddingMask(Transformer):
    """The source padding mask is all False: encoder and cross-attention read <pad>."""

    def encode(self, src):
        src_mask = torch.zeros_like(make_padding_mask(src))
        return self.encoder(src, src_mask), src_mask


class _QueriesMasked(Transformer):
    """The encoder's padding mask is [B, 1, L, 1]: padded queries blocked, padded keys read."""

    def encode(self, src):
        key_mask = make_padding_mask(src)
        return self.encoder(src, key_mask.transpose(-1, -2)), key_mask


class _PaddingSeenAfterFirst(Transformer):
    """Cross-attention blocks the source padding for target position 0 only: every later
    target position reads the <pad> rows of the memory. A test that compares only position 0
    misses it."""

    def decode(self, tgt_in, memory, src_mask, need_weights=True):
        B, Lt, Ls = tgt_in.size(0), tgt_in.size(1), src_mask.size(-1)
        cross = src_mask.expand(B, 1, Lt, Ls).clone()
        cross[:, :, 1:] = False  # queries 1.. see every key, <pad> included
        self_mask = _self_mask(tgt_in, make_causal_mask(Lt))
        h, w = self.decoder(tgt_in, memory, self_mask, cross, need_weights=need_weights)
        return self.out_proj(h), w


def _model(cls) -> Transformer:
    torch.manual_seed(8)
    # one layer: with two, a one-step leak reaches two steps ahead through the layer below
    return cls(VOCAB_SIZE, VOCAB_SIZE, d_model=32, num_heads=2, dff=64, num_layers=1, dropout=0.1)


def _batch():
    src, tgt = make_reversal_dataset(4, seed=8, max_len=8)
    return src, tgt[:, :-1]


def _verdict(fn, cls, where):
    model = _model(cls).train()  # as a model usually is: dropout on
    src, tgt_in = _batch()
    got = call(fn, model, src, tgt_in, where=where)
    if isinstance(got, torch.Tensor) and got.numel() == 1 and got.dtype == torch.bool:
        got = bool(got)
    if not isinstance(got, bool):
        fail(f"the test should return True or False, got {type(got).__name__} {got!r}", where)
    return got


def check_causality_test(fn) -> None:
    """Exercise 8.2: fn(model, src, tgt_in) -> True if the model's decoder is causal (the
    outputs at positions <= t do not change when the target tokens after t change, for every
    t), else False. Run on a correct model (must pass) and on five with a broken causal mask
    (all must fail): none, the wrong polarity, position i sees token i + 1, only positions
    after 0 see token i + 1, and position i sees token i + 2 but not i + 1. Used in chapter 8.
    """
    if not _verdict(fn, Transformer, "a correct Transformer (in training mode, dropout 0.1)"):
        fail(
            "your test says a correct model is not causal",
            "a correct Transformer (in training mode, dropout 0.1)",
            "switch dropout off with model.eval() (two forward passes in training mode differ), "
            "and compare with a tolerance (torch.allclose(..., atol=1e-5)), not with ==",
        )
    broken = [
        (
            _NoCausalMask,
            "a model with no causal mask",
            "change the tokens after t and compare the outputs at positions 0..t before and after",
        ),
        (
            _FlippedCausalMask,
            "a model whose causal mask has the wrong polarity (~triu(1))",
            "compare the outputs at positions 0..t, and require them unchanged",
        ),
        (
            _PeeksOneAhead,
            "a model in which position i also sees token i + 1 (triu(diagonal=2))",
            "for each t, change every token from t + 1 on (tgt_in[:, t + 1:]) and compare "
            "every position 0..t: a test that changes only tokens further ahead misses "
            "this leak",
        ),
        (
            _PeeksAheadAfterFirst,
            "a model whose position 0 is masked correctly but every later position i sees "
            "token i + 1",
            "repeat the check for every t from 0 to L - 2, not only for t = 0",
        ),
        (
            _PeeksTwoAhead,
            "a model in which position i also sees token i + 2 (but not i + 1)",
            "change every token after t, not only token t + 1, and compare every position "
            "0..t, not only position t",
        ),
    ]
    for cls, where, hint in broken:
        if _verdict(fn, cls, where):
            fail("your test passed a model that sees the future", where, hint)
    passed(
        "check_causality_test",
        1 + len(broken),
        f"passes the correct model, fails {len(broken)} leaks",
    )


def check_padding_test(fn) -> None:
    """Exercise 8.3: fn(model, src, tgt_in) -> True if appending <pad> to the source changes no
    logit, else False. Run on a correct model (must pass) and on three with a broken padding
    mask (all must fail): none, one that masks padded queries instead of keys, and one whose
    cross-attention blocks <pad> for target position 0 only. Used in chapter 8.
    """
    if not _verdict(fn, Transformer, "a correct Transformer (in training mode, dropout 0.1)"):
        fail(
            "your test says a correct model depends on padding",
            "a correct Transformer (in training mode, dropout 0.1)",
            "switch dropout off with model.eval(), append <pad> (id 0) to src only, and compare "
            "the logits with a tolerance (torch.allclose(..., atol=1e-5))",
        )
    compare_all = (
        "append extra <pad> columns to src (F.pad(src, (0, k), value=PAD_ID)), keep "
        "tgt_in, and compare all the logits"
    )
    broken = [
        (_NoPaddingMask, "a model with no padding mask", compare_all),
        (_QueriesMasked, "a model whose encoder masks padded queries instead of keys", compare_all),
        (
            _PaddingSeenAfterFirst,
            "a model whose cross-attention blocks <pad> for target position 0 only",
            "compare the logits at every target position, not only position 0",
        ),
    ]
    for cls, where, hint in broken:
        if _verdict(fn, cls, where):
            fail("your test passed a model whose output depends on the padding", where, hint)
    passed(
        "check_padding_test", 1 + len(broken), f"passes the correct model, fails {len(broken)} bugs"
    )
