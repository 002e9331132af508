"""The band of the book's training curve: the record behind the Experiments page "The training
band" (appendix/experiment_training_band) and helpers.debugging.compare_with_band (chapter 17).

    env $(python src/helpers/repro/pin.py pinned) nice -n 10 python -m tools.record.training_band
        # ~5 CPU-minutes -> chapters/data/training_band.json
    python -m tools.record.training_band --seeds 1   # one seed, to measure the cost first
    ... -m tools.record.training_band --jobs 4        # the same runs in 4 processes
    ... -m tools.record.training_band --check --jobs 2
        # ~5 CPU-minutes: seeds 7-12, added to the record as "check"

Trains helpers.BOOK_RECIPE from scratch once for each of the seeds 1-6 (the seed sets the
initial weights and the batch order; the data is the same). Seed 0 is the book's own model, the
healthy run chapter 17 compares with the band, so it is left out. Every run has the same budget:
the first STEPS steps of the recipe's schedule (warmup, decay and the cooldown to step 500), with
no stopping rule, so that every seed has a value at every step. For every run it stores the loss
of each training step (the batch's cross entropy before its update) and, every EVAL_EVERY steps,
the validation exact match (teacher-forced, on the recipe's eval_size validation sequences, not
gated), which is the score train_reversal's stopping rule reads. CPU seconds per run are stored
for the record's cost, not as a benchmark. Each run uses one thread, so --jobs changes only the
wall time, not a bit of the record.

--check trains CHECK_SEEDS the same way and stores them in the existing record under "check",
apart from "runs": they take no part in the band, and the Experiments page holds each against
it, as a reader's run would be (an estimate of how often a healthy run leaves the band).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import torch

from helpers.core.data import make_reversal_dataset
from helpers.training.recipes import BOOK_RECIPE
from helpers.training.train import teacher_forced_exact_match, train_reversal
from tools.common import DATA, ROOT, provenance, write_record

OUT = DATA / "training_band.json"
SEEDS = (1, 2, 3, 4, 5, 6)
CHECK_SEEDS = (7, 8, 9, 10, 11, 12)
STEPS = 400
EVAL_EVERY = 10


def one_run(seed: int) -> dict:
    torch.set_num_threads(1)
    cfg = dataclasses.replace(BOOK_RECIPE, seed=seed, target_exact_match=None)
    src_val, tgt_val = make_reversal_dataset(cfg.val_size, seed=cfg.val_seed)
    src_val, tgt_val = src_val[: cfg.eval_size], tgt_val[: cfg.eval_size]
    em = {}

    def on_step(step, model, loss):
        if step % EVAL_EVERY == 0:
            em[step] = teacher_forced_exact_match(model, src_val, tgt_val)

    cpu0 = time.process_time()
    result = train_reversal(cfg, progress=False, confirm=False, on_step=on_step, stop_after=STEPS)
    h = result.history
    return {
        "seed": seed,
        "loss": [round(x, 5) for x in h["loss"]],
        "exact_match": [round(em[s], 4) for s in sorted(em)],
        "cpu_seconds": round(time.process_time() - cpu0, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=len(SEEDS), help="how many of SEEDS to run")
    parser.add_argument("--jobs", type=int, default=1, help="processes (one thread each)")
    parser.add_argument("--check", action="store_true", help="add CHECK_SEEDS to the record")
    args = parser.parse_args()
    torch.set_num_threads(1)
    seeds = CHECK_SEEDS if args.check else SEEDS[: args.seeds]
    runs = train_all(seeds, args.jobs)
    if args.check:
        add_check(runs)
        return 0
    record = {
        "question": "What does the book's training curve look like across seeds: the loss of "
        "each step and the validation exact match every 10 steps?",
        "design": f"BOOK_RECIPE trained from scratch once per seed (seeds {SEEDS[0]}-"
        f"{SEEDS[args.seeds - 1]}: initial weights and batch order; the data is the same), the "
        f"first {STEPS} steps of its schedule, no stopping rule; validation exact match "
        f"(teacher-forced, {BOOK_RECIPE.eval_size} validation sequences) every {EVAL_EVERY} "
        "steps; seed 0, the book's own model, is left out",
        **provenance(),
        "recipe": dataclasses.asdict(BOOK_RECIPE),
        "steps": STEPS,
        "eval_every": EVAL_EVERY,
        "seeds": [r["seed"] for r in runs],
        "runs": runs,
    }
    out = OUT if args.seeds == len(SEEDS) else OUT.with_name("training_band_partial.json")
    write_record(out, record)
    print(f"wrote {out.relative_to(ROOT)}: {sum(r['cpu_seconds'] for r in runs):.0f} CPU-s")
    return 0


def train_all(seeds, jobs: int) -> list:
    if jobs > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        ctx = mp.get_context("spawn")
        with ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
            runs = list(pool.map(one_run, seeds))
    else:
        runs = [one_run(seed) for seed in seeds]
    for r in runs:
        print(f"seed {r['seed']}: {r['cpu_seconds']} CPU-s", flush=True)
    return runs


def add_check(runs: list) -> None:
    """Store `runs` (CHECK_SEEDS) in the existing record under "check"."""
    record = json.loads(OUT.read_text())
    record["check"] = {
        "seeds": [r["seed"] for r in runs],
        **provenance(),
        "runs": runs,
    }
    write_record(OUT, record)
    print(f"added {len(runs)} check runs to {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    raise SystemExit(main())
