"""Bad input to the model and its layers: a ValueError that names both shapes (issue 10, s. 5)."""

import pytest
import torch

from helpers import (
    DecoderLayer,
    EncoderLayer,
    MultiHeadAttention,
    Transformer,
    make_causal_mask,
    make_padding_mask,
)


def small_model():
    torch.manual_seed(0)
    return Transformer(13, 13, d_model=16, num_heads=2, dff=32, num_layers=1, max_len=8).eval()


def test_forward_with_different_batch_sizes():
    m = small_model()
    src = torch.tensor([[3, 4, 2], [5, 6, 2]])
    tgt_in = torch.tensor([[1, 4, 3], [1, 6, 5], [1, 3, 3]])
    with pytest.raises(
        ValueError,
        match=r"src and tgt_in must have the same batch size: src has shape \(2, 3\), "
        r"tgt_in has shape \(3, 3\)",
    ):
        m(src, tgt_in)


def test_decode_with_memory_of_another_batch():
    m = small_model()
    memory, src_mask = m.encode(torch.tensor([[3, 4, 2], [5, 6, 2]]))
    with pytest.raises(
        ValueError, match=r"tgt_in has shape \(1, 3\), memory has shape \(2, 3, 16\)"
    ):
        m.decode(torch.tensor([[1, 4, 3]]), memory, src_mask)


def test_attention_mask_that_does_not_broadcast():
    a = MultiHeadAttention(16, 2)
    x = torch.randn(2, 3, 16)
    bad = make_padding_mask(torch.tensor([[3, 4, 0], [5, 6, 2], [5, 6, 2]]))  # batch 3 vs 2
    with pytest.raises(
        ValueError,
        match=r"attn_mask has shape \(3, 1, 1, 3\), which does not broadcast to the attention "
        r"scores \[B, h, Lq, Lk\] = \(2, 2, 3, 3\).*B: mask 3 vs scores 2",
    ):
        a(x, x, x, attn_mask=bad)
    with pytest.raises(ValueError, match=r"Lq: mask 4 vs scores 3"):
        a(x, x, x, attn_mask=make_causal_mask(4))


def test_causal_mask_on_cross_attention_with_other_lengths():
    # the chapter-7 slip: the decoder's [1, 1, Lt, Lt] causal mask handed to cross-attention
    layer = DecoderLayer(16, 2, 32).eval()
    x, memory = torch.randn(2, 4, 16), torch.randn(2, 6, 16)
    with pytest.raises(
        ValueError,
        match=r"cross_mask has shape \(1, 1, 4, 4\), which does not broadcast to the attention "
        r"scores \[B, h, Lq, Lk\] = \(2, 2, 4, 6\).*Lk: mask 4 vs scores 6",
    ):
        layer(x, memory, make_causal_mask(4), make_causal_mask(4))
    with pytest.raises(
        ValueError, match=r"x has shape \(2, 4, 16\), memory has shape \(1, 6, 16\)"
    ):
        layer(x, memory[:1], make_causal_mask(4), None)


def test_encoder_layer_mask_of_another_length():
    layer = EncoderLayer(16, 2, 32).eval()
    x = torch.randn(2, 5, 16)
    with pytest.raises(ValueError, match=r"pad_mask has shape \(2, 1, 1, 4\).*Lk: mask 4 vs"):
        layer(x, make_padding_mask(torch.ones(2, 4, dtype=torch.long)))


def test_good_masks_still_pass():
    # the shapes the book uses: [B, 1, 1, L], [1, 1, L, L], [B, 1, L, L], and a cache step
    m = small_model()
    src = torch.tensor([[3, 4, 2, 0], [5, 6, 7, 2]])
    tgt_in = torch.tensor([[1, 4, 3], [1, 7, 6]])
    assert m(src, tgt_in).shape == (2, 3, 13)
    layer = DecoderLayer(16, 2, 32).eval()
    cache: dict = {}
    memory = torch.randn(2, 4, 16)
    for _ in range(3):
        out, _w = layer(torch.randn(2, 1, 16), memory, None, make_padding_mask(src), cache=cache)
    assert out.shape == (2, 1, 16) and cache["self_k"].shape[2] == 3
