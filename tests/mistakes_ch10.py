"""Plausible wrong answers to exercise 10.4 (the complete training loop), one small function
each, and the same mistakes planted in helpers.training.train for tests/plant_mistake.py.

A learner's loop is `train_loop(cfg) -> (model, losses, eval_steps)`. `loop(cfg, **slip)` is
the right one, written as a learner would; each mistake turns one slip on. Not collected by
pytest (the name does not start with test_); tests/test_exercises_ch10.py imports it.

The `lib_*` functions are library-shaped twins of the mistakes: the library's own function
with one line changed, helpers.training.train's `_train`, `make_optimizer` or
`teacher_forced_exact_match`, or what both training loops share in helpers.training.loop
(`token_loss`, `update`, `evaluation_due`, `evaluate_and_confirm`), for

    BOOK_MISTAKE="helpers.training.loop:update=tests/mistakes_ch10.py:lib_no_zero_grad" \
        PYTHONPATH=tests .venv/bin/python -m pytest -p plant_mistake \
        tests/test_training.py tests/test_loop_logs.py -x -q
"""

import inspect
import textwrap

import torch
import torch.nn.functional as F

from helpers import PAD_ID, VOCAB_SIZE, make_reversal_dataset
from helpers.training import loop as loop_module
from helpers.training import train as train_module
from helpers.training.train import build_model, epoch_batches, lr_factor


def loop(
    cfg,
    shift=True,
    ignore_padding=True,
    sched_steps=1,
    zero_grad=True,
    eval_mode=True,
    back_to_train=True,
    reshuffle=True,
    gated=True,
    first_step=1,
    stop_at_equal=True,
    trim=True,
    loss_by_hand=False,
    smoothing=True,
    adam_betas=True,
    own_generator=True,
    exact_score=True,
    sched_first=False,
):
    """The complete training loop; every keyword left at its default gives the right one."""
    model = build_model(cfg)
    src_all, tgt_all = make_reversal_dataset(cfg.train_size, seed=cfg.data_seed)
    src_val, tgt_val = make_reversal_dataset(cfg.val_size, seed=cfg.val_seed)
    src_val, tgt_val = src_val[: cfg.eval_size], tgt_val[: cfg.eval_size]
    src_len, tgt_len = (src_all != PAD_ID).sum(1), (tgt_all != PAD_ID).sum(1)
    if adam_betas:
        opt = torch.optim.Adam(model.parameters(), lr=cfg.lr_scale, betas=(0.9, 0.98), eps=1e-9)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=cfg.lr_scale)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor(cfg))
    gen = torch.Generator().manual_seed(cfg.seed) if own_generator else None
    first_epoch = None
    losses, eval_steps, batches = [], [], []
    model.train()
    for step in range(first_step, cfg.max_steps + first_step):
        if not batches:
            if reshuffle or first_epoch is None:
                first_epoch = epoch_batches(src_len, cfg.batch_size, cfg.bucket, gen)
            batches = list(first_epoch)
        idx = batches.pop()
        src, tgt = src_all[idx], tgt_all[idx]
        if trim:  # cut the columns that are padding in every row, as train_reversal does
            src, tgt = src[:, : int(src_len[idx].max())], tgt[:, : int(tgt_len[idx].max())]
        tgt_in = tgt[:, :-1]
        tgt_out = tgt[:, 1:] if shift else tgt_in
        logits = model(src, tgt_in)
        flat_logits, flat_labels = logits.reshape(-1, VOCAB_SIZE), tgt_out.reshape(-1)
        eps = cfg.label_smoothing if smoothing else 0.0
        if loss_by_hand:  # the same mean, summed in another order
            real = flat_labels != PAD_ID
            logp = flat_logits[real].log_softmax(-1)
            per_label = -(1 - eps) * logp.gather(1, flat_labels[real, None])[:, 0]
            loss = (per_label - eps * logp.mean(-1)).sum() / real.sum()
        else:
            ignore = PAD_ID if ignore_padding else -100  # -100: F.cross_entropy's default
            loss = F.cross_entropy(
                flat_logits, flat_labels, ignore_index=ignore, label_smoothing=eps
            )
        if zero_grad:
            opt.zero_grad()
        loss.backward()
        if sched_first:  # PyTorch warns: "Detected call of `lr_scheduler.step()` before ..."
            sched.step()
        opt.step()
        for _ in range(sched_steps - sched_first):
            sched.step()
        losses.append(loss.item())
        right = ((logits.argmax(-1) == tgt_out) | (tgt_out == PAD_ID)).all(1)
        passes = right.float().mean().item() >= cfg.eval_gate or not gated
        last = step == cfg.max_steps + first_step - 1
        if (step % cfg.eval_every == 0 and passes) or last:
            if eval_mode:
                model.eval()
            with torch.no_grad():
                val_logits = model(src_val, tgt_val[:, :-1])
            if back_to_train:
                model.train()
            labels = tgt_val[:, 1:]
            if exact_score:
                val_right = ((val_logits.argmax(-1) == labels) | (labels == PAD_ID)).all(1)
                score = val_right.sum().item() / len(src_val)
            else:  # the share of right tokens
                real = labels != PAD_ID
                score = ((val_logits.argmax(-1) == labels) & real).sum().item() / real.sum().item()
            eval_steps.append(len(losses))
            target = cfg.target_exact_match
            if target is not None and (score >= target if stop_at_equal else score > target):
                break
    return model, losses, eval_steps


