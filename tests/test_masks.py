import pytest
import torch

from helpers import (
    from_hf_attention_mask,
    fully_masked_rows,
    make_causal_mask,
    make_padding_mask,
    to_hf_attention_mask,
    to_sdpa_mask,
)


def test_padding_mask():
    ids = torch.tensor([[3, 4, 2, 0], [3, 2, 0, 0]])
    m = make_padding_mask(ids)
    assert m.shape == (2, 1, 1, 4) and m.dtype == torch.bool
    assert m[:, 0, 0].tolist() == [[False, False, False, True], [False, False, True, True]]


def test_causal_mask():
    m = make_causal_mask(4)
    assert m.shape == (1, 1, 4, 4) and m.dtype == torch.bool
    assert torch.equal(m[0, 0], torch.ones(4, 4, dtype=torch.bool).triu(1))


def test_conventions_round_trip():
    ids = torch.tensor([[3, 4, 2, 0]])
    ours = make_padding_mask(ids)
    hf = to_hf_attention_mask(ids)
    assert hf.tolist() == [[1, 1, 1, 0]]
    assert torch.equal(from_hf_attention_mask(hf), ours)
    assert torch.equal(to_sdpa_mask(ours), ~ours)


def test_fully_masked_rows():
    m = make_causal_mask(3) | make_padding_mask(torch.tensor([[0, 3, 2]]))
    assert fully_masked_rows(m)[0, 0].tolist() == [True, False, False]


def test_cross_mask_must_end_in_the_source_length():
    # chapter 7's guard, where the cross-attention mask enters the decoder layer
    from helpers import DecoderLayer

    layer = DecoderLayer(16, 2, 32).eval()
    x, memory = torch.randn(2, 4, 16), torch.randn(2, 6, 16)
    self_mask = make_causal_mask(4)
    # the slip: the decoder's own [1, 1, Lt, Lt] mask, Lt = 4 != Ls = 6
    with pytest.raises(ValueError, match=r"last dimension must be the source length Ls = 6"):
        layer(x, memory, self_mask, make_causal_mask(4))
    # a width-1 mask broadcasts to the scores but blocks all of the source or none of it
    with pytest.raises(ValueError, match=r"whose last dimension is 1"):
        layer(x, memory, self_mask, torch.zeros(2, 1, 1, 1, dtype=torch.bool))
    # the wrong query length
    with pytest.raises(ValueError, match=r"query dimension 1 or Lt = 4"):
        layer(x, memory, self_mask, torch.zeros(2, 1, 3, 6, dtype=torch.bool))
    # what fits: the source padding mask, and a per-query [B, 1, Lt, Ls] mask
    src = torch.tensor([[3, 4, 5, 2, 0, 0], [3, 4, 5, 6, 7, 2]])
    with torch.no_grad():
        layer(x, memory, self_mask, make_padding_mask(src))
        layer(x, memory, self_mask, torch.zeros(2, 1, 4, 6, dtype=torch.bool))
