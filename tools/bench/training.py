"""Seconds to >= 99.5 % exact match on the 1000 held-out sequences: the book's recipe vs the seed's.

    python -m tools.bench.training                # the benchmark (a few minutes)
    python -m tools.bench.training --record-seed  # once: the seed recipe's full 10-epoch curve
                                                  #   -> chapters/data/seed_recipe_run.json
    python -m tools.bench.training --ablation     # one row per lever, seconds to target
                                                  #   -> chapters/data/training_ablation.json

The benchmark trains helpers.BOOK_RECIPE from scratch --repeats times (wall clock from the call
to the returned model: data, model, training, evaluations and the final greedy confirmation all
count) and takes the median. It trains with --book-threads torch threads, 2 by default: both
cores of the book's machine, the fastest way there when the machine is quiet (chapter 23
measures it against two DDP processes); BOOK_RECIPE itself keeps 1 thread for the book's cached
model, which stays steady on a shared machine. The repeats use the same seed, so their spread
is the clock's, not the training's. The seed recipe (the reference chapter's: d_model 128, batch 64,
warmup 1000, one evaluation per epoch) is not rerun for its ~3 minutes: its per-step time is
measured in the same run, interleaved with the book's runs, and multiplied by the number of steps
its recorded run needed (the first end of epoch at which it reached 99.5 %, from
chapters/data/seed_recipe_run.json); its per-epoch evaluations are timed and added too.
The last line reads

    time_to_99.5=<seconds> seed_recipe=<seconds> speedup=<x>

The machine may be shared: the load average is printed before and after. Compare numbers from
one run only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import helpers.core.embeddings
import helpers.core.model
from helpers import PAD_ID, VOCAB_SIZE, exact_match, make_reversal_dataset
from helpers.training.evaluation import test_set
from helpers.training.recipes import BOOK_RECIPE, SEED_RECIPE, TrainConfig
from helpers.training.schedule import noam_lambda
from helpers.training.train import build_model, teacher_forced_exact_match, train_reversal
from tools.common import DATA, ROOT, provenance, run_fresh, write_record

SEED_RUN = DATA / "seed_recipe_run.json"
ABLATION = DATA / "training_ablation.json"

TARGET = 0.995


def hardware() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        flags = Path("/proc/cpuinfo").read_text()
        bf16 = "avx512_bf16" in flags or "amx_bf16" in flags
    except OSError:
        bf16 = None
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "avx512_bf16": bf16,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


def load() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


# ---------------------------------------------------------------- the seed recipe


def seed_step_seconds(threads: int = 0, steps: int = 20, warmup_steps: int = 3) -> float:
    """Median seconds of one training step of the seed recipe (batch 64, d_model 128).

    threads=0 keeps torch's default (the reference code sets none)."""
    saved = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        return _seed_step_seconds(steps, warmup_steps)
    finally:
        torch.set_num_threads(saved)


