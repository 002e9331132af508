"""helpers.core.checks: each input is checked once, where it enters, and the token ids' range
is read back only from the CPU (no device sync)."""

import pytest
import torch

import helpers.core.attention as attention
import helpers.core.layers as layers
from helpers import DecoderLayer, MultiHeadAttention, Transformer, make_causal_mask
from helpers.core.checks import check_token_ids, inputs_checked


def counting(monkeypatch, module, name):
    """Count the calls of module.name (the function is still run)."""
    calls = []
    original = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(args[0])
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


@pytest.fixture
def batch():
    return torch.tensor([[3, 4, 2, 0], [5, 6, 7, 2]]), torch.tensor([[1, 4, 3], [1, 7, 6]])


def test_the_model_checks_its_inputs_and_the_layers_trust_them(monkeypatch, batch):
    model = Transformer(13, 13, d_model=16, num_heads=2, dff=32, num_layers=3, max_len=8)
    mha_masks = counting(monkeypatch, attention, "check_mask")
    mha_inputs = counting(monkeypatch, attention, "check_features")
    layer_masks = counting(monkeypatch, layers, "check_mask")
    model(*batch)
    model.decode(batch[1], *model.encode(batch[0]))
    assert mha_masks == mha_inputs == layer_masks == []  # 3 + 3 layers, 9 attentions: none
    assert not inputs_checked()  # and the scope ends with the call


def test_a_layer_called_alone_checks_each_mask_once(monkeypatch):
    layer = DecoderLayer(16, 2, 32).eval()
    mha_masks = counting(monkeypatch, attention, "check_mask")
    layer_masks = counting(monkeypatch, layers, "check_mask")
    layer(torch.randn(2, 4, 16), torch.randn(2, 6, 16), make_causal_mask(4), None)
    assert layer_masks == ["self_mask"] and mha_masks == []
    a = MultiHeadAttention(16, 2)
    x = torch.randn(2, 4, 16)
    a(x, x, x, attn_mask=make_causal_mask(4))  # the attention alone checks its own
    assert mha_masks == ["attn_mask"]


def test_a_failed_check_leaves_no_scope_behind(batch):
    model = Transformer(13, 13, d_model=16, num_heads=2, dff=32, num_layers=1, max_len=8)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(batch[0] + 20, batch[1])
    assert not inputs_checked()
    a = MultiHeadAttention(16, 2)
    with pytest.raises(ValueError, match="attn_mask has shape"):  # still checked afterwards
        a(torch.randn(2, 3, 16), torch.randn(2, 3, 16), torch.randn(2, 3, 16), make_causal_mask(4))


def test_token_ids_off_the_cpu_are_not_read_back():
    # on the meta device a value cannot be read at all: the check must not try
    ids = torch.full((2, 3), 99, dtype=torch.long, device="meta")
    check_token_ids("ids", ids, vocab_size=13)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        check_token_ids("ids", torch.full((2, 3), 99), 13)  # the same ids on the CPU
