"""Checkers for the exercises of chapter 10 (training).

check_smoothed_cross_entropy(fn)   fn(logits [N, V], labels [N], eps, ignore_index) -> loss:
                                   cross-entropy with label smoothing, by hand (exercise 10.3);
check_teacher_forcing_loss(fn)     fn(model, src, tgt) -> loss: the training loss of one batch,
                                   with the one-position shift and padding ignored (exercise 10.2);
check_training_loop(fn)            fn(cfg) -> (model, losses, eval_steps): the complete training
                                   loop, equal to train_reversal bit for bit (exercise 10.4).

The first two compare the reader's number with PyTorch's F.cross_entropy on fixed inputs. When
the number differs, they compute the usual wrong variants (smoothing spread over V - 1 classes,
padding averaged in, target not shifted, ...) and name the one the reader's number matches. The
third runs the reader's loop and train_reversal on three tiny configs; when they differ, it runs
each known mistake (labels not shifted, padding in the loss, label smoothing left out, Adam's
default betas, the scheduler stepped twice or never, no zero_grad, eval mode never undone, no
reshuffle, an ungated or misplaced evaluation, token accuracy as the score, ...) on the same
config and names the one whose losses and evaluation steps the reader's match.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import torch
import torch.nn.functional as F

from helpers.core.data import make_reversal_dataset
from helpers.core.model import Transformer
from helpers.core.vocab import PAD_ID, VOCAB_SIZE
from helpers.training.recipes import TrainConfig
from helpers.training.train import (
    build_model,
    epoch_batches,
    lr_factor,
    sequence_correct,
    train_reversal,
)

from ._common import call, expect_tensor, fail, passed

__all__ = ["check_smoothed_cross_entropy", "check_teacher_forcing_loss", "check_training_loop"]

# A right answer computes the same float32 sums as F.cross_entropy, in another order: about
# 1e-7 relative here. A near miss (the logits rounded to a 16-bit float before the loss) is off
# by about 6e-5, so the tolerance sits between the two.
TOL_REL, TOL_ABS = 1e-5, 1e-6


def _scalar(name: str, got, where: str) -> torch.Tensor:
    got = expect_tensor(name, got, where)
    if got.dim() != 0:
        fail(
            f"{name} has shape {tuple(got.shape)}, expected a scalar (shape ())",
            where,
            "average over the positions that count: the loss is one number",
        )
    return got


def _match(got: float, variants: dict[str, torch.Tensor]) -> str:
    """The hint of the first wrong variant whose value the reader's number reproduces."""
    for hint, value in variants.items():
        if abs(got - float(value)) <= 1e-5 + 1e-4 * abs(float(value)):
            return hint
    return ""


# ---------------------------------------------------------------- exercise 10.3


def _smoothing_inputs():
    g = torch.Generator().manual_seed(100)
    logits = torch.randn(12, 7, generator=g) * 2
    labels = torch.randint(1, 7, (12,), generator=g)
    padded = labels.clone()
    padded[[2, 5, 6, 11]] = 0  # class 0 plays <pad>
    wide = torch.randn(9, 13, generator=g) * 3
    wide_labels = torch.randint(0, 13, (9,), generator=g)
    wide_labels[[0, 4]] = -100  # PyTorch's default ignore_index
    return [
        ("12 positions, 7 classes, nothing ignored, eps 0.1", logits, labels, 0.1, 0),
        ("the same with 4 labels = ignore_index 0, eps 0.1", logits, padded, 0.1, 0),
        ("the same without smoothing (eps 0)", logits, padded, 0.0, 0),
        ("9 positions, 13 classes, ignore_index -100, eps 0.3", wide, wide_labels, 0.3, -100),
    ]


