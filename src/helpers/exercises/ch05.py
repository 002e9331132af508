"""Checkers for the exercises of chapter 5 (the encoder).

Each checker knows the classic mistakes for its exercise: when an answer is wrong, it computes
what each known mistake gives on the same inputs and, if one matches, names it with a hint.
The catalogue of those mistakes, one small function each, is `tests/mistakes_ch05.py`.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers.core.layers import Encoder, EncoderLayer
from helpers.core.masks import make_padding_mask

from ._common import ExerciseError, call, expect_close, expect_shape, fail, passed

__all__ = [
    "check_rms_norm",
    "check_layer_norm",
    "check_encoder_layer_forward",
    "check_encoder_forward",
]

_D = 16


@contextlib.contextmanager
def _watch_built_ins(*names: str):
    """Record calls to the named functions of torch.nn.functional and torch while the reader's
    code runs: the exercises ask for the formula, not the built-in (nn.RMSNorm and
    nn.LayerNorm call them too)."""
    used: list[str] = []
    saved = []
    for module in (F, torch):
        for name in names:
            original = getattr(module, name, None)
            if original is None:
                continue

            def wrapper(*args, _original=original, _name=f"{module.__name__}.{name}", **kwargs):
                used.append(_name)
                return _original(*args, **kwargs)

            saved.append((module, name, original))
            setattr(module, name, wrapper)
    try:
        yield used
    finally:
        for module, name, original in saved:
            setattr(module, name, original)


@contextlib.contextmanager
def _watch_calls(module: nn.Module):
    """Record whether `module` itself is called (forward pre-hook) while the reader's code runs."""
    calls: list[int] = []
    handle = module.register_forward_pre_hook(lambda m, args: calls.append(1))
    try:
        yield calls
    finally:
        handle.remove()


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a.detach().float(), b, atol=1e-5, rtol=1e-4)


def _inputs() -> dict[str, torch.Tensor]:
    """Fixed inputs: an offset batch (the mean matters), a tiny one (eps matters)."""
    g = torch.Generator().manual_seed(5)
    return {
        "x of shape [2, 5, 16] with mean about 3": torch.randn(2, 5, _D, generator=g) + 3.0,
        "x of shape [3, 16] scaled by 1e-3 (eps matters here)": 1e-3
        * torch.randn(3, _D, generator=g),
        "x of shape [4, 2, 3, 16]": torch.randn(4, 2, 3, _D, generator=g),
    }


def _variants(x: torch.Tensor, w: torch.Tensor, eps: float) -> list[tuple[str, torch.Tensor]]:
    """What the likely mistakes compute, each with the hint it deserves."""
    ms = x.pow(2).mean(-1, keepdim=True)
    centred = x - x.mean(-1, keepdim=True)
    return [
        (
            "you subtracted the mean first: that is LayerNorm. RMSNorm divides x itself by "
            "sqrt(mean(x**2) + eps), with no centring and no bias",
            centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + eps) * w,
        ),
        (
            "eps goes inside the square root: x / sqrt(mean(x**2) + eps), not "
            "x / (sqrt(mean(x**2)) + eps)",
            x / (ms.sqrt() + eps) * w,
        ),
        ("multiply by self.weight after normalising", x / torch.sqrt(ms + eps)),
        (
            "the mean of the squares runs over the last dimension (the d_model features of one "
            "position), with keepdim=True so that it broadcasts back",
            x / torch.sqrt(x.pow(2).mean(0, keepdim=True) + eps) * w,
        ),
        (
            "divide by the root of the mean square, not by the root of the sum of squares "
            "(that would be the L2 norm)",
            x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps) * w,
        ),
        (
            "x.std() is not the root mean square: it subtracts the mean (and divides by d - 1)",
            x / (x.std(-1, keepdim=True) + eps) * w,
        ),
        (
            "take the square root: divide by sqrt(mean(x**2) + eps), not by mean(x**2) + eps",
            x / (ms + eps) * w,
        ),
        (
            "eps is missing: divide by sqrt(mean(x**2) + eps). Without it a tiny vector is "
            "blown up to RMS 1, and a vector of zeros divides by zero",
            x / ms.sqrt() * w,
        ),
    ]


