"""Exercise 11.2's, 11.3's and 11.4's checkers accept the book's solutions and reject the usual
slips; each mistake of tests/mistakes_ch11.py is named with its own message."""

import math
import re
from statistics import NormalDist

import mistakes_ch11 as mistakes
import pytest
import torch

from helpers import BOS_ID, EOS_ID, PAD_ID, greedy_decode, make_reversal_dataset
from helpers.decoding.greedy import restores_mode
from helpers.exercises import (
    ExerciseError,
    check_beam_search,
    check_greedy_decode,
    check_wilson_interval,
)


@restores_mode
@torch.no_grad()
def beam_search(model, src, k):
    """The book's solution to exercise 11.3."""
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
            top = logits[0, -1].log_softmax(-1).topk(k)
            for lp, tok in zip(top.values.tolist(), top.indices.tolist()):
                candidates.append((seq + [tok], score + lp))
        beams = sorted(candidates, key=lambda c: c[1], reverse=True)[:k]
    return torch.tensor([max(beams, key=lambda c: c[1])[0]])


def test_solution_passes(capsys):
    check_beam_search(beam_search)
    assert "check_beam_search: all 36 checks passed" in capsys.readouterr().out


@pytest.mark.parametrize("mistake", list(mistakes.BEAM), ids=lambda f: f.__name__)
def test_each_beam_search_mistake_is_named(mistake):
    with pytest.raises(ExerciseError, match=re.escape(mistakes.BEAM[mistake])):
        check_beam_search(mistake)


def test_the_beam_search_mistakes_get_different_messages():
    assert len(set(mistakes.BEAM.values())) == len(mistakes.BEAM)


@torch.no_grad()
def greedy(model, src, max_len):
    """The book's solution to exercise 11.4."""
    was_training = model.training
    model.eval()
    try:
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), BOS_ID)
        finished = torch.zeros(src.size(0), dtype=torch.bool)
        for _ in range(max_len - 1):
            logits = model.decode(out, memory, src_mask, need_weights=False)[0]
            nxt = logits[:, -1].argmax(-1).masked_fill(finished, PAD_ID)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == EOS_ID
            if finished.all():
                break
    finally:
        model.train(was_training)
    return out


def test_greedy_solution_passes(capsys):
    check_greedy_decode(greedy)
    assert "check_greedy_decode: all 5 checks passed" in capsys.readouterr().out


def test_greedy_with_the_encoder_rerun_at_every_step_passes(capsys):
    """Not a mistake: model(src, prefix) re-runs the encoder each step, with the same tokens."""

    @restores_mode
    @torch.no_grad()
    def rerun(model, src, max_len):
        model.eval()
        out = torch.full((src.size(0), 1), BOS_ID)
        finished = torch.zeros(src.size(0), dtype=torch.bool)
        for _ in range(max_len - 1):
            nxt = model(src, out)[:, -1].argmax(-1).masked_fill(finished, PAD_ID)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == EOS_ID
            if finished.all():
                break
        return out

    check_greedy_decode(rerun)
    assert "all 5 checks passed" in capsys.readouterr().out


def test_greedy_with_the_kv_cache_passes(capsys):
    check_greedy_decode(lambda model, src, max_len: greedy_decode(model, src, max_len, True))
    assert "all 5 checks passed" in capsys.readouterr().out


@pytest.mark.parametrize("mistake", list(mistakes.GREEDY), ids=lambda f: f.__name__)
def test_each_greedy_mistake_is_named(mistake):
    with pytest.raises(ExerciseError, match=re.escape(mistakes.GREEDY[mistake])):
        check_greedy_decode(mistake)


def test_the_greedy_mistakes_get_different_messages():
    assert len(set(mistakes.GREEDY.values())) == len(mistakes.GREEDY)


def test_greedy_checker_inputs_separate_the_mistakes():
    """The inputs the checker relies on: rows that finish at different steps with max_len 10,
    rows that do not finish with max_len 5, and no near-tie that float noise could flip."""
    from helpers.exercises.ch11 import _greedy_models

    src, _ = make_reversal_dataset(6, seed=111, min_len=2, max_len=8)
    for model in _greedy_models():
        full, short = greedy_decode(model, src, 10), greedy_decode(model, src, 5)
        ends = [int((row == EOS_ID).nonzero()[0, 0]) for row in full]
        assert full.size(1) < 10 and len(set(ends)) >= 3
        assert not (short == EOS_ID).any(1).all()
        with torch.no_grad():
            memory, src_mask = model.encode(src)
            logits = model.decode(full[:, :-1], memory, src_mask, need_weights=False)[0]
        top2 = logits.topk(2, -1).values
        assert ((top2[..., 0] - top2[..., 1])[full[:, 1:] != PAD_ID] > 0.05).all()


@pytest.mark.parametrize("check", [check_greedy_decode, check_beam_search])
def test_the_decoding_checkers_leave_the_callers_random_state_alone(check):
    solution = greedy if check is check_greedy_decode else beam_search
    torch.manual_seed(5)
    before = torch.rand(3)
    torch.manual_seed(5)
    check(solution)
    assert torch.equal(torch.rand(3), before)


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


def test_negative_z_is_rejected():
    def negative_z(correct, n, confidence):
        z = NormalDist().inv_cdf(confidence / 2)  # below 0.5: z < 0, low and high swapped
        p = correct / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
        return centre - half, centre + half

    with pytest.raises(ExerciseError, match="low bound is above your high bound"):
        check_wilson_interval(negative_z)
