"""Exercise 11.2's and 11.3's checkers accept the book's solutions and reject the usual slips."""

import math
from statistics import NormalDist

import pytest
import torch

from helpers import BOS_ID, EOS_ID, greedy_decode
from helpers.decoding import restores_mode
from helpers.exercises import ExerciseError, check_beam_search, check_wilson_interval


@restores_mode
@torch.no_grad()
def beam_search(model, src, k, score_last_only=False, eval_inside=True):
    """The book's solution to exercise 11.3 (with switches for two common mistakes)."""
    if eval_inside:
        model.eval()
    memory, src_mask = model.encode(src)
    beams = [([BOS_ID], 0.0)]
    for _ in range(model.max_len - 1):
        if all(seq[-1] == EOS_ID for seq, _ in beams):
            break
        candidates = []
        for seq, score in beams:
            if seq[-1] == EOS_ID:
                candidates.append((seq, score))  # finished: keeps its score
                continue
            logits, _ = model.decode(torch.tensor([seq]), memory, src_mask, need_weights=False)
            logp = logits[0, -1].log_softmax(-1)
            top = logp.topk(k)
            for lp, tok in zip(top.values.tolist(), top.indices.tolist()):
                candidates.append((seq + [tok], lp if score_last_only else score + lp))
        beams = sorted(candidates, key=lambda c: c[1], reverse=True)[:k]
    best = max(beams, key=lambda c: c[1])[0]
    return torch.tensor([best])


def test_solution_passes(capsys):
    check_beam_search(beam_search)
    assert "check_beam_search: all 36 checks passed" in capsys.readouterr().out


def test_mode_not_given_back_is_rejected():
    def keeps_eval(model, src, k):  # switches dropout off, never switches it back on
        model.eval()
        return beam_search(model, src, k)

    with pytest.raises(ExerciseError, match="in eval mode after it"):
        check_beam_search(keeps_eval)


def test_dropout_left_on_is_rejected():
    def in_callers_mode(model, src, k):  # decodes with dropout on when called in training mode
        return beam_search(model, src, k, eval_inside=False)

    with pytest.raises(ExerciseError, match="dropout was on while you decoded"):
        check_beam_search(in_callers_mode)


def test_greedy_for_every_k_is_rejected():
    with pytest.raises(ExerciseError, match="keep the 2 best partial sequences"):
        check_beam_search(lambda model, src, k: greedy_decode(model, src))


def test_ranking_by_the_last_token_is_rejected():
    with pytest.raises(ExerciseError, match="SUM of their tokens' log-probabilities"):
        check_beam_search(lambda model, src, k: beam_search(model, src, k, score_last_only=True))


def test_missing_bos_is_rejected():
    with pytest.raises(ExerciseError, match="expected <bos>"):
        check_beam_search(lambda model, src, k: beam_search(model, src, k)[:, 1:])


def test_junk_after_eos_is_rejected():
    def junk(model, src, k):
        out = beam_search(model, src, k)
        if out[0, -1] == EOS_ID and out.size(1) < model.max_len:  # keeps writing after <eos>
            out = torch.cat([out, torch.full((1, 1), EOS_ID + 1)], dim=1)
        return out

    with pytest.raises(ExerciseError, match="follow the first <eos>"):
        check_beam_search(junk)


def wilson(correct, n, confidence):
    """The book's solution to exercise 11.2."""
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


def test_wilson_solution_passes(capsys):
    check_wilson_interval(wilson)
    assert "all 5 checks passed" in capsys.readouterr().out


def test_wald_is_rejected():
    def wald(correct, n, confidence):
        z = NormalDist().inv_cdf(0.5 + confidence / 2)
        p = correct / n
        return p - z * math.sqrt(p * (1 - p) / n), p + z * math.sqrt(p * (1 - p) / n)

    with pytest.raises(ExerciseError, match="Wald interval"):
        check_wilson_interval(wald)


def test_one_sided_quantile_is_rejected():
    def one_sided(correct, n, confidence):
        z = NormalDist().inv_cdf(confidence)
        p = correct / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
        return centre - half, centre + half

    with pytest.raises(ExerciseError, match="one-sided quantile"):
        check_wilson_interval(one_sided)


def test_fixed_z_is_rejected():
    def fixed(correct, n, confidence):
        return wilson(correct, n, 0.95)

    with pytest.raises(ExerciseError, match="(fixed at 1.96|confidence 0.9)"):
        check_wilson_interval(fixed)
