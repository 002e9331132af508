"""Record the Pre-Norm vs Post-Norm sweep -> chapters/data/ch05_norm_sweep.json.

    env $(python src/helpers/repro/pin.py pinned) nice -n 10 python -m tools.record.ch05_norm_sweep
    ... -m tools.record.ch05_norm_sweep --seeds 2 --out /tmp/x.json   # a quicker look

Every run is helpers.analysis.norm_experiment.train_tagger (6-layer encoder-only tagger, d_model 64,
Adam at a constant learning rate, no warmup, batch 64, one thread): the same seed gives both
variants identical initial weights and identical batches. The file stores the settings, and per
run the seed, the learning rate, the training loss of every step (rounded to 4 decimals), and
the loss and exact match on the 1000 held-out sequences (seed 1), plus which held-out
sequences came out right (`correct_bits`, helpers.analysis.experiments.pack_bits). The same outcomes
also appear in the layout of helpers.experiments (`test_set`, and `arms` keyed "pre@0.002"),
so that `compare_arms(record, "pre@0.002", "post@0.002")` runs McNemar's test on them.
No timings are stored. The Experiments page appendix/experiment_norm_placement shows the
record; a full run is 30 runs of 400 steps (about 30 CPU-minutes under the pin).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

from helpers.analysis.experiments import pack_bits
from helpers.analysis.norm_experiment import tagger_data, train_tagger
from tools.common import DATA, ROOT, provenance, write_record

OUT = DATA / "ch05_norm_sweep.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1")
    parser.add_argument("--lrs", type=float, nargs="+", default=[1e-3, 2e-3, 4e-3])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()

    torch.set_num_threads(1)
    data = tagger_data()
    record = {
        "what": "training loss per step and held-out loss / exact match of the chapter-5 "
        "encoder-only tagger, Pre-Norm vs Post-Norm, same seed = same initial weights and batches",
        **provenance(),
        "torch": torch.__version__,
        "settings": {
            "model": "helpers.analysis.norm_experiment.EncoderTagger: d_model 64, 4 heads, "
            "dff 256, "
            f"{args.layers} layers, no dropout, Xavier",
            "optimizer": "Adam betas (0.9, 0.98), constant lr, no warmup",
            "batch_size": 64,
            "steps": args.steps,
            "num_layers": args.layers,
            "lrs": args.lrs,
            "seeds": list(range(args.seeds)),
            "train": "make_reversal_dataset(20000, seed=0)",
            "held_out": "make_reversal_dataset(1000, seed=1)",
            "threads": 1,
        },
        "test_set": {"seed": 1, "n": len(data[2])},
        "runs": [],
        "arms": {},
    }
    for lr in args.lrs:
        for seed in range(args.seeds):
            for norm in ("pre", "post"):
                run = train_tagger(
                    norm, seed=seed, steps=args.steps, lr=lr, num_layers=args.layers, data=data
                )
                record["runs"].append(
                    {
                        "norm": norm,
                        "lr": lr,
                        "seed": seed,
                        "val_loss": round(run.val_loss, 4),
                        "exact_match": round(run.exact_match, 4),
                        "test_correct": int(run.correct.sum()),
                        "correct_bits": pack_bits(run.correct),
                        "losses": [round(v, 4) for v in run.losses],
                    }
                )
                record["arms"].setdefault(f"{norm}@{lr:g}", []).append(
                    {
                        "seed": seed,
                        "test_correct": int(run.correct.sum()),
                        "correct_bits": pack_bits(run.correct),
                    }
                )
                print(
                    f"lr {lr:g} seed {seed} {norm:4s}: final loss {run.losses[-1]:.3f}, "
                    f"held-out loss {run.val_loss:.3f}, exact match {run.exact_match:.3f}",
                    flush=True,
                )
    record["load_average_after"] = " ".join(f"{v:.1f}" for v in os.getloadavg())
    write_record(args.out, record)
    print("wrote", args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
