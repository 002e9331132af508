"""Checkers for the exercises of chapter 6 (the decoder)."""

from __future__ import annotations

import itertools

import torch

from helpers.core.layers import DecoderLayer
from helpers.core.masks import make_causal_mask, make_padding_mask

from ._common import call, expect_close, expect_shape, fail, passed

__all__ = ["check_decoder_layer_forward"]

_D, _H, _DFF = 32, 4, 64


def _layer() -> DecoderLayer:
    with torch.random.fork_rng():  # leave the reader's random stream as it was
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


def _reference(layer, x, memory, self_mask, cross_mask, mistake=None, lns=None):
    """The layer's forward, or what a known mistake computes instead. lns: the LayerNorm (or
    None, no LayerNorm) each of the three sub-layers reads, when that is the mistake."""
    if mistake == "post-norm":
        a, _ = layer.self_mha(x, x, x, attn_mask=self_mask, need_weights=False)
        x = layer.ln1(x + a)
        a, w = layer.cross_mha(x, memory, memory, attn_mask=cross_mask)
        x = layer.ln2(x + a)
        return layer.ln3(x + layer.ffn(x)), w
    if mistake == "cross first":
        h = layer.ln2(x)
        a, w = layer.cross_mha(h, memory, memory, attn_mask=cross_mask)
        x = x + a
        h = layer.ln1(x)
        x = x + layer.self_mha(h, h, h, attn_mask=self_mask, need_weights=False)[0]
        return x + layer.ffn(layer.ln3(x)), w
    ln1, ln2, ln3 = [(lambda t: t) if ln is None else ln for ln in lns or layer_norms(layer)]
    h = ln1(x)
    self_m = None if mistake == "no causal mask" else self_mask
    if mistake in ("masks inverted", "self mask inverted"):
        self_m = ~self_mask
    a, _ = layer.self_mha(h, h, h, attn_mask=self_m, need_weights=False)
    x = {"no residual": a, "residual from normalised": h + a}.get(mistake, x + a)
    h = ln2(x)
    if mistake == "kv from decoder":
        a, w = layer.cross_mha(h, h, h, attn_mask=self_mask)
    else:
        mem = ln2(memory) if mistake == "memory normalised" else memory
        cross_m = None if mistake == "no cross mask" else cross_mask
        if mistake in ("masks inverted", "cross mask inverted"):
            cross_m = ~cross_mask
        a, w = layer.cross_mha(h, mem, mem, attn_mask=cross_m)
    x = {"no cross residual": a, "residual from normalised": h + a}.get(mistake, x + a)
    ffn_in = ln3(x)
    if mistake == "residual from normalised":
        x = ffn_in
    return (x if mistake != "no ffn residual" else 0) + layer.ffn(ffn_in), w


def layer_norms(layer):
    return layer.ln1, layer.ln2, layer.ln3


_SUBLAYERS = ("self-attention", "cross-attention", "feed-forward")
_INVERTED = (
    "True means blocked in this book's masks (chapter 03): pass self_mask and cross_mask as "
    "they are, not ~mask"
)

_HINTS = {
    "post-norm": "that is the Post-Norm order (LayerNorm after the addition); this book's layer "
    "is Pre-Norm: x + sublayer(LN(x))",
    "no causal mask": "the self-attention needs self_mask (causal | target padding)",
    "no residual": "the self-attention's result is added to the stream: x = x + a, not x = a",
    "no cross residual": "the cross-attention's result is added to the stream too: "
    "x = x + a after cross_mha, not x = a",
    "no ffn residual": "the feed-forward's result is added to the stream too: "
    "return x + ffn(ln3(x)), not ffn(ln3(x))",
    "residual from normalised": "the residual adds to the stream x itself, not to its "
    "normalised copy: x = x + a, where a = self_mha(ln1(x), ...)",
    "kv from decoder": "cross-attention takes its keys and values from memory, not from the "
    "decoder's stream: cross_mha(h, memory, memory, ...)",
    "memory normalised": "memory is used as it is: the encoder's final LayerNorm already "
    "normalised it; ln2 normalises the decoder's stream only",
    "no cross mask": "cross-attention needs cross_mask, the source padding mask, or the "
    "queries read the source's <pad> positions",
    "masks inverted": _INVERTED,
    "self mask inverted": _INVERTED,
    "cross mask inverted": _INVERTED,
    "cross first": "the sub-layers run in a fixed order: masked self-attention, then "
    "cross-attention, then the feed-forward",
}


def _layernorm_hint(layer, x, memory, self_mask, cross_mask, out):
    """If out is the layer with some sub-layer reading no LayerNorm, or the wrong one, say so."""
    options = (None, *layer_norms(layer))
    right = layer_norms(layer)
    for lns in itertools.product(options, repeat=3):
        if lns == right:
            continue
        with torch.no_grad():
            wrong, _ = _reference(layer, x, memory, self_mask, cross_mask, lns=lns)
        if not torch.allclose(out, wrong, atol=1e-5, rtol=1e-4):
            continue
        if lns[2] is None and lns[:2] == right[:2]:
            return "the feed-forward sub-layer reads ln3(x), like the other two read ln1 and ln2"
        if None in lns:
            i = lns.index(None)
            return (
                f"the {_SUBLAYERS[i]} sub-layer reads ln{i + 1}(x), not x: in Pre-Norm each "
                "sub-layer reads a LayerNorm of the stream"
            )
        if len(set(lns)) == 3:
            return (
                "the LayerNorms are in the wrong places: ln1 goes before the self-attention, "
                "ln2 before the cross-attention, ln3 before the feed-forward"
            )
        return (
            "each sub-layer has its own LayerNorm: ln1 before the self-attention, "
            "ln2 before the cross-attention, ln3 before the feed-forward"
        )
    return None


