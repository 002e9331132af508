"""Properties of the layers (helpers.core.layers) that a fresh model cannot show.

A fresh nn.LayerNorm is the identity map followed by normalisation (weight 1, bias 0), so
every LayerNorm of a fresh layer computes the same function: a layer that used ln1 where it
should use ln2 would still match torch's. These tests give each LayerNorm its own weight and
bias first, as training does.

The model's LayerNorms are torch's nn.LayerNorm, and so are those of the torch reference the
other tests compare with: a change to nn.LayerNorm would change both sides. One test
checks every LayerNorm the model runs against chapter 5's formula, written out here. The last
two show the encoder's and the decoder's residual dropouts, which no eval-mode comparison can
see.
"""

import torch
import torch.nn as nn

from helpers import (
    DecoderLayer,
    EncoderLayer,
    Transformer,
    make_reversal_dataset,
    to_torch_transformer,
    torch_forward,
)


def randomise_layernorms(model: nn.Module, seed: int = 0) -> int:
    g = torch.Generator().manual_seed(seed)
    n = 0
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.LayerNorm):
                module.weight.copy_(0.5 + torch.rand(module.weight.shape, generator=g))
                module.bias.copy_(0.6 * torch.rand(module.bias.shape, generator=g) - 0.3)
                n += 1
    return n


def test_same_logits_as_torch_with_trained_looking_layernorms():
    torch.manual_seed(3)
    m = Transformer(13, 13, d_model=32, num_heads=4, dff=64, num_layers=2, max_len=16).eval()
    assert randomise_layernorms(m) == 2 * 2 + 2 * 3 + 2  # two per encoder layer, three per
    ref = to_torch_transformer(m)  # decoder layer, and the two final ones
    src, tgt = make_reversal_dataset(6, seed=5)
    torch.testing.assert_close(
        m(src, tgt[:, :-1]), torch_forward(m, ref, src, tgt[:, :-1]), atol=1e-5, rtol=1e-5
    )


def test_encoder_layer_reads_ln2_before_the_feed_forward():
    """Changing ln2 changes the layer's output only through the feed-forward sub-layer:
    with the feed-forward silenced, ln2 has no effect; with it on, it has."""
    torch.manual_seed(4)
    layer = EncoderLayer(16, 2, 32).eval()
    randomise_layernorms(layer)
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        before, _ = layer(x, None)
        layer.ln2.weight.mul_(2.0)
        after, _ = layer(x, None)
        layer.ffn.net[2].weight.zero_()
        layer.ffn.net[2].bias.zero_()
        silent, _ = layer(x, None)
        layer.ln2.weight.div_(2.0)
        silent_back, _ = layer(x, None)
    assert not torch.allclose(before, after, atol=1e-4)
    torch.testing.assert_close(silent, silent_back, atol=0, rtol=0)


def layer_norm_formula(x, weight, bias, eps):
    """Chapter 5's formula: mean and biased variance over the last dimension, eps inside the
    root, then scale and shift."""
    x = x.double()
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return ((x - mean) / torch.sqrt(var + eps) * weight.double() + bias.double()).float()


def test_every_layernorm_of_the_model_computes_chapter_5s_formula():
    """Each LayerNorm the library's model runs, given what it really receives (captured with
    forward hooks) and a tiny copy of it (where eps matters), gives the formula's output."""
    torch.manual_seed(6)
    m = Transformer(13, 13, d_model=8, num_heads=2, dff=16, num_layers=2, max_len=16).eval()
    randomise_layernorms(m, seed=1)
    seen = []

    def hook(module, inputs, output):
        seen.append((module, inputs[0].detach(), output.detach()))

    handles = [
        mod.register_forward_hook(hook) for mod in m.modules() if isinstance(mod, nn.LayerNorm)
    ]
    src, tgt = make_reversal_dataset(3, seed=7)
    with torch.no_grad():
        m(src, tgt[:, :-1])
    for h in handles:
        h.remove()
    assert len(seen) == 12
    for module, x, out in seen:
        w, b, eps = module.weight, module.bias, module.eps
        torch.testing.assert_close(out, layer_norm_formula(x, w, b, eps), atol=1e-5, rtol=1e-5)
        tiny = 1e-3 * x
        with torch.no_grad():
            got = module(tiny)
        torch.testing.assert_close(got, layer_norm_formula(tiny, w, b, eps), atol=1e-5, rtol=1e-5)


def test_encoder_layer_drops_out_the_attention_update_in_training():
    """In training mode the attention's result passes through the layer's residual dropout
    before it joins the stream: with the feed-forward silenced and no dropout inside the
    attention, each entry of the update is either 0 or the attention's output / (1 - p).
    Eval mode cannot show this dropout, so a layer that left it out would pass every eval test."""
    torch.manual_seed(8)
    p = 0.5
    layer = EncoderLayer(16, 2, 32, dropout=p).train()
    layer.mha.attn_drop.p = 0.0  # the attention itself deterministic
    with torch.no_grad():
        layer.ffn.net[2].weight.zero_()  # the feed-forward adds nothing
        layer.ffn.net[2].bias.zero_()
        x = torch.randn(4, 6, 16)
        h = layer.ln1(x)
        a, _ = layer.mha(h, h, h)
        update = layer(x, None)[0] - x
    dropped = update == 0
    assert not (a == 0).any()
    share = dropped.float().mean().item()
    assert 0.35 < share < 0.65, share  # 384 entries at p = 0.5: six standard errors either side
    torch.testing.assert_close(update[~dropped], a[~dropped] / (1 - p))


def test_decoder_layer_drops_out_each_attention_update_in_training():
    """In training mode each attention's result passes through its own residual dropout (drop1
    after the self-attention, drop2 after the cross-attention) before it joins the stream.
    With the other two sub-layers silenced and no dropout inside the attentions, each entry of
    the update is either 0 or the attention's output / (1 - p)."""
    torch.manual_seed(9)
    p = 0.5
    x, memory = torch.randn(4, 6, 16), torch.randn(4, 7, 16)
    for kept in ("self_mha", "cross_mha"):
        layer = DecoderLayer(16, 2, 32, dropout=p).train()
        layer.self_mha.attn_drop.p = layer.cross_mha.attn_drop.p = 0.0
        silenced = "cross_mha" if kept == "self_mha" else "self_mha"
        with torch.no_grad():
            for lin in (getattr(layer, silenced).W_o, layer.ffn.net[2]):  # they add nothing
                lin.weight.zero_()
                lin.bias.zero_()
            h = layer.ln1(x) if kept == "self_mha" else layer.ln2(x)
            kv = h if kept == "self_mha" else memory
            a, _ = getattr(layer, kept)(h, kv, kv)
            update = layer(x, memory, None, None)[0] - x
        dropped = update == 0
        assert not (a == 0).any()
        share = dropped.float().mean().item()
        assert 0.35 < share < 0.65, (kept, share)  # 384 entries at p = 0.5: six standard errors
        torch.testing.assert_close(update[~dropped], a[~dropped] / (1 - p))
