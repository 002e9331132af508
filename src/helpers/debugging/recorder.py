"""What the attention modules and LayerNorms see during one forward pass, caught with hooks.

Used by check_model (chapter 17): the masks each attention module receives, the std of what
enters each LayerNorm, and the first module whose output is not finite.
"""

from __future__ import annotations

import inspect

import torch
import torch.nn as nn


def tensors_in(obj):
    """Every tensor inside a (nested) tensor / list / tuple / dict.

    Used in chapter 17.
    """
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from tensors_in(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from tensors_in(o)


def non_finite(t: torch.Tensor) -> bool:
    """True if t is a float tensor holding NaN or inf.

    Used in chapter 17.
    """
    return t.is_floating_point() and not bool(torch.isfinite(t).all())


class Recorder:
    """Forward hooks: masks that attention modules get, LayerNorm inputs, first non-finite output.

    Used by check_model (chapter 17).
    """

    MASK_ARGS = ("attn_mask", "mask", "attention_mask")

    def __init__(self, model: nn.Module):
        self.masks = []  # (module name, query length or None, mask tensor)
        self.ln_inputs = []  # (module name, std of the input)
        self.first_non_finite = None  # (module name, class name)
        self.n_outputs = 0
        self.handles = []
        for name, mod in model.named_modules():
            params = self._forward_params(mod)
            mask_arg = next((a for a in self.MASK_ARGS if a in params), None)
            if mask_arg is not None:
                self.handles.append(
                    mod.register_forward_pre_hook(
                        self._mask_hook(name, mod, mask_arg), with_kwargs=True
                    )
                )
            if isinstance(mod, nn.LayerNorm):
                self.handles.append(mod.register_forward_pre_hook(self._ln_hook(name)))
            self.handles.append(mod.register_forward_hook(self._out_hook(name)))

    @staticmethod
    def _forward_params(mod):
        try:
            return inspect.signature(mod.forward).parameters
        except (TypeError, ValueError):
            return {}

    def _mask_hook(self, name, mod, mask_arg):
        sig = inspect.signature(mod.forward)

        def hook(module, args, kwargs):
            try:
                bound = sig.bind_partial(*args, **kwargs).arguments
            except TypeError:
                return
            mask = bound.get(mask_arg)
            first = next(iter(bound.values()), None)
            lq = first.size(1) if isinstance(first, torch.Tensor) and first.dim() == 3 else None
            if isinstance(mask, torch.Tensor):
                self.masks.append((name, lq, mask.detach()))

        return hook

    def _ln_hook(self, name):
        def hook(module, args):
            if args and isinstance(args[0], torch.Tensor) and args[0].is_floating_point():
                self.ln_inputs.append((name, float(args[0].detach().float().std())))

        return hook

    def _out_hook(self, name):
        def hook(module, args, output):
            self.n_outputs += 1
            if self.first_non_finite is None and any(non_finite(t) for t in tensors_in(output)):
                self.first_non_finite = (name or "(the model)", type(module).__name__)

        return hook

    def remove(self):
        for h in self.handles:
            h.remove()