def check_rms_norm(cls) -> None:
    """Exercise 5.3: cls(d_model, eps=1e-6) is an nn.Module with a learnable `weight` [d_model]
    (initialised to ones) whose forward returns x / sqrt(mean(x**2 over the last dim) + eps)
    * weight. Compared with torch.nn.RMSNorm(d_model, eps=1e-6) with the same weight, on three
    inputs. Used in chapter 5.
    """
    eps = 1e-6
    layer = call(cls, _D, eps=eps, where=f"{getattr(cls, '__name__', cls)}({_D}, eps=1e-6)")
    if not isinstance(layer, nn.Module):
        fail(f"{cls!r}({_D}) should build an nn.Module, got {type(layer).__name__}")
    weight = getattr(layer, "weight", None)
    if not isinstance(weight, nn.Parameter):
        fail(
            "the layer has no parameter named `weight`",
            f"RMSNorm({_D})",
            "create it with self.weight = nn.Parameter(torch.ones(d_model)): without it the "
            "layer cannot learn a scale per feature, and nothing would be trained",
        )
    expect_shape("layer.weight", weight, (_D,), f"RMSNorm({_D})")
    if not torch.equal(weight.detach(), torch.ones(_D)):
        fail(
            "layer.weight does not start at ones",
            f"RMSNorm({_D})",
            "initialise the scale to ones, so that a fresh layer only normalises",
        )
    biases = [n for n, _ in layer.named_parameters() if n != "weight"]
    if biases:
        fail(
            f"the layer has extra parameters {biases}",
            f"RMSNorm({_D})",
            "RMSNorm has a scale (weight) only, no bias",
        )
    ref = nn.RMSNorm(_D, eps=eps)
    with torch.no_grad():
        w = torch.linspace(0.5, 1.5, _D)
        layer.weight.copy_(w)
        ref.weight.copy_(w)
    for where, x in _inputs().items():
        with torch.no_grad(), _watch_built_ins("rms_norm") as used:
            got = call(layer, x, where=where)
        if used:
            fail(
                f"the layer calls {used[0]} (directly or through nn.RMSNorm)",
                where,
                "write the formula out yourself: x / sqrt(mean(x**2) + eps) * weight",
            )
        with torch.no_grad():
            expected = ref(x)
        expect_shape("output", got, x.shape, where, "RMSNorm keeps the shape of its input")
        if not _close(got, expected):
            for hint, wrong in _variants(x, w, eps):
                if _close(got, wrong):
                    fail("the output differs from torch.nn.RMSNorm's", where, hint)
        expect_close("output", got, expected, atol=1e-5, rtol=1e-4, where=where)
    passed("check_rms_norm", len(_inputs()) + 3, "same as torch.nn.RMSNorm")


# --- Exercise 5.4: LayerNorm from its formula ----------------------------------------------

_D_LN = 4  # small, so that dividing by d - 1 instead of d changes the output by sqrt(4/3)


def _ln_inputs() -> dict[str, torch.Tensor]:
    """B, L and d all differ, so that every wrong dimension shows; one input is tiny, so that
    eps matters."""
    g = torch.Generator().manual_seed(54)
    return {
        "x of shape [2, 3, 4] with mean about 3": torch.randn(2, 3, _D_LN, generator=g) + 3.0,
        "x of shape [5, 3, 4] scaled by 1e-3 (eps matters here)": 1e-3
        * torch.randn(5, 3, _D_LN, generator=g),
    }


