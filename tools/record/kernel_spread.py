"""How much the book's trained models move when the float32 bits change.

Trains, in a fresh process per numerics mode, the models whose numbers chapters 10, 11, 12
and 21 print, and records what those chapters report about them:

  pinned   the book's kernel environment (helpers/repro/pin.py PIN): what the chapters print;
  broken   make test-portable's environment (BROKEN_PIN): ATen's scalar kernels, MKL's
           default path, as on a CPU where the pin cannot hold;
  native   no pin at all on this CPU (its own ATen kernels, MKL_CBWR unset), one thread.

Per mode: BOOK_RECIPE (stop step, test exact match, chapter 21's sharpness of it), the
first 100 steps of chapter 21's default-init twin (its sharpness), the fixed-budget pair of
chapter 12 (test exact match) and SHARP_ATTENTION_RECIPE (sharpness, test exact match).
Writes chapters/data/kernel_spread.json; the chapters read their bounds' justification
from it. Two modes run at a time (one thread each): about 10 minutes on 2 cores.

    .venv/bin/python -m tools.record.kernel_spread
    .venv/bin/python -m tools.record.kernel_spread --sharp-only   # the sharp model's parts only
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from concurrent.futures import ThreadPoolExecutor

from tools.common import DATA, command_and_date, pin, pin_env, run_fresh, write_record

OUT = DATA / "kernel_spread.json"

# A fourth path, not re-run: the same models as recorded before the pin existed, on an Intel
# Xeon with AVX-512 (PyTorch's default kernels there, MKL_CBWR unset, one thread), read from the
# book's stored outputs and chapters/data/ch21_sharpness.json at commit 9cfad91.
EARLIER = {
    "numerics": {
        "cpu": "Intel(R) Xeon(R) Processor",
        "aten_capability": "AVX512",
        "mkl_cbwr": "unset",
        "threads": 1,
        "torch": "2.13.0",
        "pinned": False,
        "note": "recorded before the pin, at commit 9cfad91; book mirror/eos to 2 decimals",
    },
    "book": {
        "stop_step": 270,
        "test_correct": 9959,
        "mirror": [0.22, 0.54],
        "eos_peak": [0.56, 0.0],
    },
    "twin_step_100": {"mirror": [0.1479, 0.1297], "eos_peak": [0.225, 0.465]},
    "sharp_step_100": {"mirror": [0.3495, 0.2685], "eos_peak": [0.505, 0.135]},
    "sharp": {"test_correct": 9998, "mirror": [0.8601, 0.9177], "eos_peak": [1.0, 0.985]},
}
NATIVE = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
MODES = {"pinned": pin.PIN, "broken": pin.BROKEN_PIN, "native": NATIVE}


def rounded(t) -> list[float]:
    return [round(float(v), 4) for v in t]


def sharp_parts() -> dict:
    """Chapter 21's sharp model: its first 100 steps trained, and its stored weights evaluated
    (data/ch21_sharp_model.pt), both measured on the probe set."""
    import torch

    from helpers import SHARP_ATTENTION_RECIPE, make_reversal_dataset, train_reversal
    from helpers.analysis.visualize import alignment_stats
    from helpers.training.train import build_model

    src_p, tgt_p = make_reversal_dataset(200, seed=7)
    cfg = dataclasses.replace(SHARP_ATTENTION_RECIPE, max_steps=100, cooldown=0)
    first = train_reversal(cfg, progress=False).model.eval()
    stats = alignment_stats(first, src_p, tgt_p)
    out = {
        "sharp_step_100": {
            "mirror": rounded(stats["mirror"]),
            "eos_peak": rounded(stats["eos_peak"]),
        }
    }
    stored = torch.load(DATA / "ch21_sharp_model.pt", weights_only=True)
    model = build_model(SHARP_ATTENTION_RECIPE)
    model.load_state_dict(stored["state_dict"])
    stats = alignment_stats(model.eval(), src_p, tgt_p)
    out["sharp_loaded"] = {
        "mirror": rounded(stats["mirror"]),
        "eos_peak": rounded(stats["eos_peak"]),
    }
    return out


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
    from helpers.analysis.visualize import alignment_stats
    from helpers.repro.numerics import provenance
    from helpers.training.recipes import default_init_recipe, fixed_budget_recipe

    src_p, tgt_p = make_reversal_dataset(200, seed=7)  # chapter 21's probe set
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
    return {**out, **sharp_parts()}


def run_mode(name: str, function=worker) -> dict:
    """function() in a fresh process with the numerics of mode `name` (see MODES)."""
    result = run_fresh(function, env={**pin_env("default"), **MODES[name]})
    print(f"{name}: {json.dumps(result)}", flush=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", nargs="*", default=list(MODES), choices=list(MODES))
    parser.add_argument(
        "--sharp-only",
        action="store_true",
        help="only the sharp model's parts, merged into the existing record (a minute or two)",
    )
    args = parser.parse_args()
    if args.sharp_only:
        record = json.loads(OUT.read_text())
        with ThreadPoolExecutor(max_workers=2) as pool:
            parts = pool.map(lambda m: run_mode(m, sharp_parts), args.modes)
            for name, part in zip(args.modes, parts):
                record["results"][name].update(part)
        write_record(OUT, record)
        print(f"updated {OUT}")
        return 0
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(args.modes, pool.map(run_mode, args.modes)))
    record = {
        "what": "the book's trained models under three numerics modes (see the tool's docstring)",
        **command_and_date(),  # the numerics: one block per mode, in results
        "modes": {name: MODES[name] for name in args.modes},
        "results": {**results, "avx512_earlier": EARLIER},
    }
    write_record(OUT, record)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
