import math

import pytest
import torch
import torch.nn as nn

from helpers import MultiHeadAttention, make_causal_mask, make_padding_mask


def mha(d=32, h=4, seed=0):
    torch.manual_seed(seed)
    return MultiHeadAttention(d, h, dropout=0.0).eval()


def test_shapes_and_weights_sum_to_one():
    m = mha()
    q, kv = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    out, w = m(q, kv, kv)
    assert out.shape == (2, 5, 32) and w.shape == (2, 4, 5, 7)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 4, 5))


@pytest.mark.parametrize("kind", ["none", "padding", "causal", "both"])
def test_sdpa_path_equals_handwritten(kind):
    m = mha()
    x = torch.randn(3, 6, 32)
    ids = torch.tensor([[3, 4, 5, 2, 0, 0], [3, 4, 5, 6, 7, 2], [5, 2, 0, 0, 0, 0]])
    mask = {
        "none": None,
        "padding": make_padding_mask(ids),
        "causal": make_causal_mask(6),
        "both": make_causal_mask(6) | make_padding_mask(ids),
    }[kind]
    a, w = m(x, x, x, attn_mask=mask, need_weights=True)
    b, none = m(x, x, x, attn_mask=mask, need_weights=False)
    assert none is None
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_equals_torch_multihead_attention():
    m = mha(d=64, h=8)
    ref = nn.MultiheadAttention(64, 8, batch_first=True).eval()
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([m.W_q.weight, m.W_k.weight, m.W_v.weight]))
        ref.in_proj_bias.copy_(torch.cat([m.W_q.bias, m.W_k.bias, m.W_v.bias]))
        ref.out_proj.weight.copy_(m.W_o.weight)
        ref.out_proj.bias.copy_(m.W_o.bias)
    q, k, v = torch.randn(2, 5, 64), torch.randn(2, 9, 64), torch.randn(2, 9, 64)  # v != k
    pad = torch.zeros(2, 9, dtype=torch.bool)
    pad[1, 6:] = True
    ours, w = m(q, k, v, attn_mask=pad[:, None, None, :])
    theirs, tw = ref(q, k, v, key_padding_mask=pad, average_attn_weights=False)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(w, tw, atol=1e-6, rtol=1e-5)


def test_fully_masked_row_gives_zeros_not_nan():
    m = mha()
    x = torch.randn(1, 4, 32)
    mask = torch.zeros(1, 1, 4, 4, dtype=torch.bool)
    mask[..., 2, :] = True  # query 2 may see nothing
    for need_weights in (True, False):
        out, _ = m(x, x, x, attn_mask=mask, need_weights=need_weights)
        assert torch.isfinite(out).all()
        # an empty attention contributes nothing: only W_o's bias remains
        torch.testing.assert_close(out[0, 2], m.W_o.bias, atol=1e-6, rtol=0)


def test_fp16_mask_value_does_not_overflow():
    m = mha().half()
    x = torch.randn(1, 4, 32).half()
    out, w = m(x, x, x, attn_mask=make_causal_mask(4))
    assert torch.isfinite(out).all() and torch.isfinite(w).all()


def test_scale_is_sqrt_dk():
    m = mha(d=32, h=4)
    x = torch.randn(1, 3, 32)
    _, w = m(x, x, x)
    Q, K = m.split_heads(m.W_q(x)), m.split_heads(m.W_k(x))
    expected = (Q @ K.transpose(-2, -1) / math.sqrt(8)).softmax(-1)
    torch.testing.assert_close(w, expected)


def test_causal_mask_blocks_exactly_the_future():
    # query i gives no weight to a key j > i, and some weight to every key j <= i (its own
    # included): catches a missing causal mask and one built with triu(diagonal=0)
    m = mha()
    x = torch.randn(2, 5, 32)
    _, w = m(x, x, x, attn_mask=make_causal_mask(5))
    future = torch.ones(5, 5, dtype=torch.bool).triu(diagonal=1)
    assert (w[..., future] == 0).all()
    assert (w[..., ~future] > 0).all()
