"""Record every GPU measurement the book shows, in one run of one prepared script. Chapter 22.

On a machine with an NVIDIA GPU (from the repository root; it needs only torch and numpy, plus
pytest for the last part, and writes nothing outside --out):

    PYTHONPATH=src timeout -k 10 460 python3 -m tools.record.gpu --device cuda --out OUT_DIR

The dry run, every part at tiny sizes on the CPU (tests/test_record_gpu.py runs it):

    PYTHONPATH=src python3 -m tools.record.gpu --device cpu --quick --out /tmp/record_gpu

Parts, in this order, each with its own time cap (seconds, --caps) inside the --budget:
1. attention  the attention sweep of chapter 22 (B=8, d_model=512, h=8, causal; L = 128 ...
              16384; bfloat16, then float32): the handwritten path, SDPA with our boolean mask,
              with a mask inverted once, with is_causal, and forced to each backend (flash,
              memory-efficient, math, cuDNN) where it runs. CUDA-event timing after warm-up,
              20 runs per row; max_memory_allocated after reset_peak_memory_stats, absolute and
              extra over the inputs; an out-of-memory error is recorded and the sweep goes on.
              First, the reference chapter's own protocol at L=1024 (float32 weights under
              bfloat16 autocast, a mean over 20 calls, absolute peak), for a like-for-like
              comparison with its RTX 4090 numbers.
2. training   wall-clock seconds to >= 99.5 % validation exact match on the device, for the
              book's recipe (helpers.BOOK_RECIPE, 3 runs) and the reference chapter's
              (helpers.SEED_RECIPE, stopping at the first epoch that reaches 99.5 %, 1 run), after
              an untimed warm-up; then exact match of each trained model on the 10,000-sequence
              test set (helpers.training.evaluation), with its 95 % interval.
3. decoding   greedy decoding without and with the KV cache for 16, 64, 256 and 512 new tokens
              (batch 1, untrained model of the book's default shape, seed 0), tokens compared.
4. unit_tests pytest on tests/test_cuda.py on the device (both attention paths agree in
              float32 and bfloat16; the KV cache is token-identical; .to() carries buffers).

Each part writes OUT_DIR/<part>_<tag>.json as soon as it finishes (tag: "cuda", or e.g.
"cpu_quick"); the attention sweep also rewrites its file after every row. A part that fails
records its error, and the next part still runs. OUT_DIR/record_gpu_<tag>.json lists every
part's status. Every file holds the environment: GPU, driver, torch, CUDA, date.
If the run is stopped (timeout sends SIGTERM), the part in progress records what it has.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ET
from pathlib import Path

import torch

# Only torch, numpy and the standard library are needed on the way: `import helpers` loads
# every module of the package, none of which imports anything else at import time, and
# tools.common imports only the standard library (tests/test_record_gpu.py runs this module
# with every other installed package hidden). helpers comes from PYTHONPATH=src there.
from helpers import benchmark as bm
from helpers.core.data import make_reversal_dataset
from helpers.core.model import Transformer
from helpers.core.vocab import VOCAB_SIZE
from helpers.decoding.greedy import greedy_decode
from helpers.training.recipes import BOOK_RECIPE, SEED_RECIPE, TrainConfig
from helpers.training.train import train_reversal
from tools.common import ROOT, command_line, write_record

PARTS = ("attention", "training", "decoding", "unit_tests")
CAPS = {"attention": 150, "training": 150, "decoding": 60, "unit_tests": 60}
TARGET = 0.995
DEVICE_COMMAND = (
    "PYTHONPATH=src timeout -k 10 460 python3 -m tools.record.gpu --device cuda --out $OUT/gpu"
)


class Terminated(BaseException):
    """SIGTERM (from `timeout`): stop the part in progress, keep what it recorded."""


class TimeCap(Exception):
    """A part ran past its time cap."""


def tag_for(device: str, quick: bool) -> str:
    kind = torch.device(device).type
    return kind + ("_quick" if quick else "")


def environment(device: str) -> dict:
    env = bm.environment(device)
    env["numpy"] = __import__("numpy").__version__
    env["command"] = command_line()
    return env


def sync(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


# ----------------------------------------------------------------------------- 1. attention


def attention_config(quick: bool) -> dict:
    if quick:
        return dict(B=2, d_model=64, heads=4, lengths=[32, 64], reference_L=64)
    lengths = [128, 256, 512, 1024, 2048, 4096, 8192, 16384]
    return dict(B=8, d_model=512, heads=8, lengths=lengths, reference_L=1024)


def part_attention(args, deadline: float, save) -> dict:
    cfg = attention_config(args.quick)
    shape = dict(B=cfg["B"], d_model=cfg["d_model"], heads=cfg["heads"])
    record = {
        "config": {
            **cfg,
            "dtypes": ["bfloat16", "float32"],
            "variants": list(bm.ALL_VARIANTS),
            "mask": "causal",
            "cuda_repeats": args.cuda_repeats,
            "warmup": 3,
            "seed": 0,
        },
        "reference_protocol": [],
        "rows": [],
    }
    for grad in (False, True):
        record["reference_protocol"] += bm.measure_like_reference(
            L=cfg["reference_L"], device=args.device, grad=grad, **shape
        )
    save(record)
    failed: set = set()  # (dtype, variant) that ran out of memory: skip longer L
    for dtype in ("bfloat16", "float32"):
        for L in cfg["lengths"]:
            for variant in bm.ALL_VARIANTS:
                if time.monotonic() > deadline:
                    raise TimeCap(f"stopped before {dtype} L={L} {variant}")
                if (dtype, variant) in failed:
                    row = dict(variant=variant, L=L, dtype=dtype, **shape)
                    row["score_matrix_mib"] = (
                        bm.score_matrix_bytes(cfg["B"], cfg["heads"], L, getattr(torch, dtype))
                        / bm.MiB
                    )
                    row["oom"] = "not attempted: out of memory at a shorter L"
                else:
                    row = bm.measure(
                        variant,
                        L,
                        dtype=dtype,
                        device=args.device,
                        cuda_repeats=args.cuda_repeats,
                        warmup=3,
                        min_runs=3 if args.quick else 5,
                        min_run_time=0.0 if args.quick else 1.0,
                        **shape,
                    )
                    if "oom" in row:
                        failed.add((dtype, variant))
                record["rows"].append(row)
                log_row(row)
                save(record)
    return record


def log_row(row: dict) -> None:
    what = bm.outcome(row)
    if what is None:
        text = f"{row['ms']:9.3f} ms  peak +{row['peak_mib']:9.1f} MiB  {row.get('sdpa_backend')}"
    else:
        text = f"{what}: {row[what]}"[:120]
    print(f"  {row['dtype']:<8} L={row['L']:<6} {row['variant']:<15} {text}", flush=True)


# ----------------------------------------------------------------------------- 2. training


def train_on(cfg: TrainConfig, device: str, deadline: float | None = None) -> dict:
    """helpers.training.train.train_reversal on `device` (no progress bar, stopped at
    `deadline`)."""
    result = train_reversal(cfg, progress=False, device=device, deadline=deadline)
    return {
        "model": result.model,
        "history": result.history,
        "seconds": result.seconds,
        "steps": result.steps,
        "reached_target": result.reached_target,
        "stopped": result.stopped,
    }


def training_recipes(quick: bool) -> dict:
    """name -> (config, runs). The reference recipe stops at the first epoch >= 99.5 %."""
    book = BOOK_RECIPE
    seed = dataclasses.replace(SEED_RECIPE, target_exact_match=TARGET)
    if not quick:
        return {"book": (book, 3), "reference": (seed, 1)}

    def tiny(cfg, target):
        return dataclasses.replace(
            cfg,
            threads=1,
            train_size=640,
            val_size=100,
            eval_size=100,
            max_steps=8,
            warmup=4,
            cooldown=min(cfg.cooldown, 4),
            eval_every=4,
            eval_gate=0.0,
            target_exact_match=target,
        )

    # target 0.0: the first evaluation stops the run (the confirm path runs); 0.995: it never
    # does in 8 steps (the run goes to max_steps)
    return {"book": (tiny(book, 0.0), 1), "reference": (tiny(seed, TARGET), 1)}


def jsonable(value):
    """A result of helpers.evaluation (dataclass, named tuple, dict, number) as JSON data."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: jsonable(v) for k, v in dataclasses.asdict(value).items()}
    if hasattr(value, "_asdict"):
        return {k: jsonable(v) for k, v in value._asdict().items()}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


