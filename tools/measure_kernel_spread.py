#!/usr/bin/env python3
"""How much the book's trained models move when the float32 bits change (issue: portability).

Trains, in a fresh process per numerics mode, the models whose numbers chapters 10, 11, 12
and 18 print, and records what those chapters report about them:

  pinned   the book's kernel environment (helpers/pin.py PIN): what the chapters print;
  broken   make test-portable's environment (BROKEN_PIN): ATen's scalar kernels, MKL's
           default path, as on a CPU where the pin cannot hold;
  native   no pin at all on this CPU (its own ATen kernels, MKL_CBWR unset), one thread.

Per mode: BOOK_RECIPE (stop step, test exact match, chapter 18's sharpness of it), the
first 100 steps of chapter 18's default-init twin (its sharpness), the fixed-budget pair of
chapter 12 (test exact match) and SHARP_ATTENTION_RECIPE (sharpness, test exact match).
Writes chapters/data/kernel_spread.json; the chapters read their bounds' justification
from it. Two modes run at a time (one thread each): about 10 minutes on 2 cores.

    .venv/bin/python tools/measure_kernel_spread.py
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "chapters" / "data" / "kernel_spread.json"
sys.path.insert(0, str(ROOT / "src" / "helpers"))
from pin import BROKEN_PIN, PIN  # noqa: E402

NATIVE = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
MODES = {"pinned": PIN, "broken": BROKEN_PIN, "native": NATIVE}
PIN_VARS = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")


def rounded(t) -> list[float]:
    return [round(float(v), 4) for v in t]


def worker() -> dict:
    """Runs inside one mode's environment; returns what the chapters report."""
    from helpers import (
        BOOK_RECIPE,
        SHARP_ATTENTION_RECIPE,
        exact_match_with_interval,
        make_reversal_dataset,
        test_set,
        train_reversal,
    )
    from helpers.numerics import provenance
    from helpers.recipes import default_init_recipe, fixed_budget_recipe
    from helpers.visualize import alignment_stats

    src_p, tgt_p = make_reversal_dataset(200, seed=7)  # chapter 18's probe set
    test = test_set()
    out = {"numerics": provenance()}

    def trained(cfg):
        result = train_reversal(cfg, progress=False)
        result.model.eval()
        return result

    book = trained(BOOK_RECIPE)
    em = exact_match_with_interval(book.model, *test)
    stats = alignment_stats(book.model, src_p, tgt_p)
    out["book"] = {
        "stop_step": book.steps,
        "test_correct": em.correct,
        "mirror": rounded(stats["mirror"]),
        "eos_peak": rounded(stats["eos_peak"]),
    }
    for name, cfg in (
        ("fixed_budget", fixed_budget_recipe()),
        ("default_init", default_init_recipe()),
    ):
        out[name] = {"test_correct": exact_match_with_interval(trained(cfg).model, *test).correct}
    twin = dataclasses.replace(SHARP_ATTENTION_RECIPE, init="default", max_steps=100, cooldown=0)
    stats = alignment_stats(trained(twin).model, src_p, tgt_p)
    out["twin_step_100"] = {
        "mirror": rounded(stats["mirror"]),
        "eos_peak": rounded(stats["eos_peak"]),
    }
    sharp = trained(SHARP_ATTENTION_RECIPE)
    stats = alignment_stats(sharp.model, src_p, tgt_p)
    out["sharp"] = {
        "test_correct": exact_match_with_interval(sharp.model, *test).correct,
        "mirror": rounded(stats["mirror"]),
        "eos_peak": rounded(stats["eos_peak"]),
    }
    return out


def run_mode(name: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in PIN_VARS}
    env.update(MODES[name])
    env["PYTHONPATH"] = str(ROOT / "src")
    proc = subprocess.run(
        [sys.executable, __file__, "--worker"], env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(f"mode {name} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"{name}: {json.dumps(result)}", flush=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--modes", nargs="*", default=list(MODES), choices=list(MODES))
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker()))
        return 0
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(args.modes, pool.map(run_mode, args.modes)))
    record = {
        "what": "the book's trained models under three numerics modes (see the tool's docstring)",
        "command": "tools/measure_kernel_spread.py",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "modes": {name: MODES[name] for name in args.modes},
        "results": results,
    }
    OUT.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
