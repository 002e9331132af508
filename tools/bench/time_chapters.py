"""Measure how long each chapter runs, and what it trains on first use; write the openings.

    python -m tools.bench.time_chapters          # time every chapter, record, write the openings
    python -m tools.bench.time_chapters --write  # only put the recorded times into the chapters
    python -m tools.bench.time_chapters 10 11    # re-time some chapters (the others are kept)
    python -m tools.bench.time_chapters --no-write 10   # record only; runs may share the file

Each chapter runs top to bottom in a fresh kernel of the book's own, as
tools/build/execute_notebooks.py runs it (one torch thread, the pinned numerics), but nothing is
stored. Each chapter starts from an empty checkpoint cache of its own, as for a reader who
opens that chapter first: it trains every model it needs. The record holds its wall-clock
seconds, the models it trained (read back from the checkpoints it wrote: recipe and training
seconds), and so the time of a run with those models already cached (total minus training).

--write puts one markdown cell, tagged `run-time`, right after each chapter's opening cell,
worded by `run_time_text` from the record; the outputs stay as they are (the code is not
touched). tools/check/notebooks.py requires that cell and that it says what the record says.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from tools.common import DATA, ROOT, pin_env, run_fresh, write_atomic

RECORD = DATA / "run_times.json"
TAG = "run-time"

# The models a chapter may train on first use, by the recipe that builds them.
RECIPE_NAMES = {
    "BOOK_RECIPE": "the book's reversal model (`BOOK_RECIPE`)",
    "SHARP_ATTENTION_RECIPE": "the sharp-attention model (`SHARP_ATTENTION_RECIPE`)",
    "SEED_RECIPE": "the reference recipe's model (`SEED_RECIPE`)",
    "fixed_budget_recipe()": "chapter 12's well-initialised model (`fixed_budget_recipe()`)",
    "default_init_recipe()": "chapter 12's badly initialised model (`default_init_recipe()`)",
    "TODAYS_BLOCKS": "the book's model with today's four blocks (`blocks_recipe(...)`)",
    "fixed_budget_recipe(steps=150)": (
        "a model on a short budget (`fixed_budget_recipe(steps=150)`)"
    ),
}


def known_recipes() -> dict[str, dict]:
    import dataclasses

    from helpers.training import recipes

    cfgs = {
        "BOOK_RECIPE": recipes.BOOK_RECIPE,
        "SHARP_ATTENTION_RECIPE": recipes.SHARP_ATTENTION_RECIPE,
        "SEED_RECIPE": recipes.SEED_RECIPE,
        "fixed_budget_recipe()": recipes.fixed_budget_recipe(),
        "default_init_recipe()": recipes.default_init_recipe(),
        # chapter 18's model with all four of today's blocks, and chapter 20's short run
        "TODAYS_BLOCKS": recipes.blocks_recipe(
            recipes.BOOK_RECIPE, norm="rms", ffn="swiglu", positions="rope", num_kv_heads=2
        ),
        "fixed_budget_recipe(steps=150)": recipes.fixed_budget_recipe(steps=150),
    }
    return {name: dataclasses.asdict(cfg) for name, cfg in cfgs.items()}


def trained_in(cache: Path) -> list[dict]:
    """The checkpoints a chapter wrote: their recipe names and training seconds."""
    import torch

    recipes = known_recipes()
    out = []
    for path in sorted(cache.glob("reversal-*.pt")):
        payload = torch.load(path, map_location="cpu", weights_only=True)
        name = next((n for n, c in recipes.items() if c == payload["config"]), None)
        out.append({"recipe": name, "seconds": round(float(payload["seconds"]), 1)})
    return out


def approx(seconds: float) -> str:
    if seconds < 60:
        return f"{max(5, 5 * round(seconds / 5))} s"
    minutes = seconds / 60
    return f"{round(minutes)} min" if minutes >= 10 else f"{minutes:.1f} min".replace(".0 ", " ")


def run_time_text(rec: dict) -> str:
    """The run-time cell's markdown for one chapter's record."""
    text = f"**Run time:** about {approx(rec['cached_s'])}"
    models = rec.get("trains", [])
    if models:
        names = [RECIPE_NAMES[m["recipe"]] for m in models if m["recipe"] in RECIPE_NAMES]
        own = len(models) - len(names)  # recipes a chapter builds itself (chapter 12's twins)
        if own:
            count = ("one", "two", "three", "four")[own - 1] if own <= 4 else str(own)
            names.append(f"{count} model{'s' if own > 1 else ''} of its own")
        train_s = sum(m["seconds"] for m in models)
        what = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
        it = "it" if len(models) == 1 else "them"
        text += (
            f". The first time, it also trains {what} and caches {it} on disk "
            f"(about {approx(train_s)} more); later runs load {it}"
        )
    return text + "."


def kernel_numerics() -> dict:
    """helpers.repro.numerics.provenance() as the book's kernel sees it (the pinned numerics)."""
    from helpers.repro.numerics import provenance

    return run_fresh(provenance, env=pin_env("pinned"))