def test_set_exact_match(model, quick: bool) -> dict:
    """Exact match on helpers.training.evaluation's test set, with its 95 % interval (quick: 300
    of it)."""
    from helpers.training.evaluation import exact_match_with_interval, test_set

    src, tgt = test_set(300) if quick else test_set()
    device = next(model.parameters()).device
    t = time.perf_counter()
    result = exact_match_with_interval(model, src.to(device), tgt.to(device))
    return {"sequences": int(src.size(0)), "seconds": time.perf_counter() - t, **_as_dict(result)}


def _as_dict(result) -> dict:
    data = jsonable(result)
    return data if isinstance(data, dict) else {"result": data}


def part_training(args, deadline: float, save) -> dict:
    recipes = training_recipes(args.quick)
    record = {
        "config": {
            "target": TARGET,
            "recipes": {k: dataclasses.asdict(c) for k, (c, _) in recipes.items()},
            "runs": {k: n for k, (_, n) in recipes.items()},
            "timing": "wall clock from the call to the trained model: data, model, training, "
            "evaluations and the final greedy confirmation, after an untimed warm-up run",
        },
        "runs": [],
    }
    warm = dataclasses.replace(recipes["book"][0], max_steps=10, target_exact_match=None)
    warm = dataclasses.replace(warm, cooldown=min(warm.cooldown, 10), eval_every=5)
    t = time.perf_counter()
    train_on(warm, args.device)
    record["warmup_seconds"] = time.perf_counter() - t
    for name, (cfg, runs) in recipes.items():
        for i in range(runs):
            if time.monotonic() > deadline:
                raise TimeCap(f"stopped before {name} run {i + 1}")
            out = train_on(cfg, args.device, deadline)
            run = {
                "recipe": name,
                "run": i + 1,
                "seconds": out["seconds"],
                "steps": out["steps"],
                "reached_target": out["reached_target"],
                "stopped": out["stopped"],
                "validation_exact_match": out["history"]["exact_match"][-1]
                if out["history"]["exact_match"]
                else None,
                "evaluations": {
                    k: out["history"][k] for k in ("eval_step", "exact_match", "seconds")
                },
                "loss_every_10_steps": [round(x, 5) for x in out["history"]["loss"][::10]],
            }
            try:
                run["test"] = test_set_exact_match(out["model"], args.quick)
            except Exception as err:  # e.g. helpers.training.evaluation not there yet
                run["test_error"] = f"{type(err).__name__}: {err}"
            record["runs"].append(run)
            print(
                f"  {name} run {i + 1}: {out['seconds']:.1f} s, {out['steps']} steps, "
                f"validation {run['validation_exact_match']}, "
                f"test {run.get('test', {}).get('exact_match', run.get('test_error'))}",
                flush=True,
            )
            save(record)
            if out["stopped"]:
                raise TimeCap(out["stopped"])
    return record


