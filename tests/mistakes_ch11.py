"""Chapter 11's catalogue of known mistakes: plausible wrong answers to exercises 11.3 (beam
search) and 11.4 (greedy decoding), one small function each.

tests/test_exercises_ch11.py shows each rejected by its checker with its own message. The
greedy ones have the library's signature, greedy_decode(model, src, max_len=None,
use_cache=False, stop_at_eos=True), so that tests/plant_mistake.py can plant them as
helpers.decoding.greedy:greedy_decode (they ignore use_cache: the tokens are the same). The beam
ones
keep the exercise's one-source signature; the library's helpers.beam_search is batched, returns
every beam and ranks with a length penalty, so planting them needs an adapter. Not collected by
pytest: the name does not start with test_.
"""

import torch

from helpers import BOS_ID, EOS_ID, PAD_ID
from helpers.decoding.greedy import checked_max_len


@torch.no_grad()
def _greedy(model, src, max_len, stop_at_eos=True, *, mistake=None):
    """Greedy decoding as helpers.greedy_decode does it, but for `mistake`."""
    was_training = model.training
    if mistake != "no eval":
        model.eval()
    if mistake == "no finally":
        out = _greedy_body(model, src, max_len, stop_at_eos, mistake)
        model.train(was_training)  # skipped when the body raises
        return out
    try:
        out = _greedy_body(model, src, max_len, stop_at_eos, mistake)
    finally:
        if mistake == "train at the end":
            model.train()
        elif mistake not in ("eval not undone", "no eval"):
            model.train(was_training)
    return out


def _greedy_body(model, src, max_len, stop_at_eos, mistake):
    max_len = checked_max_len(model, src, max_len)  # a ValueError for a source too long
    memory, src_mask = model.encode(src)
    B = src.size(0)
    start = PAD_ID if mistake == "starts with pad" else BOS_ID
    out = torch.full((B, 1), start, dtype=torch.long, device=src.device)
    finished = torch.zeros(B, dtype=torch.bool, device=src.device)
    for _ in range(max_len if mistake == "max_len + 1" else max_len - 1):
        logits = model.decode(out, memory, src_mask, need_weights=False)[0]  # [B, t, V]
        if mistake == "argmax over positions":
            nxt = logits.argmax(1)[:, -1]
        elif mistake == "first position":
            nxt = logits[:, 0].argmax(-1)
        else:
            nxt = logits[:, -1].argmax(-1)
        if mistake == "eos overwritten" and stop_at_eos:
            finished |= nxt == EOS_ID  # before the fill: the <eos> itself becomes <pad>
        if mistake == "padded with eos":
            nxt = nxt.masked_fill(finished, EOS_ID)
        elif mistake != "no padding":
            nxt = nxt.masked_fill(finished, PAD_ID)
        out = torch.cat([out, nxt[:, None]], dim=1)
        if stop_at_eos:
            if mistake == "finished forgotten":
                finished = nxt == EOS_ID
            else:
                finished |= nxt == EOS_ID
            if mistake == "stops at the first row" and finished.any():
                break
            if finished.all() and mistake != "never stops early":
                break
    return out


def greedy_no_eval(model, src, max_len=None, use_cache=False, stop_at_eos=True):
    """No model.eval(): dropout stays on when the caller is in training mode."""
    return _greedy(model, src, max_len, stop_at_eos, mistake="no eval")


def greedy_eval_not_undone(model, src, max_len=None, use_cache=False, stop_at_eos=True):
    """model.eval() and never the caller's mode back: a training loop goes on without dropout."""
    return _greedy(model, src, max_len, stop_at_eos, mistake="eval not undone")


def greedy_train_at_end(model, src, max_len=None, use_cache=False, stop_at_eos=True):
    """model.train() at the end, whatever the caller's mode was."""
    return _greedy(model, src, max_len, stop_at_eos, mistake="train at the end")


