"""Record chapter 12's 2 x 2 of initialisations: which of the two fixes does what.

Usage (from the repository root; about 12 + 6 runs of 10-140 s each on one thread):
    nice -n 10 .venv/bin/python -m tools.record.ch12_init_2x2
    nice -n 10 .venv/bin/python -m tools.record.ch12_init_2x2 --seeds 0 1 2 --budgets 600 1200

The four cells are the book's fixed-budget recipe (helpers.fixed_budget_recipe: BOOK_RECIPE
trained for exactly COMPARISON_STEPS steps, no early stop) with TrainConfig.init set to

    fixed            embedding std d^-1/2 (std 1 after the sqrt(d) scaling) + Xavier linears;
    embedding_only   the embedding fix only: linears keep PyTorch's Kaiming-uniform(a=sqrt 5);
    xavier_only      the Xavier fix only: the embedding keeps PyTorch's N(0, 1);
    default          neither fix (PyTorch's defaults everywhere);

each trained once per seed (TrainConfig.seed: the initial weights and the batch order; the
training data, validation set and schedule are the same for every run). For every run it
records the training loss per step, the teacher-forced validation exact match every 20 steps
(1000 sequences, seed 1), the final greedy exact match on the same validation set, and the
exact match on the test set (helpers.training.evaluation.test_set(): 10,000 sequences, a seed that
neither training nor validation uses) with its Wilson 95 % interval, and which test sequences
came out right (test.correct_bits, helpers.analysis.experiments.pack_bits), so that the Experiments
page
can pair two arms sequence by sequence with McNemar's test. The record of 2026-11-30 predates
correct_bits; the appendix asks for at least 5 seeds per arm before a conclusion
(--seeds 0 1 2 3 4: about 20 runs of 300 steps, some 15 CPU-minutes on one thread).

--budgets adds runs of the default-init cell with longer budgets (the cooldown rescaled as in
fixed_budget_recipe), to measure how many steps it needs for the fixed init's result.

Nothing is timed: the numbers recorded do not depend on how busy the machine is. Runs are
single-threaded (BOOK_RECIPE.threads = 1), so on the same machine they reproduce bit for bit.
Writes chapters/data/ch12_init_2x2.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
from pathlib import Path

import torch

from helpers import make_reversal_dataset
from helpers.analysis.experiments import pack_bits
from helpers.decoding.greedy import exact_match, greedy_decode, sequences_equal
from helpers.training.evaluation import TEST_SEED, TEST_SIZE, exact_match_with_interval, test_set
from helpers.training.recipes import BOOK_RECIPE, COMPARISON_STEPS, fixed_budget_recipe
from helpers.training.train import train_reversal
from tools.common import DATA, ROOT, provenance, write_atomic

OUT = DATA / "ch12_init_2x2.json"
INITS = ("fixed", "embedding_only", "xavier_only", "default")


def one_run(cfg, test_src, test_tgt) -> dict:
    """Train cfg from scratch and score it; -> the run's record (no timings)."""
    res = train_reversal(cfg, progress=False)
    h = res.history
    src_val, tgt_val = make_reversal_dataset(cfg.val_size, seed=cfg.val_seed)
    test = exact_match_with_interval(res.model, test_src, test_tgt, greedy=True)
    # which test sequences came out right, for McNemar's test on the Experiments page
    right = torch.cat(
        [
            sequences_equal(greedy_decode(res.model, s, use_cache=True), t)
            for s, t in zip(test_src.split(1000), test_tgt.split(1000))
        ]
    )
    assert int(right.sum()) == test.correct
    return {
        "init": cfg.init,
        "seed": cfg.seed,
        "steps": cfg.max_steps,
        "config_key": cfg.key(),
        "step": h["step"],
        "loss": [round(x, 5) for x in h["loss"]],
        "eval_step": h["eval_step"],
        "val_exact_match": h["exact_match"],
        "final_val_exact_match": exact_match(res.model, src_val, tgt_val),
        "test": {
            "exact_match": test.exact_match,
            "correct": test.correct,
            "n": test.n,
            "low": test.low,
            "high": test.high,
            "correct_bits": pack_bits(right.numpy()),
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--budgets", type=int, nargs="*", default=[600, 1200])
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()

    torch.set_num_threads(1)
    test_src, test_tgt = test_set()
    plan = [fixed_budget_recipe(init=init) for init in INITS]
    plan += [fixed_budget_recipe(init="default", steps=s) for s in args.budgets]
    runs = []
    for base in plan:
        for seed in args.seeds:
            cfg = dataclasses.replace(base, seed=seed)
            run = one_run(cfg, test_src, test_tgt)
            runs.append(run)
            print(
                f"{cfg.init:>14} {cfg.max_steps:>5} steps seed {seed}: "
                f"val {run['final_val_exact_match']:.3f}, test {run['test']['exact_match']:.4f}",
                flush=True,
            )
    record = {
        "what": "chapter 12's 2 x 2: the book's fixed-budget recipe with each of four inits, "
        "several seeds; plus the default init on longer budgets",
        **provenance(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "threads": 1,
        "seeds": args.seeds,
        "inits": list(INITS),
        "comparison_steps": COMPARISON_STEPS,
        "budgets": args.budgets,
        "recipe": dataclasses.asdict(fixed_budget_recipe(BOOK_RECIPE)),
        "book_recipe_key": BOOK_RECIPE.key(),
        "test_seed": TEST_SEED,
        "test_size": TEST_SIZE,
        "val_seed": BOOK_RECIPE.val_seed,
        "val_size": BOOK_RECIPE.val_size,
        "runs": runs,
    }
    # one line per run: the file stays readable and diffs stay small
    head = json.dumps({k: v for k, v in record.items() if k != "runs"}, indent=1)
    body = ",\n".join("  " + json.dumps(r) for r in runs)
    write_atomic(args.out, head[:-2] + ',\n "runs": [\n' + body + "\n ]\n}\n")
    print(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")


if __name__ == "__main__":
    main()
