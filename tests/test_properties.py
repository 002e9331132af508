"""The two properties the reference chapter checks before training, on several configs."""

import pytest
import torch

from helpers import Transformer, make_reversal_dataset

CONFIGS = [
    dict(d_model=32, num_heads=2, dff=64, num_layers=1),
    dict(d_model=64, num_heads=4, dff=128, num_layers=2),
    dict(d_model=48, num_heads=3, dff=96, num_layers=3),
    dict(),  # the default 931,213-parameter model
]


def model_for(cfg, seed=0, max_len=24):
    torch.manual_seed(seed)
    return Transformer(13, 13, max_len=max_len, dropout=0.0, **cfg).eval()


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("t", [1, 3, 6])
def test_causality(cfg, t):
    """Changing decoder tokens after position t leaves outputs at positions <= t unchanged."""
    m = model_for(cfg)
    src, tgt = make_reversal_dataset(4, seed=3)
    tgt_in = tgt[:, :-1].clone()
    with torch.no_grad():
        a = m(src, tgt_in)
        changed = tgt_in.clone()
        changed[:, t + 1 :] = torch.randint(
            3, 13, changed[:, t + 1 :].shape, generator=torch.Generator().manual_seed(t)
        )
        b = m(src, changed)
    torch.testing.assert_close(a[:, : t + 1], b[:, : t + 1], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(a[:, t + 1 :], b[:, t + 1 :], atol=1e-3)


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("extra", [1, 5])
def test_padding_invariance(cfg, extra):
    """Appending PAD to the source changes nothing."""
    m = model_for(cfg)
    src, tgt = make_reversal_dataset(4, seed=4)
    padded = torch.nn.functional.pad(src, (0, extra), value=0)
    with torch.no_grad():
        torch.testing.assert_close(
            m(src, tgt[:, :-1]), m(padded, tgt[:, :-1]), atol=1e-5, rtol=1e-5
        )


def test_broken_causal_mask_is_caught(monkeypatch):
    """The causality test can fail: with diagonal=0 replaced by no mask at all it does."""
    import helpers.core.model as model_mod

    m = model_for(CONFIGS[1])
    src, tgt = make_reversal_dataset(4, seed=3)
    tgt_in = tgt[:, :-1]
    monkeypatch.setattr(
        model_mod,
        "make_causal_mask",
        lambda L, device=None: torch.zeros(1, 1, L, L, dtype=torch.bool, device=device),
    )
    with torch.no_grad():
        a = m(src, tgt_in)
        changed = tgt_in.clone()
        changed[:, 4:] = 5
        b = m(src, changed)
    assert not torch.allclose(a[:, :3], b[:, :3], atol=1e-5)


def test_every_decoder_query_sees_a_key():
    """Over-masking (e.g. diagonal=0) leaves queries with no key at all: catch it where masks
    are built."""
    from helpers import fully_masked_rows, make_causal_mask, make_padding_mask

    _, tgt = make_reversal_dataset(8, seed=5)
    tgt_in = tgt[:, :-1]
    m = make_causal_mask(tgt_in.size(1)) | make_padding_mask(tgt_in)
    assert not fully_masked_rows(m).any()
    # every real (non-PAD) query may attend to itself
    assert (~m[:, 0].diagonal(dim1=-2, dim2=-1))[tgt_in != 0].all()