def _smoothing_variants(logits, labels, eps, ignore_index) -> dict[str, torch.Tensor]:
    V = logits.size(-1)
    real = labels != ignore_index
    safe = labels.masked_fill(~real, 0)
    logp = logits.log_softmax(-1)
    nll = -logp.gather(1, safe[:, None])[:, 0]
    uniform = -logp.mean(-1)
    others = (-logp.sum(-1) - nll) / (V - 1)
    n = real.sum().clamp(min=1)
    return {
        "the smoothing mass eps is spread over the V - 1 wrong classes; PyTorch spreads eps / V "
        "over all V classes, the true class included": (
            ((1 - eps) * nll + eps * others)[real].sum() / n
        ),
        "ignored positions are averaged in: they must add nothing to the sum and not count in "
        "the mean (divide by the number of real labels)": ((1 - eps) * nll + eps * uniform).mean(),
        "the smoothing term of the ignored positions was kept (only their -log p_y was masked), "
        "the bug of some old PyTorch versions: mask the whole per-position loss": (
            ((1 - eps) * nll * real).sum() + (eps * uniform).sum()
        )
        / n,
        "the true class's term is missing its weight (1 - eps)": (nll + eps * uniform)[real].sum()
        / n,
        "the loss is summed over the positions, not averaged": (
            ((1 - eps) * nll + eps * uniform)[real].sum()
        ),
    }


def check_smoothed_cross_entropy(fn) -> None:
    """Exercise 10.3: fn(logits, labels, eps, ignore_index) equals F.cross_entropy with
    label_smoothing=eps and ignore_index, on four fixed inputs."""
    for where, logits, labels, eps, ignore_index in _smoothing_inputs():
        got = call(fn, logits.clone(), labels.clone(), eps, ignore_index, where=where)
        got = _scalar("loss", got, where)
        want = F.cross_entropy(logits, labels, ignore_index=ignore_index, label_smoothing=eps)
        if not torch.isclose(got.detach().float(), want, atol=TOL_ABS, rtol=TOL_REL):
            hint = _match(
                float(got.detach()), _smoothing_variants(logits, labels, eps, ignore_index)
            )
            fail(f"loss is {float(got.detach()):.6f}, expected {float(want):.6f}", where, hint)
    passed("check_smoothed_cross_entropy", 4, "equal to F.cross_entropy(label_smoothing=...)")


# ---------------------------------------------------------------- exercise 10.2


def _tf_model() -> Transformer:
    torch.manual_seed(101)
    return Transformer(
        VOCAB_SIZE, VOCAB_SIZE, d_model=32, num_heads=4, dff=64, max_len=14, dropout=0.0
    )


def _ce(logits, labels, **kw) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, VOCAB_SIZE), labels.reshape(-1), **kw)


def _tf_variants(model, src, tgt) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        shifted = model(src, tgt[:, :-1])
        return {
            "padding is scored: pass ignore_index=PAD_ID, so the mean runs over real labels": (
                _ce(shifted, tgt[:, 1:])
            ),
            "the target is not shifted: the decoder reads tgt and is scored on tgt itself, so "
            "each position only has to copy its input; feed tgt[:, :-1] and score tgt[:, 1:]": (
                _ce(model(src, tgt), tgt, ignore_index=PAD_ID)
            ),
            "the shift goes the wrong way: the input must be tgt[:, :-1] (starting with <bos>) "
            "and the labels tgt[:, 1:]": (
                _ce(model(src, tgt[:, 1:]), tgt[:, :-1], ignore_index=PAD_ID)
            ),
        }


def check_teacher_forcing_loss(fn) -> None:
    """Exercise 10.2: fn(model, src, tgt) is the teacher-forced cross-entropy of the batch,
    padding ignored, returned as a tensor that backward() can use."""
    model = _tf_model()
    src, tgt = make_reversal_dataset(16, seed=102)
    short_src, short_tgt = make_reversal_dataset(8, seed=103, max_len=5)  # width 7, not 14
    checks = 0
    for where, s, t in (
        ("a batch of 16 sequences of 3-12 digits", src, tgt),
        ("a batch of 8 sequences of 3-5 digits (width 7)", short_src, short_tgt),
    ):
        model.zero_grad()
        got = call(fn, model, s.clone(), t.clone(), where=where)
        got = _scalar("loss", got, where)
        want = _ce(model(s, t[:, :-1]), t[:, 1:], ignore_index=PAD_ID).detach()
        if not torch.isclose(got.detach().float(), want, atol=TOL_ABS, rtol=TOL_REL):
            hint = _match(float(got.detach()), _tf_variants(model, s, t))
            fail(f"loss is {float(got.detach()):.6f}, expected {float(want):.6f}", where, hint)
        if not got.requires_grad:
            fail(
                "the loss does not require grad, so loss.backward() cannot train the model",
                where,
                "return the tensor itself (not loss.item(), and not computed under no_grad)",
            )
        checks += 1
    passed("check_teacher_forcing_loss", checks)


