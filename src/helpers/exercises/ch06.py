"""Checkers for the exercises of chapter 6 (the decoder)."""

from __future__ import annotations

import torch

from ..layers import DecoderLayer
from ..masks import make_causal_mask, make_padding_mask
from ._common import call, expect_close, expect_shape, fail, passed

__all__ = ["check_decoder_layer_forward"]

_D, _H, _DFF = 32, 4, 64


def _layer() -> DecoderLayer:
    torch.manual_seed(6)
    layer = DecoderLayer(_D, _H, _DFF).eval()
    with torch.no_grad():  # LayerNorms that are not the identity, so a swapped one shows
        for ln in (layer.ln1, layer.ln2, layer.ln3):
            ln.weight.uniform_(0.5, 1.5)
            ln.bias.uniform_(-0.3, 0.3)
    return layer


def _cases():
    """(where, x, memory, self_mask, cross_mask): L_t != L_s, and a padded source."""
    g = torch.Generator().manual_seed(60)
    src = torch.tensor([[3, 4, 5, 6, 7, 8, 2], [9, 10, 2, 0, 0, 0, 0]])
    tgt = torch.tensor([[1, 8, 7, 6, 5], [1, 10, 9, 2, 0]])
    x, memory = torch.randn(2, 5, _D, generator=g), torch.randn(2, 7, _D, generator=g)
    self_mask = make_causal_mask(5) | make_padding_mask(tgt)
    yield (
        "x [2, 5, 32], memory [2, 7, 32] (source 1 padded)",
        x,
        memory,
        self_mask,
        make_padding_mask(src),
    )
    src3 = torch.tensor([[3, 4, 2]])
    x3, m3 = torch.randn(1, 6, _D, generator=g), torch.randn(1, 3, _D, generator=g)
    yield "x [1, 6, 32], memory [1, 3, 32]", x3, m3, make_causal_mask(6), make_padding_mask(src3)


def _reference(layer, x, memory, self_mask, cross_mask, mistake=None):
    """The layer's forward, or what a known mistake computes instead."""
    if mistake == "post-norm":
        a, _ = layer.self_mha(x, x, x, attn_mask=self_mask, need_weights=False)
        x = layer.ln1(x + a)
        a, w = layer.cross_mha(x, memory, memory, attn_mask=cross_mask)
        x = layer.ln2(x + a)
        return layer.ln3(x + layer.ffn(x)), w
    h = layer.ln1(x)
    self_m = None if mistake == "no causal mask" else self_mask
    a, _ = layer.self_mha(h, h, h, attn_mask=self_m, need_weights=False)
    x = (x + a) if mistake != "no residual" else a
    h = layer.ln2(x)
    if mistake == "kv from decoder":
        a, w = layer.cross_mha(h, h, h, attn_mask=self_mask)
    else:
        mem = layer.ln2(memory) if mistake == "memory normalised" else memory
        cross_m = None if mistake == "no cross mask" else cross_mask
        a, w = layer.cross_mha(h, mem, mem, attn_mask=cross_m)
    x = x + a
    ffn_in = x if mistake == "no ln3" else layer.ln3(x)
    return x + layer.ffn(ffn_in), w


_HINTS = {
    "post-norm": "that is the Post-Norm order (LayerNorm after the addition); this book's layer "
    "is Pre-Norm: x + sublayer(LN(x))",
    "no causal mask": "the self-attention needs self_mask (causal | target padding)",
    "no residual": "each sub-layer's result is added to the stream: x = x + a, not x = a",
    "kv from decoder": "cross-attention takes its keys and values from memory, not from the "
    "decoder's stream: cross_mha(h, memory, memory, ...)",
    "memory normalised": "memory is used as it is: the encoder's final LayerNorm already "
    "normalised it; ln2 normalises the decoder's stream only",
    "no cross mask": "cross-attention needs cross_mask, the source padding mask, or the "
    "queries read the source's <pad> positions",
    "no ln3": "the feed-forward sub-layer reads ln3(x), like the other two read ln1 and ln2",
}


def check_decoder_layer_forward(fn) -> None:
    """Exercise 6.3: fn(layer, x, memory, self_mask, cross_mask) -> (x_out, cross_weights), the
    forward pass of a helpers.DecoderLayer written with the layer's own sub-modules (ln1, ln2,
    ln3, self_mha, cross_mha, ffn). Compared with layer(...) in eval mode on two inputs with
    L_t != L_s. Used in chapter 6.
    """
    layer = _layer()
    n = 0
    for where, x, memory, self_mask, cross_mask in _cases():
        with torch.no_grad():
            expected, expected_w = layer(x, memory, self_mask, cross_mask)
            got = call(fn, layer, x, memory, self_mask, cross_mask, where=where)
        if not (isinstance(got, tuple) and len(got) == 2):
            fail(
                f"fn should return a pair (output, cross-attention weights), got "
                f"{type(got).__name__}",
                where,
            )
        out, w = got
        B, Lt, Ls = x.size(0), x.size(1), memory.size(1)
        expect_shape("output", out, x.shape, where, "the layer keeps the stream's shape")
        if not torch.allclose(out, expected, atol=1e-5, rtol=1e-4):
            for mistake, hint in _HINTS.items():
                with torch.no_grad():
                    wrong, _ = _reference(layer, x, memory, self_mask, cross_mask, mistake)
                if torch.allclose(out, wrong, atol=1e-5, rtol=1e-4):
                    fail("the output differs from helpers.DecoderLayer's", where, hint)
        expect_close("output", out, expected, where=where)
        if isinstance(w, torch.Tensor) and tuple(w.shape) == (B, _H, Lt, Lt) and Lt != Ls:
            fail(
                f"the weights have shape {tuple(w.shape)}, the shape of self-attention weights",
                where,
                "return the cross-attention weights [B, h, L_t, L_s]: one row per target "
                "position, one column per source position",
            )
        expect_shape("cross-attention weights", w, (B, _H, Lt, Ls), where)
        expect_close(
            "cross-attention weights",
            w,
            expected_w,
            where=where,
            hint="the weights come from cross_mha(ln2(x), memory, memory, attn_mask=cross_mask)",
        )
        n += 2
    passed("check_decoder_layer_forward", n, "same output and weights as helpers.DecoderLayer")
