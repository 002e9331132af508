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
