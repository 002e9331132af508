"""Checkers for the exercises of chapter 23 (distributed data parallel).

check_shard_indices(fn)   fn(n, world_size, rank, seed, epoch) -> list of int: the indices
                          DistributedSampler(shuffle=True, drop_last=False) gives that rank.
check_rank_loss(fn)       fn(loss_sum, rank_tokens, global_tokens, world_size) -> the loss a rank
                          backpropagates so that DDP's averaged gradient is the gradient of the
                          whole batch's mean token loss.

The first compares with torch's own DistributedSampler; the second simulates the ranks of one
process group in one process (each rank's gradient, then DDP's average over the ranks) on a
small model and compares with one process on the whole batch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.data.distributed import DistributedSampler

from helpers.core.data import make_reversal_dataset
from helpers.core.model import Transformer
from helpers.core.vocab import PAD_ID, VOCAB_SIZE

from ._common import call, expect_close, fail, passed

__all__ = ["check_shard_indices", "check_rank_loss"]

# (n, world_size, rank, seed, epoch): even splits, padding, another epoch, more ranks than
# samples
_SHARD_CASES = (
    (10, 2, 0, 0, 0),
    (10, 2, 1, 0, 0),
    (10, 3, 2, 0, 0),
    (10, 3, 0, 5, 1),
    (7, 4, 3, 1, 2),
    (2, 4, 3, 0, 0),
)


def _sampler_indices(n, world_size, rank, seed, epoch) -> list:
    s = DistributedSampler(range(n), num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
    s.set_epoch(epoch)
    return list(s)


def _shard_hint(got: list, n, world_size, rank, seed, epoch) -> str:
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch)).tolist()
    per = -(-n // world_size)
    padded = (perm * (per * world_size // n + 1))[: per * world_size]
    if got == padded[rank * per : (rank + 1) * per]:
        return (
            "rank r took a contiguous block of the permutation; DistributedSampler gives rank r "
            "every world_size-th index: positions r, r + world_size, r + 2 world_size, ..."
        )
    if epoch and got == _sampler_indices(n, world_size, rank, seed, 0):
        return "the epoch is ignored: seed the generator with seed + epoch (what set_epoch does)"
    if (
        got == list(range(n))[rank::world_size]
        or got == list(range(per * world_size))[rank::world_size]
    ):
        return "no shuffle: permute 0..n-1 with torch.randperm(n, generator=...) first"
    if len(got) < per:
        return (
            f"every rank must get ceil(n / world_size) = {per} indices: pad the permutation to "
            f"{per * world_size} by repeating its first indices, then take every "
            "world_size-th one"
        )
    return (
        "use torch.Generator().manual_seed(seed + epoch) and torch.randperm(n, generator=g), "
        "pad by repeating the first indices, then take positions rank, rank + world_size, ..."
    )


def check_shard_indices(shard_indices) -> None:
    """Exercise 23.2: compare shard_indices(n, world_size, rank, seed, epoch) with
    DistributedSampler."""
    for n, world_size, rank, seed, epoch in _SHARD_CASES:
        where = f"n={n}, world_size={world_size}, rank={rank}, seed={seed}, epoch={epoch}"
        got = call(shard_indices, n, world_size, rank, seed, epoch, where=where)
        try:
            got = [int(i) for i in got]
        except (TypeError, ValueError):
            fail(f"expected a list of ints, got {type(got).__name__}", where)
        expected = _sampler_indices(n, world_size, rank, seed, epoch)
        if got != expected:
            fail(
                f"got {got}, DistributedSampler gives {expected}",
                where,
                _shard_hint(got, n, world_size, rank, seed, epoch),
            )
    passed("check_shard_indices", len(_SHARD_CASES))


def _model() -> Transformer:
    torch.manual_seed(200)
    return Transformer(
        VOCAB_SIZE,
        VOCAB_SIZE,
        d_model=16,
        num_heads=2,
        dff=32,
        num_layers=1,
        max_len=14,
        dropout=0.0,
    )


def _batch():
    # 12 sequences of very different lengths: the ranks hold different numbers of tokens
    src, tgt = make_reversal_dataset(12, seed=20, min_len=1, max_len=12)
    return src, tgt


def _whole_batch_grads(model, src, tgt) -> torch.Tensor:
    model.zero_grad()
    logits = model(src, tgt[:, :-1])
    loss = F.cross_entropy(
        logits.reshape(-1, logits.size(-1)), tgt[:, 1:].reshape(-1), ignore_index=PAD_ID
    )
    loss.backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def _ddp_grads(model, src, tgt, world_size, rank_loss, where) -> torch.Tensor:
    """Each rank's gradient of rank_loss(...) on its rows, then DDP's average over the ranks."""
    per = src.size(0) // world_size
    tokens = [(tgt[r * per : (r + 1) * per, 1:] != PAD_ID).sum() for r in range(world_size)]
    global_tokens = torch.stack(tokens).sum()
    grads = []
    for r in range(world_size):
        s, t = src[r * per : (r + 1) * per], tgt[r * per : (r + 1) * per]
        model.zero_grad()
        logits = model(s, t[:, :-1])
        loss_sum = F.cross_entropy(
            logits.reshape(-1, logits.size(-1)),
            t[:, 1:].reshape(-1),
            ignore_index=PAD_ID,
            reduction="sum",
        )
        loss = call(rank_loss, loss_sum, tokens[r], global_tokens, world_size, where=where)
        if not isinstance(loss, torch.Tensor) or loss.dim() != 0 or not loss.requires_grad:
            fail(
                "rank_loss must return a scalar tensor that still carries loss_sum's graph",
                where,
                "compute it from loss_sum with tensor arithmetic (no .item(), no float())",
            )
        loss.backward()
        grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
    return torch.stack(grads).sum(0) / world_size  # what DDP's all-reduce leaves in .grad


def check_rank_loss(rank_loss) -> None:
    """Exercise 23.3: simulate DDP on 2, 3 and 4 ranks with the reader's rank_loss; compare with
    one process."""
    model, (src, tgt) = _model(), _batch()
    expected = _whole_batch_grads(model, src, tgt)
    checks = 0
    for world_size in (2, 3, 4):
        where = f"{world_size} ranks of {src.size(0) // world_size} sequences each"
        got = _ddp_grads(model, src, tgt, world_size, rank_loss, where)
        ratio = float(got.norm() / expected.norm())
        if abs(ratio * world_size - 1) < 1e-3:
            hint = (
                f"the gradient is {world_size} times too small: DDP divides the summed "
                "gradients by world_size, so each rank's loss must be multiplied by it"
            )
        elif abs(ratio - world_size) < 1e-3:
            hint = "the gradient is world_size times too large: multiply by world_size once"
        else:
            hint = (
                "is this each rank's own mean (loss_sum / rank_tokens)? The ranks hold different "
                "numbers of tokens, so the mean of their means is not the mean over the whole "
                "batch: divide by global_tokens"
            )
        expect_close(
            "averaged gradient", got, expected, atol=1e-6, rtol=1e-4, where=where, hint=hint
        )
        checks += 1
    passed("check_rank_loss", checks)
