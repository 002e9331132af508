"""Stage 1 of check_model, shapes: one forward pass, the logits' shape, the encoder's memory,
and two eval-mode passes that must agree. Used in chapter 17."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from .recorder import Recorder, non_finite
from .report import ModelReport, short


@dataclass
class ForwardPass:
    """The first forward pass: its logits and what the hooks saw during it.

    Used in chapter 17.
    """

    logits: torch.Tensor
    recorder: Recorder

    @property
    def finite(self) -> bool:
        return not non_finite(self.logits)


def first_forward(model: nn.Module, src, tgt_in, report: ModelReport) -> ForwardPass | None:
    """model(src, tgt_in) under hooks; None (and a FAIL) if it raises.

    Used in chapter 17.
    """
    rec = Recorder(model)
    try:
        with torch.no_grad():
            logits = model(src, tgt_in)
    except Exception as exc:  # the first thing to fix: report it and stop the model checks
        report.add(
            "shapes",
            "forward pass",
            "FAIL",
            f"model(src, tgt_in) raised {type(exc).__name__}: {exc}",
        )
        return None
    finally:
        rec.remove()
    return ForwardPass(logits, rec)


def logits_shape(logits: torch.Tensor, expected: tuple, report: ModelReport) -> bool:
    """The logits must be [B, Lt, V]; every later check indexes them that way.

    Used in chapter 17.
    """
    if tuple(logits.shape) == expected:
        report.add("shapes", "logits shape", "ok", f"[B, Lt, V] = {list(expected)}")
        return True
    report.add(
        "shapes",
        "logits shape",
        "FAIL",
        f"got {list(logits.shape)}, expected [B, Lt, V] = {list(expected)}",
    )
    return False


def encoder_memory(model: nn.Module, src: torch.Tensor, report: ModelReport) -> None:
    """If the model has encode(src), its memory must be [B, Ls, d].

    Used in chapter 17.
    """
    if not hasattr(model, "encode"):
        return
    B, Ls = src.shape
    try:
        with torch.no_grad():
            out = model.encode(src)
        memory = out[0] if isinstance(out, (tuple, list)) else out
        ok = (
            isinstance(memory, torch.Tensor)
            and memory.dim() == 3
            and tuple(memory.shape[:2]) == (B, Ls)
        )
        report.add(
            "shapes",
            "encoder memory",
            "ok" if ok else "FAIL",
            f"{list(memory.shape)}, [B, Ls, d] expected with B={B}, Ls={Ls}",
        )
    except Exception as exc:
        report.add(
            "shapes",
            "encoder memory",
            "FAIL",
            f"model.encode(src) raised {type(exc).__name__}: {exc}",
        )


def eval_determinism(model: nn.Module, src, tgt_in, first: ForwardPass, report) -> bool:
    """A second pass in eval mode must give the first pass's logits exactly.

    Used in chapter 17.
    """
    with torch.no_grad():
        again = model(src, tgt_in)
    logits = first.logits
    diff = float((again - logits).abs().max()) if first.finite and not non_finite(again) else 0.0
    deterministic = torch.equal(again.isnan(), logits.isnan()) and diff == 0
    if deterministic:
        report.add(
            "shapes", "eval determinism", "ok", "two forward passes in eval mode are identical"
        )
    else:
        report.add(
            "shapes",
            "eval determinism",
            "FAIL",
            f"two forward passes in eval mode differ by up to {short(diff)}: something still runs "
            "in training mode (dropout in a module that model.eval() cannot reach?)",
        )
    return deterministic
