"""Record length generalisation of four position schemes -> chapters/data/positions_length.json.

    env $(python src/helpers/repro/pin.py pinned) nice -n 10 python -m tools.record.positions_length

Trained on the book's data (3 to 12 digits), scored on the book's test set (3 to 12 digits) and
on a test set of longer inputs, 13 to 20 digits, drawn with a seed of its own (LONG_SEED). The
arms differ only in how the model knows positions (blocks_recipe(positions=...)):

    sinusoidal  the 2017 table, added to the embeddings (the book's model);
    learned     a trained table, added; rows past the training lengths are never trained;
    rope        queries and keys of every self-attention rotated; nothing added;
    alibi       a linear distance penalty on every self-attention score; nothing added.

Every model has seq_len = 22, so that each arm can embed 20 digits plus <bos>/<eos> (the
sinusoidal and learned tables have 22 rows; rope and alibi need none).

The budget is fixed: fixed_budget_recipe(BOOK_RECIPE), the book's model and optimiser for
exactly 300 steps (COMPARISON_STEPS, the budget chapter 12 and the cross-mask page compare on:
warmup 100, then a cooldown to 0 at step 300), no early stop. An early stop would end each run
at the first evaluation that reaches 99.5 % on 3-12 digits; the score on longer inputs would
then depend on where that evaluation fell, and an arm that learns the short lengths faster
would train fewer steps. Validation is scored at the last step only: nothing reads the curve.

A seed sets the initial weights and the order of the batches; data, validation set and schedule
are the same for every run, so the arms are paired by seed. The loop runs seed by seed and
rewrites the record after every run.

Per run and test set: which sequences came out right (pack_bits, for McNemar's test), scored
teacher-forced, which equals greedy exact match (teacher_forced_exact_match says why); per
input length, the number of sequences, how many were right, and the sum over them of the
number of leading output digits that are right before the first wrong token (teacher forcing
and greedy decoding agree on that prefix too: both feed the same tokens until the first wrong
argmax). The layout is helpers.analysis.experiments' record layout, with one "arms" entry per
test set ("arms" for 3-12 digits, "arms_long" for 13-20). No timings are stored in the
results, only each run's training seconds for information.

--stop-after N ends every run after N steps (a dry run of the recorder). --resume keeps the runs
the record already holds (matched by config key) and trains only the missing ones.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

import torch

from helpers import make_reversal_dataset
from helpers.analysis.experiments import pack_bits
from helpers.core.vocab import EOS_ID, PAD_ID
from helpers.training.evaluation import TEST_SEED, TEST_SIZE, test_set
from helpers.training.recipes import (
    BOOK_RECIPE,
    COMPARISON_STEPS,
    blocks_recipe,
    fixed_budget_recipe,
)
from helpers.training.train import sequence_correct, train_reversal
from tools.common import DATA, ROOT, provenance, write_record

OUT = DATA / "positions_length.json"
POSITIONS = ("sinusoidal", "learned", "rope", "alibi")
STEPS = COMPARISON_STEPS
SEQ_LEN = 22  # 20 digits + <bos>/<eos>
LONG_SEED = 2028  # training uses 0, validation 1, the test set 2027
LONG_MIN, LONG_MAX = 13, 20


def long_test_set(n: int = TEST_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """n sequences of 13 to 20 digits, [n, 22], drawn with LONG_SEED."""
    return make_reversal_dataset(n, seed=LONG_SEED, min_len=LONG_MIN, max_len=LONG_MAX)


@torch.no_grad()
def score(model, src, tgt, batch: int = 1000) -> dict:
    """Teacher-forced: which sequences are right up to <eos>, and per input length the count,
    the number right and the sum of leading output digits right before the first error."""
    model.eval()
    right, lead = [], []
    for s, t in zip(src.split(batch), tgt.split(batch)):
        logits = model(s, t[:, :-1])
        out = t[:, 1:]
        right.append(sequence_correct(logits, out))
        ok = (logits.argmax(-1) == out) | (out == PAD_ID)
        lead.append(ok.long().cumprod(1).sum(1))  # positions right before the first wrong one
    right, lead = torch.cat(right), torch.cat(lead)
    length = (src != PAD_ID).sum(1) - 1  # digits (the source ends with one <eos>)
    assert bool((src[torch.arange(len(src)), length] == EOS_ID).all())
    lead = torch.minimum(lead, length)  # count digits only, not <eos> or the padding after it
    by_length = {}
    for L in sorted(set(length.tolist())):
        m = length == L
        by_length[str(L)] = {
            "n": int(m.sum()),
            "correct": int(right[m].sum()),
            "leading_digits_right": int(lead[m].sum()),
        }
    return {
        "test_correct": int(right.sum()),
        "correct_bits": pack_bits(right.numpy()),
        "leading_fraction": round(float((lead / length).mean()), 5),
        "by_length": by_length,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--positions", nargs="+", default=list(POSITIONS), choices=POSITIONS)
    ap.add_argument("--stop-after", type=int, default=None, help="dry run: N steps per run")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--resume", action="store_true", help="keep the runs --out already holds")
    args = ap.parse_args()

    torch.set_num_threads(1)
    src, tgt = test_set()
    long_src, long_tgt = long_test_set()
    assert long_src.size(1) == SEQ_LEN
    # no early stop: the validation curve is not used, so only the last step is evaluated
    base = dataclasses.replace(fixed_budget_recipe(BOOK_RECIPE, steps=STEPS), eval_every=STEPS)
    record = {
        "question": "trained on 3-12 digits, how well do sinusoidal, learned, RoPE and ALiBi "
        "positions reverse 13-20 digits?",
        "design": f"fixed_budget_recipe(BOOK_RECIPE, steps={STEPS}) (validation scored at the last "
        f"step only) with seq_len={SEQ_LEN} and "
        "blocks_recipe(positions=...) per arm, no early stop; per seed the same data, "
        "initial-weight seed and batch order; scored teacher-forced (= greedy) on the test set "
        f"(3-12 digits) and on a test set of {LONG_MIN}-{LONG_MAX} digits",
        **provenance(),
        "threads": 1,
        "recipe": dataclasses.asdict(base),
        "seq_len": SEQ_LEN,
        "steps": STEPS,
        "stop_after": args.stop_after,
        "seeds": args.seeds,
        "test_set": {"seed": TEST_SEED, "n": len(src), "min_len": 3, "max_len": 12},
        "long_test_set": {
            "seed": LONG_SEED,
            "n": len(long_src),
            "min_len": LONG_MIN,
            "max_len": LONG_MAX,
        },
        "arms": {p: [] for p in args.positions},
        "arms_long": {p: [] for p in args.positions},
    }
    done = {}
    if args.resume and args.out.exists():  # runs of the same config, recorded before
        old = json.loads(args.out.read_text())
        if old["stop_after"] == args.stop_after:
            done = {
                r["config_key"]: (r, long)
                for p in old["arms"]
                for r, long in zip(old["arms"][p], old["arms_long"][p])
            }
    for seed in args.seeds:
        for p in args.positions:
            cfg = blocks_recipe(base, positions=p, seq_len=SEQ_LEN, seed=seed)
            if cfg.key() in done:
                record["arms"][p].append(done[cfg.key()][0])
                record["arms_long"][p].append(done[cfg.key()][1])
                continue
            res = train_reversal(cfg, progress=False, stop_after=args.stop_after)
            h = res.history
            common = {
                "seed": seed,
                "config_key": cfg.key(),
                "steps": res.steps,
                "parameters": sum(q.numel() for q in res.model.parameters()),
                "final_val_exact_match": round(h["exact_match"][-1], 4),
                "train_seconds": round(res.seconds, 1),
            }
            short, long = score(res.model, src, tgt), score(res.model, long_src, long_tgt)
            record["arms"][p].append({**common, **short})
            record["arms_long"][p].append({**common, **long})
            record["load_average_after"] = " ".join(f"{v:.1f}" for v in os.getloadavg())
            write_record(args.out, record)
            print(
                f"seed {seed} {p:>10}: {res.steps} steps, val {h['exact_match'][-1]:.4f},"
                f" test 3-12 {short['test_correct']}/{len(src)},"
                f" 13-20 {long['test_correct']}/{len(long_src)}"
                f" (leading digits {long['leading_fraction']:.3f}), {res.seconds:.0f} s",
                flush=True,
            )
    write_record(args.out, record)  # also the runs kept after the last one trained
    out = args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out
    print("wrote", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