# ---------------------------------------------------------------- exercise 10.4

# Three 12-step runs of a tiny model with dropout: 3 batches per epoch, so 12 steps cross three
# epoch boundaries; warmup 4 and a cooldown over the last 8 steps, so every lr is distinct.
# The first config smooths the labels and has a target above the young model's exact match
# (0), so a loop that drops the smoothing, or scores something more generous than exact match
# (token accuracy), shows.
_LOOP_CFG = TrainConfig(
    d_model=16,
    num_heads=2,
    dff=32,
    num_layers=1,
    dropout=0.1,
    train_size=96,
    val_size=64,
    eval_size=64,
    batch_size=32,
    warmup=4,
    cooldown=8,
    max_steps=12,
    eval_every=4,
    eval_gate=0.0,
    target_exact_match=None,
    threads=1,
)


def _loop_configs() -> list[tuple[str, TrainConfig]]:
    base = "a 12-step run (3 batches per epoch, dropout 0.1, eval_every 4"
    return [
        (
            f"{base}, eval_gate 0, label_smoothing 0.1, target_exact_match 0.01, above this "
            "young model's exact match of 0)",
            dataclasses.replace(_LOOP_CFG, label_smoothing=0.1, target_exact_match=0.01),
        ),
        (
            f"{base}, eval_gate 0.5, which no batch of this young model reaches)",
            dataclasses.replace(_LOOP_CFG, eval_gate=0.5),
        ),
        (
            f"{base}, target_exact_match 0.0, which the first evaluation reaches)",
            dataclasses.replace(_LOOP_CFG, target_exact_match=0.0),
        ),
    ]


def _loop(cfg: TrainConfig, mistake: str | None = None):
    """train_reversal(cfg, confirm=False) written out, or what a known mistake makes of it:
    (model, losses, eval_steps)."""
    model = build_model(cfg)
    src_all, tgt_all = make_reversal_dataset(cfg.train_size, seed=cfg.data_seed)
    src_val, tgt_val = make_reversal_dataset(cfg.val_size, seed=cfg.val_seed)
    src_val, tgt_val = src_val[: cfg.eval_size], tgt_val[: cfg.eval_size]
    src_len, tgt_len = (src_all != PAD_ID).sum(1), (tgt_all != PAD_ID).sum(1)
    if mistake == "adam defaults":
        opt = torch.optim.Adam(model.parameters(), lr=cfg.lr_scale)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=cfg.lr_scale, betas=(0.9, 0.98), eps=1e-9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor(cfg))
    gen = torch.Generator().manual_seed(cfg.seed)
    losses, eval_steps, batches = [], [], []
    model.train()
    for step in range(1, cfg.max_steps + 1):
        if not batches:
            if mistake == "no reshuffle":
                gen = torch.Generator().manual_seed(cfg.seed)
            batch_gen = None if mistake == "global generator" else gen  # None: torch's global one
            batches = epoch_batches(src_len, cfg.batch_size, cfg.bucket, batch_gen)
        idx = batches.pop(0) if mistake == "front" else batches.pop()
        src, tgt = src_all[idx], tgt_all[idx]
        if mistake != "untrimmed":
            src, tgt = src[:, : int(src_len[idx].max())], tgt[:, : int(tgt_len[idx].max())]
        tgt_in = tgt[:, :-1]
        tgt_out = tgt_in if mistake == "labels not shifted" else tgt[:, 1:]
        logits = model(src, tgt_in)
        loss = F.cross_entropy(
            logits.reshape(-1, VOCAB_SIZE),
            tgt_out.reshape(-1),
            ignore_index=-100 if mistake == "padding counted" else PAD_ID,
            label_smoothing=0.0 if mistake == "no smoothing" else cfg.label_smoothing,
        )
        if mistake != "no zero_grad":
            opt.zero_grad()
        loss.backward()
        if mistake == "scheduler first":
            with warnings.catch_warnings():  # PyTorch warns about this order; the learner's
                warnings.simplefilter("ignore")  # own run has already shown that warning
                sched.step()
        opt.step()
        if mistake not in ("scheduler never", "scheduler first"):
            sched.step()
        if mistake == "scheduler twice":
            sched.step()
        losses.append(loss.item())
        batch_exact = sequence_correct(logits, tgt_out).float().mean().item()
        counted = step - 1 if mistake == "off by one" else step
        gate = (
            batch_exact > cfg.eval_gate
            if mistake == "strict gate"
            else (batch_exact >= cfg.eval_gate or mistake == "not gated")
        )
        last = step == cfg.max_steps and mistake != "no final evaluation"
        if (counted % cfg.eval_every == 0 and gate) or last:
            if mistake != "eval in train mode":
                model.eval()
            with torch.no_grad():
                val_logits, labels = model(src_val, tgt_val[:, :-1]), tgt_val[:, 1:]
            if mistake != "eval never undone":
                model.train()
            eval_steps.append(step)
            if mistake == "token accuracy":
                real = labels != PAD_ID
                score = int(((val_logits.argmax(-1) == labels) & real).sum()) / int(real.sum())
            else:
                score = int(sequence_correct(val_logits, labels).sum()) / len(src_val)
            target = cfg.target_exact_match
            if target is not None and (
                score > target if mistake == "strict stop" else score >= target
            ):
                break
    return model, losses, eval_steps


