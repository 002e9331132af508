"""Attention masks. Convention everywhere in this book: bool, True = blocked.

Built in chapter 7 (chapter 3 uses the padding and causal masks first).
"""

import torch

from helpers.core.checks import check_rank
from helpers.core.vocab import PAD_ID


def make_padding_mask(ids: torch.Tensor, pad_id: int = PAD_ID) -> torch.Tensor:
    """Built in chapter 7. [B, L] ids -> bool [B, 1, 1, L], True where the key is padding.

    The two singleton dims broadcast over heads and queries: no query of any head may
    look at a PAD key.
    """
    check_rank("ids", ids, 2, "[B, L]")
    return (ids == pad_id)[:, None, None, :]


def make_causal_mask(L: int, device=None) -> torch.Tensor:
    """Built in chapter 7. bool [1, 1, L, L], True above the diagonal: i may not see j > i."""
    if int(L) < 1:
        raise ValueError(f"L must be a positive length, got {L}")
    return torch.triu(torch.ones(L, L, dtype=torch.bool, device=device), diagonal=1)[None, None]


def to_sdpa_mask(mask: torch.Tensor) -> torch.Tensor:
    """Built in chapter 7. Our mask (True = blocked) -> SDPA's bool mask (True = may attend)."""
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be bool (True = blocked), got {mask.dtype}")
    return ~mask


def from_hf_attention_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Built in chapter 7. Hugging Face's [B, L] int mask (1 = attend) -> ours [B, 1, 1, L]."""
    check_rank("attention_mask", attention_mask, 2, "[B, L]")
    return (attention_mask == 0)[:, None, None, :]


def to_hf_attention_mask(ids: torch.Tensor, pad_id: int = PAD_ID) -> torch.Tensor:
    """Built in chapter 7. [B, L] ids -> Hugging Face's [B, L] int64 mask, 1 = attend."""
    check_rank("ids", ids, 2, "[B, L]")
    return (ids != pad_id).long()


def fully_masked_rows(mask: torch.Tensor) -> torch.Tensor:
    """Built in chapter 7. True for every query row whose keys are all blocked (softmax has
    nothing to attend to)."""
    return mask.all(dim=-1)