# ----------------------------------------------------------------------------- 3. decoding


def part_decoding(args, deadline: float, save) -> dict:
    lengths = [4, 8] if args.quick else [16, 64, 256, 512]
    repeats, batch, seed = (1 if args.quick else 3), 1, 0
    shape = dict(d_model=32, num_heads=4, dff=64) if args.quick else {}
    src, _ = make_reversal_dataset(batch, seed=seed)
    src = src.to(args.device)
    torch.manual_seed(seed)
    max_len = max(max(lengths) + 1, src.size(1))
    model = Transformer(VOCAB_SIZE, VOCAB_SIZE, max_len=max_len, **shape)
    model = model.to(args.device).eval()
    record = {
        "config": {
            "lengths": lengths,
            "repeats": repeats,
            "batch": batch,
            "seed": seed,
            "model": dataclasses.asdict(model.config),
            "timing": "time.perf_counter around greedy_decode, synchronized; best and "
            "median of the repeats; naive and cached runs alternate",
        },
        "rows": [],
    }

    def run(n, use_cache):
        sync(args.device)
        t = time.perf_counter()
        out = greedy_decode(model, src, max_len=n + 1, use_cache=use_cache, stop_at_eos=False)
        sync(args.device)
        return time.perf_counter() - t, out

    run(4, False), run(4, True)  # warm-up
    for n in lengths:
        if time.monotonic() > deadline:
            raise TimeCap(f"stopped before {n} new tokens")
        times = {False: [], True: []}
        outs = {}
        for _ in range(repeats):
            for use_cache in (False, True):
                sec, outs[use_cache] = run(n, use_cache)
                times[use_cache].append(sec)
        naive, cached = outs[False], outs[True]
        identical = bool(torch.equal(naive, cached))
        row = {
            "new_tokens": n,
            "naive_ms": [1000 * t for t in times[False]],
            "cached_ms": [1000 * t for t in times[True]],
            "naive_best_ms": 1000 * min(times[False]),
            "cached_best_ms": 1000 * min(times[True]),
            "speedup": min(times[False]) / min(times[True]),
            "identical": identical,
            "tokens": int(naive.numel()),
        }
        if not identical:
            row["first_difference"] = (naive != cached).nonzero()[0].tolist()
        record["rows"].append(row)
        print(
            f"  {n:>4} new tokens: naive {row['naive_best_ms']:.1f} ms, cached "
            f"{row['cached_best_ms']:.1f} ms, {row['speedup']:.1f}x, identical {identical}",
            flush=True,
        )
        save(record)
    return record


