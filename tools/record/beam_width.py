"""Record greedy decoding against beam widths 2, 4 and 8 on deliberately under-trained models.

Usage (from the repository root; about 5 runs of 150 training steps plus the searches, some
5 CPU-minutes on one thread):
    nice -n 10 .venv/bin/python -m tools.record.beam_width

Each seed's model is the book's recipe trained for exactly --steps steps with no early stop
(helpers.fixed_budget_recipe(BOOK_RECIPE, steps=...), TrainConfig.seed = the seed: initial
weights and batch order), through the checkpoint cache (helpers.load_or_train; seed 0 is the
model chapter 20 loads). Each model decodes the first --n sequences of the test set
(helpers.training.evaluation.test_set: seed 2027, the same sequences for every arm and seed)
greedily and with helpers.beam_search at widths 2, 4 and 8 (length penalty 0.6). The record
keeps, per arm and seed, the exact-match count and which sequences came out right
(correct_bits, helpers.analysis.experiments.pack_bits), so that the Experiments page pairs the
arms sequence by sequence with McNemar's test (helpers.analysis.experiments.compare_arms).

It also times each width on seed 0's model (the first --time-n test sources, one batch, the
median of --repeats runs), as seconds per generated token: the run's wall-clock time divided by
the tokens of the best hypotheses (after <bos>, up to and including <eos>). The timings are
information about this machine only; nothing is decided on them.
Writes chapters/data/beam_width.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import statistics
import time
from pathlib import Path

import torch

from helpers import beam_search, greedy_decode, load_or_train, sequences_equal
from helpers.analysis.experiments import pack_bits
from helpers.core.vocab import EOS_ID, PAD_ID
from helpers.decoding.beam_search import DEFAULT_LENGTH_PENALTY
from helpers.training.evaluation import TEST_SEED, test_set
from helpers.training.recipes import BOOK_RECIPE, fixed_budget_recipe
from tools.common import DATA, ROOT, provenance, write_record

OUT = DATA / "beam_width.json"
WIDTHS = (2, 4, 8)
ARMS = ("greedy",) + tuple(f"beam {w}" for w in WIDTHS)


def decode(model, src: torch.Tensor, arm: str) -> torch.Tensor:
    """The arm's output tokens [n, L] for src (<bos> first), in batches of 500."""
    outs = []
    for s in src.split(500):
        if arm == "greedy":
            out = greedy_decode(model, s, use_cache=True)
        else:
            out = beam_search(model, s, int(arm.split()[1]), length_penalty=DEFAULT_LENGTH_PENALTY)
            out = out.tokens
        outs.append(out)
    width = max(o.size(1) for o in outs)
    return torch.cat(
        [torch.nn.functional.pad(o, (0, width - o.size(1)), value=PAD_ID) for o in outs]
    )


def generated_tokens(out: torch.Tensor) -> int:
    """Tokens after <bos> up to and including each row's first <eos> (all of them if none)."""
    body = out[:, 1:]
    is_eos = body == EOS_ID
    n = torch.where(is_eos.any(1), is_eos.long().argmax(1) + 1, body.size(1))
    return int(n.sum())


def time_arm(model, src: torch.Tensor, arm: str, repeats: int) -> dict:
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = decode(model, src, arm)
        seconds.append(time.perf_counter() - start)
    tokens = generated_tokens(out)
    median = statistics.median(seconds)
    return {
        "seconds": [round(s, 4) for s in seconds],
        "median_seconds": round(median, 4),
        "generated_tokens": tokens,
        "seconds_per_token": median / tokens,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--time-n", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()

    torch.set_num_threads(1)
    src, tgt = test_set(args.n)
    base = fixed_budget_recipe(BOOK_RECIPE, steps=args.steps)
    arms = {arm: [] for arm in ARMS}
    timing = {}
    for seed in args.seeds:
        cfg = dataclasses.replace(base, seed=seed)
        model = load_or_train(cfg, progress=False, verbose=False).model.eval()
        line = []
        for arm in ARMS:
            right = sequences_equal(decode(model, src, arm), tgt)
            arms[arm].append(
                {
                    "seed": seed,
                    "config_key": cfg.key(),
                    "correct": int(right.sum()),
                    "exact_match": float(right.float().mean()),
                    "correct_bits": pack_bits(right.numpy()),
                }
            )
            line.append(f"{arm} {right.float().mean():.4f}")
        print(f"seed {seed}: " + ", ".join(line), flush=True)
        if seed == args.seeds[0]:
            timing = {arm: time_arm(model, src[: args.time_n], arm, args.repeats) for arm in ARMS}
            for arm, t in timing.items():
                print(f"  {arm}: {1e3 * t['seconds_per_token']:.3f} ms per token", flush=True)
    record = {
        "what": "greedy decoding against beam widths 2, 4, 8 (length penalty 0.6) on the book's "
        "recipe trained for a short fixed budget, several seeds, on a fixed prefix of the test set",
        **provenance(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "threads": 1,
        "seeds": args.seeds,
        "steps": args.steps,
        "length_penalty": DEFAULT_LENGTH_PENALTY,
        "recipe": dataclasses.asdict(base),
        "test_set": {"seed": TEST_SEED, "n": args.n, "first": True},
        "arms": arms,
        "timing": {
            "seed": args.seeds[0],
            "sources": args.time_n,
            "repeats": args.repeats,
            "arms": timing,
        },
    }
    write_record(args.out, record)
    print(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")


if __name__ == "__main__":
    main()
