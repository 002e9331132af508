"""Properties of the training loop and the test-set bookkeeping that the chapters rely on,
each checked against an independent computation, so that a one-line slip fails here:
padding counted in the loss, the scheduler stepped twice, the last training row not counted.
"""

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from helpers import PAD_ID, TrainConfig, make_reversal_dataset, train_reversal, train_test_overlap
from helpers.train import build_model, epoch_batches, lr_factor

TINY = TrainConfig(
    d_model=16,
    num_heads=2,
    dff=32,
    num_layers=1,
    dropout=0.0,
    train_size=256,
    val_size=64,
    batch_size=32,
    warmup=10,
    max_steps=4,
    eval_every=100,
    eval_size=64,
    target_exact_match=None,
)


def first_batch(cfg):
    """The first batch train_reversal draws, trimmed as it trims it, and the initial model."""
    src, tgt = make_reversal_dataset(cfg.train_size, seed=cfg.data_seed)
    src_len, tgt_len = (src != PAD_ID).sum(1), (tgt != PAD_ID).sum(1)
    gen = torch.Generator().manual_seed(cfg.seed)
    idx = epoch_batches(src_len, cfg.batch_size, cfg.bucket, gen).pop()
    s = src[idx, : int(src_len[idx].max())]
    t = tgt[idx, : int(tgt_len[idx].max())]
    return build_model(cfg), s, t


def test_the_first_loss_ignores_padding():
    model, src, tgt = first_batch(TINY)
    model.train()
    logits = model(src, tgt[:, :-1]).reshape(-1, model.config.tgt_vocab)
    target = tgt[:, 1:].reshape(-1)
    assert (target == PAD_ID).any()  # the batch has padding, so the two losses differ
    ignoring = F.cross_entropy(logits, target, ignore_index=PAD_ID).item()
    counting = F.cross_entropy(logits, target).item()
    assert abs(ignoring - counting) > 1e-3
    loss = train_reversal(TINY, progress=False, confirm=False).history["loss"][0]
    assert loss == pytest.approx(ignoring, rel=1e-5)


def test_the_schedule_advances_once_per_optimizer_step():
    cfg = dataclasses.replace(TINY, warmup=3, max_steps=6)
    lrs = train_reversal(cfg, progress=False, confirm=False).history["lr"]
    factor = lr_factor(cfg)
    expected = [cfg.lr_scale * factor(step) for step in range(1, cfg.max_steps + 1)]
    assert lrs == pytest.approx(expected, rel=1e-6)
    assert len(set(expected)) == len(expected)  # distinct values: a double step would show


def test_overlap_counts_every_training_row_including_the_last():
    train = torch.tensor([[3, 4, 2, 0], [5, 6, 2, 0], [7, 8, 9, 2]])
    test = torch.tensor([[7, 8, 9, 2], [3, 4, 2, 0], [9, 9, 2, 0]])
    assert train_test_overlap(test, train).tolist() == [True, True, False]
    assert train_test_overlap(train[-1:], train).tolist() == [True]