def update_record(number: str | None, entry: dict | None) -> dict:
    """Add one chapter's entry to the record, under a lock: two runs may time chapters at once."""
    import fcntl

    RECORD.parent.mkdir(parents=True, exist_ok=True)
    with open(Path(tempfile.gettempdir()) / "transformer-book-run-times.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = json.loads(RECORD.read_text()) if RECORD.exists() else {"chapters": {}}
        if number is not None:
            record["chapters"][number] = entry
        record["numerics"] = kernel_numerics()
        record["measured_with"] = {"tool": "tools/bench/time_chapters.py"}  # numerics: the kernel
        write_atomic(RECORD, json.dumps(record, indent=1, sort_keys=True) + "\n")
    return record


def measure(numbers: list[str]) -> dict:
    import nbformat

    from tools.build import execute_notebooks as ex

    record: dict = {}
    paths = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))
    for path in paths:
        number = path.stem[:2]
        if numbers and number not in numbers:
            continue
        cache = Path(tempfile.mkdtemp(prefix=f"book-cache-{number}-"))
        os.environ["TRANSFORMER_BOOK_CACHE"] = str(cache)
        nb = nbformat.read(path, as_version=4)
        ex.prepare(nb)
        start = time.perf_counter()
        ex.execute(nb, path.parent)
        total = time.perf_counter() - start
        trains = trained_in(cache)
        shutil.rmtree(cache)
        cached = total - sum(m["seconds"] for m in trains)
        entry = {
            "notebook": path.name,
            "total_s": round(total, 1),
            "cached_s": round(cached, 1),
            "trains": trains,
            "date": time.strftime("%Y-%m-%d"),
            "load_1min_at_end": round(os.getloadavg()[0], 1),
        }
        record = update_record(number, entry)
        print(f"{path.name}: {total:.0f} s, {cached:.0f} s with its models cached", flush=True)
    return record


def write_openings(record: dict) -> int:
    import nbformat

    from tools.build import execute_notebooks as ex

    bad = 0
    for _number, rec in sorted(record["chapters"].items()):
        notebook = ROOT / "chapters" / rec["notebook"]
        twin = notebook.with_suffix(".py")
        nb = nbformat.read(notebook, as_version=4)
        text = run_time_text(rec)
        cells = [c for c in nb.cells if TAG in c.metadata.get("tags", [])]
        if cells:
            if cells[0].source == text:
                continue
            cells[0].source = text
        else:
            if not nb.cells or nb.cells[0].cell_type != "markdown":
                print(f"{notebook.name}: its first cell is not the opening markdown cell")
                bad += 1
                continue
            cell = nbformat.v4.new_markdown_cell(text, metadata={"tags": [TAG]})
            nb.cells.insert(1, cell)
            ex.stable_cell_ids(nb, {c.get("id") for c in nb.cells if c.get("id")})
        ex.save(nb, notebook, twin)
        print(f"{notebook.name}: {text}")
    return bad


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="only write the recorded times")
    parser.add_argument(
        "--no-write", action="store_true", help="measure and record only; write no chapter"
    )
    parser.add_argument("chapters", nargs="*", help="chapter numbers to re-measure (01 ... 20)")
    args = parser.parse_args(argv)
    if not args.write:
        measure([f"{int(n):02d}" for n in args.chapters])
    elif RECORD.exists():
        update_record(None, None)  # the kernel's numerics block, for a record made before it
    if args.no_write:
        return 0
    return 1 if write_openings(json.loads(RECORD.read_text())) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
