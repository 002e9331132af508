"""Stage 3 of check_model, data: the batch itself, whatever the model does with it. The decoder
input starts with BOS and BOS is not PAD, ids are inside the vocabulary, no source row is empty,
and the target is the decoder input shifted by one. Used in chapter 17."""

from __future__ import annotations

import torch

from .report import ModelReport


def data_checks(
    src, tgt_in, tgt_out, shift_given, pad_id, bos_id, src_vocab, tgt_vocab, report: ModelReport
) -> None:
    """All four data checks, in order.

    Used in chapter 17.
    """
    start_symbol(tgt_in, pad_id, bos_id, report)
    ids_in_vocabulary(src, tgt_in, tgt_out, src_vocab, tgt_vocab, report)
    source_rows(src, pad_id, report)
    teacher_forcing_shift(tgt_in, tgt_out, shift_given, report)


def start_symbol(tgt_in, pad_id, bos_id, report: ModelReport) -> None:
    """The decoder input starts with BOS, and BOS is not PAD. Used in chapter 17."""
    first = tgt_in[:, 0]
    if bos_id == pad_id:
        report.add(
            "data",
            "start symbol",
            "FAIL",
            f"BOS id == PAD id == {pad_id}: the decoder's first query sees one key, and it is "
            "masked as padding",
        )
    elif bool((first == pad_id).any()):
        n = int((first == pad_id).sum())
        report.add(
            "data",
            "start symbol",
            "FAIL",
            f"{n} of {len(first)} decoder inputs start with PAD ({pad_id}), not BOS ({bos_id}): "
            "their first query sees one key, and it is masked as padding",
        )
    elif not bool((first == bos_id).all()):
        n = int((first != bos_id).sum())
        report.add(
            "data",
            "start symbol",
            "FAIL",
            f"{n} of {len(first)} decoder inputs do not start with BOS ({bos_id})",
        )
    else:
        report.add(
            "data",
            "start symbol",
            "ok",
            f"every decoder input starts with BOS ({bos_id}), and BOS != PAD ({pad_id})",
        )


def ids_in_vocabulary(src, tgt_in, tgt_out, src_vocab, tgt_vocab, report: ModelReport) -> None:
    """src, tgt_in, tgt_out hold integer ids inside the vocabularies. Used in chapter 17."""
    problems = []
    for name, t, vocab in (
        ("src", src, src_vocab),
        ("tgt_in", tgt_in, tgt_vocab),
        ("tgt_out", tgt_out, tgt_vocab),
    ):
        if t.dtype.is_floating_point or t.dtype == torch.bool:
            problems.append(f"{name} has dtype {t.dtype}, not integer ids")
        elif t.numel() and (int(t.min()) < 0 or (vocab is not None and int(t.max()) >= vocab)):
            problems.append(
                f"{name} holds ids in [{int(t.min())}, {int(t.max())}], vocabulary is [0, {vocab})"
            )
    if problems:
        report.add("data", "ids in vocabulary", "FAIL", "; ".join(problems))
    else:
        report.add(
            "data",
            "ids in vocabulary",
            "ok",
            f"src ids < {src_vocab}, target ids < {tgt_vocab}"
            if src_vocab and tgt_vocab
            else "ids >= 0",
        )


def source_rows(src, pad_id, report: ModelReport) -> None:
    """No source row is all PAD (its encoder queries would see no key). Used in chapter 17."""
    empty = int((src == pad_id).all(dim=1).sum())
    if empty:
        report.add(
            "data",
            "source rows",
            "FAIL",
            f"{empty} source rows are all PAD: their encoder queries see no key",
        )
    else:
        report.add("data", "source rows", "ok", "every source row has at least one real token")


def teacher_forcing_shift(tgt_in, tgt_out, shift_given, report: ModelReport) -> None:
    """tgt_out is tgt_in shifted by one (when the batch gives both). Used in chapter 17."""
    if not shift_given:
        report.add(
            "data",
            "teacher-forcing shift",
            "skip",
            "not tested: the batch gave tgt, so the shift was made here (tgt[:, :-1], tgt[:, 1:]);"
            " pass (src, tgt_in, tgt_out) to test your own",
        )
    elif tgt_in.shape != tgt_out.shape:
        report.add(
            "data",
            "teacher-forcing shift",
            "FAIL",
            f"tgt_in {list(tgt_in.shape)} and tgt_out {list(tgt_out.shape)} differ in shape",
        )
    elif torch.equal(tgt_in, tgt_out):
        report.add(
            "data",
            "teacher-forcing shift",
            "FAIL",
            "tgt_out == tgt_in: every position is trained to output its own input "
            "(no shift: a label leak)",
        )
    else:
        bad = int((tgt_in[:, 1:] != tgt_out[:, :-1]).sum())
        if bad:
            report.add(
                "data",
                "teacher-forcing shift",
                "FAIL",
                f"tgt_out[:, t] != tgt_in[:, t + 1] at {bad} positions: the target is not the "
                "input shifted by one",
            )
        else:
            report.add(
                "data",
                "teacher-forcing shift",
                "ok",
                "tgt_out[:, t] == tgt_in[:, t + 1] everywhere",
            )
