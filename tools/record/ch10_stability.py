"""How much higher the book's learning rate can go: the record behind the Experiments page
"The learning rate" (appendix/experiment_learning_rate).

    env $(python src/helpers/repro/pin.py pinned) nice -n 10 python -m tools.record.ch10_stability
        # ~6 CPU-minutes -> chapters/data/ch10_stability.json
    python -m tools.record.ch10_stability --keep  # train only the runs the file lacks

Trains helpers.BOOK_RECIPE from scratch with its whole learning-rate schedule multiplied by
lr_scale (the `lr_scale` field of TrainConfig), for the arms lr_scale 1 (the book's recipe) and
lr_scale 3, once for each of the seeds 0-4 (the seed sets the initial weights and the batch
order; the data is the same). Every run has the same budget (the recipe's 500 steps) and the
same stopping rule (the recipe's 99.5 % on the validation set). For every run it stores whether
and when the run reached the target, the validation scores, the per-step curves of the training
batch's exact match and loss (rounded), and which of the 10,000 test sequences the stopped
model gets right (`helpers.analysis.experiments.pack_bits`), so that the arms can be compared seed
by
seed and sequence by sequence. CPU seconds per run are stored for the record's cost, not as a
benchmark. With --keep, runs already in the file for the same recipe are kept (training is
deterministic on one machine and thread count) and only the missing ones are trained.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

import torch

from helpers.analysis.experiments import pack_bits
from helpers.training.evaluation import TEST_SEED, test_set
from helpers.training.recipes import BOOK_RECIPE
from helpers.training.train import sequence_correct, train_reversal
from tools.common import DATA, ROOT, provenance, write_record

OUT = DATA / "ch10_stability.json"
LR_SCALES = (1.0, 3.0)
SEEDS = (0, 1, 2, 3, 4)


def arm_name(lr_scale: float) -> str:
    return f"lr_scale_{lr_scale:g}"


def test_correct(model) -> torch.Tensor:
    """bool [10,000]: which test sequences the model gets right (teacher-forced exact match)."""
    src, tgt = test_set()
    model.eval()
    with torch.no_grad():
        return torch.cat(
            [
                sequence_correct(model(s, t[:, :-1]), t[:, 1:])
                for s, t in zip(src.split(1000), tgt.split(1000))
            ]
        )


def one_run(lr_scale: float, seed: int) -> dict:
    cfg = dataclasses.replace(BOOK_RECIPE, lr_scale=lr_scale, seed=seed)
    cpu0 = time.process_time()
    result = train_reversal(cfg, progress=False)
    h = result.history
    ok = test_correct(result.model)
    return {
        "seed": seed,
        "lr_scale": lr_scale,
        "reached": bool(result.reached_target),
        "steps": h["step"][-1],
        "final_exact_match": round(h["exact_match"][-1], 4),
        "eval_step": h["eval_step"],
        "exact_match": [round(x, 4) for x in h["exact_match"]],
        "batch_exact": [round(x, 4) for x in h["batch_exact"]],
        "loss": [round(x, 4) for x in h["loss"]],
        "test_correct": int(ok.sum()),
        "correct_bits": pack_bits(ok.numpy()),
        "cpu_seconds": round(time.process_time() - cpu0, 1),
    }


def write(arms: dict) -> None:
    record = {
        "question": "Does the book's recipe reach 99.5 % on the validation set in fewer "
        "steps at its own learning rate than at three times that learning rate?",
        "design": "BOOK_RECIPE with its whole learning-rate schedule scaled by lr_scale "
        "(arms lr_scale 1 and 3), trained from scratch once per seed (seed: initial "
        "weights and batch order); equal budget (500 steps) and stopping rule (99.5 % "
        "validation exact match); each stopped model scored on the same 10,000 test "
        "sequences",
        **provenance(),
        "recipe": dataclasses.asdict(BOOK_RECIPE),
        "test_set": {"seed": TEST_SEED, "n": 10_000},
        "lr_scales": list(LR_SCALES),
        "seeds": list(SEEDS),
        "arms": arms,
    }
    write_record(OUT, record)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="train only the runs the file lacks")
    args = parser.parse_args()
    torch.set_num_threads(1)
    old = {}
    if args.keep and OUT.exists():
        data = json.loads(OUT.read_text())
        if data.get("recipe") == dataclasses.asdict(BOOK_RECIPE) and "arms" in data:
            old = {(r["lr_scale"], r["seed"]): r for runs in data["arms"].values() for r in runs}
    arms = {arm_name(s): [] for s in LR_SCALES}
    for seed in SEEDS:  # seed-major: a stopped recording still holds paired runs
        for lr_scale in LR_SCALES:
            run = old.get((lr_scale, seed)) or one_run(lr_scale, seed)
            arms[arm_name(lr_scale)].append(run)
            print(
                f"lr_scale {lr_scale:g} seed {seed}: {run['steps']:3d} steps, reached "
                f"{run['reached']}, test {run['test_correct']:,} of 10,000, "
                f"{run['cpu_seconds']:.0f} CPU s",
                flush=True,
            )
            write(arms)  # after every run, so that an interrupted recording keeps its runs
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
