"""Property tests of the evaluation helpers: every way the book counts exactly right sequences
agrees with a plain Python definition, on predictions built to be wrong in chosen places.

The definition (chapters 10 and 11): a sequence is right when the prediction equals the
target at every position up to and including the target's first <eos>; what comes after it
does not count. A helper that stopped one position early (missing a wrong <eos>), counted
padding, or depended on the batch size or the trimming of padding columns fails here.
"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers import EOS_ID, PAD_ID, VOCAB_SIZE, exact_match_with_interval, make_reversal_dataset
from helpers.decoding.greedy import sequences_equal
from helpers.training.distributed import DistInfo, sharded_exact_match
from helpers.training.train import sequence_correct, teacher_forced_exact_match


def reference_correct(pred: list[int], tgt: list[int]) -> bool:
    """The definition, one row at a time (pred shorter than tgt counts as <pad> after it)."""
    pred = pred + [PAD_ID] * (len(tgt) - len(pred))
    end = tgt.index(EOS_ID) if EOS_ID in tgt else len(tgt) - 1
    return pred[: end + 1] == tgt[: end + 1]


def corrupt(tgt: torch.Tensor, seed: int) -> torch.Tensor:
    """Predictions equal to tgt except, per row, one of: nothing; a wrong token before <eos>;
    a wrong <eos> itself; garbage after <eos>; an early <eos>."""
    g = torch.Generator().manual_seed(seed)
    pred = tgt.clone()
    for r in range(tgt.size(0)):
        row = tgt[r].tolist()
        end = row.index(EOS_ID) if EOS_ID in row else len(row) - 1
        kind = int(torch.randint(5, (1,), generator=g))
        pos = int(torch.randint(end + 1, (1,), generator=g))
        if kind == 1:
            pred[r, pos] = 3 + (pred[r, pos] - 2) % 10  # another digit (or a digit for <bos>)
        elif kind == 2:
            pred[r, end] = 3 + int(torch.randint(10, (1,), generator=g))
        elif kind == 3 and end + 1 < len(row):
            pred[r, end + 1 :] = torch.randint(3, 13, (len(row) - end - 1,), generator=g)
        elif kind == 4 and pos < end:
            pred[r, pos] = EOS_ID
    return pred


def one_hot_logits(tokens: torch.Tensor) -> torch.Tensor:
    return F.one_hot(tokens, VOCAB_SIZE).float() * 5.0


@pytest.fixture(scope="module")
def data():
    src, tgt = make_reversal_dataset(400, seed=11)
    # one row per distinct source, so that a source identifies its prediction
    seen, keep = set(), []
    for i, row in enumerate(src.tolist()):
        if tuple(row) not in seen:
            seen.add(tuple(row))
            keep.append(i)
    src, tgt = src[keep], tgt[keep]
    pred_out = corrupt(tgt[:, 1:], seed=3)
    want = [reference_correct(p, t) for p, t in zip(pred_out.tolist(), tgt[:, 1:].tolist())]
    assert 0.1 < sum(want) / len(want) < 0.9  # both kinds of rows are there
    return src, tgt, pred_out, want


class Oracle(nn.Module):
    """A 'model' that answers each source with a chosen prediction (teacher-forced logits)."""

    def __init__(self, src, pred_out):
        super().__init__()
        self.table = {self.key(s): p for s, p in zip(src, pred_out)}
        self.dummy = nn.Parameter(torch.zeros(()))  # helpers ask for next(parameters())

    @staticmethod
    def key(s):
        return tuple(t for t in s.tolist() if t != PAD_ID)

    def forward(self, src, tgt_in):
        rows = [self.table[self.key(s)][: tgt_in.size(1)] for s in src]
        return one_hot_logits(torch.stack(rows)) + 0 * self.dummy


def test_sequence_correct_and_sequences_equal_follow_the_definition(data):
    _, tgt, pred_out, want = data
    got = sequence_correct(one_hot_logits(pred_out), tgt[:, 1:])
    assert got.tolist() == want
    assert sequences_equal(pred_out, tgt[:, 1:]).tolist() == want


@pytest.mark.parametrize("cut", [1, 3])
def test_sequences_equal_pads_a_short_prediction(data, cut):
    _, tgt, pred_out, _ = data
    short = pred_out[:, :-cut]
    want = [reference_correct(p, t) for p, t in zip(short.tolist(), tgt[:, 1:].tolist())]
    assert sequences_equal(short, tgt[:, 1:]).tolist() == want


@pytest.mark.parametrize("batch_size", [1, 7, 1000])
def test_every_teacher_forced_count_is_the_definitions(data, batch_size):
    src, tgt, pred_out, want = data
    model = Oracle(src, pred_out).train()
    n = sum(want)
    assert teacher_forced_exact_match(model, src, tgt, batch_size=batch_size) == n / len(want)
    interval = exact_match_with_interval(model, src, tgt, batch_size=batch_size)
    assert interval.correct == n and interval.n == len(want)
    assert interval.low <= n / len(want) <= interval.high
    assert model.training  # every helper gives the caller's mode back
    info = DistInfo(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
    assert sharded_exact_match(model, src, tgt, info) == n / len(want)  # after trimming
    assert model.training


def test_sharded_counts_add_up_over_ranks(data, monkeypatch):
    """Each rank scores every world_size-th sequence; the sum over ranks is the whole count."""
    import helpers.training.distributed as d

    src, tgt, pred_out, want = data
    model = Oracle(src, pred_out)
    seen = []
    monkeypatch.setattr(d, "all_reduce_sum", lambda t: seen.append(t.clone()) or t)
    for rank in range(3):
        info = DistInfo(rank=rank, world_size=3, local_rank=rank, device=torch.device("cpu"))
        sharded_exact_match(model, src, tgt, info)
    correct = sum(float(t[0]) for t in seen)
    total = sum(float(t[1]) for t in seen)
    assert (correct, total) == (sum(want), len(want))
