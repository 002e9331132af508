"""Stage 4 of check_model, the loss at initialisation: the cross entropy of the untrained model
against ln(V), and the scale of what enters each stack's first LayerNorm. Used in chapter 17."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .recorder import Recorder
from .report import ModelReport, short


def initial_loss(model, src, tgt_in, tgt_out, V, pad_id, ratio_limit, report: ModelReport):
    """The loss with its autograd graph (the gradient checks use it), and its value.

    An untrained model that knows nothing scores about ln(V); with random logits of std s it
    scores about ln(V) + s^2 / 2, so a healthy initialisation lands somewhat above ln(V). Only a
    loss above ratio_limit * ln(V) is flagged: the model is then confidently wrong.
    Used in chapter 17.
    """
    with torch.enable_grad():
        logits_g = model(src, tgt_in)
        loss = F.cross_entropy(logits_g.reshape(-1, V), tgt_out.reshape(-1), ignore_index=pad_id)
    ln_v = math.log(V)
    pad_share = float((tgt_out == pad_id).float().mean())
    lv = float(loss.detach())
    msg = (
        f"{lv:.2f} vs ln(V) = ln({V}) = {ln_v:.2f}, ratio {lv / ln_v:.2f} "
        f"({pad_share:.0%} PAD targets ignored)"
    )
    if not math.isfinite(lv):
        report.add("loss at init", "initial loss", "FAIL", f"the loss is {lv}")
    elif lv > ratio_limit * ln_v:
        report.add(
            "loss at init",
            "initial loss",
            "FAIL",
            msg + f": above {ratio_limit:g} x ln(V), the untrained model is confidently wrong "
            "(initialisation or output scale)",
        )
    else:
        report.add(
            "loss at init",
            "initial loss",
            "ok",
            msg + (": far below ln(V), a trained model (or a leak)" if lv < 0.5 * ln_v else ""),
        )
    return loss, lv


def embedding_scale(rec: Recorder, limit: float, report: ModelReport) -> None:
    """The std of what enters the first LayerNorm of each stack: the embeddings (plus positions).

    Used in chapter 17.
    """
    entry = {}
    for name, std in rec.ln_inputs:
        stack = name.split(".")[0]
        entry.setdefault(stack, std)
    if not entry:
        report.add("loss at init", "embedding scale", "skip", "no LayerNorm was called")
        return
    msg = ", ".join(f"{k} {short(v)}" for k, v in entry.items())
    if max(entry.values()) > limit:
        report.add(
            "loss at init",
            "embedding scale",
            "FAIL",
            f"std entering the first LayerNorm: {msg} (> {limit:g}): token embeddings this large "
            "drown the positional signal (|pe| <= 1)",
        )
    else:
        report.add(
            "loss at init", "embedding scale", "ok", f"std entering the first LayerNorm: {msg}"
        )
