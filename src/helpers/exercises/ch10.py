"""Checkers for the exercises of chapter 10 (training).

check_smoothed_cross_entropy(fn)   fn(logits [N, V], labels [N], eps, ignore_index) -> loss:
                                   cross-entropy with label smoothing, by hand (exercise 10.3);
check_teacher_forcing_loss(fn)     fn(model, src, tgt) -> loss: the training loss of one batch,
                                   with the one-position shift and padding ignored (exercise 10.2).

Both compare the reader's number with PyTorch's F.cross_entropy on fixed inputs. When the number
differs, they compute the usual wrong variants (smoothing spread over V - 1 classes, padding
averaged in, target not shifted, ...) and name the one the reader's number matches.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..data import make_reversal_dataset
from ..model import Transformer
from ..vocab import PAD_ID, VOCAB_SIZE
from ._common import call, expect_tensor, fail, passed

__all__ = ["check_smoothed_cross_entropy", "check_teacher_forcing_loss"]

# A right answer computes the same float32 sums as F.cross_entropy, in another order: about
# 1e-7 relative here. A near miss (the logits rounded to a 16-bit float before the loss) is off
# by about 6e-5, so the tolerance sits between the two.
TOL_REL, TOL_ABS = 1e-5, 1e-6


def _scalar(name: str, got, where: str) -> torch.Tensor:
    got = expect_tensor(name, got, where)
    if got.dim() != 0:
        fail(
            f"{name} has shape {tuple(got.shape)}, expected a scalar (shape ())",
            where,
            "average over the positions that count: the loss is one number",
        )
    return got


def _match(got: float, variants: dict[str, torch.Tensor]) -> str:
    """The hint of the first wrong variant whose value the reader's number reproduces."""
    for hint, value in variants.items():
        if abs(got - float(value)) <= 1e-5 + 1e-4 * abs(float(value)):
            return hint
    return ""


# ---------------------------------------------------------------- exercise 10.3


def _smoothing_inputs():
    g = torch.Generator().manual_seed(100)
    logits = torch.randn(12, 7, generator=g) * 2
    labels = torch.randint(1, 7, (12,), generator=g)
    padded = labels.clone()
    padded[[2, 5, 6, 11]] = 0  # class 0 plays <pad>
    wide = torch.randn(9, 13, generator=g) * 3
    wide_labels = torch.randint(0, 13, (9,), generator=g)
    wide_labels[[0, 4]] = -100  # PyTorch's default ignore_index
    return [
        ("12 positions, 7 classes, nothing ignored, eps 0.1", logits, labels, 0.1, 0),
        ("the same with 4 labels = ignore_index 0, eps 0.1", logits, padded, 0.1, 0),
        ("the same without smoothing (eps 0)", logits, padded, 0.0, 0),
        ("9 positions, 13 classes, ignore_index -100, eps 0.3", wide, wide_labels, 0.3, -100),
    ]


def _smoothing_variants(logits, labels, eps, ignore_index) -> dict[str, torch.Tensor]:
    V = logits.size(-1)
    real = labels != ignore_index
    safe = labels.masked_fill(~real, 0)
    logp = logits.log_softmax(-1)
    nll = -logp.gather(1, safe[:, None])[:, 0]
    uniform = -logp.mean(-1)
    others = (-logp.sum(-1) - nll) / (V - 1)
    n = real.sum().clamp(min=1)
    return {
        "the smoothing mass eps is spread over the V - 1 wrong classes; PyTorch spreads eps / V "
        "over all V classes, the true class included": (
            ((1 - eps) * nll + eps * others)[real].sum() / n
        ),
        "ignored positions are averaged in: they must add nothing to the sum and not count in "
        "the mean (divide by the number of real labels)": ((1 - eps) * nll + eps * uniform).mean(),
        "the smoothing term of the ignored positions was kept (only their -log p_y was masked), "
        "the bug of some old PyTorch versions: mask the whole per-position loss": (
            ((1 - eps) * nll * real).sum() + (eps * uniform).sum()
        )
        / n,
        "the true class's term is missing its weight (1 - eps)": (nll + eps * uniform)[real].sum()
        / n,
        "the loss is summed over the positions, not averaged": (
            ((1 - eps) * nll + eps * uniform)[real].sum()
        ),
    }