def _seed_step_seconds(steps: int, warmup_steps: int) -> float:
    cfg = SEED_RECIPE
    model = build_model(cfg).train()
    src, tgt = make_reversal_dataset(cfg.batch_size * (steps + warmup_steps), seed=cfg.data_seed)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr_scale, betas=(0.9, 0.98), eps=1e-9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, noam_lambda(cfg.d_model, cfg.warmup))
    times = []
    for i in range(steps + warmup_steps):
        s, t = src[i * 64 : (i + 1) * 64], tgt[i * 64 : (i + 1) * 64]
        t0 = time.perf_counter()
        logits = model(s, t[:, :-1])
        loss = F.cross_entropy(
            logits.reshape(-1, VOCAB_SIZE), t[:, 1:].reshape(-1), ignore_index=PAD_ID
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        loss.item()
        if i >= warmup_steps:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def seed_eval_seconds() -> float:
    """One of the seed's per-epoch evaluations: greedy decoding without a cache on 500 sequences."""
    model = build_model(SEED_RECIPE).eval()
    src, tgt = make_reversal_dataset(1000, seed=1)
    t0 = time.perf_counter()
    exact_match(model, src[:500], tgt[:500], use_cache=False)
    return time.perf_counter() - t0


def seed_steps_to_target(record: dict) -> tuple[int, int]:
    """(steps, epochs): the first end of epoch whose validation exact match is >= 99.5 %."""
    per_epoch = record["steps_per_epoch"]
    for step, em in zip(record["eval_step"], record["exact_match"]):
        if step % per_epoch == 0 and em >= TARGET:
            return step, step // per_epoch
    raise SystemExit(f"{SEED_RUN.name}: the seed recipe never reached {TARGET} at an end of epoch")


def record_seed(args) -> None:
    """Train the seed recipe for its full 10 epochs, evaluating every sixth of an epoch."""
    steps_per_epoch = SEED_RECIPE.train_size // SEED_RECIPE.batch_size
    # One thread: on a shared machine, two OpenMP threads competing with other processes can
    # make each step ten times slower. The thread count changes only the low bits of the sums.
    cfg = dataclasses.replace(
        SEED_RECIPE,
        eval_every=steps_per_epoch // 6,
        max_steps=10 * steps_per_epoch,
        threads=args.threads,
    )
    print(f"recording the seed recipe: {cfg.max_steps} steps, load {load()}", flush=True)
    load_before = load()
    res = train_reversal(cfg, progress=True)
    h = res.history
    record = {
        "what": "the reference chapter's recipe (helpers.SEED_RECIPE), trained once for 10 epochs; "
        "exact_match: teacher-forced exact match on the 1000 validation sequences (seed 1), "
        "which equals greedy exact match",
        **provenance(),
        "hardware": hardware(),
        "load_average_before": load_before,
        "load_average_after": load(),
        "config": dataclasses.asdict(cfg),
        "steps_per_epoch": steps_per_epoch,
        "seconds_total": round(res.seconds, 2),
        "ms_per_step": round(1000 * res.seconds / cfg.max_steps, 2),
        "eval_step": h["eval_step"],
        "exact_match": h["exact_match"],
        "seconds": [round(s, 3) for s in h["seconds"]],
        "step_loss": [round(x, 5) for x in h["loss"]],
        "greedy_exact_match_final": exact_match(res.model, *make_reversal_dataset(1000, seed=1)),
    }
    write_record(SEED_RUN, record)
    steps, epochs = seed_steps_to_target(record)
    print(
        f"wrote {SEED_RUN.relative_to(ROOT)}: {res.seconds:.1f} s for 10 epochs, "
        f"99.5 % first at the end of epoch {epochs} (step {steps})"
    )


# ---------------------------------------------------------------- the book recipe


def test_exact_match(model) -> float:
    """Exact match on the test set (10,000 sequences that stopping never looks at; about one in
    nine also occurs in the training set, chapter 09 counts them);
    teacher-forced, which equals greedy exact match (helpers.teacher_forced_exact_match)."""
    return teacher_forced_exact_match(model, *test_set())


def time_to_target(cfg: TrainConfig) -> dict:
    t0 = time.perf_counter()
    res = train_reversal(cfg, progress=False)
    seconds = time.perf_counter() - t0
    em = res.history["exact_match"][-1]
    return {
        "seconds": round(seconds, 2),
        "steps": res.history["step"][-1],
        "exact_match": em,
        "test_exact_match": test_exact_match(res.model),  # not timed
        "reached": bool(cfg.target_exact_match is not None and em >= cfg.target_exact_match),
    }


def benchmark(args) -> None:
    if not SEED_RUN.exists():
        raise SystemExit(
            f"missing {SEED_RUN}: run  python -m tools.bench.training --record-seed  once"
        )
    record = json.loads(SEED_RUN.read_text())
    seed_steps, seed_epochs = seed_steps_to_target(record)
    print("hardware:", hardware())
    print("load average before:", load(), flush=True)
    print(
        "book recipe:",
        {k: v for k, v in dataclasses.asdict(BOOK_RECIPE).items() if v != getattr(SEED_RECIPE, k)},
    )
    book_cfg = dataclasses.replace(BOOK_RECIPE, threads=args.book_threads)
    print(f"book recipe trained with threads={args.book_threads} (BOOK_RECIPE: 1)")
    runs, step_times = [], []
    for r in range(args.repeats):
        # the seed recipe at its faster thread count on this machine (fair to it under load)
        step_times.append(min(seed_step_seconds(threads) for threads in (0, 1)))
        run = time_to_target(book_cfg)
        runs.append(run)
        print(
            f"  run {r + 1}: book recipe {run['seconds']:6.2f} s, {run['steps']} steps, "
            f"exact match {run['exact_match']:.3f} (test set {run['test_exact_match']:.4f}); "
            f"seed recipe step {1000 * step_times[-1]:.1f} ms",
            flush=True,
        )
        if not run["reached"]:
            raise SystemExit("the book recipe did not reach the target")
    eval_s = seed_eval_seconds()
    book = statistics.median(r["seconds"] for r in runs)
    step = statistics.median(step_times)
    # Generous to the seed recipe: its first evaluation at >= 99.5 % in the recorded run (one every
    # sixth of an epoch), no evaluation cost. Its own protocol (greedy on 500 sequences at the end
    # of each epoch) is printed too.
    first = next(s for s, em in zip(record["eval_step"], record["exact_match"]) if em >= TARGET)
    seed = first * step
    protocol = seed_steps * step + seed_epochs * eval_s
    print(
        f"seed recipe: first >= 99.5 % at step {first} of the run recorded {record['date'][:10]} "
        f"x {1000 * step:.1f} ms per step (measured now) = {seed:.1f} s"
    )
    print(
        f"  (with its own protocol, greedy evaluation at the end of each epoch: "
        f"epoch {seed_epochs}, step {seed_steps}, {protocol:.1f} s)"
    )
    print("load average after:", load())
    print(f"time_to_99.5={book:.1f} seed_recipe={seed:.1f} speedup={seed / book:.1f}x")


# ---------------------------------------------------------------- the ablation


def ablation_rows():
    """(status, lever, config): cumulative from the seed recipe to the book's, then rejected levers.

    Every run uses one thread (threads=1), except the row that measures torch's default."""
    cheap = dataclasses.replace(
        SEED_RECIPE, eval_every=20, eval_gate=0.0, target_exact_match=TARGET, threads=1
    )
    small = dataclasses.replace(cheap, d_model=32, dff=128)
    batch = dataclasses.replace(small, batch_size=128, warmup=100)
    nodrop = dataclasses.replace(batch, dropout=0.0)
    cool = dataclasses.replace(nodrop, max_steps=500, cooldown=400)
    assert dataclasses.replace(cool, eval_every=10, eval_gate=0.98) == BOOK_RECIPE
    B = BOOK_RECIPE
    return [
        ("kept", "smaller model: d_model 32, dff 128 (61k parameters)", small),
        ("kept", "batch 128, warmup 100", batch),
        ("kept", "dropout 0", nodrop),
        ("kept", "linear cooldown: lr down to 0 at step 500", cool),
        (
            "kept",
            "evaluate at every 10th step whose training batch is 98 % right (the book's recipe)",
            B,
        ),
        (
            "option",
            "2 threads (torch's default here) instead of 1",
            dataclasses.replace(B, threads=0),
        ),
        ("busy", "1 thread, another program busy on one core (the book's recipe)", B),
        ("busy", "2 threads, another program busy on one core", dataclasses.replace(B, threads=0)),
        ("rejected", "+ bf16 autocast", dataclasses.replace(B, bf16=True)),
        (
            "rejected",
            "+ length bucketing (batches sorted by length, padding cut)",
            dataclasses.replace(B, bucket=20),
        ),
        ("option", "+ label smoothing 0.1", dataclasses.replace(B, label_smoothing=0.1)),
        (
            "rejected",
            "d_model 64, dff 256 instead of 32, 128",
            dataclasses.replace(B, d_model=64, dff=256),
        ),
        ("option", "1 layer instead of 2 in each stack", dataclasses.replace(B, num_layers=1)),
        (
            "rejected",
            "+ torch.compile (compile time included)",
            dataclasses.replace(B, compile=True),
        ),
        ("rejected", "- the token-id checks in every forward pass", B),
        ("option", FUSED_ADAM, B),
    ]


FUSED_ADAM = "+ fused Adam step (torch.optim.Adam(fused=True), one kernel for all parameters)"


def fused_adam():
    """Make helpers.training.train's Adam the fused one (torch 2.13 has it on the CPU) while a row
    runs."""
    import functools

    saved = torch.optim.Adam
    torch.optim.Adam = functools.partial(saved, fused=True)

    def restore():
        torch.optim.Adam = saved

    return restore


def no_checks():
    """Switch off the token-id validation (four checks per forward pass: src and tgt_in in the
    model, then again in each embedding; each a .min() and a .max()) to measure what it costs."""
    saved = helpers.core.model.check_token_ids, helpers.core.embeddings.check_token_ids
    helpers.core.model.check_token_ids = helpers.core.embeddings.check_token_ids = lambda *a, **k: (
        None
    )

    def restore():
        helpers.core.model.check_token_ids, helpers.core.embeddings.check_token_ids = saved

    return restore


def spin() -> None:
    """Keep one core busy until killed."""
    while True:
        pass


def busy_core() -> multiprocessing.Process:
    """Another program that keeps one core busy (a shared machine, in miniature)."""
    process = multiprocessing.Process(target=spin, daemon=True)
    process.start()
    return process


def time_to_target_of(fields: dict) -> dict:
    """time_to_target of TrainConfig(**fields): what run_fresh can call with JSON."""
    return time_to_target(TrainConfig(**fields))


def time_in_fresh_process(cfg: TrainConfig) -> dict:
    """time_to_target in a new Python process with an empty compile cache: torch.compile's cost
    as a fresh clone pays it (a second compile in the same process, or with a warm on-disk cache,
    is much cheaper and would flatter it)."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache, TORCHDYNAMO_VERBOSE="0")
        return run_fresh(time_to_target_of, dataclasses.asdict(cfg), env=env)


def extrapolated_seed_rows(record: dict, step: float, eval_s: float) -> list[dict]:
    """The seed recipe itself, and with the cheap evaluation: recorded steps x measured step
    time."""
    steps, epochs = seed_steps_to_target(record)
    cheap = next(s for s, em in zip(record["eval_step"], record["exact_match"]) if em >= TARGET)
    return [
        {
            "status": "baseline",
            "lever": "reference recipe (d_model 128, batch 64, warmup 1000, dropout 0.1, "
            "greedy evaluation each epoch)",
            "seconds": round(steps * step + epochs * eval_s, 1),
            "steps": steps,
            "extrapolated": True,
        },
        {
            "status": "kept",
            "lever": f"cheap evaluation: teacher-forced exact match every "
            f"{record['config']['eval_every']} steps, stop at 99.5 %",
            "seconds": round(cheap * step, 1),
            "steps": cheap,
            "extrapolated": True,
        },
    ]


def ablation(args) -> None:
    record = json.loads(SEED_RUN.read_text())
    out = {
        "what": "seconds to >= 99.5 % exact match on the 1000 validation sequences, one row "
        "per lever; each row trains from scratch, once per seed 0..repeats-1, and reports the "
        "medians; "
        "rows marked extrapolated use the recorded reference run's step count times the "
        "measured step time; torch.compile runs in a fresh process with an empty compile cache",
        **provenance(),
        "hardware": hardware(),
        "load_average_before": load(),
        "repeats": args.repeats,
        "rows": [],
    }
    # The seed recipe's step time is measured before every row (at its faster thread count) and
    # the median is used: one measurement would catch whatever else the machine was doing then.
    seed_steps = []
    for status, lever, cfg in ablation_rows():
        seed_steps.append(min(seed_step_seconds(threads) for threads in (0, 1)))
        row_load, results = load(), []
        busy = busy_core() if status == "busy" else None
        for seed in range(
            args.repeats
        ):  # each repeat with another seed (initial weights, batch order)
            run_cfg = dataclasses.replace(cfg, seed=seed)
            patch = {
                "- the token-id checks in every forward pass": no_checks,
                FUSED_ADAM: fused_adam,
            }
            restore = patch[lever]() if lever in patch else None
            try:
                results.append(
                    time_in_fresh_process(run_cfg) if cfg.compile else time_to_target(run_cfg)
                )
            finally:
                if restore:
                    restore()
        if busy:
            busy.kill()
            busy.join()
        row = {
            "status": status,
            "lever": lever,
            "seconds": round(statistics.median(r["seconds"] for r in results), 1),
            "steps": int(statistics.median(r["steps"] for r in results)),
            "reached": all(r["reached"] for r in results),
            "extrapolated": False,
            "all_seconds": [r["seconds"] for r in results],
            "all_steps": [r["steps"] for r in results],
            "all_test_exact_match": [r["test_exact_match"] for r in results],
            "load_average_at_start": row_load,
        }
        out["rows"].append(row)
        print(row, flush=True)
    step = statistics.median(seed_steps)
    out["seed_ms_per_step"] = round(1000 * step, 1)
    out["seed_ms_per_step_all"] = [round(1000 * x, 1) for x in seed_steps]
    out["rows"] = extrapolated_seed_rows(record, step, seed_eval_seconds()) + out["rows"]
    for row in out["rows"][:2]:
        print(row, flush=True)
    out["load_average_after"] = load()
    write_record(ABLATION, out)
    print(f"wrote {ABLATION.relative_to(ROOT)}")


def relabel(args) -> None:
    """Re-apply the statuses of ablation_rows() to the recorded rows, matched by lever, without
    measuring again (a status is a decision about a measurement, not part of it)."""
    data = json.loads(ABLATION.read_text())
    status = {lever: st for st, lever, _ in ablation_rows()}
    for row in data["rows"]:
        if row["lever"] in status and row["status"] != status[row["lever"]]:
            print(f"{row['lever']}: {row['status']} -> {status[row['lever']]}")
            row["status"] = status[row["lever"]]
    write_record(ABLATION, data)


if __name__ == "__main__":
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--record-seed", action="store_true", help="record the seed recipe's full curve")
    p.add_argument("--ablation", action="store_true", help="measure one row per lever")
    p.add_argument(
        "--relabel", action="store_true", help="re-apply the ablation's statuses to its JSON"
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="benchmark: runs of the book recipe (median); ablation: seeds per row (median)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads for --record-seed (0: torch's default)",
    )
    p.add_argument(
        "--book-threads",
        type=int,
        default=2,
        help="benchmark: torch threads for the book's recipe (default 2: both cores of this "
        "machine, the fastest on a quiet machine; BOOK_RECIPE itself trains the book's cached "
        "model with 1, steady when the machine is shared)",
    )
    a = p.parse_args()
    if a.record_seed:
        record_seed(a)
    elif a.ablation:
        ablation(a)
    elif a.relabel:
        relabel(a)
    else:
        benchmark(a)
