"""Record what a triangular cross-attention mask costs -> chapters/data/ch07_cross_mask.json.

    env $(python src/helpers/repro/pin.py pinned) nice -n 10 python -m tools.record.ch07_cross_mask

For each seed (default 0-4), two arms train with the same recipe
(helpers.fixed_budget_recipe(BOOK_RECIPE, steps=STEPS): the book's recipe for a fixed number
of steps, no early stop), the same initial weights and the same batches:

- "correct": helpers.Transformer, cross-attention blocked on source padding only;
- "triangular_cross": the same model whose cross-attention mask also blocks every source
  position j > i for target position i. It is the decoder's causal pattern rebuilt at the
  cross-attention shape [B, 1, Lt, Ls]. (Handing the decoder's own [1, 1, Lt, Lt] mask to
  cross-attention does not train: it runs on the trimmed training batches, where Lt = Ls, and
  raises at the first validation pass, where Ls = 14 and Lt = 13.)

Each trained model is scored on the test set (helpers.training.evaluation.test_set(): 10,000
sequences,
a seed neither training nor validation uses): exact match (teacher-forced argmax right at every
position up to <eos>, which equals greedy exact match for these causal decoders), which test
sequences came out right (helpers.analysis.experiments.pack_bits, for McNemar's paired test) and the
token accuracy at each output position. The layout is helpers.analysis.experiments' record layout.
No timings are stored.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path
from unittest import mock

import torch

import helpers.training.train
from helpers import (
    BOOK_RECIPE,
    COMPARISON_STEPS,
    PAD_ID,
    Transformer,
    fixed_budget_recipe,
    make_padding_mask,
)
from helpers.analysis.experiments import pack_bits
from helpers.core.masks import make_causal_mask
from helpers.training.evaluation import TEST_SEED, test_set
from helpers.training.train import sequence_correct, train_reversal
from tools.common import DATA, provenance, write_record

OUT = DATA / "ch07_cross_mask.json"
STEPS = COMPARISON_STEPS  # the budget chapter 12 compares initialisations on


class TriangularCrossTransformer(Transformer):
    """Chapter 7's bug: cross-attention also blocks source position j > target position i."""

    def decode(self, tgt_in, memory, src_mask, need_weights=True):
        Lt, Ls = tgt_in.size(1), memory.size(1)
        self_mask = make_causal_mask(Lt, tgt_in.device) | make_padding_mask(tgt_in)
        future = torch.ones(Lt, Ls, dtype=torch.bool, device=tgt_in.device).triu(1)
        cross_mask = src_mask | future[None, None]  # [B, 1, Lt, Ls]
        h, cross_w = self.decoder(tgt_in, memory, self_mask, cross_mask, need_weights=need_weights)
        return self.out_proj(h), cross_w


@torch.no_grad()
def score(model, src, tgt, batch=1000):
    """(bool [N]: sequence right, token accuracy per output position) on (src, tgt),
    teacher-forced."""
    model.eval()
    correct, right, count = [], torch.zeros(tgt.size(1) - 1), torch.zeros(tgt.size(1) - 1)
    for i in range(0, len(src), batch):
        s, t = src[i : i + batch], tgt[i : i + batch]
        logits = model(s, t[:, :-1])
        tgt_out = t[:, 1:]
        correct.append(sequence_correct(logits, tgt_out))
        real = tgt_out != PAD_ID
        right += ((logits.argmax(-1) == tgt_out) & real).sum(0).float()
        count += real.sum(0).float()
    per_pos = (right / count.clamp(min=1)).tolist()
    return torch.cat(correct), [round(v, 4) for v, c in zip(per_pos, count.tolist()) if c > 0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()

    src, tgt = test_set()
    base = fixed_budget_recipe(BOOK_RECIPE, steps=args.steps)
    record = {
        "question": "does a triangular cross-attention mask (target position i reads source "
        "positions 0..i only) cost test exact match after a fixed budget?",
        "design": "arms correct and triangular_cross; per seed the same initial weights and "
        f"batches; fixed_budget_recipe(BOOK_RECIPE, steps={args.steps}), no early stop; "
        "scored on the test set",
        **provenance(),
        "recipe": f"fixed_budget_recipe(BOOK_RECIPE, steps={args.steps})",
        "steps": args.steps,
        "seeds": args.seeds,
        "test_set": {"seed": TEST_SEED, "n": len(src)},
        "arms": {"correct": [], "triangular_cross": []},
    }
    for seed in args.seeds:
        cfg = dataclasses.replace(base, seed=seed)
        for arm, cls in (
            ("correct", Transformer),
            ("triangular_cross", TriangularCrossTransformer),
        ):
            with mock.patch.object(helpers.training.train, "Transformer", cls):
                run = train_reversal(cfg, progress=False)
            assert isinstance(run.model, cls)
            right, per_pos = score(run.model, src, tgt)
            h = run.history
            record["arms"][arm].append(
                {
                    "seed": seed,
                    "test_correct": int(right.sum()),
                    "correct_bits": pack_bits(right.numpy()),
                    "test_token_accuracy_by_position": per_pos,
                    "final_train_loss": round(h["loss"][-1], 4),
                    "eval_step": h["eval_step"],
                    "val_exact_match": [round(v, 4) for v in h["exact_match"]],
                }
            )
            print(f"seed {seed} {arm:17s}: test correct {int(right.sum())}", flush=True)
    record["load_average_after"] = " ".join(f"{v:.1f}" for v in os.getloadavg())
    write_record(args.out, record)
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
