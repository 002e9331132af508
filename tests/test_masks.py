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
