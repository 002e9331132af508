"""Checkers for the exercises of chapter 12 (when correct code learns slowly).

check_book_init(fn)   fn(model) re-initialises, in place, a Transformer that has PyTorch's
                      default initialisation the way the book does: token embeddings
                      normal with std d_model^-1/2 and the <pad> row zero, Xavier-uniform
                      linear weights, zero linear biases; nothing else touched.

The checker builds a small model with PyTorch's defaults (helpers.apply_default_init), runs the
reader's function on it, and compares the statistics of every re-initialised tensor with what the
book's initialisation gives. A wrong answer that matches a known mistake (PyTorch's N(0, 1) left
in place, std 1/d instead of d^-1/2, the <pad> row overwritten, Xavier-normal instead of
Xavier-uniform, biases left alone) gets a hint naming it.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from helpers.core.model import Transformer, apply_default_init
from helpers.core.vocab import PAD_ID, VOCAB_SIZE

from ._common import call, fail, passed

__all__ = ["check_book_init"]

_SHAPE = dict(d_model=64, num_heads=4, dff=256, num_layers=2, max_len=14, dropout=0.0)


def _tolerance(t: torch.Tensor) -> float:
    """Relative tolerance for a sample std: 4 standard errors (about 1/sqrt(2n) each)."""
    return 4 / math.sqrt(2 * t.numel())


def _default_model() -> Transformer:
    torch.manual_seed(12)
    return apply_default_init(Transformer(VOCAB_SIZE, VOCAB_SIZE, **_SHAPE))


def _embedding_hint(std: float, d: int) -> str:
    want = d**-0.5
    if abs(std - 1) < 0.15:
        return "this is still PyTorch's N(0, 1): the embedding fix is missing"
    if abs(std / (1 / d) - 1) < 0.15:
        return f"std 1/d_model = {1 / d:.4f} is too small: the std is d_model^-1/2 = {want:.4f}"
    if abs(std / d**-0.25 - 1) < 0.15:
        return (
            f"d_model^-1/2 is the standard deviation, not the variance: pass std={want:.4f} "
            "to nn.init.normal_"
        )
    return f"draw from nn.init.normal_(weight, mean=0.0, std=d_model**-0.5) = {want:.4f}"


def _check_embedding(name: str, emb: nn.Embedding, d: int) -> None:
    w = emb.weight.detach()
    if w[PAD_ID].abs().max() > 0:
        fail(
            f"{name}: the <pad> row (index {PAD_ID}) is not zero after your init",
            hint="nn.init.normal_ overwrites every row, the padding row too; zero it again "
            "under torch.no_grad() (weight[PAD_ID].zero_())",
        )
    rows = torch.ones(w.size(0), dtype=torch.bool)
    rows[PAD_ID] = False
    std, mean = w[rows].std().item(), w[rows].mean().item()
    want = d**-0.5
    if abs(std / want - 1) > _tolerance(w[rows]) or abs(mean) > 0.3 * want:
        fail(
            f"{name}: the non-<pad> rows have mean {mean:.4f} and std {std:.4f}; "
            f"expected mean 0 and std d_model^-1/2 = {want:.4f} (d_model = {d})",
            hint=_embedding_hint(std, d),
        )


def _check_linear(name: str, lin: nn.Linear) -> None:
    n_out, n_in = lin.weight.shape
    w = lin.weight.detach()
    bound = math.sqrt(6 / (n_in + n_out))
    std, want = w.std().item(), bound / math.sqrt(3)
    kaiming = 1 / math.sqrt(3 * n_in)
    if abs(std / want - 1) > _tolerance(w):
        hint = (
            "this is PyTorch's nn.Linear default (Kaiming-uniform with a=sqrt 5); apply "
            "nn.init.xavier_uniform_ to the weight"
            if abs(std / kaiming - 1) < 0.1
            else "Xavier-uniform draws from U(-a, a) with a = sqrt(6 / (n_in + n_out))"
        )
        fail(
            f"{name} ({n_in} -> {n_out}): weight std {std:.4f}, expected Xavier's "
            f"sqrt(2 / (n_in + n_out)) = {want:.4f}",
            hint=hint,
        )
    if w.abs().max().item() > bound * (1 + 1e-6):
        fail(
            f"{name} ({n_in} -> {n_out}): a weight of {w.abs().max().item():.4f} lies outside "
            f"Xavier-uniform's range +-{bound:.4f}",
            hint="the std is right, but the book uses nn.init.xavier_uniform_ (a uniform "
            "distribution), not xavier_normal_",
        )
    if lin.bias is not None and lin.bias.detach().abs().max() > 0:
        fail(
            f"{name}: the bias is not zero (largest |b| = {lin.bias.abs().max().item():.4f})",
            hint="Xavier sets the weights only; the book also sets every bias to 0 with "
            "nn.init.zeros_",
        )


def check_book_init(fn) -> None:
    """Check exercise 12.3: fn(model) gives a default-initialised model the book's init, in place.

    Used in chapter 12.
    """
    model = _default_model()
    d = model.config.d_model
    untouched = {
        n: t.detach().clone()
        for n, t in list(model.named_parameters()) + list(model.named_buffers())
        if not isinstance(model.get_submodule(n.rsplit(".", 1)[0]), (nn.Linear, nn.Embedding))
    }
    torch.manual_seed(0)
    with torch.no_grad():
        call(fn, model, where=f"a default-initialised Transformer ({_SHAPE})")
    n = 0
    for name, m in model.named_modules():
        if isinstance(m, nn.Embedding):
            _check_embedding(name, m, d)
            n += 1
        elif isinstance(m, nn.Linear):
            _check_linear(name, m)
            n += 1
    tensors = dict(model.named_parameters()) | dict(model.named_buffers())
    for name, before in untouched.items():
        now = tensors.get(name)
        if now is None or not torch.equal(now.detach(), before):
            fail(
                f"{name} changed",
                hint="only the Embedding and Linear layers are re-initialised; LayerNorm "
                "weights stay 1, their biases 0, and the position table stays as it is",
            )
        n += 1
    passed("check_book_init", n, f"{d=}: embeddings, linears, and what must stay untouched")