_LOOP_HINTS = {
    "labels not shifted": "the labels are not shifted: the loss scores tgt[:, :-1], the "
    "decoder's own input, so each position only has to copy it; score tgt[:, 1:]",
    "padding counted": "padding is counted in the loss: pass ignore_index=PAD_ID to "
    "F.cross_entropy, so that the mean runs over the real labels only",
    "scheduler twice": "the schedule advances twice per step: call sched.step() once, after "
    "opt.step()",
    "scheduler first": "the schedule advances before the optimiser steps, so step 1 already "
    "uses step 2's learning rate: call sched.step() after opt.step()",
    "scheduler never": "the learning rate never changes: call sched.step() after every opt.step()",
    "no smoothing": "the loss ignores cfg.label_smoothing: pass "
    "label_smoothing=cfg.label_smoothing to F.cross_entropy",
    "adam defaults": "Adam runs with PyTorch's defaults, betas (0.9, 0.999) and eps 1e-8: build "
    "it with betas=(0.9, 0.98), eps=1e-9, as train_reversal does",
    "no zero_grad": "the gradients pile up from step to step: call opt.zero_grad() before "
    "loss.backward()",
    "eval never undone": "after the first evaluation, training went on in eval mode, with "
    "dropout off: call model.train() once the validation set is scored",
    "eval in train mode": "the validation set was scored in training mode: dropout was on, and "
    "its random draws changed the masks of the later steps; call model.eval() before scoring",
    "no reshuffle": "every epoch repeats the first epoch's batches: draw each epoch's batches "
    "from the same generator, created once before the loop",
    "global generator": "the batches come from torch's global random generator, which "
    "build_model and dropout draw from too: draw them with a torch.Generator seeded with "
    "cfg.seed, created once before the loop",
    "front": "the batches are taken from the front of the list: take them with batches.pop(), "
    "from the end, as train_reversal does",
    "untrimmed": "the batch keeps its all-padding columns: cut src and tgt to the batch's "
    "longest sequence, as train_reversal does (dropout draws a random mask for every column, "
    "so the width changes the masks)",
    "not gated": "you evaluated at every eval_every-th step: evaluate only when that step's "
    "batch is at least cfg.eval_gate exactly right",
    "strict gate": "a batch exactly at the gate counts: evaluate when its share of exactly right "
    "sequences is >= cfg.eval_gate",
    "off by one": "the evaluations come one step early: count steps from 1 and evaluate after "
    "step k when k % cfg.eval_every == 0",
    "no final evaluation": "the last step is evaluated too, whatever the gate says, as "
    "train_reversal does",
    "token accuracy": "training stopped where train_reversal did not: the score must be "
    "exact match, the share of validation sequences right at every position up to <eos>, "
    "not the share of right tokens",
    "strict stop": "training did not stop at the first evaluation that reached the target: "
    "stop when the score is >= cfg.target_exact_match (a score equal to it counts)",
}

