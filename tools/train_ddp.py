#!/usr/bin/env python3
"""Train the reversal model data-parallel: one process per rank, started by torchrun.

    python -m torch.distributed.run --standalone --nproc_per_node=2 tools/train_ddp.py \\
        --out /tmp/ddp [--seed 0] [--threads 1] [--log-every 50] [--max-steps N] [--dropout P]
    python -m torch.distributed.run --standalone --nproc_per_node=2 tools/train_ddp.py \\
        --out /tmp/ddp --one-step          # one step on a fixed batch (chapter 23's proof)

Every rank runs this file; the logic is in helpers.training.distributed. Rank 0 prints the log,
writes OUT/model.pt (the checkpoint), OUT/grads.pt (--one-step: the all-reduced gradients)
and OUT/result.json (what every rank saw, gathered over the process group); every rank also
writes OUT/rank<r>.json on its own machine. A bad launch (no torchrun, one process, a port in
use) stops with one line that says what to do, and exit status 2. Built in chapter 23.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

T_START = time.perf_counter()  # before torch is imported: start-up is part of the cost

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from helpers.training.distributed import (  # noqa: E402
    LaunchError,
    bucket_demo,
    init_distributed,
    one_step_ddp,
    replicas_max_diff,
    save_on_rank0,
    train_reversal_ddp,
)
from helpers.training.recipes import BOOK_RECIPE  # noqa: E402

ONE_STEP_ROWS = 64  # the fixed global batch of --one-step: rows 0..63 of the training set


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for the checkpoint and the result")
    p.add_argument("--seed", type=int, default=0, help="the recipe's seed (weights, batch order)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--log-every", type=int, default=50, help="rank 0 logs every N steps")
    p.add_argument("--one-step", action="store_true", help="one step on a fixed global batch")
    p.add_argument("--bucket-cap-mb", type=float, default=None, help="DDP's bucket size")
    p.add_argument("--max-steps", type=int, default=None, help="train exactly N steps")
    p.add_argument("--dropout", type=float, default=None, help="override the recipe's dropout")
    args = p.parse_args()
    try:
        info = init_distributed()
    except LaunchError as err:
        print(f"train_ddp.py: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    t_joined = time.perf_counter()
    torch.set_num_threads(args.threads)
    cfg = dataclasses.replace(BOOK_RECIPE, seed=args.seed, threads=args.threads)
    if args.max_steps is not None:  # a fixed number of steps, no early stop (the tests' runs)
        cfg = dataclasses.replace(
            cfg, max_steps=args.max_steps, cooldown=0, target_exact_match=None
        )
    if args.dropout is not None:
        cfg = dataclasses.replace(cfg, dropout=args.dropout)
    out = __import__("pathlib").Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    mine = {"rank": info.rank, "world_size": info.world_size, "threads": args.threads}
    if args.one_step:
        from helpers import make_reversal_dataset

        src, tgt = make_reversal_dataset(ONE_STEP_ROWS, seed=cfg.data_seed)
        model, grads, loss = one_step_ddp(cfg, src, tgt)
        mine.update(loss=loss, rows=ONE_STEP_ROWS // info.world_size)
        mine["replicas_max_diff"] = replicas_max_diff(model)
        written = save_on_rank0(model, cfg, out / "model.pt", info)
        mine["wrote_checkpoint"] = written is not None
        if info.is_main:
            torch.save({"grads": grads, "loss": loss}, out / "grads.pt")
        if args.bucket_cap_mb:
            mine["buckets"] = bucket_demo(cfg, src, tgt, args.bucket_cap_mb)
    else:
        res = train_reversal_ddp(cfg, checkpoint=out / "model.pt", log_every=args.log_every)
        h = res.history
        mine.update(
            steps=h["step"][-1],
            exact_match=h["exact_match"][-1],
            train_seconds=round(res.seconds, 3),
            ms_per_step=round(1000 * res.step_seconds, 2),
            final_rank_loss=h["rank_loss"][-1],
            wrote_checkpoint=res.checkpoint is not None,
            stream_seed=res.stream_seed,
        )
        if info.is_main:
            mine["loss"] = [round(x, 5) for x in h["loss"]]
            mine["rank_loss"] = h["rank_loss"]
            mine.update(eval_step=h["eval_step"], eval_exact_match=h["exact_match"])
    mine["startup_seconds"] = round(t_joined - T_START, 3)
    mine["seconds_in_script"] = round(time.perf_counter() - T_START, 3)
    (out / f"rank{info.rank}.json").write_text(json.dumps(mine) + "\n")
    # gathered over the process group, not read back from the files: on several machines rank
    # 0 cannot see the other machines' folders
    ranks = [None] * info.world_size
    dist.all_gather_object(ranks, mine)
    if info.is_main:
        (out / "result.json").write_text(json.dumps(ranks) + "\n")
        for r in ranks:
            keys = ("rows", "loss") if args.one_step else ("steps", "exact_match", "ms_per_step")
            what = ", ".join(f"{k} {r[k]}" for k in keys)
            print(f"rank {r['rank']}: {what}, started in {r['startup_seconds']:.1f} s", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