# ---------------------------------------------------------------- the catalogue


def labels_not_shifted(cfg):
    return loop(cfg, shift=False)


def padding_in_loss(cfg):
    return loop(cfg, ignore_padding=False)


def scheduler_twice(cfg):
    return loop(cfg, sched_steps=2)


def scheduler_before_optimizer(cfg):
    return loop(cfg, sched_first=True)


def scheduler_never(cfg):
    return loop(cfg, sched_steps=0)


def no_zero_grad(cfg):
    return loop(cfg, zero_grad=False)


def eval_never_undone(cfg):
    return loop(cfg, back_to_train=False)


def eval_in_train_mode(cfg):
    return loop(cfg, eval_mode=False)


def no_reshuffle(cfg):
    return loop(cfg, reshuffle=False)


def eval_not_gated(cfg):
    return loop(cfg, gated=False)


def eval_off_by_one(cfg):
    return loop(cfg, first_step=0)  # steps counted from 0: evaluates after steps 1, 5, 9, ...


def stop_only_above_target(cfg):
    return loop(cfg, stop_at_equal=False)


def untrimmed(cfg):
    return loop(cfg, trim=False)


def no_label_smoothing(cfg):
    return loop(cfg, smoothing=False)


def adam_default_betas(cfg):
    return loop(cfg, adam_betas=False)


def batches_from_global_generator(cfg):
    return loop(cfg, own_generator=False)  # torch.randperm(n, generator=None)


def score_token_accuracy(cfg):
    return loop(cfg, exact_score=False)


CATALOGUE = {  # mistake -> a fragment of the message check_training_loop gives for it
    labels_not_shifted: "the labels are not shifted",
    padding_in_loss: "padding is counted in the loss",
    scheduler_twice: "the schedule advances twice per step",
    scheduler_before_optimizer: "the schedule advances before the optimiser steps",
    scheduler_never: "the learning rate never changes",
    no_zero_grad: "the gradients pile up",
    eval_never_undone: "training went on in eval mode",
    eval_in_train_mode: "scored in training mode",
    no_reshuffle: "every epoch repeats the first epoch's batches",
    eval_not_gated: "you evaluated at every eval_every-th step",
    eval_off_by_one: "the evaluations come one step early",
    stop_only_above_target: "did not stop at the first evaluation that reached the target",
    untrimmed: "keeps its all-padding columns",
    no_label_smoothing: "the loss ignores cfg.label_smoothing",
    adam_default_betas: "Adam runs with PyTorch's defaults",
    batches_from_global_generator: "torch's global random generator",
    score_token_accuracy: "the score must be exact match",
}


# ------------------------------------------- planted in helpers.training.train and .loop


def _mutant(function, old: str, new: str, count: int = 1, *more: tuple[str, str]):
    """The library's `function` with the text `old` of its source (decorators included)
    replaced by `new` (which must occur `count` times; `more` pairs are replaced too, once
    each), compiled in a copy of the namespace of the module that defines it."""
    source = textwrap.dedent(inspect.getsource(function))
    for text, replacement, n in ((old, new, count), *((o, r, 1) for o, r in more)):
        if source.count(text) != n:
            raise ValueError(f"{text!r} occurs {source.count(text)} times in {function.__name__}")
        source = source.replace(text, replacement)
    namespace = dict(inspect.unwrap(function).__globals__)
    exec(compile(source, f"<mutant of {function.__name__}>", "exec"), namespace)
    return namespace[function.__name__]


