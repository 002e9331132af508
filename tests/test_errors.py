"""Bad input gets a clear error naming what was wrong."""

import pytest
import torch

from helpers import (
    MultiHeadAttention,
    TokenAndPosition,
    Transformer,
    greedy_decode,
    make_causal_mask,
    make_padding_mask,
)


def test_heads_must_divide_d_model():
    with pytest.raises(ValueError, match=r"d_model=30 is not divisible by num_heads=4"):
        MultiHeadAttention(30, 4)


def test_too_long_input():
    emb = TokenAndPosition(13, 16, max_len=8)
    with pytest.raises(ValueError, match=r"length 9 .* max_len=8|max_len=8"):
        emb(torch.ones(1, 9, dtype=torch.long))
    m = Transformer(13, 13, d_model=16, num_heads=2, dff=32, num_layers=1, max_len=8)
    with pytest.raises(ValueError, match=r"src has length 9 .*max_len=8"):
        m.encode(torch.ones(1, 9, dtype=torch.long))


def test_out_of_vocabulary_ids():
    m = Transformer(13, 13, d_model=16, num_heads=2, dff=32, num_layers=1, max_len=8)
    with pytest.raises(
        ValueError, match=r"src contains token id 13, outside the vocabulary \[0, 13\)"
    ):
        m.encode(torch.tensor([[3, 13, 2]]))
    with pytest.raises(ValueError, match=r"token id -1"):
        m.encode(torch.tensor([[3, -1, 2]]))
    with pytest.raises(TypeError, match=r"integer token ids"):
        m.encode(torch.tensor([[3.0, 4.0]]))


def test_mask_must_be_bool():
    a = MultiHeadAttention(16, 2)
    x = torch.randn(1, 3, 16)
    for bad in (make_causal_mask(3).to(torch.uint8), make_causal_mask(3).float()):
        with pytest.raises(TypeError, match=r"attn_mask must be a bool tensor \(True = blocked\)"):
            a(x, x, x, attn_mask=bad)


def test_mask_on_another_device():
    a = MultiHeadAttention(16, 2)
    x = torch.randn(1, 3, 16)
    with pytest.raises(
        ValueError, match=r"attn_mask is on meta but the attention inputs are on cpu"
    ):
        a(x, x, x, attn_mask=make_causal_mask(3, device="meta"))


def test_wrong_ranks():
    a = MultiHeadAttention(16, 2)
    with pytest.raises(ValueError, match=r"q must have rank 3 \(\[B, L, d_model\]\)"):
        a(torch.randn(3, 16), torch.randn(1, 3, 16), torch.randn(1, 3, 16))
    with pytest.raises(ValueError, match=r"expected d_model=16"):
        x = torch.randn(1, 3, 8)
        a(x, x, x)
    x = torch.randn(1, 3, 16)
    with pytest.raises(ValueError, match=r"attn_mask must have rank 4"):
        a(x, x, x, attn_mask=make_causal_mask(3)[0, 0])
    with pytest.raises(ValueError, match=r"ids must have rank 2"):
        make_padding_mask(torch.ones(3, dtype=torch.long))
    m = Transformer(13, 13, d_model=16, num_heads=2, dff=32, num_layers=1, max_len=8)
    with pytest.raises(ValueError, match=r"src must have rank 2"):
        m.encode(torch.ones(3, dtype=torch.long))


def test_decode_length_beyond_positions():
    m = Transformer(13, 13, d_model=16, num_heads=2, dff=32, num_layers=1, max_len=8)
    with pytest.raises(ValueError, match=r"max_len must be in \[1, 8\]"):
        greedy_decode(m, torch.tensor([[3, 4, 2]]), max_len=9)
