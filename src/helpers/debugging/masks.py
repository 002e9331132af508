"""Stage 2 of check_model, masks: what the attention modules received (dtype, fully masked
rows) and two behavioural probes, causality and padding invariance. Used in chapter 17.

check_masks: chapter 8's two mask tests, causality and padding invariance, as one call."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from helpers.core.vocab import PAD_ID
from helpers.decoding.greedy import restores_mode

from .recorder import Recorder
from .report import Finding, ModelReport, short


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


# Chapter 8's two tests as one call. check_model (chapter 17) probes a few positions; this one
# rewrites the target after every position and appends padding of several widths.


@dataclass(frozen=True)
class MaskCheck:
    """What check_masks found: one Finding per property, and the largest change it measured.

    Built in chapter 8.
    """

    findings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.findings)

    @property
    def failed_checks(self) -> list[str]:
        return [f.check for f in self.findings if not f.ok]

    def __str__(self) -> str:
        head = "check_masks: " + (
            "all ok" if self.ok else f"{len(self.failed_checks)} of {len(self.findings)} FAIL"
        )
        return "\n".join(
            [head] + [f"  {f.status:<4}  {f.check:<19} {f.message}" for f in self.findings]
        )

    __repr__ = __str__


def _other_tokens(ids: torch.Tensor, vocab: int, pad_id: int) -> torch.Tensor:
    """Every id replaced by a different id that is not pad_id (the next one, cyclically)."""
    out = (ids + 1) % vocab
    out = torch.where(out == pad_id, (out + 1) % vocab, out)
    return torch.where(out == ids, (out + 1) % vocab, out)  # only when vocab is tiny


@restores_mode
@torch.no_grad()
def check_masks(model, src, tgt_in, pad_id: int = PAD_ID, extra_pads=(1, 3), tol=1e-5) -> MaskCheck:
    """Built in chapter 8. The two properties a correct model has whatever its weights, tested
    in eval mode (the caller's mode is given back):

    - causality: for every position t, rewriting every target token after t (each into another
      non-pad token) moves no logit at positions <= t by more than the limit;
    - padding invariance: appending `extra_pads` <pad> columns to the source moves no logit by
      more than the limit. Widths past the model's `max_len` (when it has one) are left out;
      if none fits, the source is cut to its longest row instead (when that removes columns).

    The limit is tol times the largest |logit| of the unchanged batch (at least 1): float
    rounding is relative, and a trained model's logits are several times an untrained one's.
    Measured on the book's trained model (largest logit about 14), appending padding moves its
    logits by up to 2.4e-5 from rounding alone, 1.7e-6 of the largest logit; a missing mask
    moves them by more than 0.1 of it.

    model: any module with forward(src [B, Ls], tgt_in [B, Lt]) -> logits [B, Lt, V]. Returns
    a MaskCheck (print it; .ok).
    """
    model.eval()
    base = model(src, tgt_in)
    vocab, Lt = base.size(-1), tgt_in.size(1)
    scale = float(base.abs().max())
    limit = tol * (scale if scale > 1.0 else 1.0)  # NaN logits: limit tol, and every d fails
    within = f"by more than {tol:g} of the largest |logit|"
    findings = []

    worst, worst_t = 0.0, None
    for t in range(Lt - 1):
        changed = tgt_in.clone()
        changed[:, t + 1 :] = _other_tokens(tgt_in[:, t + 1 :], vocab, pad_id)
        d = float((model(src, changed)[:, : t + 1] - base[:, : t + 1]).abs().max())
        if not d <= worst:  # also catches NaN
            worst, worst_t = d, t
    if Lt < 2:
        findings.append(Finding("masks", "causality", "skip", "the decoder input has one position"))
    elif worst <= limit:
        findings.append(
            Finding(
                "masks",
                "causality",
                "ok",
                f"rewriting the tokens after each of {Lt - 1} positions moved no earlier logit"
                f" {within}",
            )
        )
    else:
        findings.append(
            Finding(
                "masks",
                "causality",
                "FAIL",
                f"rewriting the tokens after position {worst_t} moved the logits at positions"
                f" <= {worst_t} by up to {short(worst)}: the decoder reads the future",
            )
        )

    max_len = getattr(model, "max_len", None)
    widths = [int(n) for n in extra_pads if max_len is None or src.size(1) + int(n) <= max_len]
    variants = [
        (f"appending {n} <pad> columns to the source", F.pad(src, (0, n), value=pad_id))
        for n in widths
    ]
    longest = int((src != pad_id).long().cumsum(1).argmax(1).max()) + 1  # last real column + 1
    if not variants and longest < src.size(1):
        variants = [
            (f"cutting the source to its longest row ({longest} columns)", src[:, :longest])
        ]
    if not variants:
        findings.append(
            Finding(
                "masks",
                "padding invariance",
                "skip",
                f"no <pad> column can be appended (max_len {max_len}) or cut",
            )
        )
        return MaskCheck(tuple(findings))
    worst, worst_how = 0.0, None
    for how, other in variants:
        d = float((model(other, tgt_in) - base).abs().max())
        if not d <= worst:
            worst, worst_how = d, how
    if worst <= limit:
        done = (
            f"appending {', '.join(map(str, widths))} <pad> columns to the source"
            if widths
            else variants[0][0]
        )
        findings.append(
            Finding("masks", "padding invariance", "ok", f"{done} moved no logit {within}")
        )
    else:
        findings.append(
            Finding(
                "masks",
                "padding invariance",
                "FAIL",
                f"{worst_how} moved the logits by up to {short(worst)}: padding is attended to",
            )
        )
    return MaskCheck(tuple(findings))