def _ln_variants(x, w, b, eps) -> list[tuple[str, torch.Tensor]]:
    """(hint, what the mistake computes) for LayerNorm's classic mistakes."""
    mu = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, unbiased=False)
    y = (x - mu) / torch.sqrt(var + eps)

    def over(dim):
        m = x.mean(dim, keepdim=True)
        return (x - m) / torch.sqrt(x.var(dim, keepdim=True, unbiased=False) + eps) * w + b

    return [
        (
            "the variance is the biased one: divide by d, not d - 1 "
            "(x.var(-1, unbiased=False), or ((x - mean) ** 2).mean(-1))",
            (x - mu) / torch.sqrt(x.var(-1, keepdim=True) + eps) * w + b,
        ),
        (
            "eps goes inside the square root: (x - mean) / sqrt(var + eps), not "
            "(x - mean) / (sqrt(var) + eps)",
            (x - mu) / (var.sqrt() + eps) * w + b,
        ),
        (
            "x.std() + eps is the Annotated Transformer's slip: x.std() divides by d - 1, and "
            "eps belongs inside the root: (x - mean) / sqrt(var + eps)",
            (x - mu) / (x.std(-1, keepdim=True) + eps) * w + b,
        ),
        (
            "you normalised over the batch dimension (dim 0); LayerNorm normalises each "
            "position over its own features: mean and var over dim=-1, keepdim=True",
            over(0),
        ),
        (
            "you normalised over the sequence dimension (dim -2); LayerNorm normalises each "
            "position over its own features: mean and var over dim=-1, keepdim=True",
            over(-2),
        ),
        (
            "subtract the mean: without centring this is RMSNorm (exercise 5.3), not LayerNorm",
            x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w + b,
        ),
        (
            "the numerator is x - mean, not x: centre x as well as computing the variance "
            "around the mean",
            x / torch.sqrt(var + eps) * w + b,
        ),
        (
            "the variance is the mean of (x - mean)**2, around the mean, not the mean of x**2",
            (x - mu) / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w + b,
        ),
        (
            "eps is missing: (x - mean) / sqrt(var + eps). Without it a nearly constant "
            "vector is blown up to standard deviation 1",
            (x - mu) / var.sqrt() * w + b,
        ),
        (
            "weight and bias are swapped: multiply by self.weight, then add self.bias",
            y * b + w,
        ),
        ("add self.bias after scaling by self.weight", y * w),
        ("multiply by self.weight before adding self.bias", y + b),
        (
            "scale first, then shift: y * weight + bias, not (y + bias) * weight",
            (y + b) * w,
        ),
    ]


def _outputs(layer, inputs):
    out = {}
    for where, x in inputs.items():
        with torch.no_grad(), _watch_built_ins("layer_norm") as used:
            got = call(layer, x, where=where)
        if used:
            fail(
                f"the layer calls {used[0]}",
                where,
                "write the formula out yourself: (x - mean) / sqrt(var + eps) * weight + bias",
            )
        expect_shape("output", got, x.shape, where, "LayerNorm keeps the shape of its input")
        out[where] = got.detach().float()
    return out


def check_layer_norm(cls) -> None:
    """Exercise 5.4: cls(d_model, eps=1e-5) is an nn.Module with learnable `weight` (ones) and
    `bias` (zeros), both [d_model], whose forward returns (x - mean) / sqrt(var + eps) * weight
    + bias, mean and biased variance over the last dimension. Compared with torch.nn.LayerNorm
    with the same (non-trivial) weight and bias on two inputs: an offset one with d = 4 and a
    tiny one where eps matters. Used in chapter 5.
    """
    eps, d = 1e-5, _D_LN
    name = f"{getattr(cls, '__name__', cls)}({d}, eps=1e-5)"
    layer = call(cls, d, eps=eps, where=name)
    if not isinstance(layer, nn.Module):
        fail(f"{name} should build an nn.Module, got {type(layer).__name__}")
    if isinstance(layer, nn.LayerNorm) or any(isinstance(m, nn.LayerNorm) for m in layer.modules()):
        fail("the layer uses nn.LayerNorm", name, "write the formula out yourself")
    for pname, init in (("weight", "ones"), ("bias", "zeros")):
        start = torch.ones(d) if init == "ones" else torch.zeros(d)
        p = getattr(layer, pname, None)
        if not isinstance(p, nn.Parameter):
            fail(
                f"the layer has no parameter named `{pname}`",
                name,
                f"create it with self.{pname} = nn.Parameter(torch.{init}(d_model)): "
                "LayerNorm learns a scale (weight) and a shift (bias) per feature",
            )
        expect_shape(f"layer.{pname}", p, (d,), name)
        if not torch.equal(p.detach(), start):
            fail(
                f"layer.{pname} does not start at {init}",
                name,
                "a fresh LayerNorm only normalises: weight starts at 1, bias at 0",
            )
    ref = nn.LayerNorm(d, eps=eps)
    w, b = torch.tensor([0.5, 1.5, -1.0, 2.0]), torch.tensor([0.3, -0.2, 1.0, 0.1])
    with torch.no_grad():
        for m in (layer, ref):
            m.weight.copy_(w)
            m.bias.copy_(b)
    inputs = _ln_inputs()
    got = _outputs(layer, inputs)
    with torch.no_grad():
        expected = {where: ref(x) for where, x in inputs.items()}
    if not all(_close(got[k], expected[k]) for k in inputs):
        # a mistake is recognised when it gives the answer's output on every input
        for i, (hint, _) in enumerate(_ln_variants(inputs[next(iter(inputs))], w, b, eps)):
            if all(_close(got[k], _ln_variants(x, w, b, eps)[i][1]) for k, x in inputs.items()):
                wrong_on = next(k for k in inputs if not _close(got[k], expected[k]))
                fail("the output differs from torch.nn.LayerNorm's", wrong_on, hint)
    for where in inputs:
        expect_close("output", got[where], expected[where], where=where)
    passed("check_layer_norm", len(inputs) + 4, "same as torch.nn.LayerNorm")


