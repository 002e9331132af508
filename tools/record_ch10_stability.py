#!/usr/bin/env python3
"""How much higher the book's learning rate can go before training slows down or fails:
chapter 10's recorded sweep.

    python tools/record_ch10_stability.py         # ~10 min -> chapters/data/ch10_stability.json
    python tools/record_ch10_stability.py --keep  # train only the runs the file lacks

Trains helpers.BOOK_RECIPE from scratch with its peak learning rate multiplied by lr_scale in
0.5, 1, 1.5, 2, 3 and 4 (the `lr_scale` field of TrainConfig multiplies the whole schedule), once
for each of the seeds 0, 1, 2 (the seed sets the initial weights and the batch order; the data is
the same). For every run it stores whether and when the run reached the recipe's target on the
validation set, and the per-step curves of the training batch's exact match and loss (rounded),
so that chapter 10 can plot them and measure each run's fall after the warmup. Step counts
and accuracies only: no timing is recorded (the machine may be shared). With --keep, runs already
in the file for the same recipe are kept (training is deterministic on one machine and thread
count, so a rerun would give the same curves) and only the missing ones are trained.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "chapters" / "data" / "ch10_stability.json"

from helpers.numerics import provenance  # noqa: E402
from helpers.recipes import BOOK_RECIPE  # noqa: E402
from helpers.train import train_reversal  # noqa: E402

LR_SCALES = (0.5, 1.0, 1.5, 2.0, 3.0, 4.0)
SEEDS = (0, 1, 2)


def main() -> int:
    torch.set_num_threads(1)
    old = {}
    if "--keep" in sys.argv[1:] and OUT.exists():
        data = json.loads(OUT.read_text())
        if data["recipe"] == dataclasses.asdict(BOOK_RECIPE):
            old = {(r["lr_scale"], r["seed"]): r for r in data["runs"]}
    runs = []
    for lr_scale in LR_SCALES:
        for seed in SEEDS:
            if (lr_scale, seed) in old:
                runs.append(old[(lr_scale, seed)])
                continue
            cfg = dataclasses.replace(BOOK_RECIPE, lr_scale=lr_scale, seed=seed)
            h = train_reversal(cfg, progress=False).history
            reached = (
                cfg.target_exact_match is not None
                and h["exact_match"][-1] >= cfg.target_exact_match
            )
            runs.append(
                {
                    "lr_scale": lr_scale,
                    "seed": seed,
                    "reached": bool(reached),
                    "steps": h["step"][-1],
                    "final_exact_match": round(h["exact_match"][-1], 4),
                    "eval_step": h["eval_step"],
                    "exact_match": [round(x, 4) for x in h["exact_match"]],
                    "batch_exact": [round(x, 4) for x in h["batch_exact"]],
                    "loss": [round(x, 4) for x in h["loss"]],
                }
            )
            print(
                f"lr_scale {lr_scale:3.1f} seed {seed}: {h['step'][-1]:3d} steps, "
                f"reached {reached}, last validation exact match {h['exact_match'][-1]:.3f}",
                flush=True,
            )
    OUT.write_text(
        json.dumps(
            {
                "what": "BOOK_RECIPE with its learning-rate schedule scaled by lr_scale, trained "
                "from scratch once per seed; per-step batch exact match and loss; validation "
                "exact match at each evaluation (the run stops at the recipe's target)",
                "command": "python tools/record_ch10_stability.py",
                "date": dt.datetime.now().isoformat(timespec="seconds"),
                "numerics": provenance(),
                "torch": torch.__version__,
                "recipe": dataclasses.asdict(BOOK_RECIPE),
                "lr_scales": list(LR_SCALES),
                "seeds": list(SEEDS),
                "runs": runs,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