def check_smoothed_cross_entropy(fn) -> None:
    """Exercise 10.3: fn(logits, labels, eps, ignore_index) equals F.cross_entropy with
    label_smoothing=eps and ignore_index, on four fixed inputs."""
    for where, logits, labels, eps, ignore_index in _smoothing_inputs():
        got = call(fn, logits.clone(), labels.clone(), eps, ignore_index, where=where)
        got = _scalar("loss", got, where)
        want = F.cross_entropy(logits, labels, ignore_index=ignore_index, label_smoothing=eps)
        if not torch.isclose(got.detach().float(), want, atol=TOL_ABS, rtol=TOL_REL):
            hint = _match(
                float(got.detach()), _smoothing_variants(logits, labels, eps, ignore_index)
            )
            fail(f"loss is {float(got.detach()):.6f}, expected {float(want):.6f}", where, hint)
    passed("check_smoothed_cross_entropy", 4, "equal to F.cross_entropy(label_smoothing=...)")


# ---------------------------------------------------------------- exercise 10.2


def _tf_model() -> Transformer:
    torch.manual_seed(101)
    return Transformer(
        VOCAB_SIZE, VOCAB_SIZE, d_model=32, num_heads=4, dff=64, max_len=14, dropout=0.0
    )


def _ce(logits, labels, **kw) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, VOCAB_SIZE), labels.reshape(-1), **kw)


def _tf_variants(model, src, tgt) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        shifted = model(src, tgt[:, :-1])
        return {
            "padding is scored: pass ignore_index=PAD_ID, so the mean runs over real labels": (
                _ce(shifted, tgt[:, 1:])
            ),
            "the target is not shifted: the decoder reads tgt and is scored on tgt itself, so "
            "each position only has to copy its input; feed tgt[:, :-1] and score tgt[:, 1:]": (
                _ce(model(src, tgt), tgt, ignore_index=PAD_ID)
            ),
            "the shift goes the wrong way: the input must be tgt[:, :-1] (starting with <bos>) "
            "and the labels tgt[:, 1:]": (
                _ce(model(src, tgt[:, 1:]), tgt[:, :-1], ignore_index=PAD_ID)
            ),
        }


def check_teacher_forcing_loss(fn) -> None:
    """Exercise 10.2: fn(model, src, tgt) is the teacher-forced cross-entropy of the batch,
    padding ignored, returned as a tensor that backward() can use."""
    model = _tf_model()
    src, tgt = make_reversal_dataset(16, seed=102)
    short_src, short_tgt = make_reversal_dataset(8, seed=103, max_len=5)  # width 7, not 14
    checks = 0
    for where, s, t in (
        ("a batch of 16 sequences of 3-12 digits", src, tgt),
        ("a batch of 8 sequences of 3-5 digits (width 7)", short_src, short_tgt),
    ):
        model.zero_grad()
        got = call(fn, model, s.clone(), t.clone(), where=where)
        got = _scalar("loss", got, where)
        want = _ce(model(s, t[:, :-1]), t[:, 1:], ignore_index=PAD_ID).detach()
        if not torch.isclose(got.detach().float(), want, atol=TOL_ABS, rtol=TOL_REL):
            hint = _match(float(got.detach()), _tf_variants(model, s, t))
            fail(f"loss is {float(got.detach()):.6f}, expected {float(want):.6f}", where, hint)
        if not got.requires_grad:
            fail(
                "the loss does not require grad, so loss.backward() cannot train the model",
                where,
                "return the tensor itself (not loss.item(), and not computed under no_grad)",
            )
        checks += 1
    passed("check_teacher_forcing_loss", checks)
