"""Stage 6 of check_model, asked for with make_train_step: overfit one small batch.

A model, a loss and an optimiser step that work together drive the loss of one small batch,
trained on again and again, near zero within a few dozen steps. Used in chapter 17.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F

from .report import ModelReport, short


def _batch_loss(model, src, tgt_in, tgt_out, V, pad_id) -> float:
    """The batch's loss in eval mode, with the checker's own shift (not the reader's)."""
    model.eval()
    with torch.no_grad():
        logits = model(src, tgt_in)
        return F.cross_entropy(
            logits.reshape(-1, V), tgt_out.reshape(-1), ignore_index=pad_id
        ).item()


def overfit_one_batch(
    model,
    batch,
    make_train_step,
    tgt_in,
    tgt_out,
    V,
    pad_id,
    steps,
    ratio_limit,
    seed,
    report: ModelReport,
) -> None:
    """Train a copy of `model` for `steps` steps on `batch` with the reader's own step.

    make_train_step(model) builds the reader's optimiser and schedule for the model it is given
    and returns step(*batch), one training step on the batch as check_model received it
    (the step makes its own teacher-forcing shift), returning the loss it computed (or None).
    The copy's loss on the batch, computed here with the target shifted by one, must end below
    ratio_limit * ln(V). The model passed in is not touched, and the global random state is
    restored afterwards (the steps run under torch.random.fork_rng, seeded with `seed`).

    A failure names what it recognises: no parameter changed (the optimiser never stepped);
    the step's own loss fell but the shifted target's did not (labels misaligned); otherwise
    the loss fell too little (steps too small: a schedule that never advances).
    Used in chapter 17.
    """
    src = batch[0]
    ln_v = math.log(V)
    limit = ratio_limit * ln_v
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        trained = copy.deepcopy(model)
        start = _batch_loss(trained, src, tgt_in, tgt_out, V, pad_id)
        before = [p.detach().clone() for p in trained.parameters()]
        trained.train()
        step = make_train_step(trained)
        own = None
        with torch.enable_grad():
            for _ in range(steps):
                own = step(*batch)
        end = _batch_loss(trained, src, tgt_in, tgt_out, V, pad_id)
    moved = any(not torch.equal(b, p.detach()) for b, p in zip(before, trained.parameters()))
    own = float(own) if isinstance(own, (float, int, torch.Tensor)) else None
    msg = f"{start:.2f} -> {short(end)} in {steps} steps on one batch (limit {limit:.2f})"
    if end < limit:
        report.add("overfit", "overfit one batch", "ok", msg)
    elif not moved:
        report.add(
            "overfit",
            "overfit one batch",
            "FAIL",
            msg + ": no parameter changed, the optimiser never stepped (opt.step() missing, "
            "or zero_grad() between backward() and step())",
        )
    elif own is not None and own < limit:
        report.add(
            "overfit",
            "overfit one batch",
            "FAIL",
            msg + f": your step's own loss fell to {short(own)}, the shifted target's did not: "
            "the labels are misaligned (the target is tgt[:, 1:] for the input tgt[:, :-1])",
        )
    else:
        report.add(
            "overfit",
            "overfit one batch",
            "FAIL",
            msg + ": the weights moved, but the loss fell too little: the steps are too small "
            "(is scheduler.step() called, and does the learning rate leave its first value?)",
        )
