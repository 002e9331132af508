"""Unit tests use tiny models: one thread is faster than two (no cross-thread sync) and
keeps timings sane when the machine is busy."""

import dataclasses

import pytest
import torch

from helpers import BOOK_RECIPE, train_reversal

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def partly_trained_model():
    """The book's model after 120 steps on 2,000 sequences (a few seconds): right on some
    sequences and wrong on others, so that comparing two ways of scoring it is not trivial.
    Shared by the tests that compare exact-match functions (each asserts it is partly right
    on its own data)."""
    cfg = dataclasses.replace(
        BOOK_RECIPE,
        train_size=2000,
        val_size=200,
        eval_size=200,
        batch_size=64,
        warmup=50,
        cooldown=0,
        lr_scale=2.0,
        max_steps=120,
        eval_every=120,
        eval_gate=0.0,
        target_exact_match=None,
    )
    return train_reversal(cfg, progress=False).model
