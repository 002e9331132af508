"""helpers.check_masks (chapter 8): passes on the book's model, fails on broken masks."""

import pytest
import torch

from helpers import (
    BOOK_RECIPE,
    VOCAB_SIZE,
    Transformer,
    check_masks,
    make_causal_mask,
    make_padding_mask,
    make_reversal_dataset,
)
from helpers.training.train import build_model


class NoCausalMask(Transformer):
    """The decoder's self-attention blocks target padding only: it reads the future."""

    def decode(self, tgt_in, memory, src_mask, need_weights=True):
        h, w = self.decoder(tgt_in, memory, make_padding_mask(tgt_in), src_mask, need_weights)
        return self.out_proj(h), w


class NoSourcePaddingMask(Transformer):
    """Neither the encoder nor cross-attention blocks source padding."""

    def encode(self, src):
        mask = torch.zeros_like(make_padding_mask(src))
        return self.encoder(src, mask), mask


class CausalOnlyOnLaterLayers(Transformer):
    """A subtler leak: the mask is right except in the last decoder layer."""

    def decode(self, tgt_in, memory, src_mask, need_weights=True):
        good = make_causal_mask(tgt_in.size(1)) | make_padding_mask(tgt_in)
        x = self.decoder.embed(tgt_in)
        for i, layer in enumerate(self.decoder.layers):
            last = i == len(self.decoder.layers) - 1
            x, _ = layer(x, memory, make_padding_mask(tgt_in) if last else good, src_mask)
        return self.out_proj(self.decoder.ln_final(x)), []


@pytest.fixture(scope="module")
def batch():
    src, tgt = make_reversal_dataset(4, seed=7, max_len=8)
    return src, tgt[:, :-1]


def broken(cls):
    torch.manual_seed(0)
    good = build_model(BOOK_RECIPE)
    model = cls(**good.config.__dict__)
    model.load_state_dict(good.state_dict())
    return model


def test_passes_on_the_book_model(batch):
    model = build_model(BOOK_RECIPE)
    model.train()
    report = check_masks(model, *batch)
    assert report.ok, str(report)
    assert [f.check for f in report.findings] == ["causality", "padding invariance"]
    assert model.training  # the caller's mode is given back
    assert check_masks(Transformer(VOCAB_SIZE, VOCAB_SIZE), *batch).ok


@pytest.mark.parametrize(
    "cls, failed",
    [
        (NoCausalMask, ["causality"]),
        (CausalOnlyOnLaterLayers, ["causality"]),
        (NoSourcePaddingMask, ["padding invariance"]),
    ],
)
def test_fails_on_a_broken_mask(batch, cls, failed):
    report = check_masks(broken(cls), *batch)
    assert not report.ok and report.failed_checks == failed, str(report)
    assert "FAIL" in str(report)


def test_a_leak_after_the_last_position_but_one_is_caught(batch):
    # only position Lt - 2 reads position Lt - 1: the loop over every t must find it
    class LeakAtTheEnd(Transformer):
        def decode(self, tgt_in, memory, src_mask, need_weights=True):
            L = tgt_in.size(1)
            mask = make_causal_mask(L).clone()
            mask[..., L - 2, L - 1] = False
            h, w = self.decoder(tgt_in, memory, mask | make_padding_mask(tgt_in), src_mask)
            return self.out_proj(h), w

    report = check_masks(broken(LeakAtTheEnd), *batch)
    assert report.failed_checks == ["causality"]
    assert "after position 7" in str(report)


def test_the_limit_follows_the_size_of_the_logits(batch):
    # a correct model whose logits are ~300: float rounding alone moves them by more than an
    # absolute 1e-5 when padding is appended, but by far less than 1e-5 of the largest logit
    model = build_model(BOOK_RECIPE)
    with torch.no_grad():
        model.out_proj.weight.mul_(100)
    report = check_masks(model, *batch)
    assert report.ok, str(report)
    assert "of the largest |logit|" in str(report)


def test_a_leak_of_one_part_in_a_thousand_is_refused(batch):
    # position t reads token t + 1 with a weight of 1e-3: a near miss the limit must refuse
    class SmallPeek(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, src, tgt_in):
            return self.model(src, tgt_in) + 1e-3 * self.model(src, tgt_in.roll(-1, dims=1))

    report = check_masks(SmallPeek(build_model(BOOK_RECIPE)), *batch)
    assert report.failed_checks == ["causality"], str(report)


def test_a_full_width_batch_is_cut_instead_of_padded_past_max_len():
    # the book's model has max_len 14: a full-width source (14 columns) has no room for more
    # <pad>, so the check cuts the source to its longest row instead of raising
    src, tgt = make_reversal_dataset(64, seed=7)
    good = build_model(BOOK_RECIPE)
    assert good.max_len == src.size(1) == 14
    report = check_masks(good, src, tgt[:, :-1])
    assert report.ok and "cutting the source to its longest row (13 columns)" in str(report)
    bad = check_masks(broken(NoSourcePaddingMask), src, tgt[:, :-1])
    assert bad.failed_checks == ["padding invariance"], str(bad)
    no_room = check_masks(good, src[:, :13], tgt[:, :-1], extra_pads=(3,))
    assert "cutting" not in str(no_room)  # 13 + 3 > 14, and nothing to cut: skipped
    assert [f.status for f in no_room.findings] == ["ok", "skip"], str(no_room)