def greedy_no_padding(model, src, max_len=None, use_cache=False, stop_at_eos=True):
    """A finished row keeps emitting tokens after its <eos> (no <pad>)."""
    return _greedy(model, src, max_len, stop_at_eos, mistake="no padding")


def greedy_stops_at_first_row(model, src, max_len=None, use_cache=False, stop_at_eos=True):
    """finished.any() where finished.all() is meant: the batch stops with its first <eos>."""
    return _greedy(model, src, max_len, stop_at_eos, mistake="stops at the first row")


def greedy_starts_with_pad(model, src, max_len=None, use_cache=False, stop_at_eos=True):
    """torch.zeros for the first column: the decoder starts from <pad>, not <bos>."""
    return _greedy(model, src, max_len, stop_at_eos, mistake="starts with pad")


def greedy_argmax_over_positions(model, src, max_len=None, use_cache=False, stop_at_eos=True):
    """logits.argmax(1) on [B, t, V]: the argmax over the positions, not the vocabulary."""
    return _greedy(model, src, max_len, stop_at_eos, mistake="argmax over positions")


def greedy_max_len_plus_one(model, src, max_len=None, use_cache=False, stop_at_eos=True):
    """range(max_len) steps: max_len + 1 tokens with <bos>, one more than asked."""
    return _greedy(model, src, max_len, stop_at_eos, mistake="max_len + 1")


def greedy_first_position(model, src, max_len=None, use_cache=False, stop_at_eos=True):
    """logits[:, 0]: the first position's prediction at every step, not the newest one's."""
    return _greedy(model, src, max_len, stop_at_eos, mistake="first position")


def greedy_never_stops_early(model, src, max_len=None, use_cache=False, stop_at_eos=True):
    """Finished rows are padded, but the loop always runs to max_len."""
    return _greedy(model, src, max_len, stop_at_eos, mistake="never stops early")


def greedy_eos_overwritten(model, src, max_len=None, use_cache=False, stop_at_eos=True):
    """`finished` updated before the fill: a row's <eos> is overwritten by <pad>."""
    return _greedy(model, src, max_len, stop_at_eos, mistake="eos overwritten")


def greedy_padded_with_eos(model, src, max_len=None, use_cache=False, stop_at_eos=True):
    """Finished rows filled with <eos>, not <pad>."""
    return _greedy(model, src, max_len, stop_at_eos, mistake="padded with eos")


def greedy_finished_forgotten(model, src, max_len=None, use_cache=False, stop_at_eos=True):
    """finished = nxt == EOS_ID, not |=: a row counts as finished for one step only."""
    return _greedy(model, src, max_len, stop_at_eos, mistake="finished forgotten")


def greedy_no_finally(model, src, max_len=None, use_cache=False, stop_at_eos=True):
    """The caller's mode given back after the loop, not in a finally: an error skips it."""
    return _greedy(model, src, max_len, stop_at_eos, mistake="no finally")


GREEDY = {
    # mistake -> a fragment of the message check_greedy_decode gives it
    greedy_no_eval: "dropout was on while you decoded",
    greedy_eval_not_undone: "is in eval mode after it",
    greedy_train_at_end: "switched to training mode whatever the caller's mode was",
    greedy_no_padding: "overwrite its next tokens with <pad>",
    greedy_stops_at_first_row: "stopped when the first row finished",
    greedy_starts_with_pad: "not <bos>",
    greedy_argmax_over_positions: "argmax over the positions",
    greedy_max_len_plus_one: "one token longer than max_len allows",
    greedy_first_position: "logits of the first position",
    greedy_never_stops_early: "after every row had finished",
    greedy_eos_overwritten: "the <eos> itself became <pad>",
    greedy_padded_with_eos: "you filled finished rows with <eos>",
    greedy_finished_forgotten: "a row is finished for one step only",
    greedy_no_finally: "the line that gives the mode back was",
}