# --- Exercise 5.5: the Pre-Norm encoder layer's forward ------------------------------------

_DL, _H, _DFF = 32, 4, 64


def _layer() -> EncoderLayer:
    with torch.random.fork_rng():  # leave the reader's random stream as it was
        torch.manual_seed(55)
        layer = EncoderLayer(_DL, _H, _DFF).eval()
        with torch.no_grad():  # LayerNorms that are not the identity and not alike
            for ln in (layer.ln1, layer.ln2):
                ln.weight.uniform_(0.5, 1.5)
                ln.bias.uniform_(-0.3, 0.3)
    return layer


_SOURCES = (  # padded batches, B != L
    torch.tensor([[3, 4, 5, 6, 7, 2], [8, 9, 2, 0, 0, 0]]),
    torch.tensor([[5, 2, 0, 0, 0], [3, 4, 5, 6, 2], [7, 8, 2, 0, 0]]),
)


def _enc_cases():
    """(where, x, pad_mask): B != L, and padded batches so that a missing mask shows."""
    g = torch.Generator().manual_seed(550)
    for i, src in enumerate(_SOURCES):
        B, L = src.shape
        x = torch.randn(B, L, _DL, generator=g) + (1.0 if i == 0 else 0.0)
        where = f"x [{B}, {L}, {_DL}], pad_mask [{B}, 1, 1, {L}] (a padded batch)"
        yield where, x, make_padding_mask(src)


def _enc_reference(layer, x, pad_mask, mistake=None):
    """The layer's forward, or what a known mistake computes instead."""
    if mistake == "post-norm":
        a, w = layer.mha(x, x, x, attn_mask=pad_mask)
        x = layer.ln1(x + layer.drop(a))
        return layer.ln2(x + layer.ffn(x)), w
    ln1, ln2 = layer.ln1, layer.ln2
    if mistake == "one layernorm":
        ln2 = layer.ln1
    elif mistake == "layernorms swapped":
        ln1, ln2 = layer.ln2, layer.ln1
    h = x if mistake == "attention unnormalised" else ln1(x)
    mask = {"no pad mask": None, "mask inverted": ~pad_mask}.get(mistake, pad_mask)
    a, w = layer.mha(h, h, h, attn_mask=mask)
    if mistake != "no residual dropout":
        a = layer.drop(a)
    if mistake == "no attention residual":
        x = a
    elif mistake == "residual from normalised":
        x = h + a
    else:
        x = x + a
    f = layer.ffn(x if mistake == "ffn unnormalised" else ln2(x))
    x = f if mistake == "no ffn residual" else x + f
    return x, w


_ENC_HINTS = {
    "post-norm": "that is the Post-Norm order (LayerNorm after the addition); this book's layer "
    "is Pre-Norm: x + sublayer(LN(x))",
    "no attention residual": "the attention's result is added to the stream: x = x + a, not x = a",
    "no ffn residual": "the feed-forward's result is added to the stream too: "
    "x = x + ffn(ln2(x)), not x = ffn(ln2(x))",
    "residual from normalised": "the residual adds to the stream x itself, not to its "
    "normalised copy: x = x + a, where a = mha(ln1(x), ...)",
    "one layernorm": "each sub-layer has its own LayerNorm: the feed-forward reads ln2(x), "
    "not ln1(x)",
    "no pad mask": "pass pad_mask to the attention (attn_mask=pad_mask), or every query also "
    "reads the <pad> positions",
    "ffn unnormalised": "the feed-forward reads ln2(x), the normalised stream, like the "
    "attention reads ln1(x)",
    "attention unnormalised": "the attention reads ln1(x), the normalised stream: "
    "h = layer.ln1(x), then layer.mha(h, h, h, ...)",
    "layernorms swapped": "ln1 and ln2 are swapped: the attention reads ln1(x), the "
    "feed-forward ln2(x)",
    "mask inverted": "the mask is inverted: pad_mask is True where a key is blocked, so "
    "pass it as it is (attn_mask=pad_mask), not ~pad_mask",
}