# ----------------------------------------------------------------------------- 4. unit tests


def part_unit_tests(args, deadline: float, save) -> dict:
    tests = ["tests/test_cuda.py"]
    env = dict(os.environ)
    env["TRANSFORMER_BOOK_TEST_DEVICE"] = args.device
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # only pytest's own plugins
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p)
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        cmd = [
            sys.executable,
            *(["-S"] if sys.flags.no_site else []),  # keep a dry run's restricted packages
            "-m",
            "pytest",
            *tests,
            "-q",
            "-rA",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=",  # pytest.ini adds nbval's options, and nbval is not installed there
            f"--junitxml={junit}",
        ]
        if args.quick:  # the dry run checks the plumbing (make test-slow runs the rest on the CPU)
            cmd[-1:-1] = ["-k", "kv_cache or carries"]
        timeout = max(5.0, deadline - time.monotonic())
        t = time.perf_counter()
        try:
            proc = subprocess.run(
                cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
            )
            returncode, output = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as err:
            returncode = None
            output = (err.stdout or b"").decode() if isinstance(err.stdout, bytes) else ""
        record = {
            "command": shlex.join(["python3", *cmd[1:-1]]),
            "device": args.device,
            "returncode": returncode,
            "seconds": time.perf_counter() - t,
            "output_tail": output[-4000:],
            "tests": parse_junit(junit) if junit.exists() else [],
        }
    counts = {}
    for case in record["tests"]:
        counts[case["outcome"]] = counts.get(case["outcome"], 0) + 1
    record["counts"] = counts
    print(f"  pytest exit code {returncode}: {counts}", flush=True)
    if returncode is None:
        save(record)
        raise TimeCap("pytest ran past the cap")
    if returncode != 0:
        save(record)
        raise RuntimeError(f"pytest exit code {returncode}: {counts}")
    return record


def parse_junit(path: Path) -> list[dict]:
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome, message = tag, (node.get("message") or "")[:500]
                break
        cases.append(
            {
                "name": case.get("name"),
                "outcome": outcome,
                "seconds": float(case.get("time") or 0),
                "message": message,
            }
        )
    return cases


# ----------------------------------------------------------------------------- the runner

PART_FUNCTIONS = {
    "attention": part_attention,
    "training": part_training,
    "decoding": part_decoding,
    "unit_tests": part_unit_tests,
}


