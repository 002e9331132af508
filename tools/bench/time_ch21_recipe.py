"""Wall-clock time to train chapter 21's SHARP_ATTENTION_RECIPE from scratch, on 1 and 2 threads.

Usage:
    nice -n 10 .venv/bin/python -m tools.bench.time_ch21_recipe [--repeats N] [--out PATH]

The sharp-attention Experiments page says how long chapter 21's recipe takes to train. The
recipe itself says one thread (`threads=1`, inherited from BOOK_RECIPE), so that `make test`
can run two notebooks at once; this tool also times it on two threads (the same recipe with
`threads=2`: the same steps and data, sums in another order). Each run trains from scratch (no
checkpoint cache) and is timed from the call to the trained model, evaluations included, by
tools/bench/training.py's time_to_target (whose test-set score after the run is not timed).
Writes chapters/data/ch21_training_time.json, which appendix/experiment_sharp_attention prints.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from pathlib import Path

from helpers.training.recipes import SHARP_ATTENTION_RECIPE
from tools.bench.training import hardware, load, time_to_target  # chapter 10's clock
from tools.common import DATA, provenance, write_record


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=2, help="runs per thread count (default 2)")
    ap.add_argument("--out", type=Path, default=DATA / "ch21_training_time.json")
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    runs = []
    for threads in (1, 2):
        for r in range(args.repeats):
            cfg = dataclasses.replace(SHARP_ATTENTION_RECIPE, threads=threads)
            timed = time_to_target(cfg)
            del timed["reached"]  # the recipe has no target: it trains a fixed 1000 steps
            run = {"threads": threads, "repeat": r, **timed, "load_after": load()}
            runs.append(run)
            print(json.dumps(run), flush=True)
    median = {t: statistics.median(r["seconds"] for r in runs if r["threads"] == t) for t in (1, 2)}
    record = {
        "what": "seconds to train SHARP_ATTENTION_RECIPE (1000 steps) from scratch, per run "
        "(tools/bench/training.py's time_to_target: from the call to the trained model)",
        **provenance(),
        "hardware": hardware(),
        "runs": runs,
        "median_seconds": {str(t): round(s, 1) for t, s in median.items()},
    }
    write_record(args.out, record)
    print(f"median: 1 thread {median[1]:.1f} s, 2 threads {median[2]:.1f} s -> {args.out}")


if __name__ == "__main__":
    main()
