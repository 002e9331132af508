"""Checkers for the exercises of chapter 4 (the feed-forward network).

When an answer is wrong, the checker computes what each known mistake gives on the same input
and, if one matches, names it with a hint. The catalogue of those mistakes, one small function
each, is `tests/mistakes_ch04.py`.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._common import call, expect_close, expect_shape, fail, passed

__all__ = ["check_swiglu_ffn"]


def check_swiglu_ffn(cls) -> None:
    """Exercise 4.3: cls(d_model, dff) is a gated feed-forward block with three bias-free
    nn.Linear layers, `w_gate` and `w_up` (d_model -> dff) and `w_down` (dff -> d_model),
    computing w_down(SiLU(w_gate(x)) * w_up(x)) at every position of x [..., d_model].

    Compared with that formula, computed from the module's own weights. Used in chapter 4.
    """
    d, dff = 12, 20
    where = f"cls({d}, {dff})"
    module = call(cls, d, dff, where=where)
    for name, shape in (("w_gate", (dff, d)), ("w_up", (dff, d)), ("w_down", (d, dff))):
        layer = getattr(module, name, None)
        if not isinstance(layer, nn.Linear):
            fail(
                f"module.{name} should be an nn.Linear, got {type(layer).__name__}",
                where,
                "name the three layers w_gate, w_up and w_down",
            )
        expect_shape(
            f"module.{name}.weight",
            layer.weight,
            shape,
            where,
            "nn.Linear(in, out) stores its weight as [out, in]",
        )
        if layer.bias is not None:
            fail(f"module.{name} has a bias", where, "build the layers with bias=False")
    n_params = sum(p.numel() for p in module.parameters())
    if n_params != 3 * d * dff:
        fail(f"the module has {n_params} parameters, expected 3 * d * dff = {3 * d * dff}", where)

    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, d, generator=g) * 2
    with torch.no_grad():
        gate, up = module.w_gate(x), module.w_up(x)
        expected = module.w_down(F.silu(gate) * up)
        wrong = [
            (
                module.w_down(F.silu(up) * gate),
                "the SiLU goes on the gate, w_gate(x), not on w_up(x)",
            ),
            (module.w_down(torch.sigmoid(gate) * up), "SiLU(z) is z * sigmoid(z), not sigmoid(z)"),
            (module.w_down(F.gelu(gate) * up), "the activation is SiLU (F.silu), not GELU"),
            (module.w_down(F.silu(gate)), "multiply the activated gate by w_up(x)"),
            (module.w_down(F.silu(gate * up)), "apply SiLU to the gate alone, then multiply"),
            (module.w_down(F.relu(gate) * up), "the activation is SiLU (F.silu), not ReLU"),
            (
                module.w_down(gate * up),
                "the gate needs its SiLU: without it, w_gate(x) * w_up(x) is a product of two "
                "linear maps, with no non-linearity",
            ),
            (
                module.w_down(F.silu(gate) + up),
                "the gate and the value are multiplied elementwise (*), not added",
            ),
        ]
    for shape_name, inp, out_shape in (
        ("x of shape (2, 5, d)", x, (2, 5, d)),
        ("one position, x of shape (d,)", x[1, 3], (d,)),
    ):
        got = call(module, inp, where=shape_name)
        if isinstance(got, torch.Tensor) and got.shape == (*out_shape[:-1], dff):
            fail(
                f"the output has shape {tuple(got.shape)}: its last dimension is dff, not d",
                shape_name,
                "finish with w_down, which maps the dff hidden units back to d_model",
            )
        expect_shape("the output", got, out_shape, shape_name, "the output has the input's shape")
        exp = expected if inp.dim() == 3 else expected[1, 3]
        hint = ""
        for w, h in wrong:
            w = w if inp.dim() == 3 else w[1, 3]
            if torch.allclose(got, w, atol=1e-5):
                hint = h
                break
        expect_close("the output", got, exp, where=shape_name, hint=hint)
    passed("check_swiglu_ffn", 4)
