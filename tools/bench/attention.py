"""Attention benchmark: handwritten vs F.scaled_dot_product_attention, time and peak memory vs L.

Usage:
    python -m tools.bench.attention                         # CPU, float32, L = 128 ... 4096
    python -m tools.bench.attention --dtype bfloat16        # CPU, bfloat16
    python -m tools.bench.attention --device cuda           # GPU, bfloat16, CUDA events
    python -m tools.bench.attention --lengths 128 256 --min-run-time 0.2 --out /tmp/b.json

Every row is timed at least --min-runs times (default 5) and for at least --min-run-time
seconds, each call on its own, after two warm-up calls and one call that measures the peak
memory; every run is stored ("times_ms"), and the median and the spread (interquartile range,
min-max) are printed. (For the GPU, tools/record/gpu.py records all of chapter 22's GPU
measurements in one run.)

Writes a JSON record (environment: hardware, date, torch version, device, dtype, load
average before and after; config; one row per variant and L) to
chapters/data/attention_benchmark_<device>[_<dtype>].json, the file the benchmark chapter
reads (the dtype suffix is left out for the defaults: float32 on the CPU, bfloat16 on
CUDA). The record is rewritten after every row, so an interrupted run keeps what it
measured. What is measured and how: see helpers/benchmark.py.

The handwritten path needs about three [B, h, L, L] buffers at once; a configuration whose
estimate exceeds --memory-fraction of the memory available now is recorded as skipped
instead of risking the machine (at L=4096, float32: ~12 GiB).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

from helpers.benchmark import (
    ALL_VARIANTS,
    VARIANTS,
    environment,
    measure,
    results_table,
    save_results,
    spread_table,
)
from tools.common import DATA, command_line


def default_out(device: str, dtype: str) -> Path:
    kind = "cuda" if device.startswith("cuda") else "cpu"
    default_dtype = "bfloat16" if kind == "cuda" else "float32"
    suffix = "" if dtype == default_dtype else f"_{dtype}"
    return DATA / f"attention_benchmark_{kind}{suffix}.json"


def main(argv) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument(
        "--dtype",
        choices=["float32", "bfloat16", "float16"],
        help="default: bfloat16 on CUDA, float32 on the CPU",
    )
    ap.add_argument("--lengths", type=int, nargs="+", default=[128, 256, 512, 1024, 2048, 4096])
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=ALL_VARIANTS)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--d-model", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument(
        "--min-run-time", type=float, default=1.0, help="CPU: seconds of timed runs per row"
    )
    ap.add_argument("--min-runs", type=int, default=5, help="CPU: timed runs per row, at least")
    ap.add_argument(
        "--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)"
    )
    ap.add_argument("--cuda-repeats", type=int, default=20)
    ap.add_argument(
        "--memory-fraction",
        type=float,
        default=0.6,
        help="skip a handwritten row whose estimated peak exceeds this share of available memory",
    )
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)

    if args.threads:
        torch.set_num_threads(args.threads)
    device = args.device
    if device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device here", file=sys.stderr)
        return 2
    dtype = args.dtype or ("bfloat16" if device.startswith("cuda") else "float32")
    out = args.out or default_out(device, dtype)
    config = {
        "B": args.batch,
        "d_model": args.d_model,
        "heads": args.heads,
        "dtype": dtype,
        "lengths": args.lengths,
        "variants": args.variants,
        "mask": "causal",
        "min_run_time_s": args.min_run_time,
        "min_runs": args.min_runs,
        "cuda_repeats": args.cuda_repeats,
        "command": command_line(),
    }
    env = environment(device)
    env["load_average_before"] = env.pop("load_average", None)
    print(
        f"device {device}, {dtype}, torch {env['torch']}, {env.get('gpu', env['cpu'])}, "
        f"{env['threads']} threads, load average {env['load_average_before']}",
        flush=True,
    )

    rows: list[dict] = []
    t0 = time.perf_counter()
    for L in args.lengths:
        for variant in args.variants:
            t = time.perf_counter()
            row = measure(
                variant,
                L,
                B=args.batch,
                d_model=args.d_model,
                heads=args.heads,
                dtype=dtype,
                device=device,
                min_run_time=args.min_run_time,
                min_runs=args.min_runs,
                cuda_repeats=args.cuda_repeats,
                memory_fraction=args.memory_fraction,
            )
            row["load_average"] = [round(x, 2) for x in os.getloadavg()]
            rows.append(row)
            if "ms" not in row:
                what = next(k for k in ("skipped", "oom", "unsupported", "error") if k in row)
                print(f"L={L:5d} {variant:12s} {what}: {row[what]}", flush=True)
            else:
                print(
                    f"L={L:5d} {variant:12s} median {row['ms']:9.2f} ms (IQR {row['iqr_ms']:.2f}, "
                    f"{row['min_ms']:.2f}-{row['max_ms']:.2f}, {row['runs']} runs)  "
                    f"peak {row['peak_mib']:8.1f} MiB  ({row['sdpa_backend']}, "
                    f"{time.perf_counter() - t:.0f} s)",
                    flush=True,
                )
            env["load_average_after"] = row["load_average"]
            env["seconds"] = round(time.perf_counter() - t0, 1)
            save_results(out, env, rows, config)
    print()
    print(results_table(rows, [v for v in ALL_VARIANTS if v in args.variants][:3]))
    print()
    print(spread_table(rows, tuple(args.variants)))
    print(f"\nwrote {out} in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
