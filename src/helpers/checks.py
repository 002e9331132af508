"""Input validation shared by the modules: clear errors instead of silent wrong answers."""

import torch


def check_rank(name: str, t: torch.Tensor, rank: int, layout: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape {layout}, got {type(t).__name__}")
    if t.dim() != rank:
        raise ValueError(f"{name} must have rank {rank} ({layout}), got shape {tuple(t.shape)}")


def check_token_ids(
    name: str, ids: torch.Tensor, vocab_size: int, max_len: int | None = None
) -> None:
    """ids: int tensor [B, L] with every id in [0, vocab_size) and L <= max_len."""
    check_rank(name, ids, 2, "[B, L]")
    if ids.dtype.is_floating_point or ids.dtype == torch.bool or ids.is_complex():
        raise TypeError(f"{name} must hold integer token ids (int64), got dtype {ids.dtype}")
    if max_len is not None and ids.size(1) > max_len:
        raise ValueError(
            f"{name} has length {ids.size(1)} but the model was built with max_len={max_len}: "
            f"the position table has no row for positions >= {max_len}"
        )
    if ids.numel():
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= vocab_size:
            bad = lo if lo < 0 else hi
            raise ValueError(
                f"{name} contains token id {bad}, outside the vocabulary [0, {vocab_size})"
            )


def check_mask(name: str, mask: torch.Tensor, like: torch.Tensor) -> None:
    """A mask is bool (True = blocked), rank 4 and on the same device as the scores."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(
            f"{name} must be a bool torch.Tensor (True = blocked), got {type(mask).__name__}"
        )
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must be a bool tensor (True = blocked), got dtype {mask.dtype}; "
            "convert with mask.bool() only if 1 already means 'blocked'"
        )
    if mask.dim() != 4:
        raise ValueError(
            f"{name} must have rank 4, broadcastable to [B, h, Lq, Lk], got shape {tuple(mask.shape)}"
        )
    if mask.device != like.device:
        raise ValueError(
            f"{name} is on {mask.device} but the attention inputs are on {like.device}"
        )
