"""Record greedy decoding against beam widths 2, 4 and 8 on deliberately under-trained models.

Usage (from the repository root, pinned as the record's command says; about 5 runs of 150
training steps plus the searches, some 5 CPU-minutes on one thread, and 8 rounds of timing,
about 20 s):
    env $(.venv/bin/python src/helpers/repro/pin.py pinned) nice -n 10 \
        .venv/bin/python -m tools.record.beam_width

Each seed's model is the book's recipe trained for exactly --steps steps with no early stop
(helpers.fixed_budget_recipe(BOOK_RECIPE, steps=...), TrainConfig.seed = the seed: initial
weights and batch order), through the checkpoint cache (helpers.load_or_train; seed 0 is the
model chapter 20 loads). Each model decodes the first --n sequences of the test set
(helpers.training.evaluation.test_set: seed 2027, the same sequences for every arm and seed)
greedily and with helpers.beam_search at widths 2, 4 and 8 (length penalty 0.6). The record
keeps, per arm and seed, the exact-match count and which sequences came out right
(correct_bits, helpers.analysis.experiments.pack_bits), so that the Experiments page pairs the
arms sequence by sequence with McNemar's test (helpers.analysis.experiments.compare_arms).

It also times each width on seed 0's model (the first --time-n test sources, in batches of
500, greedy_decode and beam_search both on the KV cache): one untimed warm-up round, then in
each of --repeats rounds every arm once, one after the other, so that a slow drift of the
machine's speed reaches every arm of a round alike (a slowdown shorter than a round does not).
Per arm: each run's wall-clock seconds, their median, and the median per generated token (the
tokens of the best hypotheses, after <bos> up to and including <eos>); per round, each arm's
time over greedy decoding's in the same round.
The load average before and after the timing is recorded: run it on an idle machine. The
timings describe this machine, on one thread.
Writes chapters/data/beam_width.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
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


def time_arms(model, src: torch.Tensor, repeats: int) -> dict:
    """Every arm once per round, `repeats` rounds, after one untimed warm-up round."""
    for arm in ARMS:
        decode(model, src, arm)
    seconds = {arm: [] for arm in ARMS}
    tokens = {}
    for _ in range(repeats):
        for arm in ARMS:
            start = time.perf_counter()
            out = decode(model, src, arm)
            seconds[arm].append(time.perf_counter() - start)
            tokens[arm] = generated_tokens(out)
    timed = {}
    for arm in ARMS:
        median = statistics.median(seconds[arm])
        timed[arm] = {
            "seconds": [round(s, 4) for s in seconds[arm]],
            "median_seconds": round(median, 4),
            "generated_tokens": tokens[arm],
            "seconds_per_token": median / tokens[arm],
            "over_greedy_by_round": [
                round(a / g, 3) for a, g in zip(seconds[arm], seconds["greedy"], strict=True)
            ],
        }
    return timed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--time-n", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=7)
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
            load_before = " ".join(f"{v:.2f}" for v in os.getloadavg())
            timing = time_arms(model, src[: args.time_n], args.repeats)
            load_after = " ".join(f"{v:.2f}" for v in os.getloadavg())
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
            "order": "rounds: every arm once per round, after one untimed warm-up round",
            "load_average_before": load_before,
            "load_average_after": load_after,
            "arms": timing,
        },
    }
    write_record(args.out, record)
    print(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")


if __name__ == "__main__":
    main()
