"""Exercise 11.3's beam-search mistakes (tests/mistakes_ch11.py), written in the shape of the
library's batched search, helpers.decoding.beam_search.beam_search, so that
tests/plant_mistake.py can plant each one and show whether tests/test_beam_search.py notices it:

    M=helpers.decoding.beam_search:beam_search
    BOOK_MISTAKE="$M=tests/mistakes_beam_search.py:beam_no_eval" \
        PYTHONPATH=tests .venv/bin/python -m pytest -p plant_mistake tests/test_beam_search.py -x -q

_beam_search is a copy of the library's function with a `mistake` argument; no_mistake is the
control (it must pass every test). Not collected by pytest: the name does not start with test_.
"""

import functools
import math

import torch

from helpers import BOS_ID, EOS_ID, PAD_ID
from helpers.core.masks import make_padding_mask
from helpers.decoding.beam_search import (
    DEFAULT_LENGTH_PENALTY,
    BeamSearchResult,
    _checked_src,
    _checked_width,
    gnmt_length_penalty,
)
from helpers.decoding.greedy import checked_max_len


def _mode(fn):
    """helpers.decoding.greedy.restores_mode, skipped for the mistake that never gives the mode
    back."""

    @functools.wraps(fn)
    def wrapper(model, *args, mistake=None, **kwargs):
        was_training = model.training
        try:
            return fn(model, *args, mistake=mistake, **kwargs)
        finally:
            if mistake != "eval not undone":
                model.train(was_training)

    return wrapper


@_mode
@torch.no_grad()
def _beam_search(
    model,
    src,
    beam_width,
    max_len=None,
    length_penalty=DEFAULT_LENGTH_PENALTY,
    use_cache=True,
    *,
    mistake=None,
):
    """helpers.decoding.beam_search.beam_search, but for `mistake`."""
    if mistake != "no eval":
        model.eval()
    W = _checked_width(beam_width)
    if mistake == "width ignored":
        W = 1
    _checked_src(src)
    max_len = checked_max_len(model, src, max_len)
    alpha = float(length_penalty)
    if not math.isfinite(alpha):
        raise ValueError(f"length_penalty must be a finite number, got {length_penalty!r}")

    def penalty(length):
        if mistake == "mean log-probability":  # log P / |y|: the mean per token
            return length.clamp(min=1).to(dtype)
        return gnmt_length_penalty(length, alpha)

    extends = mistake == "extends finished"
    B, V, dev = src.size(0), model.tgt_vocab, src.device
    dtype = torch.promote_types(next(model.parameters()).dtype, torch.float32)
    neg_inf = float("-inf")
    memory, src_mask = model.encode(src)
    seqs = torch.full((B, W, 1), BOS_ID, dtype=torch.long, device=dev)
    log_probs = torch.full((B, W), neg_inf, dtype=dtype, device=dev)
    log_probs[:, 0] = 0.0
    lengths = torch.zeros(B, W, dtype=torch.long, device=dev)
    finished = torch.ones(B, W, dtype=torch.bool, device=dev)
    finished[:, 0] = False
    stay = torch.full((V,), neg_inf, dtype=dtype, device=dev)
    stay[PAD_ID] = 0.0
    source_of_row = torch.arange(B, device=dev).repeat_interleave(W)
    first_row = (torch.arange(B, device=dev) * W)[:, None]
    caches = [{} for _ in model.decoder.layers] if use_cache else None
    mem, mem_mask = memory, src_mask

    for step in range(max_len - 1):
        if finished.all():
            break
        rows = seqs[:, 0] if step == 0 else seqs.reshape(B * W, -1)
        if use_cache:
            h, _ = model.decoder(
                rows[:, -1:],
                mem,
                make_padding_mask(rows),
                mem_mask,
                need_weights=False,
                caches=caches,
                start_pos=step,
            )
            logits = model.out_proj(h[:, -1])
        else:
            logits = model.decode(rows, mem, mem_mask, need_weights=False)[0][:, -1]
        if mistake == "logits added":
            logp = logits.to(dtype)
        else:
            logp = logits.to(dtype).log_softmax(-1)
        if mistake == "probabilities added":
            logp = logp.exp()
        logp = logp.view(B, -1, V).expand(B, W, V)
        if mistake == "one token per beam" and step > 0:  # each beam keeps its own best token
            best = logp.argmax(-1, keepdim=True)
            logp = torch.full_like(logp, neg_inf).scatter(-1, best, logp.gather(-1, best))
        if not extends:  # extends: an <eos> beam grows like a live one (an empty one stays -inf)
            logp = torch.where(finished[..., None], stay, logp)
        if mistake == "last token only":  # a live beam's candidates forget its past
            cand = torch.where(finished[..., None], log_probs[..., None] + logp, logp)
        else:
            cand = log_probs[..., None] + logp
        cand_len = lengths + (~finished).long() if not extends else lengths + 1
        rank = cand / penalty(cand_len)[..., None]
        top_rank, top = rank.view(B, W * V).topk(W, dim=1)
        parent, token = top // V, top % V
        empty = top_rank == neg_inf
        was_finished = finished.gather(1, parent)
        log_probs = cand.view(B, W * V).gather(1, top).masked_fill(empty, neg_inf)
        lengths = cand_len.gather(1, parent)
        if extends:
            token = token.masked_fill(empty, PAD_ID)
            finished = empty | (token == EOS_ID)
        else:
            token = token.masked_fill(was_finished | empty, PAD_ID)
            finished = was_finished | empty | (token == EOS_ID)
        prefix = seqs.gather(1, parent[..., None].expand(-1, -1, seqs.size(2)))
        seqs = torch.cat([prefix, token[..., None]], dim=2)

        if step == 0:
            parent_rows = source_of_row
            mem, mem_mask = (
                memory.index_select(0, parent_rows),
                src_mask.index_select(0, parent_rows),
            )
        else:
            parent_rows = (first_row + parent).view(-1)
        if use_cache:
            for cache in caches:
                cache["self_k"] = cache["self_k"].index_select(0, parent_rows)
                cache["self_v"] = cache["self_v"].index_select(0, parent_rows)
                if step == 0:
                    cache["cross_k"] = cache["cross_k"].index_select(0, parent_rows)
                    cache["cross_v"] = cache["cross_v"].index_select(0, parent_rows)

    scores = log_probs / penalty(lengths)
    order = scores.argsort(dim=1, descending=True, stable=True)
    scores, log_probs = scores.gather(1, order), log_probs.gather(1, order)
    lengths = lengths.gather(1, order)
    seqs = seqs.gather(1, order[..., None].expand(-1, -1, seqs.size(2)))
    empty = scores == neg_inf
    seqs[..., 1:] = seqs[..., 1:].masked_fill(empty[..., None], PAD_ID)
    pick = -1 if mistake == "last beam returned" else 0  # the worst of the sorted beams
    best_len = 1 + int(lengths[:, pick].max())
    first = 1 if mistake == "no bos" else 0
    return BeamSearchResult(
        tokens=seqs[:, pick, first:best_len].contiguous(),
        scores=scores[:, pick].contiguous(),
        log_probs=log_probs[:, pick].contiguous(),
        beams=seqs[..., first:],
        beam_scores=scores,
        beam_log_probs=log_probs,
    )


