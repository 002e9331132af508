import math

import torch

from helpers import PAD_ID, TokenAndPosition, sinusoidal_position_encoding


def test_sinusoidal_formula():
    pe = sinusoidal_position_encoding(50, 16)
    assert pe.shape == (50, 16) and pe.dtype == torch.float32
    for pos in (0, 1, 7, 49):
        for i in range(8):
            angle = pos / 10000 ** (2 * i / 16)
            assert math.isclose(pe[pos, 2 * i].item(), math.sin(angle), abs_tol=1e-5)
            assert math.isclose(pe[pos, 2 * i + 1].item(), math.cos(angle), abs_tol=1e-5)


def test_embedding_scale_keeps_positions_audible():
    torch.manual_seed(0)
    emb = TokenAndPosition(13, 128, max_len=14, dropout=0.0)
    tokens = emb.emb.weight[1:] * math.sqrt(128)
    assert 0.8 < tokens.std().item() < 1.2
    assert torch.all(emb.emb.weight[PAD_ID] == 0)


def test_position_buffer_not_a_parameter_nor_saved():
    emb = TokenAndPosition(13, 16, max_len=8)
    assert "pe" not in dict(emb.named_parameters())
    assert "pe" in dict(emb.named_buffers())
    assert "pe" not in emb.state_dict()


def test_start_pos_continues_a_sequence():
    torch.manual_seed(0)
    emb = TokenAndPosition(13, 16, max_len=8, dropout=0.0)
    ids = torch.tensor([[3, 4, 5, 6]])
    torch.testing.assert_close(emb(ids)[:, 2:], emb(ids[:, 2:], start_pos=2))


def test_token_and_position_scales():
    """Chapter 12's options: the defaults compute tokens * sqrt(d) + positions, bit for bit; the
    options multiply the two parts and nothing else."""
    torch.manual_seed(0)
    ids = torch.tensor([[3, 4, 5, PAD_ID]])
    default = TokenAndPosition(13, 16, max_len=8, dropout=0.0)
    pe = sinusoidal_position_encoding(8, 16)[:4]
    assert torch.equal(default(ids), default.emb(ids) * math.sqrt(16) + pe)
    quiet = TokenAndPosition(13, 16, max_len=8, dropout=0.0, token_scale=1.0, position_scale=0.25)
    quiet.load_state_dict(default.state_dict())
    torch.testing.assert_close(quiet(ids), default.emb(ids) + 0.25 * pe)
    torch.testing.assert_close(quiet(ids[:, 2:], start_pos=2), quiet(ids)[:, 2:])


def test_model_and_recipe_scales():
    """ModelConfig and embedding_scale_recipe carry the two scales to both embeddings; the
    recipe starts from the base recipe's weights, under its own checkpoint key, and the configs
    other chapters print read as before."""
    import dataclasses

    from helpers import BOOK_RECIPE, Transformer, fixed_budget_recipe
    from helpers.training.recipes import embedding_scale_recipe
    from helpers.training.train import build_model

    model = Transformer(13, 13, d_model=16, num_heads=2, dff=32, max_len=8)
    assert "scale" not in repr(model.config)
    twin = Transformer.from_config(
        dataclasses.replace(model.config, token_scale=1.0, position_scale=0.5)
    )
    assert "token_scale=1.0, position_scale=0.5" in repr(twin.config)
    for embed in (twin.encoder.embed, twin.decoder.embed):
        assert (embed.token_scale, embed.position_scale) == (1.0, 0.5)
    assert model.encoder.embed.token_scale == math.sqrt(16)

    base = dataclasses.replace(fixed_budget_recipe(init="default"), max_steps=2, cooldown=0)
    cfg = embedding_scale_recipe(base, token_scale=1.0, position_scale=0.5)
    assert cfg.key() != base.key() and cfg.key() != BOOK_RECIPE.key()
    assert all(getattr(cfg, f.name) == getattr(base, f.name) for f in dataclasses.fields(base))
    same = embedding_scale_recipe(base)  # the default scales: the base model, another key
    a, b, c = build_model(base), build_model(cfg), build_model(same)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert b.encoder.embed.position_scale == 0.5 and b.decoder.embed.token_scale == 1.0
    src = torch.tensor([[3, 4, 2, 0]])
    torch.testing.assert_close(c.encoder.embed(src), a.encoder.embed(src))
