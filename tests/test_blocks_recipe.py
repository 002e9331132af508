"""BlocksConfig: today's blocks as a training recipe, without touching any other recipe's key."""

import dataclasses

import pytest
import torch

from helpers.training.recipes import (
    BOOK_RECIPE,
    SEED_RECIPE,
    SHARP_ATTENTION_RECIPE,
    BlocksConfig,
    blocks_recipe,
)
from helpers.training.train import build_model

# The keys at f3ad71f, before BlocksConfig existed: the cached checkpoints of every chapter.
KEYS_BEFORE = {
    "BOOK_RECIPE": "c15c34ef81542bf5",
    "SEED_RECIPE": "d7765efd8ae6d50c",
    "SHARP_ATTENTION_RECIPE": "398653ff0d610b71",
}


def test_existing_keys_unchanged():
    now = {
        "BOOK_RECIPE": BOOK_RECIPE.key(),
        "SEED_RECIPE": SEED_RECIPE.key(),
        "SHARP_ATTENTION_RECIPE": SHARP_ATTENTION_RECIPE.key(),
    }
    assert now == KEYS_BEFORE


def test_default_blocks_build_the_same_model_under_another_key():
    cfg = blocks_recipe(BOOK_RECIPE)
    assert cfg.key() != BOOK_RECIPE.key()
    a, b = build_model(BOOK_RECIPE).state_dict(), build_model(cfg).state_dict()
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(
    "options",
    [{"norm": "rms"}, {"ffn": "swiglu"}, {"positions": "rope"}, {"num_kv_heads": 1}],
)
def test_each_option_reaches_the_model_and_the_key(options):
    cfg = blocks_recipe(BOOK_RECIPE, **options)
    model = build_model(cfg)
    for name, value in options.items():
        assert getattr(model.config, name) == value
    assert cfg.key() not in (BOOK_RECIPE.key(), blocks_recipe(BOOK_RECIPE).key())


def test_training_fields_can_be_replaced_too():
    cfg = blocks_recipe(BOOK_RECIPE, positions="alibi", seed=3, seq_len=22)
    assert (cfg.seed, cfg.seq_len, cfg.positions) == (3, 22, "alibi")
    assert build_model(cfg).config.max_len == 22
    assert dataclasses.replace(cfg, seed=4).positions == "alibi"


def test_unknown_option_is_refused():
    with pytest.raises(TypeError, match="unknown options.*posiitons"):
        blocks_recipe(BOOK_RECIPE, posiitons="rope")


def test_is_a_train_config():
    assert isinstance(blocks_recipe(), BlocksConfig)