def _wrapper(mistake, doc):
    def search(
        model,
        src,
        beam_width,
        max_len=None,
        length_penalty=DEFAULT_LENGTH_PENALTY,
        use_cache=True,
    ):
        return _beam_search(
            model, src, beam_width, max_len, length_penalty, use_cache, mistake=mistake
        )

    search.__doc__ = doc
    return search


no_mistake = _wrapper(None, "The control: the library's search, copied; passes every test.")
beam_no_eval = _wrapper("no eval", "No model.eval(): dropout stays on in training mode.")
beam_eval_not_undone = _wrapper("eval not undone", "model.eval() and never the mode back.")
beam_width_ignored = _wrapper("width ignored", "beam_width never used: one beam (greedy).")
beam_last_token_only = _wrapper(
    "last token only", "Ranked by the last token's log-probability, not the sequence's."
)
beam_probabilities_added = _wrapper(
    "probabilities added", "Scores add probabilities (softmax), not log-probabilities."
)
beam_logits_added = _wrapper("logits added", "Scores add raw logits: no log_softmax.")
beam_one_token_per_beam = _wrapper(
    "one token per beam", "After the first step each beam keeps only its own best token."
)
beam_extends_finished = _wrapper(
    "extends finished", "A beam that produced <eos> is extended like the live ones."
)
beam_mean_log_probability = _wrapper(
    "mean log-probability", "Ranked by log P / |y| (the mean) instead of GNMT's penalty."
)
beam_last_beam_returned = _wrapper(
    "last beam returned", "The last of the sorted final beams (the worst), not the best."
)
beam_no_bos = _wrapper("no bos", "The sequences returned without their <bos>.")

MISTAKES = [
    "beam_no_eval",
    "beam_eval_not_undone",
    "beam_width_ignored",
    "beam_last_token_only",
    "beam_probabilities_added",
    "beam_logits_added",
    "beam_one_token_per_beam",
    "beam_extends_finished",
    "beam_mean_log_probability",
    "beam_last_beam_returned",
    "beam_no_bos",
]
