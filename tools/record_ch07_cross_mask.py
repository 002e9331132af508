#!/usr/bin/env python3
"""Record what a causal mask on cross-attention costs -> chapters/data/ch07_cross_mask.json.

    nice -n 10 python tools/record_ch07_cross_mask.py             # seeds 0 1 2, 300 steps
    nice -n 10 python tools/record_ch07_cross_mask.py --seeds 0 1 2 3 4

For each seed, two models train with the same recipe (helpers.fixed_budget_recipe(BOOK_RECIPE,
steps=STEPS): the book's recipe for a fixed number of steps, no early stop), the same initial
weights and the same batches:

- "correct": helpers.Transformer, cross-attention blocked on source padding only;
- "causal cross-attention": the same model whose decoder also blocks, in cross-attention,
  every source position j > i for target position i (the decoder's causal mask handed to
  cross-attention by mistake; training batches are trimmed to their longest sequence, so
  L_t = L_s there and the mistake raises no error).

Each trained model is scored on the test set (helpers.evaluation.test_set(): 10,000 sequences,
a seed neither training nor validation uses): exact match (teacher-forced argmax right at every
position up to <eos>, which equals greedy exact match for these causal decoders) and the token
accuracy at each output position. No timings are stored.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import sys
from pathlib import Path
from unittest import mock

import torch

import helpers.train
from helpers import (
    BOOK_RECIPE,
    COMPARISON_STEPS,
    PAD_ID,
    Transformer,
    fixed_budget_recipe,
    make_padding_mask,
)
from helpers.evaluation import TEST_SEED, test_set
from helpers.masks import make_causal_mask
from helpers.numerics import provenance
from helpers.train import sequence_correct, train_reversal

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "chapters" / "data" / "ch07_cross_mask.json"
STEPS = COMPARISON_STEPS  # the budget chapter 12 compares initialisations on


class CausalCrossTransformer(Transformer):
    """The bug of chapter 7: cross-attention also gets a causal mask (key j > query i blocked)."""

    def decode(self, tgt_in, memory, src_mask, need_weights=True):
        Lt, Ls = tgt_in.size(1), memory.size(1)
        self_mask = make_causal_mask(Lt, tgt_in.device) | make_padding_mask(tgt_in)
        future = torch.ones(Lt, Ls, dtype=torch.bool, device=tgt_in.device).triu(1)
        cross_mask = src_mask | future[None, None]  # [B, 1, Lt, Ls]
        h, cross_w = self.decoder(tgt_in, memory, self_mask, cross_mask, need_weights=need_weights)
        return self.out_proj(h), cross_w


@torch.no_grad()
def score(model, src, tgt, batch=1000):
    """(exact match, token accuracy per output position) on (src, tgt), teacher-forced."""
    model.eval()
    correct, right, count = 0, torch.zeros(tgt.size(1) - 1), torch.zeros(tgt.size(1) - 1)
    for i in range(0, len(src), batch):
        s, t = src[i : i + batch], tgt[i : i + batch]
        logits = model(s, t[:, :-1])
        tgt_out = t[:, 1:]
        correct += int(sequence_correct(logits, tgt_out).sum())
        real = tgt_out != PAD_ID
        right += ((logits.argmax(-1) == tgt_out) & real).sum(0).float()
        count += real.sum(0).float()
    per_pos = (right / count.clamp(min=1)).tolist()
    return correct / len(src), [round(v, 4) for v, c in zip(per_pos, count.tolist()) if c > 0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()

    src, tgt = test_set()
    base = fixed_budget_recipe(BOOK_RECIPE, steps=args.steps)
    record = {
        "what": "test-set exact match after a fixed budget: the correct model vs the same model "
        "with a causal mask on cross-attention; same seed = same initial weights and batches",
        "command": "nice -n 10 python "
        + " ".join(["tools/record_ch07_cross_mask.py"] + sys.argv[1:]),
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "numerics": provenance(),
        "torch": torch.__version__,
        "recipe": f"fixed_budget_recipe(BOOK_RECIPE, steps={args.steps})",
        "steps": args.steps,
        "seeds": args.seeds,
        "test_set": f"helpers.evaluation.test_set(): {len(src)} sequences, seed {TEST_SEED}",
        "runs": [],
    }
    for seed in args.seeds:
        cfg = dataclasses.replace(base, seed=seed)
        for variant, cls in (
            ("correct", Transformer),
            ("causal cross-attention", CausalCrossTransformer),
        ):
            with mock.patch.object(helpers.train, "Transformer", cls):
                run = train_reversal(cfg, progress=False)
            assert isinstance(run.model, cls)
            em, per_pos = score(run.model, src, tgt)
            h = run.history
            record["runs"].append(
                {
                    "variant": variant,
                    "seed": seed,
                    "test_exact_match": round(em, 4),
                    "test_token_accuracy_by_position": per_pos,
                    "final_train_loss": round(h["loss"][-1], 4),
                    "eval_step": h["eval_step"],
                    "val_exact_match": [round(v, 4) for v in h["exact_match"]],
                }
            )
            print(f"seed {seed} {variant:23s}: test exact match {em:.4f}", flush=True)
    record["load_average_after"] = " ".join(f"{v:.1f}" for v in os.getloadavg())
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
