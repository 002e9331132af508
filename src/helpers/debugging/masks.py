"""Stage 2 of check_model, masks: what the attention modules received (dtype, fully masked
rows) and two behavioural probes, causality and padding invariance. Used in chapter 17."""

from __future__ import annotations

import torch

from .recorder import Recorder
from .report import ModelReport, short


def received_masks(rec: Recorder, report: ModelReport) -> None:
    """The masks the hooks caught: all bool, and no query row that may attend to nothing.

    Used in chapter 17.
    """
    if not rec.masks:
        report.add("masks", "mask dtype", "skip", "no attention module received a mask")
        report.add("masks", "fully masked rows", "skip", "no attention module received a mask")
        return
    names = sorted({n for n, _, _ in rec.masks})
    not_bool = sorted({f"{n} ({m.dtype})" for n, _, m in rec.masks if m.dtype != torch.bool})
    if not_bool:
        report.add("masks", "mask dtype", "FAIL", "non-bool masks: " + ", ".join(not_bool[:3]))
    else:
        report.add(
            "masks",
            "mask dtype",
            "ok",
            f"{len(rec.masks)} masks seen by {len(names)} attention modules, all bool",
        )
    full = []
    for name, lq, m in rec.masks:
        if m.dtype != torch.bool or m.dim() < 2:
            continue
        rows = m.all(dim=-1)  # [B, 1 or h, Lq or 1]
        if lq is not None and rows.size(-1) == 1:
            rows = rows.expand(*rows.shape[:-1], lq)
        n = int(rows.any(dim=-2).sum()) if rows.dim() >= 3 else int(rows.sum())
        if n:
            idx = rows.nonzero()[0].tolist()
            full.append(f"{name}: {n} query rows (first: batch {idx[0]}, query {idx[-1]})")
    if full:
        report.add(
            "masks",
            "fully masked rows",
            "FAIL",
            "queries that may attend to no key at all (NaN with -inf masking): "
            + "; ".join(full[:2]),
        )
    else:
        report.add(
            "masks", "fully masked rows", "ok", "every query row may attend to at least one key"
        )


def skip_probes(why: str, report: ModelReport) -> None:
    """The probes compare logits: meaningless when they hold NaN or change from run to run.

    Used in chapter 17.
    """
    report.add("masks", "causality probe", "skip", why)
    report.add("masks", "padding invariance", "skip", why)


def _random_ids_like(t: torch.Tensor, vocab: int, pad_id: int, gen) -> torch.Tensor:
    r = torch.randint(0, vocab, t.shape, generator=gen).to(t.device)
    return torch.where(r == pad_id, (r + 1) % vocab, r)


def causality_probe(model, src, tgt_in, logits, pad_id, V, gen, report) -> None:
    """Change every target token after position t; the logits at positions <= t must not move.

    Used in chapter 17.
    """
    Lt = tgt_in.size(1)
    if Lt < 2:
        report.add("masks", "causality probe", "skip", "the decoder input has a single position")
        return
    scale = max(1.0, float(logits.abs().max()))
    worst, worst_t = 0.0, None
    for t in sorted({0, Lt // 2, Lt - 2}):
        changed = tgt_in.clone()
        changed[:, t + 1 :] = _random_ids_like(changed[:, t + 1 :], V, pad_id, gen)
        with torch.no_grad():
            out = model(src, changed)
        d = float((out[:, : t + 1] - logits[:, : t + 1]).abs().max())
        if not d <= worst:  # also catches NaN
            worst, worst_t = d, t
    if worst <= 1e-5 * scale:
        report.add(
            "masks",
            "causality probe",
            "ok",
            "changing later target tokens never changes earlier logits",
        )
    else:
        report.add(
            "masks",
            "causality probe",
            "FAIL",
            f"changing the tokens after position {worst_t} moved the logits at positions "
            f"<= {worst_t} by up to {short(worst)}: the decoder sees the future",
        )


def padding_probe(model, src, tgt_in, logits, pad_id, max_rows, report) -> None:
    """A padded row computed alone, with its padding columns cut off, must give the same logits.

    Used in chapter 17.
    """
    real = src != pad_id
    lengths = real.long().cumsum(1).argmax(1) + 1  # last real position + 1
    rows = [
        i for i in range(src.size(0)) if lengths[i] < src.size(1) and real[i, : lengths[i]].any()
    ][:max_rows]
    if not rows:
        report.add(
            "masks",
            "padding invariance",
            "skip",
            "no source row in the batch has padding to remove",
        )
        return
    scale = max(1.0, float(logits.abs().max()))
    worst = 0.0
    for i in rows:
        with torch.no_grad():
            alone = model(src[i : i + 1, : lengths[i]], tgt_in[i : i + 1])
        d = float((alone[0] - logits[i]).abs().max())
        worst = d if not d <= worst else worst
    if worst <= 1e-4 * scale:
        report.add(
            "masks",
            "padding invariance",
            "ok",
            f"{len(rows)} padded rows give the same logits with their padding removed",
        )
    else:
        report.add(
            "masks",
            "padding invariance",
            "FAIL",
            f"removing the PAD columns of src moved the logits by up to {short(worst)}: "
            "padding is attended to",
        )
