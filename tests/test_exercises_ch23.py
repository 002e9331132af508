"""The chapter 23 checkers accept the book's solutions and reject plausible wrong answers."""

import pytest
import torch

from helpers.exercises import check_rank_loss, check_shard_indices
from helpers.exercises._common import ExerciseError


def shard_indices(n, world_size, rank, seed, epoch):
    g = torch.Generator().manual_seed(seed + epoch)
    perm = torch.randperm(n, generator=g).tolist()
    per = -(-n // world_size)  # ceil(n / world_size)
    while len(perm) < per * world_size:  # pad by repeating the first indices
        perm += perm[: per * world_size - len(perm)]
    return perm[rank : per * world_size : world_size]


def test_shard_indices_solution_passes(capsys):
    check_shard_indices(shard_indices)
    assert "check_shard_indices: all 6 checks passed" in capsys.readouterr().out


def test_shard_indices_contiguous_block_is_rejected():
    def contiguous(n, world_size, rank, seed, epoch):
        perm = shard_indices(n, 1, 0, seed, epoch)
        per = -(-n // world_size)
        padded = (perm * world_size)[: per * world_size]
        return padded[rank * per : (rank + 1) * per]

    with pytest.raises(ExerciseError, match="contiguous block"):
        check_shard_indices(contiguous)


def test_shard_indices_ignoring_the_epoch_is_rejected():
    def no_epoch(n, world_size, rank, seed, epoch):
        return shard_indices(n, world_size, rank, seed, 0)

    with pytest.raises(ExerciseError, match="the epoch is ignored"):
        check_shard_indices(no_epoch)


def test_shard_indices_without_padding_is_rejected():
    def no_padding(n, world_size, rank, seed, epoch):
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch)).tolist()
        return perm[rank::world_size]

    with pytest.raises(ExerciseError, match="pad the permutation"):
        check_shard_indices(no_padding)


def rank_loss(loss_sum, rank_tokens, global_tokens, world_size):
    return loss_sum * world_size / global_tokens


def test_rank_loss_solution_passes(capsys):
    check_rank_loss(rank_loss)
    assert "check_rank_loss: all 3 checks passed" in capsys.readouterr().out


def test_rank_loss_mean_of_means_is_rejected():
    with pytest.raises(ExerciseError, match="mean of their means"):
        check_rank_loss(lambda loss_sum, rank_tokens, global_tokens, w: loss_sum / rank_tokens)


def test_rank_loss_without_world_size_is_rejected():
    with pytest.raises(ExerciseError, match="2 times too small"):
        check_rank_loss(lambda loss_sum, rank_tokens, global_tokens, w: loss_sum / global_tokens)


def test_rank_loss_detached_is_rejected():
    with pytest.raises(ExerciseError, match="still carries loss_sum's graph"):
        check_rank_loss(lambda s, r, g, w: torch.tensor(float(s.detach()) * w / float(g)))
