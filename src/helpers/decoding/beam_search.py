"""Beam search for the encoder-decoder, batched over sources, on chapter 13's KV cache.

Exercise 11.3 (chapter 11) has the learner write beam search for one source, re-running the
decoder over every prefix. This is the library's version: every source of a batch at once, each
with `beam_width` hypotheses ("beams"), so the decoder sees B * W rows per step.

The cache (the growing one of `helpers.DecoderLayer`, as in greedy_decode(use_cache=True)):
- the encoder runs once, on the B sources;
- step 0 feeds <bos> to B rows (one per source: all beams start equal), which projects the
  cross-attention keys and values once per source; they are then repeated to the W beams of
  their source with one index_select, and never touched again: a beam's parent is always a
  beam of the same source, so its cross-attention keys never change;
- after every step, each layer's self-attention K and V are reordered by the parent index of
  each new beam (the caches' reorder: index_select on the batch axis), because a beam may
  descend from another beam's prefix.

Scoring. A hypothesis y (the tokens after <bos>, its <eos> included) has the log-probability
log P(y | x), the sum of its tokens' log-probabilities, and the score

    score(y) = log P(y | x) / lp(|y|),   lp(n) = ((5 + n) / 6) ** alpha,

the length penalty of GNMT (Wu et al. 2016), with alpha = `length_penalty`; alpha = 0.6 is the
value of the Transformer paper (Vaswani et al. 2017). alpha = 0 ranks by log-probability alone
(the search of exercise 11.3). Since log P < 0 and lp grows with n, alpha > 0 favours longer
hypotheses.

Finished hypotheses. A beam that emitted <eos> is kept, with its score frozen, and is not
extended: its only continuation is <pad> at no cost, so it competes with the live beams' W * V
extensions for the W places of the next step. The search stops when every beam of every source
is finished, or after max_len - 1 tokens (a hypothesis cut there is complete, without <eos>).
Every token of the vocabulary may be chosen, <pad> and <bos> included, as in greedy_decode; a
<pad> that a live beam writes is masked as a key, as greedy_decode masks it.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import torch

from helpers.core.kv_cache import layer_caches
from helpers.core.masks import make_padding_mask
from helpers.core.vocab import BOS_ID, EOS_ID, PAD_ID
from helpers.decoding.greedy import checked_max_len, restores_mode

DEFAULT_LENGTH_PENALTY = 0.6  # alpha of the Transformer paper's beam search


def gnmt_length_penalty(length: torch.Tensor, alpha: float) -> torch.Tensor:
    """GNMT's length penalty ((5 + length) / 6) ** alpha: a score is log P divided by it.

    Used by beam_search (chapter 11's exercise 11.3 writes the search without it)."""
    return ((5.0 + length.float()) / 6.0) ** alpha


@dataclass(frozen=True)
class BeamSearchResult:
    """What beam_search returns (chapter 11's exercise 11.3 writes the one-source version).

    tokens [B, L]: the best hypothesis of each source, <bos> first, <pad> after its <eos>, and
    L = 1 + the longest best hypothesis (the layout of greedy_decode's output).
    scores [B]: their length-penalised scores; log_probs [B]: their summed log-probabilities.
    beams [B, W, L_all], beam_scores [B, W], beam_log_probs [B, W]: all W final beams of each
    source, best first. A beam with score -inf is empty (<bos>, then <pad>): only when W is
    larger than the number of hypotheses the search could hold.
    """

    tokens: torch.Tensor
    scores: torch.Tensor
    log_probs: torch.Tensor
    beams: torch.Tensor
    beam_scores: torch.Tensor
    beam_log_probs: torch.Tensor


def _checked_width(beam_width) -> int:
    if isinstance(beam_width, bool):
        raise TypeError(f"beam_width must be an int >= 1, got {beam_width!r}")
    try:
        width = operator.index(beam_width)
    except TypeError:
        raise TypeError(
            f"beam_width must be an int >= 1, got {type(beam_width).__name__}"
        ) from None
    if width < 1:
        raise ValueError(f"beam_width must be >= 1 (1 is greedy decoding), got {width}")
    return width


def _checked_src(src: torch.Tensor) -> None:
    if isinstance(src, torch.Tensor) and src.dim() == 2 and 0 in src.shape:
        raise ValueError(
            f"src is empty (shape {tuple(src.shape)}): beam search needs at least one source "
            "of at least one token"
        )


@restores_mode
@torch.no_grad()
def beam_search(
    model,
    src: torch.Tensor,
    beam_width: int,
    max_len: int | None = None,
    length_penalty: float = DEFAULT_LENGTH_PENALTY,
    use_cache: bool = True,
) -> BeamSearchResult:
    """Beam search of width beam_width for every source of src [B, Ls] -> BeamSearchResult.

    Exercise 11.3 in chapter 11 writes it for one source without a cache; this one is batched
    and runs on chapter 13's KV cache (the module docstring says how, and how it scores:
    log P(y) / ((5 + |y|) / 6) ** length_penalty). beam_width=1 is greedy_decode, token for
    token. max_len: the longest output, <bos> included (model.max_len when None), as in
    greedy_decode. use_cache=False re-runs the decoder over every beam's whole prefix at every
    step (the same search, slower). Searches in eval mode (dropout off), then gives back the
    caller's mode.
    """
    model.eval()
    W = _checked_width(beam_width)
    _checked_src(src)
    max_len = checked_max_len(model, src, max_len)
    alpha = float(length_penalty)
    if not math.isfinite(alpha):
        raise ValueError(f"length_penalty must be a finite number, got {length_penalty!r}")
    return search(model, src, W, max_len, alpha, use_cache)


@torch.no_grad()
def search(model, src, W: int, max_len: int, alpha: float, use_cache: bool, reorder_self=None):
    """beam_search's loop, on checked arguments. reorder_self(caches, parent [B, W]), when
    given, replaces the self-attention caches' reorder after every step but the first:
    exercise 20.3's checker runs the reader's reordering inside the very same search."""
    B, V, dev = src.size(0), model.tgt_vocab, src.device
    dtype = torch.promote_types(next(model.parameters()).dtype, torch.float32)  # for the scores
    neg_inf = float("-inf")
    memory, src_mask = model.encode(src)  # the encoder runs once, on B rows
    seqs = torch.full((B, W, 1), BOS_ID, dtype=torch.long, device=dev)
    log_probs = torch.full((B, W), neg_inf, dtype=dtype, device=dev)
    log_probs[:, 0] = 0.0  # one real beam per source to start with; the others are empty
    lengths = torch.zeros(B, W, dtype=torch.long, device=dev)
    finished = torch.ones(B, W, dtype=torch.bool, device=dev)
    finished[:, 0] = False
    # a finished (or empty) beam has a single continuation: <pad>, with log-probability 0
    stay = torch.full((V,), neg_inf, dtype=dtype, device=dev)
    stay[PAD_ID] = 0.0
    source_of_row = torch.arange(B, device=dev).repeat_interleave(W)  # row b * W + w -> b
    first_row = (torch.arange(B, device=dev) * W)[:, None]  # [B, 1]
    caches = [{} for _ in model.decoder.layers] if use_cache else None
    mem, mem_mask = memory, src_mask  # B rows at step 0, B * W rows after it

    for step in range(max_len - 1):
        if finished.all():
            break
        rows = seqs[:, 0] if step == 0 else seqs.reshape(B * W, -1)  # [B or B * W, step + 1]
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
        logp = logits.to(dtype).log_softmax(-1).view(B, -1, V).expand(B, W, V)
        logp = torch.where(finished[..., None], stay, logp)
        cand = log_probs[..., None] + logp  # [B, W, V]
        cand_len = lengths + (~finished).long()  # [B, W]
        rank = cand / gnmt_length_penalty(cand_len, alpha)[..., None]
        top_rank, top = rank.view(B, W * V).topk(W, dim=1)  # sorted, best first
        parent, token = top // V, top % V
        empty = top_rank == neg_inf
        was_finished = finished.gather(1, parent)
        log_probs = cand.view(B, W * V).gather(1, top).masked_fill(empty, neg_inf)
        lengths = cand_len.gather(1, parent)
        token = token.masked_fill(was_finished | empty, PAD_ID)
        finished = was_finished | empty | (token == EOS_ID)
        prefix = seqs.gather(1, parent[..., None].expand(-1, -1, seqs.size(2)))
        seqs = torch.cat([prefix, token[..., None]], dim=2)

        if step == 0:  # every beam of source b descends from row b
            parent_rows = source_of_row
            mem, mem_mask = (
                memory.index_select(0, parent_rows),
                src_mask.index_select(0, parent_rows),
            )
        else:
            parent_rows = (first_row + parent).view(-1)
        if use_cache and step > 0 and reorder_self is not None:
            reorder_self(caches, parent.clone())
        elif use_cache:  # the caches' own reorder (helpers.core.kv_cache): index_select on dim 0
            for cache in caches:
                self_cache, cross_cache = layer_caches(cache)
                self_cache.reorder(parent_rows)
                if step == 0:  # projected once per source, now shared by its W beams
                    cross_cache.reorder(parent_rows)

    scores = log_probs / gnmt_length_penalty(lengths, alpha)
    order = scores.argsort(dim=1, descending=True, stable=True)
    scores, log_probs = scores.gather(1, order), log_probs.gather(1, order)
    lengths = lengths.gather(1, order)
    seqs = seqs.gather(1, order[..., None].expand(-1, -1, seqs.size(2)))
    empty = scores == neg_inf
    seqs[..., 1:] = seqs[..., 1:].masked_fill(empty[..., None], PAD_ID)
    best_len = 1 + int(lengths[:, 0].max())
    return BeamSearchResult(
        tokens=seqs[:, 0, :best_len].contiguous(),
        scores=scores[:, 0].contiguous(),
        log_probs=log_probs[:, 0].contiguous(),
        beams=seqs,
        beam_scores=scores,
        beam_log_probs=log_probs,
    )