def check_encoder_layer_forward(fn) -> None:
    """Exercise 5.5: fn(layer, x, pad_mask) -> (x_out, weights), the forward pass of a
    helpers.EncoderLayer written with the layer's own sub-modules (ln1, ln2, mha, ffn, drop).
    Compared with layer(x, pad_mask) in eval mode on two padded batches with B != L; the
    LayerNorms get distinct, non-trivial weights so that a swapped one shows. Used in
    chapter 5.
    """
    layer = _layer()
    n = 0
    for where, x, pad_mask in _enc_cases():
        with torch.no_grad():
            expected, expected_w = layer(x, pad_mask)
            with _watch_calls(layer) as calls:
                got = call(fn, layer, x, pad_mask, where=where)
        if calls:
            fail(
                "fn calls layer(x, pad_mask) itself",
                where,
                "write the forward pass from the layer's parts: layer.ln1, layer.mha, "
                "layer.drop, layer.ln2 and layer.ffn",
            )
        if not (isinstance(got, tuple) and len(got) == 2):
            fail(
                f"fn should return a pair (output, attention weights), got {type(got).__name__}",
                where,
            )
        out, w = got
        expect_shape("output", out, x.shape, where, "the layer keeps the stream's shape")
        if not _close(out, expected):
            with torch.no_grad():
                again = call(fn, layer, x, pad_mask, where=where)[0]
            if not torch.equal(again, out):
                fail(
                    "two calls on the same input give different outputs",
                    where,
                    "dropout is still on: use the layer's own layer.drop, which eval() "
                    "switches off (F.dropout(a, p) is on unless you pass training=...)",
                )
            with torch.no_grad():
                normalised = [F.layer_norm(expected, (_DL,)), layer.ln1(expected)]
                normalised.append(layer.ln2(expected))
            if any(_close(out, e) for e in normalised):
                fail(
                    "the output is the layer's output passed through a LayerNorm",
                    where,
                    "a Pre-Norm layer returns the stream without normalising it; the "
                    "encoder's ln_final normalises it once, after the last layer",
                )
            for mistake, hint in _ENC_HINTS.items():
                with torch.no_grad():
                    wrong, _ = _enc_reference(layer, x, pad_mask, mistake)
                if _close(out, wrong):
                    fail("the output differs from helpers.EncoderLayer's", where, hint)
        expect_close("output", out, expected, where=where)
        expect_shape(
            "attention weights",
            w,
            (x.size(0), _H, x.size(1), x.size(1)),
            where,
            "return the self-attention weights [B, h, L, L] that layer.mha gives back",
        )
        expect_close(
            "attention weights",
            w,
            expected_w,
            where=where,
            hint="the weights come from mha(ln1(x), ln1(x), ln1(x), attn_mask=pad_mask)",
        )
        n += 2
    # training mode, the same random seed on both sides: the dropouts must be the layer's own,
    # in the order of its forward pass (eval mode cannot see a missing layer.drop)
    where, x, pad_mask = next(_enc_cases())
    where += ", training mode (dropout on), the same random seed"
    layer.train()
    try:
        with torch.no_grad(), torch.random.fork_rng():
            torch.manual_seed(551)
            expected, _ = layer(x, pad_mask)
            torch.manual_seed(551)
            out = call(fn, layer, x, pad_mask, where=where)[0]
            torch.manual_seed(551)
            no_drop, _ = _enc_reference(layer, x, pad_mask, "no residual dropout")
    finally:
        layer.eval()
    if not _close(out, expected) and _close(out, no_drop):
        fail(
            "the output differs from helpers.EncoderLayer's in training mode",
            where,
            "pass the attention's result through layer.drop before adding it: "
            "x = x + layer.drop(a). In eval mode layer.drop does nothing, so only training "
            "shows it",
        )
    expect_close(
        "output",
        out,
        expected,
        where=where,
        hint="use the layer's own dropouts (inside layer.mha, layer.drop, inside layer.ffn), "
        "in the order of the forward pass",
    )
    n += 1
    passed("check_encoder_layer_forward", n, "same output and weights as helpers.EncoderLayer")


# --- Exercise 5.5, second part: the encoder stack's forward -------------------------------


