"""Record today's blocks on the reversal task, one change at a time -> todays_blocks.json.

    env $(python src/helpers/repro/pin.py pinned) nice -n 10 python -m tools.record.todays_blocks

Every arm is the book's recipe (BOOK_RECIPE: at most 500 steps, an evaluation at every 10th
step whose training batch is at least 98 % right, a stop once validation exact match reaches
99.5 %), with the model's blocks set by helpers.training.recipes.blocks_recipe:

    baseline  the 2017 block as the book builds it: LayerNorm, GELU feed-forward, sinusoidal
              positions, full multi-head attention (4 heads, 4 key/value heads);
    rms       norm="rms" (RMSNorm);
    swiglu    ffn="swiglu" (hidden width round(2 dff / 3), so about the same parameters);
    gqa       num_kv_heads=2 (grouped-query attention: 2 key/value heads for 4 query heads);
    mqa       num_kv_heads=1 (multi-query attention);
    rope      positions="rope" (self-attention queries and keys rotated; nothing added);
    today     all of today's together: rms + swiglu + rope + gqa.

A seed (TrainConfig.seed) sets the initial weights and the order of the batches; the training
data, the validation set and the schedule are the same for every run, so the arms are paired
by seed. The loop runs seed by seed (every arm for seed 0, then seed 1...), and the record is
rewritten after every run: an interrupted sweep leaves a record whose arms hold equal numbers
of seeds, or differ by one.

Per run: whether and at which step validation reached the target (the steps to the target),
the parameter count, the test exact match (helpers.training.evaluation.test_set(): 10,000
sequences, TEST_SEED) scored teacher-forced, which equals greedy exact match
(helpers.training.train.teacher_forced_exact_match says why), which test sequences came out
right (helpers.analysis.experiments.pack_bits, for McNemar's test), the validation curve, and
the training seconds (for information only: they depend on how busy the machine was).
The layout is helpers.analysis.experiments' record layout ("arms", "test_set").

--stop-after N ends every run after N steps (a dry run of the recorder; the schedule stays
the full recipe's). --resume keeps the runs the record already holds (matched by config key)
and trains only the missing ones.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

import torch

from helpers.analysis.experiments import pack_bits
from helpers.core.vocab import PAD_ID
from helpers.training.evaluation import TEST_SEED, test_set
from helpers.training.recipes import BOOK_RECIPE, blocks_recipe
from helpers.training.train import sequence_correct, train_reversal
from tools.common import DATA, ROOT, provenance, write_record

OUT = DATA / "todays_blocks.json"
ARMS = {
    "baseline": {},
    "rms": {"norm": "rms"},
    "swiglu": {"ffn": "swiglu"},
    "gqa": {"num_kv_heads": 2},
    "mqa": {"num_kv_heads": 1},
    "rope": {"positions": "rope"},
    "today": {"norm": "rms", "ffn": "swiglu", "positions": "rope", "num_kv_heads": 2},
}


@torch.no_grad()
def score(model, src, tgt, batch: int = 1000) -> torch.Tensor:
    """bool [N]: the teacher-forced argmax is right at every position up to <eos>."""
    model.eval()
    out = [
        sequence_correct(model(s, t[:, :-1]), t[:, 1:])
        for s, t in zip(src.split(batch), tgt.split(batch))
    ]
    return torch.cat(out)


def one_run(cfg, src, tgt, stop_after=None) -> dict:
    res = train_reversal(cfg, progress=False, stop_after=stop_after)
    right = score(res.model, src, tgt)
    h = res.history
    return {
        "seed": cfg.seed,
        "config_key": cfg.key(),
        "reached_target": res.reached_target,
        "steps": res.steps,  # the step training stopped at: the target's, or the last
        "steps_to_target": res.steps if res.reached_target else None,
        "parameters": sum(p.numel() for p in res.model.parameters()),
        "test_correct": int(right.sum()),
        "correct_bits": pack_bits(right.numpy()),
        "eval_step": h["eval_step"],
        "val_exact_match": [round(v, 4) for v in h["exact_match"]],
        "final_train_loss": round(h["loss"][-1], 4),
        "train_seconds": round(res.seconds, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--stop-after", type=int, default=None, help="dry run: N steps per run")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--resume", action="store_true", help="keep the runs --out already holds")
    args = ap.parse_args()

    torch.set_num_threads(1)
    src, tgt = test_set()
    assert int((src != PAD_ID).sum(1).max()) <= BOOK_RECIPE.seq_len
    record = {
        "question": "one change at a time from the 2017 block to today's (RMSNorm, SwiGLU, "
        "grouped-query and multi-query attention, RoPE, all together): does it change the "
        "steps to the validation target or the test exact match of the reversal model?",
        "design": "BOOK_RECIPE (early stop at validation exact match 0.995, at most 500 "
        "steps) with blocks_recipe options per arm; per seed the same data, initial-weight "
        "seed and batch order; scored teacher-forced (= greedy) on the test set",
        **provenance(),
        "threads": 1,
        "recipe": dataclasses.asdict(BOOK_RECIPE),
        "arm_options": {arm: ARMS[arm] for arm in args.arms},
        "stop_after": args.stop_after,
        "seeds": args.seeds,
        "test_set": {"seed": TEST_SEED, "n": len(src)},
        "arms": {arm: [] for arm in args.arms},
    }
    done = {}
    if args.resume and args.out.exists():  # runs of the same config, recorded before
        old = json.loads(args.out.read_text())
        done = {r["config_key"]: r for runs in old["arms"].values() for r in runs}
        if old["stop_after"] != args.stop_after:
            done = {}
        elif "load_average_after" in old:  # kept until a run is trained here
            record["load_average_after"] = old["load_average_after"]
    for seed in args.seeds:
        for arm in args.arms:
            cfg = blocks_recipe(BOOK_RECIPE, seed=seed, **ARMS[arm])
            if cfg.key() in done:
                record["arms"][arm].append(done[cfg.key()])
                continue
            run = one_run(cfg, src, tgt, args.stop_after)
            record["arms"][arm].append(run)
            record["load_average_after"] = " ".join(f"{v:.1f}" for v in os.getloadavg())
            write_record(args.out, record)
            print(
                f"seed {seed} {arm:>8}: {run['steps']:>3} steps"
                f" (target {'reached' if run['reached_target'] else 'not reached'}),"
                f" {run['parameters']:,} parameters, test {run['test_correct']}/{len(src)},"
                f" {run['train_seconds']} s",
                flush=True,
            )
    write_record(args.out, record)  # also the runs kept after the last one trained
    out = args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out
    print("wrote", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
