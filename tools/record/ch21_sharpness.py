"""Record how sharp the cross-attention of a reversal model gets as it trains (chapter 21).

Trains one TrainConfig exactly as helpers.training.train.train_reversal does (same model, data,
batches,
schedule and random streams: the final weights are those of the cached checkpoint of that
config), and every --every steps measures, on 200 probe sequences (seed 7) under teacher
forcing, per decoder layer and mean of heads (helpers.analysis.visualize.alignment_stats):

  mirror      mean weight on the mirrored source position (the reference chapter's map: >= 0.94),
  eos_peak    share of sequences whose <eos>-predicting row peaks on the source's <eos>,
  digit_peak  share of digit rows that peak on the mirrored digit,

plus teacher-forced exact match on the first 1000 validation sequences and the mean training
loss since the last measurement. At the end it also records the trained model's exact match on
the test set (helpers.training.evaluation, 10,000 sequences, Wilson 95 % interval) and its
cross-attention maps (every decoder layer, mean of heads) on the chapter's input 7 3 0 9 5 1 8,
so that appendix/experiment_sharp_attention can show a run nobody retrains. Each run is
appended to a JSON file (default chapters/data/ch21_sharpness.json) under a name; a run with
the same name and seed replaces the old one. Run it niced and single-threaded:

  nice -n 10 .venv/bin/python -m tools.record.ch21_sharpness NAME --base book \\
      --set d_model=64 dff=256 num_heads=1 max_steps=1200 cooldown=1100 --every 100 --seed 0

The log prints rough training seconds; the file stores none (the machine was shared, so
they would not be results): compare recipes by steps.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import torch

from helpers.analysis.visualize import alignment_stats, cross_attention
from helpers.core.data import make_reversal_dataset
from helpers.core.model import count_parameters
from helpers.training.evaluation import exact_match_with_interval, test_set
from helpers.training.recipes import BOOK_RECIPE, SEED_RECIPE, TrainConfig
from helpers.training.train import teacher_forced_exact_match, train_reversal
from tools.common import DATA, provenance, write_record

DEFAULT_OUT = DATA / "ch21_sharpness.json"
PROBE_SEED, PROBE_SIZE = 7, 200  # the probe sequences the sharpness is measured on


def parse_value(field: dataclasses.Field, text: str):
    if field.type in ("bool", bool):
        return text.lower() in ("1", "true", "yes")
    if text == "None":
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def make_config(base: str, overrides: list[str], seed: int) -> TrainConfig:
    cfg = {"book": BOOK_RECIPE, "seed": SEED_RECIPE}[base]
    fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    changes = {}
    for item in overrides:
        name, _, value = item.partition("=")
        if name not in fields:
            raise SystemExit(f"unknown TrainConfig field {name!r}")
        changes[name] = parse_value(fields[name], value)
    changes.setdefault("seed", seed)
    changes.setdefault("target_exact_match", None)  # a fixed budget: no early stop
    return dataclasses.replace(cfg, **changes)


def measure(model, probe, val) -> dict:
    stats = alignment_stats(model, *probe)
    return {
        "mirror": [round(float(v), 4) for v in stats["mirror"]],
        "eos_peak": [round(float(v), 4) for v in stats["eos_peak"]],
        "neighbours": [round(float(v), 4) for v in stats["neighbours"]],
        "digit_peak": [round(float(v), 4) for v in stats["digit_peak"]],
        "mirror_heads": [[round(float(v), 4) for v in row] for row in stats["mirror_heads"]],
        "val_exact": round(teacher_forced_exact_match(model, *val), 4),
    }


MAP_DIGITS = [7, 3, 0, 9, 5, 1, 8]  # the input of chapter 21's figures


def final_record(model) -> dict:
    """The trained model's test exact match and its maps on MAP_DIGITS, as JSON."""
    interval = exact_match_with_interval(model, *test_set())
    maps = []
    for layer in range(len(model.decoder.layers)):
        amap = dataclasses.asdict(cross_attention(model, MAP_DIGITS, layer=layer))
        amap["weights"] = [[round(float(v), 5) for v in row] for row in amap["weights"]]
        maps.append(amap)
    return {"test": dataclasses.asdict(interval), "maps": maps}


def run(cfg: TrainConfig, every: int, log=print) -> dict:
    """helpers.train_reversal (no early stop, no progress bar) with a measurement every
    `every` steps, taken in eval mode between two steps (it draws no random numbers, so the
    run trains exactly as it would without it)."""
    val_src, val_tgt = make_reversal_dataset(cfg.val_size, seed=cfg.val_seed)
    val = (val_src[: cfg.eval_size], val_tgt[: cfg.eval_size])
    probe = make_reversal_dataset(PROBE_SIZE, seed=PROBE_SEED)
    points, losses = [], []

    def on_step(step, model, loss):
        losses.append(loss)
        if step % every == 0 or step == cfg.max_steps:
            point = {"step": step, "loss": round(sum(losses) / len(losses), 4)}
            point.update(measure(model, probe, val))
            losses.clear()
            points.append(point)
            log(
                f"step {step:5d} loss {point['loss']:.3f} val {point['val_exact']:.3f} "
                f"mirror {point['mirror']} eos {point['eos_peak']}"
            )

    result = train_reversal(cfg, progress=False, on_step=on_step)
    return {
        "model": result.model,
        "points": points,
        "parameters": count_parameters(result.model),
    }


def load(path: Path) -> dict:
    if path.exists():
        return json.loads(path.read_text())
    return {
        "description": (
            "Cross-attention sharpness of reversal models during training (chapter 21). "
            "Recorded by tools/record/ch21_sharpness.py; each run names its TrainConfig "
            "(config) and seed. Per point and decoder layer, mean of heads, on 200 probe "
            "sequences (make_reversal_dataset(200, seed=7)) under teacher forcing: mirror = "
            "mean weight on the mirrored source position, eos_peak = share of sequences whose "
            "<eos>-predicting row peaks on the source's <eos>, digit_peak = share of digit rows "
            "peaking on the mirrored digit; val_exact = teacher-forced exact match on 1000 "
            "validation sequences (seed 1); loss = mean training loss since the previous point. "
            "Timings are not recorded: the runs shared a busy 2-core machine; compare steps."
        ),
        "runs": [],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("name", help="a short name for the recipe (the lever being tested)")
    ap.add_argument("--base", choices=["book", "seed"], default="book")
    ap.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--note", default="")
    ap.add_argument("--save", type=Path, help="also save the final state_dict to this file")
    args = ap.parse_args()
    cfg = make_config(args.base, args.set, args.seed)
    print(f"{args.name}: {cfg}")
    result = run(cfg, args.every)
    record = {
        "name": args.name,
        "note": args.note,
        "base": args.base,
        "set": args.set,
        "seed": cfg.seed,
        "config": dataclasses.asdict(cfg),
        "key": cfg.key(),
        **provenance(),
        "parameters": result["parameters"],
        "points": result["points"],
        **final_record(result["model"]),
    }
    print(f"test exact match: {record['test']['exact_match']:.4f}")
    if args.save:
        torch.save(result["model"].state_dict(), args.save)
    data = load(args.out)  # re-read just before writing: keep runs recorded meanwhile
    data["runs"] = [
        r for r in data["runs"] if not (r["name"] == args.name and r["seed"] == cfg.seed)
    ] + [record]
    write_record(args.out, data)
    last = result["points"][-1]
    print(f"recorded {args.name} seed {cfg.seed} in {args.out.name}: last point {last}")


if __name__ == "__main__":
    main()
