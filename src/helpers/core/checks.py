"""Input validation shared by the modules: clear errors instead of silent wrong answers.

Used from chapter 2 on (token ids), chapter 3 (masks) and chapter 7 (the full model).

Each input is checked once per call, where it enters. The model's encode, decode and forward,
the Encoder and Decoder stacks and their layers are entry points (`checks_inputs`): the
outermost one called checks everything the modules below it will see, and those skip their own
checks. The embedding and the attention check inline, only when no entry point above them has
(`inputs_checked()`). So a layer or an attention called on its own still checks its inputs.
"""

import contextvars
import functools

import torch

_INPUTS_CHECKED = contextvars.ContextVar("helpers_inputs_checked", default=False)


def inputs_checked() -> bool:
    """True inside a call whose entry point has already checked the inputs."""
    return _INPUTS_CHECKED.get()


def checks_inputs(check):
    """Decorator for an entry point (a forward, encode or decode): check(self, *args, **kwargs)
    validates the inputs when this is the outermost checked call, and the modules it calls then
    trust them (each input is checked once per call of the model, not once per layer)."""

    def decorate(method):
        @functools.wraps(method)
        def checked(self, *args, **kwargs):
            if _INPUTS_CHECKED.get():
                return method(self, *args, **kwargs)
            check(self, *args, **kwargs)
            token = _INPUTS_CHECKED.set(True)
            try:
                return method(self, *args, **kwargs)
            finally:
                _INPUTS_CHECKED.reset(token)

        return checked

    return decorate


def check_rank(name: str, t: torch.Tensor, rank: int, layout: str) -> None:
    """t is a tensor of the given rank; the error names `layout` (e.g. "[B, L]")."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape {layout}, got {type(t).__name__}")
    if t.dim() != rank:
        raise ValueError(f"{name} must have rank {rank} ({layout}), got shape {tuple(t.shape)}")


def check_token_ids(
    name: str, ids: torch.Tensor, vocab_size: int, max_len: int | None = None
) -> None:
    """ids: int tensor [B, L] with L <= max_len and, on the CPU, every id in [0, vocab_size).

    The range of the ids is checked only where they live on the CPU: reading a minimum back
    from an accelerator would wait for it at every forward. On CUDA, nn.Embedding then refuses
    an id outside the table itself (a device-side assert)."""
    check_rank(name, ids, 2, "[B, L]")
    if ids.dtype.is_floating_point or ids.dtype == torch.bool or ids.is_complex():
        raise TypeError(f"{name} must hold integer token ids (int64), got dtype {ids.dtype}")
    if max_len is not None and ids.size(1) > max_len:
        raise ValueError(
            f"{name} has length {ids.size(1)} but the model was built with max_len={max_len}: "
            f"the position table has no row for positions >= {max_len}"
        )
    if ids.numel() and ids.device.type == "cpu":
        lo, hi = (int(t) for t in torch.aminmax(ids))
        if lo < 0 or hi >= vocab_size:
            bad = lo if lo < 0 else hi
            raise ValueError(
                f"{name} contains token id {bad}, outside the vocabulary [0, {vocab_size})"
            )


def check_mask(name: str, mask: torch.Tensor, scores_shape, device: torch.device) -> None:
    """A mask is bool (True = blocked), rank 4, on the device of the attention inputs, and
    broadcastable to the scores [B, h, Lq, Lk] = scores_shape. Explained in chapters 3 and 7."""
    check_bool_mask_on(name, mask, device)
    if mask.dim() != 4:
        raise ValueError(
            f"{name} must have rank 4, broadcastable to [B, h, Lq, Lk], "
            f"got shape {tuple(mask.shape)}"
        )
    check_mask_broadcasts(name, mask, scores_shape)


def check_bool_mask_on(name: str, mask: torch.Tensor, device: torch.device) -> None:
    """mask is a bool tensor (True = blocked) on the device of the attention inputs."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(
            f"{name} must be a bool torch.Tensor (True = blocked), got {type(mask).__name__}"
        )
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must be a bool tensor (True = blocked), got dtype {mask.dtype}; "
            "convert with mask.bool() only if 1 already means 'blocked'"
        )
    if mask.device != device:
        raise ValueError(f"{name} is on {mask.device} but the attention inputs are on {device}")


def check_mask_broadcasts(name: str, mask: torch.Tensor, scores_shape) -> None:
    """mask broadcasts to the attention scores [B, h, Lq, Lk] = scores_shape, or a ValueError
    names both shapes (instead of torch's RuntimeError from inside masked_fill). Chapter 7."""
    scores_shape = tuple(int(n) for n in scores_shape)
    fits = mask.dim() == len(scores_shape) and all(
        m in (1, s) for m, s in zip(mask.shape, scores_shape)
    )
    if not fits:
        dims = ("B", "h", "Lq", "Lk")
        bad = [
            f"{dims[i]}: mask {m} vs scores {s}"
            for i, (m, s) in enumerate(zip(mask.shape, scores_shape))
            if m not in (1, s)
        ]
        raise ValueError(
            f"{name} has shape {tuple(mask.shape)}, which does not broadcast to the attention "
            f"scores [B, h, Lq, Lk] = {scores_shape} (each mask dim must be 1 or equal; "
            f"{'; '.join(bad)})"
        )


def check_cross_mask(mask: torch.Tensor, scores_shape, device: torch.device | None = None) -> None:
    """Built in chapter 7. Where the cross-attention mask enters the decoder: it blocks source
    keys, so its last dimension must be the source length Ls and its query dimension 1 or Lt
    (scores_shape = [B, h, Lt, Ls]). The decoder's own [1, 1, Lt, Lt] causal mask, handed over
    by mistake, gets a ValueError that says so whenever Lt != Ls. device: where the attention
    inputs are; when given, the mask must also be a bool tensor there."""
    scores_shape = tuple(int(n) for n in scores_shape)
    Lt, Ls = scores_shape[-2], scores_shape[-1]
    rule = (
        f"a cross-attention mask blocks source keys: its last dimension must be the source "
        f"length Ls = {Ls} and its query dimension 1 or Lt = {Lt}; pass the source padding "
        f"mask [B, 1, 1, Ls], not the decoder's self-attention mask [.., Lt, Lt]"
    )
    try:
        check_mask_broadcasts("cross_mask", mask, scores_shape)
    except ValueError as e:
        raise ValueError(f"{e}. {rule[0].upper()}{rule[1:]}") from None
    if mask.size(-1) != Ls:
        raise ValueError(
            f"cross_mask has shape {tuple(mask.shape)}, whose last dimension is "
            f"{mask.size(-1)}: {rule}"
        )
    if device is not None:
        check_bool_mask_on("cross_mask", mask, device)


def check_same_batch(name_a: str, a: torch.Tensor, name_b: str, b: torch.Tensor) -> None:
    """a and b hold the same number of sequences (dim 0), or a ValueError names both shapes.
    Used by the full model, chapter 7."""
    if a.size(0) != b.size(0):
        raise ValueError(
            f"{name_a} and {name_b} must have the same batch size: {name_a} has shape "
            f"{tuple(a.shape)}, {name_b} has shape {tuple(b.shape)}"
        )


def check_features(name: str, x: torch.Tensor, d_model: int) -> None:
    """x is [B, L, d_model] (the input of an attention or a layer)."""
    check_rank(name, x, 3, "[B, L, d_model]")
    if x.size(-1) != d_model:
        raise ValueError(f"{name} has last dim {x.size(-1)}, expected d_model={d_model}")
