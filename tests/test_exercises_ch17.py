"""Chapter 17's checker accepts a fixed model and rejects half-fixed ones with the right hint."""

import pytest
import torch

from helpers import Transformer, make_causal_mask, make_padding_mask
from helpers.exercises import ExerciseError, check_fixed_model
from helpers.exercises.ch17 import BuggyTransformer


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


class Buggy(BuggyTransformer):
    """The chapter's broken model, its causal mask made replaceable by the subclasses below."""

    def decode(self, tgt_in, memory, src_mask, need_weights=True):
        L = tgt_in.size(1)
        self_mask = self.causal(L) | make_padding_mask(tgt_in)
        hidden, cross = self.decoder(tgt_in, memory, self_mask, src_mask, need_weights=need_weights)
        return self.out_proj(hidden), cross

    @staticmethod
    def causal(L):
        return torch.tril(torch.ones(L, L, dtype=torch.bool))


class SourceFixed(Buggy):
    def encode(self, src):
        src_mask = make_padding_mask(src)
        return self.encoder(src, src_mask), src_mask


class ReferenceSolution(BuggyTransformer):
    """The chapter's solution to exercise 17.3, as written there."""

    def encode(self, src):
        src_mask = make_padding_mask(src)
        return self.encoder(src, src_mask), src_mask

    def decode(self, tgt_in, memory, src_mask, need_weights=True):
        causal = make_causal_mask(tgt_in.size(1), tgt_in.device)
        self_mask = causal | make_padding_mask(tgt_in)
        hidden, cross = self.decoder(tgt_in, memory, self_mask, src_mask, need_weights=need_weights)
        return self.out_proj(hidden), cross


class FixedTransformer(Transformer):
    """The answer that fixes nothing: a healthy model that never was the broken one."""


class UnchangedSubclass(BuggyTransformer):
    """A subclass of the broken model that overrides nothing."""


class Fixed(SourceFixed):
    @staticmethod
    def causal(L):
        return make_causal_mask(L)


class DiagonalZero(SourceFixed):
    @staticmethod
    def causal(L):
        return torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=0)


class NoCausalMask(SourceFixed):
    @staticmethod
    def causal(L):
        return torch.zeros(L, L, dtype=torch.bool)


class OwnSizes(Fixed):
    """Ignores the sizes it is given: a healthy model, but not the one the checker asked for."""

    def __init__(self, src_vocab, tgt_vocab, max_len, **sizes):
        super().__init__(src_vocab, tgt_vocab, max_len=max_len, d_model=16, num_heads=2)


def test_the_fixed_model_passes(capsys):
    check_fixed_model(Fixed)
    assert "check_fixed_model: all 21 checks passed" in capsys.readouterr().out


def test_the_reference_solution_passes(capsys):
    check_fixed_model(ReferenceSolution)
    assert "check_fixed_model: all 21 checks passed" in capsys.readouterr().out


def test_a_healthy_model_that_fixes_nothing_is_rejected():
    # `class FixedTransformer(Transformer): pass` computes the right logits, but fixes nothing
    with pytest.raises(ExerciseError, match="is not a subclass of BuggyTransformer"):
        check_fixed_model(FixedTransformer)


def test_a_subclass_that_overrides_nothing_is_rejected():
    with pytest.raises(ExerciseError, match="check_model still flags"):
        check_fixed_model(UnchangedSubclass)


def test_a_model_instance_is_rejected():
    with pytest.raises(ExerciseError, match="is not a subclass of BuggyTransformer"):
        check_fixed_model(Fixed(13, 13))


def test_the_broken_model_is_rejected_naming_every_failed_check():
    with pytest.raises(ExerciseError, match="flags fully masked rows, causality probe, padding"):
        check_fixed_model(Buggy)


def test_fixing_only_the_source_mask_is_rejected():
    with pytest.raises(ExerciseError, match="check each mask's polarity"):
        check_fixed_model(SourceFixed)


def test_a_causal_mask_with_diagonal_zero_is_rejected():
    with pytest.raises(ExerciseError, match="still flags fully masked rows; first"):
        check_fixed_model(DiagonalZero)


def test_dropping_the_causal_mask_is_rejected():
    with pytest.raises(ExerciseError, match="the decoder sees later target tokens"):
        check_fixed_model(NoCausalMask)


def test_other_weights_are_rejected():
    with pytest.raises(ExerciseError, match="fix the masks only"):
        check_fixed_model(OwnSizes)
