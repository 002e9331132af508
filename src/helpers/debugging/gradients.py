"""Stage 5 of check_model, gradients: tensors in the autograd graph that are not parameters,
parameters that get no gradient, and the gradient norm of each block. Used in chapter 17."""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from .report import ModelReport, short


def block_of(param_name: str) -> str:
    """'encoder.layers.0.mha.W_q.weight' -> 'encoder.layers.0'; 'out_proj.weight' -> 'out_proj'.

    Used in chapter 17 (check_model's gradient norms per block).
    """
    parts = param_name.split(".")[:-1] or [param_name]
    for i, p in enumerate(parts):
        if p.isdigit():
            return ".".join(parts[: i + 1])
    return ".".join(parts[:2])


def autograd_leaves(root: torch.Tensor) -> list[torch.Tensor]:
    """Every leaf tensor with requires_grad that the autograd graph of `root` reaches.

    Used in chapter 17.
    """
    seen, leaves, stack = set(), [], [root.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        var = getattr(fn, "variable", None)  # AccumulateGrad nodes hold the leaf
        if isinstance(var, torch.Tensor):
            leaves.append(var)
        stack.extend(next_fn for next_fn, _ in fn.next_functions)
    return leaves


def hidden_modules(model: nn.Module) -> list[str]:
    """Attributes that hold modules inside a plain list/tuple/dict (invisible to nn.Module).

    Used in chapter 17.
    """
    found = []
    for name, mod in model.named_modules():
        for attr, value in vars(mod).items():
            if isinstance(value, dict):
                values = value.values()
            elif isinstance(value, (list, tuple)):
                values = value
            else:
                values = ()
            if not attr.startswith("_") and any(isinstance(v, nn.Module) for v in values):
                found.append(f"{name + '.' if name else ''}{attr} is a {type(value).__name__}")
    return found


def gradient_checks(model: nn.Module, loss: torch.Tensor, norm_limit: float, report: ModelReport):
    """All three gradient checks; returns (named trainable parameters, their gradients).

    Used in chapter 17.
    """
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    unregistered_tensors(model, loss, named, report)
    grads = parameters_reached(loss, named, report)
    gradient_norms(named, grads, norm_limit, report)
    return named, grads


def unregistered_tensors(model, loss, named, report: ModelReport) -> None:
    """Leaves of the autograd graph of the loss that are not parameters. Used in chapter 17."""
    registered = {id(p) for _, p in named}
    leaves = autograd_leaves(loss) if loss.grad_fn is not None else []
    hidden = [t for t in leaves if id(t) not in registered]
    if hidden:
        where = hidden_modules(model)
        report.add(
            "gradients",
            "unregistered tensors",
            "FAIL",
            f"{len(hidden)} tensors ({sum(t.numel() for t in hidden):,} values) require grad and "
            "shape the output but are not parameters of the model: the optimizer, state_dict, "
            ".to() and .eval() never see them" + (f" ({'; '.join(where)})" if where else ""),
        )
    else:
        report.add(
            "gradients",
            "unregistered tensors",
            "ok",
            f"every tensor that requires grad in the graph is one of the {len(named)} parameters",
        )


def parameters_reached(loss, named, report: ModelReport) -> list:
    """torch.autograd.grad of the loss for every parameter (None where it does not reach).

    Used in chapter 17.
    """
    if loss.grad_fn is None:
        report.add(
            "gradients", "parameters reached", "FAIL", "the loss does not depend on any parameter"
        )
        grads = [None] * len(named)
    else:
        grads = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True)
    unused = [n for (n, _), g in zip(named, grads) if g is None]
    if unused:
        report.add(
            "gradients",
            "parameters reached",
            "FAIL",
            f"{len(unused)} parameter tensor(s) get no gradient (never used by the forward "
            "pass), e.g. " + ", ".join(unused[:3]),
        )
    else:
        report.add(
            "gradients", "parameters reached", "ok", f"all {len(named)} parameters get a gradient"
        )
    return grads


def _some(blocks: list[str]) -> str:
    return ", ".join(blocks) if len(blocks) <= 3 else f"{len(blocks)} blocks ({blocks[0]}, ...)"


def gradient_norms(named, grads, norm_limit: float, report: ModelReport) -> None:
    """The gradient norm of each block (report.grad_norms): none zero, NaN/inf or huge.

    Used in chapter 17.
    """
    sq: dict[str, float] = {}
    for (n, _), g in zip(named, grads):
        if g is not None:
            b = block_of(n)
            sq[b] = sq.get(b, 0.0) + float(g.double().pow(2).sum())
    report.grad_norms = {b: math.sqrt(v) for b, v in sq.items()}
    norms = report.grad_norms
    if not norms:
        return
    lo, hi = min(norms, key=norms.get), max(norms, key=norms.get)
    zero = [b for b, v in norms.items() if v == 0]
    nonfinite = [b for b, v in norms.items() if not math.isfinite(v)]
    huge = [b for b, v in norms.items() if math.isfinite(v) and v > norm_limit]
    problems = (
        ([f"zero in {_some(zero)}"] if zero else [])
        + ([f"NaN/inf in {_some(nonfinite)}"] if nonfinite else [])
        + ([f"above {norm_limit:g} in {_some(huge)}"] if huge else [])
    )
    if problems:
        report.add(
            "gradients", "gradient norms", "FAIL", f"{len(norms)} blocks: " + "; ".join(problems)
        )
    else:
        report.add(
            "gradients",
            "gradient norms",
            "ok",
            f"{len(norms)} blocks, from {short(norms[lo])} ({lo}) to {short(norms[hi])} ({hi})",
        )
