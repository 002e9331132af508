"""Checkers for the exercises of chapter 5 (the encoder)."""

from __future__ import annotations

import torch
import torch.nn as nn

from ._common import call, expect_close, expect_shape, fail, passed

__all__ = ["check_rms_norm"]

_D = 16


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
        with torch.no_grad():
            got = call(layer, x, where=where)
            expected = ref(x)
        expect_shape("output", got, x.shape, where, "RMSNorm keeps the shape of its input")
        if not torch.allclose(got.detach().float(), expected, atol=1e-5, rtol=1e-4):
            for hint, wrong in _variants(x, w, eps):
                if torch.allclose(got.detach().float(), wrong, atol=1e-5, rtol=1e-4):
                    fail("the output differs from torch.nn.RMSNorm's", where, hint)
        expect_close("output", got, expected, atol=1e-5, rtol=1e-4, where=where)
    passed("check_rms_norm", len(_inputs()) + 3, "same as torch.nn.RMSNorm")
