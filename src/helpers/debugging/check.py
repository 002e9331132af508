"""check_model: the six stages run in debugging order on one batch, and the seventh, overfit one
batch, when the reader passes a training step. Built in chapter 17."""

from __future__ import annotations

import torch
import torch.nn as nn

from helpers.core.vocab import BOS_ID, PAD_ID
from helpers.decoding.greedy import restores_mode

from .data import data_checks
from .gradients import gradient_checks
from .loss_at_init import embedding_scale, initial_loss
from .masks import causality_probe, padding_probe, received_masks, skip_probes
from .nan_inf import nan_inf_checks
from .overfit import overfit_one_batch
from .report import ModelReport
from .shapes import encoder_memory, eval_determinism, first_forward, logits_shape


@restores_mode
def check_model(
    model: nn.Module,
    batch,
    *,
    pad_id: int = PAD_ID,
    bos_id: int = BOS_ID,
    seed: int = 0,
    max_probe_rows: int = 4,
    loss_ratio_limit: float = 2.0,
    entry_std_limit: float = 4.0,
    grad_norm_limit: float = 1e3,
    make_train_step=None,
    overfit_steps: int = 50,
    overfit_ratio_limit: float = 0.2,
    verbose: bool = True,
) -> ModelReport:
    """Check `model` on one batch in debugging order; print a short report and return it.

    Built in chapter 17. batch: (src, tgt) with tgt = <bos> ... <eos> <pad>... (the decoder
    input and target are then tgt[:, :-1] and tgt[:, 1:]), or (src, tgt_in, tgt_out) to check a
    shift made elsewhere. The initial loss fails above loss_ratio_limit * ln(V); the std
    entering a stack's first LayerNorm fails above entry_std_limit; a block's gradient norm
    fails above grad_norm_limit.

    make_train_step (optional) adds the stage "overfit": make_train_step(model) builds your
    optimiser and schedule for the model it is given and returns step(*batch), one training
    step on the batch as passed here (your step makes its own teacher-forcing shift) that
    returns its loss. A copy of the model takes overfit_steps such steps on this one batch; its
    loss on the batch, with the target shifted by one, must then be below overfit_ratio_limit *
    ln(V). The limit comes from measurement: the book's recipe (BOOK_RECIPE's model, optimiser
    and lr_factor) on 8 reversal pairs (make_reversal_dataset(8, seed=7)) ends 50 steps at
    0.006-0.052 over the model seeds 0-9; a schedule that never advances ends at 1.2-1.9; an
    optimiser that never steps keeps the initial loss, and misaligned labels drive the shifted
    target's loss up. The limit, 0.2 ln(V) = 0.51, is about 10 times the worst correct run and over
    2 times below the best frozen one (tests/test_debugging_overfit.py checks that it lies
    between them). Another recipe may need more steps.
    Without make_train_step, nothing trains and the report has no overfit stage.
    Returns a ModelReport: .ok, .failures, report['causality probe'].status, .grad_norms.
    The checks run in eval mode; the model's own mode is given back, also after an error.
    """
    if not isinstance(batch, (tuple, list)) or len(batch) not in (2, 3):
        raise ValueError("batch must be (src, tgt) or (src, tgt_in, tgt_out)")
    if len(batch) == 2:
        src, tgt = batch
        tgt_in, tgt_out, shift_given = tgt[:, :-1], tgt[:, 1:], False
    else:
        src, tgt_in, tgt_out = batch
        shift_given = True
    for name, t in (("src", src), ("tgt_in", tgt_in), ("tgt_out", tgt_out)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2:
            raise ValueError(
                f"{name} must be a [B, L] tensor of token ids, got {getattr(t, 'shape', type(t))}"
            )
    made = {} if shift_given else {"tgt_in": " = tgt[:, :-1]", "tgt_out": " = tgt[:, 1:]"}
    for name, t in (("src", src), ("tgt_in", tgt_in), ("tgt_out", tgt_out)):
        if t.size(0) == 0 or t.size(1) == 0:
            raise ValueError(
                f"{name}{made.get(name, '')} has shape {list(t.shape)}: check_model needs at "
                "least one sequence of at least one token (tgt: BOS and one more token)"
            )

    report = ModelReport()
    gen = torch.Generator().manual_seed(seed)
    limits = (loss_ratio_limit, entry_std_limit, grad_norm_limit)
    model.eval()
    V = _run_stages(
        model,
        src,
        tgt_in,
        tgt_out,
        shift_given,
        pad_id,
        bos_id,
        gen,
        max_probe_rows,
        limits,
        report,
    )
    if make_train_step is not None:
        if V is None:
            report.add("overfit", "overfit one batch", "skip", "skipped: see shapes")
        else:
            overfit_one_batch(
                model,
                tuple(batch),
                make_train_step,
                tgt_in,
                tgt_out,
                V,
                pad_id,
                overfit_steps,
                overfit_ratio_limit,
                seed,
                report,
            )
    if verbose:
        print(report)
    return report


def _vocab(model, attr):
    v = getattr(model, attr, None)
    return int(v) if isinstance(v, int) else None


def _run_stages(
    model, src, tgt_in, tgt_out, shift_given, pad_id, bos_id, gen, max_probe_rows, limits, report
) -> int | None:
    """Run the six stages; return V, or None when the shapes stage stopped the model checks."""
    loss_ratio_limit, entry_std_limit, grad_norm_limit = limits
    src_vocab, tgt_vocab = _vocab(model, "src_vocab"), _vocab(model, "tgt_vocab")

    def data_stage():
        data_checks(src, tgt_in, tgt_out, shift_given, pad_id, bos_id, src_vocab, tgt_vocab, report)

    # 1. shapes: a model that does not run, or gives the wrong shape, stops the model checks
    first = first_forward(model, src, tgt_in, report)
    if first is None:
        data_stage()  # the batch can still be checked
        return None
    V = tgt_vocab or first.logits.size(-1)
    if not logits_shape(first.logits, (src.size(0), tgt_in.size(1), V), report):
        return None  # every later check indexes logits as [B, Lt, V]
    encoder_memory(model, src, report)
    deterministic = eval_determinism(model, src, tgt_in, first, report)

    # 2. masks: what the attention modules received, then the probes (on sound logits only)
    received_masks(first.recorder, report)
    if not first.finite:
        skip_probes("skipped: the logits hold NaN/inf (see nan/inf)", report)
    elif not deterministic:
        skip_probes("skipped: the forward pass is not deterministic (see eval determinism)", report)
    else:
        causality_probe(model, src, tgt_in, first.logits, pad_id, V, gen, report)
        padding_probe(model, src, tgt_in, first.logits, pad_id, max_probe_rows, report)

    # 3. data
    data_stage()

    # 4. the loss at initialisation
    loss, loss_value = initial_loss(
        model, src, tgt_in, tgt_out, V, pad_id, loss_ratio_limit, report
    )
    embedding_scale(first.recorder, entry_std_limit, report)

    # 5. gradients
    named, grads = gradient_checks(model, loss, grad_norm_limit, report)

    # 6. NaN/inf anywhere
    nan_inf_checks(model, first, named, grads, loss_value, report)
    return V
