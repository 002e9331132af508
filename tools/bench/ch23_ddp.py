"""Chapter 23's measurement: the book's recipe trained to 99.5 % validation exact match with
1 process x 1 thread, 1 process x 2 threads and 2 processes x 1 thread (DDP, gloo).

    python -m tools.bench.ch23_ddp [--seeds 0,1,2,3,4]   # -> chapters/data/ch23_ddp_timing.json

Every run is a fresh process, timed from its start to its exit: Python and torch start-up,
data, training, evaluations and the checkpoint all count. All three configurations run the
same loop (helpers.train_reversal_ddp; one process runs it without a process group) on the
same global batches, so with the same seed they differ only in the rounding of the sums.
The configurations are interleaved seed by seed, so that a change in the machine's load hits
all three alike; the load average is recorded. The trained models are scored on the test set
(helpers.training.evaluation: 10,000 sequences that stopping never looks at; about one in nine also
occurs in the training set, chapter 09 counts them).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from tools.common import DATA, ROOT, provenance, run_fresh, write_record

OUT = DATA / "ch23_ddp_timing.json"
CONFIGS = {  # name: (processes, threads per process)
    "1 process x 1 thread": (1, 1),
    "1 process x 2 threads": (1, 2),
    "2 processes x 1 thread": (2, 1),
}


def one_process(threads: int, seed: int, out: str) -> list[dict]:
    """One process, no process group: the same loop as the DDP script, world size 1; what the
    DDP script gathers into result.json, for its one rank (run_fresh runs it on its own)."""
    t_start = time.perf_counter()
    import dataclasses  # from here on, imports count as start-up: the timed run pays them

    import torch

    from helpers.training.distributed import train_reversal_ddp
    from helpers.training.recipes import BOOK_RECIPE

    torch.set_num_threads(threads)
    cfg = dataclasses.replace(BOOK_RECIPE, seed=seed, threads=threads)
    res = train_reversal_ddp(cfg, checkpoint=Path(out) / "model.pt")
    h = res.history
    rank = {
        "rank": 0,
        "world_size": 1,
        "threads": threads,
        "steps": h["step"][-1],
        "exact_match": h["exact_match"][-1],
        "ms_per_step": round(1000 * res.step_seconds, 2),
        "train_seconds": round(res.seconds, 3),
        "startup_seconds": round(time.perf_counter() - t_start - res.seconds, 3),
    }
    return [rank]


def train_ranks(procs: int, threads: int, seed: int, out: str) -> list[dict]:
    """Train once in fresh processes (one_process, or chapter 23's script under torchrun), the
    checkpoint into `out`; what each rank saw."""
    from helpers.training.distributed import torchrun_command

    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    if procs == 1:
        return run_fresh(one_process, threads, seed, out, env=env)
    script = ROOT / "tools" / "train_ddp.py"
    cmd = torchrun_command(script, procs, "--out", out, "--seed", str(seed))
    cmd += ["--threads", str(threads), "--log-every", "0"]
    subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    return json.loads((Path(out) / "result.json").read_text())


def run_config(name: str, seed: int) -> dict:
    procs, threads = CONFIGS[name]
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        ranks = train_ranks(procs, threads, seed, out)
        wall = time.perf_counter() - t0
        test = test_exact_match(Path(out) / "model.pt")
    return {
        "config": name,
        "seed": seed,
        "seconds": round(wall, 2),
        "steps": ranks[0]["steps"],
        "ms_per_step": ranks[0]["ms_per_step"],
        # everything but train_reversal_ddp itself: interpreter, imports, torchrun, the group
        "outside_training_seconds": round(wall - ranks[0]["train_seconds"], 2),
        "validation_exact_match": ranks[0]["exact_match"],
        "test_exact_match": test,
        "load_average": os.getloadavg()[0],
    }


def test_exact_match(path: Path) -> float:
    import torch

    from helpers.training.evaluation import test_set
    from helpers.training.recipes import TrainConfig
    from helpers.training.train import build_model, teacher_forced_exact_match

    ckpt = torch.load(path)
    model = build_model(TrainConfig(**ckpt["config"]))
    model.load_state_dict(ckpt["state_dict"])
    return teacher_forced_exact_match(model, *test_set())


def main(args) -> None:
    import torch

    seeds = [int(s) for s in args.seeds.split(",")]
    record = {
        "what": "the book's recipe trained to >= 99.5 % validation exact match by "
        "helpers.train_reversal_ddp; seconds: wall clock of the whole command (start-up "
        "counted); ms_per_step: mean time of a training step; test_exact_match: teacher-forced "
        "(= greedy) exact match on the 10,000 test sequences",
        **provenance(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "load_average_before": list(os.getloadavg()),
        "runs": [],
    }
    for seed in seeds:
        for name in CONFIGS:
            row = run_config(name, seed)
            record["runs"].append(row)
            print(row, flush=True)
        # after every seed, so that a long recording interrupted keeps its complete seeds
        record["load_average_after"] = list(os.getloadavg())
        write_record(OUT, record)
    for name in CONFIGS:
        rows = [r for r in record["runs"] if r["config"] == name]
        secs = statistics.median(r["seconds"] for r in rows)
        ms = statistics.median(r["ms_per_step"] for r in rows)
        print(f"{name}: median {secs:.1f} s to the target, {ms:.1f} ms per step")
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated recipe seeds")
    main(p.parse_args())