@torch.no_grad()
def _beam(model, src, k, *, mistake=None):
    """The book's solution to exercise 11.3, but for `mistake`."""
    was_training = model.training
    if mistake != "no eval":
        model.eval()
    memory, src_mask = model.encode(src)
    beams = [([BOS_ID], 0.0)]  # (tokens, score)
    for _ in range(model.max_len - 1):
        if all(seq[-1] == EOS_ID for seq, _ in beams):
            break
        candidates = []
        for seq, score in beams:
            if seq[-1] == EOS_ID and mistake != "extends finished":
                candidates.append((seq, score))
                continue
            logits, _ = model.decode(torch.tensor([seq]), memory, src_mask, need_weights=False)
            logp = logits[0, -1].log_softmax(-1)
            step = {"probabilities added": logp.exp(), "logits added": logits[0, -1]}.get(
                mistake, logp
            )
            n = 1 if mistake == "one token per beam" and len(seq) > 1 else k
            top = step.topk(n)
            for s, tok in zip(top.values.tolist(), top.indices.tolist()):
                new = s if mistake == "last token only" else score + s
                if mistake == "mean log-probability":
                    new = (score * (len(seq) - 1) + s) / len(seq)
                candidates.append((seq + [tok], new))
        beams = sorted(candidates, key=lambda c: c[1], reverse=True)[:k]
    best = beams[-1][0] if mistake == "last beam returned" else max(beams, key=lambda c: c[1])[0]
    if mistake not in ("eval not undone", "no eval"):
        model.train(was_training)
    out = torch.tensor([best])
    return out[:, 1:] if mistake == "no bos" else out


def beam_no_eval(model, src, k):
    """No model.eval(): dropout stays on when the caller is in training mode."""
    return _beam(model, src, k, mistake="no eval")


def beam_eval_not_undone(model, src, k):
    """model.eval() and never the caller's mode back."""
    return _beam(model, src, k, mistake="eval not undone")


def beam_width_ignored(model, src, k):
    """k never used: a beam of width 1 (greedy decoding) whatever k is."""
    return _beam(model, src, 1)


def beam_last_token_only(model, src, k):
    """Hypotheses ranked by the last token's log-probability, not the sequence's."""
    return _beam(model, src, k, mistake="last token only")


def beam_probabilities_added(model, src, k):
    """Scores add the tokens' probabilities (softmax) instead of their log-probabilities."""
    return _beam(model, src, k, mistake="probabilities added")


def beam_logits_added(model, src, k):
    """Scores add raw logits: no log_softmax."""
    return _beam(model, src, k, mistake="logits added")


def beam_one_token_per_beam(model, src, k):
    """Top-k per beam only: after the first step each hypothesis keeps its own best token."""
    return _beam(model, src, k, mistake="one token per beam")


def beam_extends_finished(model, src, k):
    """A hypothesis that produced <eos> is extended like the live ones."""
    return _beam(model, src, k, mistake="extends finished")


def beam_mean_log_probability(model, src, k):
    """Length normalisation where the exercise asks for the sum: ranked by the mean."""
    return _beam(model, src, k, mistake="mean log-probability")


def beam_last_beam_returned(model, src, k):
    """The last of the sorted final beam (the least probable), not the best."""
    return _beam(model, src, k, mistake="last beam returned")


def beam_no_bos(model, src, k):
    """The sequence returned without its <bos>."""
    return _beam(model, src, k, mistake="no bos")


BEAM = {
    # mistake -> a fragment of the message check_beam_search gives it
    beam_no_eval: "dropout was on while you decoded",
    beam_eval_not_undone: "in eval mode after it",
    beam_width_ignored: "greedy decoding's sequence, as if k were 1",
    beam_last_token_only: "last token's log-probability",
    beam_probabilities_added: "add log-probabilities (log_softmax), not probabilities",
    beam_logits_added: "you added raw logits",
    beam_one_token_per_beam: "the beam never branches again",
    beam_extends_finished: "follow the first <eos>",
    beam_mean_log_probability: "mean log-probability per token",
    beam_last_beam_returned: "the least probable one",
    beam_no_bos: "expected <bos>",
}