def _encoder() -> Encoder:
    with torch.random.fork_rng():  # leave the reader's random stream as it was
        torch.manual_seed(56)
        encoder = Encoder(13, _DL, _H, _DFF, num_layers=3, max_len=16).eval()
    g = torch.Generator().manual_seed(560)
    with torch.no_grad():  # LayerNorms that are not the identity, as after training
        for ln in encoder.modules():
            if isinstance(ln, nn.LayerNorm):
                ln.weight.copy_(0.5 + torch.rand(_DL, generator=g))
                ln.bias.copy_(0.6 * torch.rand(_DL, generator=g) - 0.3)
    return encoder


def _stack_reference(encoder, src, pad_mask, mistake=None):
    """The encoder's forward, or what a known mistake computes instead."""
    emb = encoder.embed(src)
    if mistake == "ln at the start":
        emb = encoder.ln_final(emb)
    x = emb
    layers = list(encoder.layers)
    mask = {"no pad mask": None, "mask inverted": ~pad_mask}.get(mistake, pad_mask)
    for layer in reversed(layers) if mistake == "reversed" else layers:
        inp = emb if mistake == "reads embedding" else x
        x, _ = layer(inp, mask)
        if mistake == "ln every layer":
            x = encoder.ln_final(x)
    if mistake in ("no final ln", "ln every layer", "ln at the start"):
        return x
    if mistake == "unweighted final ln":
        return F.layer_norm(x, (_DL,))
    return encoder.ln_final(x)


_STACK_HINTS = {
    "no final ln": "Pre-Norm never normalises the stream inside the stack: the encoder ends "
    "with encoder.ln_final(x), after the last layer",
    "ln every layer": "encoder.ln_final runs once, after the loop, not after every layer",
    "no pad mask": "pass pad_mask to every layer, or the queries read <pad> positions",
    "reads embedding": "each layer reads the previous layer's output: x, _ = layer(x, "
    "pad_mask), not layer(embedding, pad_mask)",
    "reversed": "the layers run in the order of encoder.layers, first to last",
    "unweighted final ln": "use encoder.ln_final, with its learned weight and bias, not a "
    "bare F.layer_norm",
    "ln at the start": "encoder.ln_final goes at the exit, after the last layer, not on the "
    "embedding: each Pre-Norm layer already normalises its own input",
    "mask inverted": "the mask is inverted: pad_mask is True where a key is blocked, so pass "
    "it as it is, not ~pad_mask",
}


def check_encoder_forward(fn) -> None:
    """Exercise 5.5, second part: fn(encoder, src, pad_mask) -> memory [B, L, d], the forward
    pass of a helpers.Encoder (embed, layers, ln_final) written with its own sub-modules.
    Compared with encoder(src, pad_mask) in eval mode: three layers, LayerNorms with
    non-trivial weights, two padded batches. Used in chapter 5.
    """
    encoder = _encoder()
    n = 0
    for src in _SOURCES:
        pad_mask = make_padding_mask(src)
        where = f"src {list(src.shape)}, pad_mask {list(pad_mask.shape)} (a padded batch)"
        with torch.no_grad():
            expected = encoder(src, pad_mask)
            try:
                with _watch_calls(encoder) as calls:
                    got = call(fn, encoder, src, pad_mask, where=where)
            except ExerciseError as err:
                if "'tuple' object" in str(err) or "got tuple" in str(err):
                    fail(
                        str(err).split(": ", 1)[-1],
                        where,
                        "each layer returns a pair (x, weights): unpack it in the loop, "
                        "x, _ = layer(x, pad_mask)",
                    )
                raise
        if calls:
            fail(
                "fn calls encoder(src, pad_mask) itself",
                where,
                "write the forward pass from the encoder's parts: encoder.embed, the layers "
                "of encoder.layers, encoder.ln_final",
            )
        if isinstance(got, tuple):
            fail(
                "fn returned a tuple",
                where,
                "the encoder returns memory alone; each layer returns a pair, so unpack it "
                "in the loop: x, _ = layer(x, pad_mask)",
            )
        expect_shape("memory", got, expected.shape, where, "memory is [B, L, d_model]")
        if not _close(got, expected):
            for mistake, hint in _STACK_HINTS.items():
                with torch.no_grad():
                    wrong = _stack_reference(encoder, src, pad_mask, mistake)
                if _close(got, wrong):
                    fail("memory differs from helpers.Encoder's", where, hint)
        expect_close("memory", got, expected, where=where)
        n += 1
    passed("check_encoder_forward", n, "same memory as helpers.Encoder")