_train = train_module._train
lib_labels_not_shifted = _mutant(_train, "tgt[:, :-1], tgt[:, 1:]", "tgt[:, :-1], tgt[:, :-1]")
# the loss, the update, the evaluation gate and its confirmation live in helpers.training.loop
_loss = loop_module.token_loss
_due = loop_module.evaluation_due
_confirm = loop_module.evaluate_and_confirm
lib_padding_in_loss = _mutant(_loss, "ignore_index=PAD_ID,", "")
_update = loop_module.update
lib_scheduler_twice = _mutant(_update, "sched.step()", "sched.step()\n    sched.step()")
lib_scheduler_before_optimizer = _mutant(
    _update, "opt.step()\n    sched.step()", "sched.step()\n    opt.step()"
)
lib_scheduler_never = _mutant(_update, "sched.step()", "pass")
lib_no_zero_grad = _mutant(_update, "opt.zero_grad(set_to_none=True)", "pass")
lib_no_reshuffle = _mutant(
    _train,
    "epoch_batches(src_len, cfg.batch_size, cfg.bucket, gen)",
    "epoch_batches(src_len, cfg.batch_size, cfg.bucket, torch.Generator().manual_seed(cfg.seed))",
)
lib_eval_not_gated = _mutant(_due, " and batch_exact >= cfg.eval_gate", "")
lib_eval_off_by_one = _mutant(
    _due, "step % cfg.eval_every == 0", "(step - 1) % cfg.eval_every == 0"
)
lib_stop_only_above_target = _mutant(
    _confirm, "em >= cfg.target_exact_match", "em > cfg.target_exact_match", count=2
)
lib_untrimmed = _mutant(
    _train,
    "src_train[rows, : int(src_len[idx].max())]",
    "src_train[rows]",
    1,
    ("tgt_train[rows, : int(tgt_len[idx].max())]", "tgt_train[rows]"),
)
lib_no_label_smoothing = _mutant(
    _train, "token_loss(logits, tgt_out, cfg.label_smoothing)", "token_loss(logits, tgt_out)"
)
lib_adam_default_betas = _mutant(train_module.make_optimizer, ", betas=(0.9, 0.98), eps=1e-9", "")
lib_batches_from_global_generator = _mutant(
    _train,
    "epoch_batches(src_len, cfg.batch_size, cfg.bucket, gen)",
    "epoch_batches(src_len, cfg.batch_size, cfg.bucket, None)",
)
# the mode switches live in teacher_forced_exact_match, which train_reversal scores with: its
# restores_mode decorator gives the mode back
_tf_em = train_module.teacher_forced_exact_match
lib_eval_never_undone = _mutant(_tf_em, "@restores_mode\n", "")
lib_eval_in_train_mode = _mutant(_tf_em, "model.eval()", "pass")
lib_score_token_accuracy = _mutant(  # per sequence: its share of right tokens, <pad> included
    _tf_em,
    "int(sequence_correct(model(s, t[:, :-1]), t[:, 1:]).sum())",
    "float((model(s, t[:, :-1]).argmax(-1) == t[:, 1:]).float().mean(1).sum())",
)

PLANTED = {  # catalogue name -> (the library object replaced, its mistaken twin's name)
    "labels_not_shifted": ("helpers.training.train:_train", "lib_labels_not_shifted"),
    "padding_in_loss": ("helpers.training.loop:token_loss", "lib_padding_in_loss"),
    "scheduler_twice": ("helpers.training.loop:update", "lib_scheduler_twice"),
    "scheduler_before_optimizer": (
        "helpers.training.loop:update",
        "lib_scheduler_before_optimizer",
    ),
    "scheduler_never": ("helpers.training.loop:update", "lib_scheduler_never"),
    "no_zero_grad": ("helpers.training.loop:update", "lib_no_zero_grad"),
    "eval_never_undone": (
        "helpers.training.train:teacher_forced_exact_match",
        "lib_eval_never_undone",
    ),
    "eval_in_train_mode": (
        "helpers.training.train:teacher_forced_exact_match",
        "lib_eval_in_train_mode",
    ),
    "no_reshuffle": ("helpers.training.train:_train", "lib_no_reshuffle"),
    "eval_not_gated": ("helpers.training.loop:evaluation_due", "lib_eval_not_gated"),
    "eval_off_by_one": ("helpers.training.loop:evaluation_due", "lib_eval_off_by_one"),
    "stop_only_above_target": (
        "helpers.training.loop:evaluate_and_confirm",
        "lib_stop_only_above_target",
    ),
    "untrimmed": ("helpers.training.train:_train", "lib_untrimmed"),
    "no_label_smoothing": ("helpers.training.train:_train", "lib_no_label_smoothing"),
    "adam_default_betas": ("helpers.training.train:make_optimizer", "lib_adam_default_betas"),
    "batches_from_global_generator": (
        "helpers.training.train:_train",
        "lib_batches_from_global_generator",
    ),
    "score_token_accuracy": (
        "helpers.training.train:teacher_forced_exact_match",
        "lib_score_token_accuracy",
    ),
}
