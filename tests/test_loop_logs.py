"""What the two training loops log, recomputed step by step over epoch boundaries.

train_reversal (chapter 10) and train_reversal_ddp (chapter 23, one process here) log per step
the learning rate, the loss, and (chapter 10) the token accuracy and the share of exactly
right sequences of the batch just trained on. A loop that logged the wrong step's learning
rate, a running mean for the loss, or a statistic of the model after its update would still
train; these tests recompute every logged number from the model before the step and the
step's batch, so such a slip fails here.
"""

import copy
import dataclasses

import pytest
import torch
import torch.nn.functional as F

from helpers import BOOK_RECIPE, PAD_ID, make_reversal_dataset
from helpers.training.distributed import rank_batches, summed_loss, train_reversal_ddp, trimmed
from helpers.training.train import (
    build_model,
    epoch_batches,
    lr_factor,
    sequence_correct,
    train_reversal,
)

# tiny model, 3 batches per epoch: 8 steps cross two epoch boundaries; no dropout, so the
# recomputation in train mode is exact; a cooldown, so the schedule has all three phases
CFG = dataclasses.replace(
    BOOK_RECIPE,
    d_model=16,
    num_heads=2,
    dff=32,
    num_layers=1,
    dropout=0.0,
    train_size=200,
    batch_size=64,
    val_size=64,
    eval_size=64,
    warmup=3,
    max_steps=8,
    cooldown=4,
    eval_every=1000,
    eval_gate=0.0,
    target_exact_match=None,
    threads=1,
    bucket=0,
)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def batch_stats(model, src, tgt):
    """(mean loss, token accuracy, share exactly right) of one batch, as the loop defines them."""
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
    with torch.no_grad():
        logits = model(src, tgt_in)
        loss = F.cross_entropy(
            logits.reshape(-1, logits.size(-1)), tgt_out.reshape(-1), ignore_index=PAD_ID
        ).item()
        real = tgt_out != PAD_ID
        acc = ((logits.argmax(-1) == tgt_out) & real).sum().item() / real.sum().item()
        exact = sequence_correct(logits, tgt_out).float().mean().item()
    return loss, acc, exact


def test_train_reversal_logs_every_step_of_the_batch_it_trained_on():
    before = {}  # step -> the weights before that step

    def snapshot(step, model, loss):
        before[step + 1] = copy.deepcopy(model.state_dict())

    result = train_reversal(CFG, progress=False, on_step=snapshot)
    hist = result.history
    assert hist["step"] == list(range(1, CFG.max_steps + 1))
    factor = lr_factor(CFG)
    for step, lr in zip(hist["step"], hist["lr"]):
        assert lr == pytest.approx(CFG.lr_scale * factor(step), rel=1e-12), step
    before[1] = build_model(CFG).state_dict()
    src_train, tgt_train = make_reversal_dataset(CFG.train_size, seed=CFG.data_seed)
    src_len, tgt_len = (src_train != PAD_ID).sum(1), (tgt_train != PAD_ID).sum(1)
    gen = torch.Generator().manual_seed(CFG.seed)
    batches = []
    model = build_model(CFG).train()
    for i, step in enumerate(hist["step"]):
        if not batches:
            batches = epoch_batches(src_len, CFG.batch_size, CFG.bucket, gen)
        idx = batches.pop()
        src = src_train[idx, : int(src_len[idx].max())]
        tgt = tgt_train[idx, : int(tgt_len[idx].max())]
        model.load_state_dict(before[step])
        loss, acc, exact = batch_stats(model, src, tgt)
        assert hist["loss"][i] == pytest.approx(loss, abs=1e-5), step
        assert hist["token_acc"][i] == pytest.approx(acc, abs=1e-9), step
        assert hist["batch_exact"][i] == pytest.approx(exact, abs=1e-9), step


def test_ddp_loop_logs_the_schedule_and_the_loss_of_each_step():
    """One process (no process group): every logged lr is the schedule's at that step, and the
    logged loss of step k + 1 is the loss of the model after k steps on batch k + 1."""
    logs = []
    full = train_reversal_ddp(CFG, confirm=False, log=logs.append).history
    assert full["step"] == list(range(1, CFG.max_steps + 1))
    factor = lr_factor(CFG)
    for step, lr in zip(full["step"], full["lr"]):
        assert lr == pytest.approx(CFG.lr_scale * factor(step), rel=1e-12), step
    # without a cooldown the schedule does not depend on max_steps: a run stopped after k
    # steps is the first k steps of the full run
    flat = dataclasses.replace(CFG, cooldown=0)
    full = train_reversal_ddp(flat, confirm=False, log=logs.append).history
    src_train, tgt_train = make_reversal_dataset(CFG.train_size, seed=CFG.data_seed)
    per_epoch = len(rank_batches(CFG.train_size, CFG.batch_size, 1, 0, CFG.seed, 0))
    for k in (0, per_epoch - 1, per_epoch, 2 * per_epoch + 1):  # around the epoch boundaries
        model = (
            build_model(flat)
            if k == 0
            else train_reversal_ddp(
                dataclasses.replace(flat, max_steps=k), confirm=False, log=logs.append
            ).model
        ).train()
        epoch, pos = divmod(k, per_epoch)
        idx = rank_batches(CFG.train_size, CFG.batch_size, 1, 0, CFG.seed, epoch)[pos]
        src, tgt = trimmed(src_train[idx], tgt_train[idx])
        with torch.no_grad():
            loss_sum, _, tgt_out = summed_loss(model, src, tgt)
        loss = loss_sum.item() / (tgt_out != PAD_ID).sum().item()
        assert full["loss"][k] == pytest.approx(loss, abs=1e-5), k
        assert full["rank_loss"][k] == [pytest.approx(loss, abs=1e-5)], k
