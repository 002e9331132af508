"""Stage 6 of check_model, NaN/inf anywhere: in the parameters and buffers, in the module
outputs (naming the first module that produced one), in the loss and the gradients.
Used in chapter 17."""

from __future__ import annotations

import math

import torch.nn as nn

from .recorder import non_finite
from .report import ModelReport
from .shapes import ForwardPass


def nan_inf_checks(model: nn.Module, first: ForwardPass, named, grads, loss_value, report):
    """All three NaN/inf checks, in order. Used in chapter 17."""
    parameters_finite(model, report)
    activations_finite(first, report)
    loss_and_grads_finite(named, grads, loss_value, report)


def parameters_finite(model: nn.Module, report: ModelReport) -> None:
    """No NaN/inf in any parameter or buffer. Used in chapter 17."""
    bad = [n for n, p in model.named_parameters() if non_finite(p.detach())]
    bad += [n for n, b in model.named_buffers() if non_finite(b)]
    if bad:
        report.add(
            "nan/inf",
            "parameters finite",
            "FAIL",
            f"NaN/inf in {len(bad)} parameter/buffer tensor(s): {', '.join(bad[:3])}",
        )
    else:
        report.add("nan/inf", "parameters finite", "ok", "no NaN/inf in parameters or buffers")


def activations_finite(first: ForwardPass, report: ModelReport) -> None:
    """No NaN/inf in a module output of the first pass; names the first. Used in chapter 17."""
    rec = first.recorder
    if rec.first_non_finite or not first.finite:
        where = "{} ({})".format(*rec.first_non_finite) if rec.first_non_finite else "the logits"
        report.add("nan/inf", "activations finite", "FAIL", f"first non-finite output: {where}")
    else:
        report.add(
            "nan/inf", "activations finite", "ok", f"all {rec.n_outputs} module outputs are finite"
        )


def loss_and_grads_finite(named, grads, loss_value: float, report: ModelReport) -> None:
    """The initial loss and every gradient are finite. Used in chapter 17."""
    bad = [n for (n, _), g in zip(named, grads) if g is not None and non_finite(g)]
    if bad or not math.isfinite(loss_value):
        report.add(
            "nan/inf",
            "loss and grads finite",
            "FAIL",
            f"loss {loss_value:.3g}; NaN/inf in the gradients of {len(bad)} parameter tensor(s)"
            + (f", e.g. {bad[0]}" if bad else ""),
        )
    else:
        report.add(
            "nan/inf", "loss and grads finite", "ok", "the loss and every gradient are finite"
        )