def run_part(name: str, args, env: dict, budget_end: float, out: Path, tag: str) -> dict:
    """Run one part under its cap; write OUT/<name>_<tag>.json whatever happens."""
    path = out / f"{name}_{tag}.json"
    start = time.monotonic()
    deadline = min(start + args.caps[name], budget_end)
    header = {"part": name, "environment": env, "quick": args.quick, "cap_s": args.caps[name]}
    latest: dict = {}

    def save(payload: dict, status: str = "running") -> None:
        latest.clear()
        latest.update(payload)
        seconds = round(time.monotonic() - start, 2)
        write_record(path, {**header, "status": status, "seconds": seconds, **payload})

    print(f"[{name}] cap {args.caps[name]} s", flush=True)
    status, error = "ok", None
    try:
        if time.monotonic() >= budget_end:
            raise TimeCap("no time left in the budget")
        payload = PART_FUNCTIONS[name](args, deadline, save)
    except TimeCap as err:
        status, error, payload = "partial (time cap)", str(err), dict(latest)
    except Terminated:
        status, error = "partial (terminated)", "SIGTERM (the run's time limit)"
        save({**latest, "error": error}, status)
        seconds = round(time.monotonic() - start, 1)
        raise Terminated(
            {"part": name, "status": status, "seconds": seconds, "file": path.name, "error": error}
        ) from None
    except Exception as err:
        status, payload = "failed", dict(latest)
        error = "".join(traceback.format_exception_only(type(err), err)).strip()
        payload["traceback"] = traceback.format_exc()[-3000:]
    if error is not None:
        payload["error"] = error
    save(payload, status)
    seconds = round(time.monotonic() - start, 1)
    print(f"[{name}] {status} in {seconds} s -> {path.name}", flush=True)
    return {"part": name, "status": status, "seconds": seconds, "file": path.name, "error": error}


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", type=Path, required=True, help="folder for the JSON files")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a dry run of every part")
    ap.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    ap.add_argument("--budget", type=float, default=430.0, help="seconds for all parts together")
    ap.add_argument(
        "--caps",
        nargs="+",
        default=[],
        metavar="PART=SECONDS",
        help=f"override a part's time cap (defaults: {CAPS})",
    )
    ap.add_argument("--cuda-repeats", type=int, default=20, help="timed runs per CUDA row")
    args = ap.parse_args(argv)
    caps = dict(CAPS)
    for item in args.caps:
        part, _, seconds = item.partition("=")
        if part not in CAPS or not seconds:
            ap.error(f"--caps takes PART=SECONDS with PART in {PARTS}, got {item!r}")
        caps[part] = float(seconds)
    args.caps = caps
    if args.cuda_repeats < 20 and not args.quick:
        ap.error("--cuda-repeats must be at least 20 (the issue asks for >= 20 runs per row)")
    return args


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        print("record_gpu: --device cuda, but this torch sees no CUDA device", file=sys.stderr)
        return 2
    if dev.type == "cuda":
        torch.cuda.init()
    elif args.quick:
        torch.set_num_threads(1)  # a dry run on a shared CPU: one thread is the steady choice
    t0 = time.monotonic()
    budget_end = t0 + args.budget
    tag = tag_for(args.device, args.quick)
    args.out.mkdir(parents=True, exist_ok=True)
    env = environment(args.device)
    print(
        f"record_gpu: {env.get('gpu', env['cpu'])}, torch {env['torch']}, CUDA {env.get('cuda')}, "
        f"driver {env.get('driver')}, budget {args.budget:.0f} s -> {args.out}",
        flush=True,
    )

    def on_sigterm(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    summary = {"environment": env, "parts": [], "quick": args.quick}
    summary_path = args.out / f"record_gpu_{tag}.json"
    try:
        for name in args.parts:
            summary["parts"].append(run_part(name, args, env, budget_end, args.out, tag))
            write_record(summary_path, {**summary, "seconds": round(time.monotonic() - t0, 1)})
    except Terminated as stop:
        summary["parts"] += list(stop.args[:1])
        summary["terminated"] = True
    finally:
        signal.signal(signal.SIGTERM, previous)
    summary["seconds"] = round(time.monotonic() - t0, 1)
    write_record(summary_path, summary)
    print(f"record_gpu: done in {summary['seconds']} s", flush=True)
    for p in summary["parts"]:
        print(f"  {p['part']:<11} {p['status']:<22} {p['seconds']:>6} s  {p['file']}")
    ok = all(p["status"] == "ok" for p in summary["parts"]) and not summary.get("terminated")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