_RUNS: dict = {}  # (cfg, mistake or None) -> (losses, eval_steps, state), computed once


def _mistake_run(cfg: TrainConfig, mistake: str | None):
    """What the loop with this mistake gives on cfg; mistake None: train_reversal's run."""
    if (cfg, mistake) not in _RUNS:
        if mistake is None:
            run = train_reversal(cfg, progress=False, confirm=False)
            model, losses, eval_steps = run.model, run.history["loss"], run.history["eval_step"]
        else:
            model, losses, eval_steps = _loop(cfg, mistake)
        _RUNS[cfg, mistake] = (losses, eval_steps, model.state_dict())
    return _RUNS[cfg, mistake]


def _unpack_loop(got, where: str):
    if not (isinstance(got, tuple) and len(got) == 3):
        fail(
            f"fn should return a triple (model, losses, eval_steps), got {type(got).__name__}",
            where,
        )
    model, losses, eval_steps = got
    if not isinstance(model, torch.nn.Module):
        fail(f"the first item should be the trained model, got {type(model).__name__}", where)
    try:
        losses = [float(x) for x in losses]
        eval_steps = [int(s) for s in eval_steps]
    except (TypeError, ValueError) as err:
        fail(
            f"losses should be a list of numbers and eval_steps a list of step numbers ({err})",
            where,
        )
    return model, losses, eval_steps


def _close(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(
        math.isclose(x, y, rel_tol=1e-4, abs_tol=1e-6) for x, y in zip(a, b)
    )


def _difference(losses, eval_steps, state, want_losses, want_steps, want_state) -> str:
    """The first thing that differs from train_reversal's run, in words ('' if nothing)."""
    if len(losses) != len(want_losses):
        return f"your loop took {len(losses)} steps, train_reversal {len(want_losses)}"
    if eval_steps != want_steps:
        return f"you evaluated after steps {eval_steps}, train_reversal after steps {want_steps}"
    for step, (x, y) in enumerate(zip(losses, want_losses), start=1):
        if x != y:
            return f"the loss of step {step} is {x:.6f}, train_reversal's is {y:.6f}"
    if state.keys() != want_state.keys():
        return "the model's weights have other names than build_model(cfg)'s"
    for name, value in want_state.items():
        if not torch.equal(state[name], value):
            return f"the weight {name} differs from train_reversal's"
    return ""


def check_training_loop(fn) -> None:
    """Exercise 10.4: fn(cfg) -> (model, losses, eval_steps) trains build_model(cfg) as
    train_reversal(cfg, confirm=False) does. Compared bit for bit (every weight, every loss,
    the steps evaluated, hence the stop) on three 12-step runs of a tiny model with dropout;
    when they differ, the known mistakes are run on the same config and the one that matches is
    named. Used in chapter 10.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the configs train on one thread: the learner's loop too
    try:
        for where, cfg in _loop_configs():
            model, losses, eval_steps = _unpack_loop(call(fn, cfg, where=where), where)
            want_run = _mistake_run(cfg, None)
            what = _difference(losses, eval_steps, model.state_dict(), *want_run)
            if not what:
                continue
            for mistake, hint in _LOOP_HINTS.items():
                m_losses, m_steps, m_state = _mistake_run(cfg, mistake)
                if not _difference(m_losses, m_steps, m_state, *want_run):
                    continue  # this mistake changes nothing on this config
                if m_steps == eval_steps and _close(losses, m_losses):
                    fail(what, where, hint)
            near = eval_steps == want_run[1] and _close(losses, want_run[0])
            fail(
                what,
                where,
                "your numbers agree with train_reversal's up to float rounding, not bit for bit: "
                "the same operations in the same order give the same bits (cut each batch to its "
                "longest sequence; F.cross_entropy on the flattened logits)"
                if near
                else "",
            )
    finally:
        torch.set_num_threads(threads)
    passed(
        "check_training_loop",
        3,
        "same weights, losses and evaluation steps as train_reversal, bit for bit",
    )