def _arg(args, kwargs, i, name):
    return args[i] if len(args) > i else kwargs.get(name)


def _recognise_calls(calls, memory, self_mask, cross_mask, where) -> None:
    """Name a mistake seen in what fn passed to the attentions (it may have raised before
    returning anything): the masks swapped, the causal mask given to the cross-attention, or
    the cross-attention's queries from memory."""
    for name, args, kwargs in calls:
        mask = _arg(args, kwargs, 3, "attn_mask")
        if name == "self_mha" and mask is cross_mask:
            fail(
                "the self-attention got cross_mask",
                where,
                "the masks are swapped: self_mha takes self_mask (causal | target padding), "
                "cross_mha takes cross_mask (source padding)",
            )
        if name == "cross_mha" and mask is self_mask and _arg(args, kwargs, 1, "k") is memory:
            fail(
                "the cross-attention got self_mask",
                where,
                "cross_mha takes cross_mask (source padding) only: the whole source is known, "
                "so nothing about it is causal",
            )
        if name == "cross_mha" and _arg(args, kwargs, 0, "q") is memory:
            fail(
                "the cross-attention's queries are the memory",
                where,
                "memory and x are swapped: the queries come from the decoder, the keys and "
                "values from memory: cross_mha(ln2(x), memory, memory, ...)",
            )


def _run(fn, layer, args, where, seed=61):
    """Call fn(layer, *args) with its own random seed (the reader's random stream is left as it
    was), recording what it passes to the layer's two attentions and whether it calls the
    layer itself."""
    calls: list = []
    handles = [
        getattr(layer, name).register_forward_pre_hook(
            lambda m, a, kw, name=name: calls.append((name, a, kw)), with_kwargs=True
        )
        for name in ("self_mha", "cross_mha")
    ]
    handles.append(layer.register_forward_pre_hook(lambda m, a: calls.append(("layer", a, {}))))
    try:
        with torch.no_grad(), torch.random.fork_rng():
            torch.manual_seed(seed)
            got = call(fn, layer, *args, where=where)
    except Exception:
        _recognise_calls(calls, *args[1:], where)
        raise
    finally:
        for h in handles:
            h.remove()
    return got, calls


def check_decoder_layer_forward(fn) -> None:
    """Exercise 6.3: fn(layer, x, memory, self_mask, cross_mask) -> (x_out, cross_weights), the
    forward pass of a helpers.DecoderLayer written with the layer's own sub-modules (ln1, ln2,
    ln3, self_mha, cross_mha, ffn). Compared with layer(...) in eval mode on two inputs with
    L_t != L_s; the LayerNorms get distinct, non-trivial weights so that a swapped one shows.
    Used in chapter 6.
    """
    layer = _layer()
    n = 0
    for where, x, memory, self_mask, cross_mask in _cases():
        args = (x, memory, self_mask, cross_mask)
        with torch.no_grad():
            expected, expected_w = layer(*args)
        got, calls = _run(fn, layer, args, where)
        if any(name == "layer" for name, _, _ in calls):
            fail(
                "fn calls layer(x, memory, self_mask, cross_mask) itself",
                where,
                "write the forward pass from the layer's parts: layer.ln1, layer.self_mha, "
                "layer.ln2, layer.cross_mha, layer.ln3 and layer.ffn",
            )
        if not (isinstance(got, (tuple, list)) and len(got) == 2):
            fail(
                f"fn should return a pair (output, cross-attention weights), got "
                f"{type(got).__name__}",
                where,
            )
        out, w = got
        B, Lt, Ls = x.size(0), x.size(1), memory.size(1)
        expect_shape("output", out, x.shape, where, "the layer keeps the stream's shape")
        if not torch.allclose(out, expected, atol=1e-5, rtol=1e-4):
            _recognise_calls(calls, memory, self_mask, cross_mask, where)
            again = _run(fn, layer, args, where, seed=62)[0][0]
            if not torch.equal(again, out):
                fail(
                    "two calls on the same input give different outputs",
                    where,
                    "dropout is still on: the layer is in eval mode, so leave dropout out "
                    "(F.dropout(a, p) is on unless you pass training=...)",
                )
            for mistake, hint in _HINTS.items():
                with torch.no_grad():
                    wrong, _ = _reference(layer, x, memory, self_mask, cross_mask, mistake)
                if torch.allclose(out, wrong, atol=1e-5, rtol=1e-4):
                    fail("the output differs from helpers.DecoderLayer's", where, hint)
            hint = _layernorm_hint(layer, x, memory, self_mask, cross_mask, out)
            if hint:
                fail("the output differs from helpers.DecoderLayer's", where, hint)
        expect_close("output", out, expected, where=where)
        if isinstance(w, torch.Tensor) and tuple(w.shape) == (B, _H, Lt, Lt) and Lt != Ls:
            fail(
                f"the weights have shape {tuple(w.shape)}, the shape of self-attention weights",
                where,
                "return the cross-attention weights [B, h, L_t, L_s]: one row per target "
                "position, one column per source position",
            )
        if w is None:
            fail(
                "the cross-attention weights are None",
                where,
                "cross_mha returns None in place of its weights when need_weights=False: "
                "leave need_weights at its default (True) for the cross-attention",
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
