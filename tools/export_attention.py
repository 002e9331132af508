#!/usr/bin/env python3
"""Export the cross-attention weights that the HTML book's attention explorer shows.

Usage (the book's pinned numerics, as the chapters run):
    env $(.venv/bin/python src/helpers/pin.py pinned) .venv/bin/python tools/export_attention.py

Writes book_assets/attention_explorer_data.js (a script that assigns the data, as JSON, to
window.ATTENTION_EXPLORER_DATA, so that it loads from file:// too), which _config.yml ships in
_static/ and book_assets/attention_explorer.js draws in chapter 18 of the HTML book (no kernel,
nothing loaded from outside).

The models: chapter 18's sharp model (its stored weights, chapters/data/ch18_sharp_model.pt),
its default-init twin (SHARP_ATTENTION_RECIPE with init="default", from the checkpoint cache)
and the book's model of chapter 10 (BOOK_RECIPE, from the cache). A model missing from the
cache is trained first (the script says so; the twin takes a few minutes on one thread).

For every input of INPUTS and every model: the cross-attention weights of every decoder layer,
every head and their mean, under teacher forcing on the true target (decoder input: <bos> and
the reversed digits), rounded to 3 decimals; plus the model's greedy output. The file is
written with sorted keys and no spaces, so the same weights give the same bytes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "book_assets" / "attention_explorer_data.js"
# The page reads its data from a script that sets this global: a `fetch` of a JSON file is
# refused when the book is opened from disk (file://), a <script src> from the same folder is not.
DATA_GLOBAL = "ATTENTION_EXPLORER_DATA"
SCRIPT_HEAD = f"window.{DATA_GLOBAL} = "
SHARP_WEIGHTS = ROOT / "chapters" / "data" / "ch18_sharp_model.pt"
DECIMALS = 3
FORMAT = 1

# (label, digits): the chapter's example first; repeated digits; short and long inputs (the
# models were trained on 3 to 12 digits)
INPUTS = [
    ("the chapter's example", [7, 3, 0, 9, 5, 1, 8]),
    ("one digit repeated", [4, 4, 4, 4, 4, 4]),
    ("one digit repeated, 12 times", [5] * 12),
    ("pairs", [1, 1, 2, 2, 3, 3]),
    ("short: 3 digits", [5, 2, 8]),
    ("short: 4 digits", [9, 0, 4, 2]),
    ("5 digits", [8, 6, 4, 2, 0]),
    ("zeros inside ones", [1, 0, 0, 0, 0, 1]),
    ("counting down", [9, 8, 7, 6, 5, 4, 3, 2, 1]),
    ("counting up, 10 digits", [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]),
    ("long: 11 digits", [2, 7, 1, 8, 2, 8, 1, 8, 2, 8, 4]),
    ("long: 12 digits", [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8]),
]


def input_id(digits) -> str:
    return "".join(str(d) for d in digits)


@torch.no_grad()
def teacher_forced_weights(model, digits) -> torch.Tensor:
    """[layers, heads, n + 1, n + 1]: cross-attention with the decoder fed <bos> and the
    reversed digits (the true target minus its <eos>)."""
    from helpers import encode_digits
    from helpers.vocab import BOS_ID

    model.eval()
    src = encode_digits(list(digits))  # [1, n + 1]: the digits, <eos>
    reversed_ids = encode_digits(list(digits)[::-1])[:, :-1]  # the reversed digits, no <eos>
    tgt_in = torch.cat([torch.tensor([[BOS_ID]]), reversed_ids], dim=1)  # [1, n + 1]
    memory, src_mask = model.encode(src)
    _, cross = model.decode(tgt_in, memory, src_mask, need_weights=True)
    return torch.stack([w[0] for w in cross]).float()


def rounded(matrix: torch.Tensor) -> list[list[float]]:
    return [[round(float(v), DECIMALS) for v in row] for row in matrix.tolist()]


@torch.no_grad()
def model_maps(model, digits) -> dict:
    """One model on one input: labels, greedy output, and per layer [head 0, ..., mean]."""
    from helpers import decode_digits, encode_digits, greedy_decode, mirrored_columns

    weights = teacher_forced_weights(model, digits)
    output = decode_digits(greedy_decode(model, encode_digits(list(digits)))[0])
    layers = [[rounded(h) for h in layer] + [rounded(layer.mean(dim=0))] for layer in weights]
    return {
        "rows": ["<bos>"] + [str(d) for d in reversed(digits)],
        "cols": [str(d) for d in digits] + ["<eos>"],
        "mirror": mirrored_columns(len(digits)).tolist(),
        "output": output,
        "correct": output == list(digits)[::-1],
        "layers": layers,
    }


def export(models: dict, inputs=INPUTS) -> dict:
    """models: {id: (label, model)} in the order the viewer lists them -> the JSON object."""
    out_models, maps = [], {}
    for mid, (label, model) in models.items():
        n_layers, n_heads = len(model.decoder.layers), model.decoder.layers[0].cross_mha.h
        out_models.append({"id": mid, "label": label, "layers": n_layers, "heads": n_heads})
        maps[mid] = {input_id(d): model_maps(model, d) for _, d in inputs}
    return {
        "format": FORMAT,
        "decimals": DECIMALS,
        "colormap": "Blues, 0 to 1 (as helpers.plot_attention)",
        "generated_by": "tools/export_attention.py",
        "teacher_forcing": "rows: decoder input <bos> and the reversed digits; columns: source",
        "inputs": [{"id": input_id(d), "label": label, "digits": list(d)} for label, d in inputs],
        "models": out_models,
        "maps": maps,
    }


def dumps(data: dict) -> str:
    """The data file's text: a script assigning the JSON (sorted keys, deterministic)."""
    return SCRIPT_HEAD + json.dumps(data, sort_keys=True, separators=(",", ":")) + ";\n"


def read_data(path: Path = OUT) -> dict:
    """The data back from a file `dumps` wrote."""
    text = Path(path).read_text()
    if not text.startswith(SCRIPT_HEAD) or not text.rstrip().endswith(";"):
        raise ValueError(f"{path} is not a data script of export_attention.py")
    return json.loads(text[len(SCRIPT_HEAD) :].rstrip().rstrip(";"))


def sharp_model():
    from helpers import SHARP_ATTENTION_RECIPE
    from helpers.train import build_model

    stored = torch.load(SHARP_WEIGHTS, weights_only=True)
    assert stored["key"] == SHARP_ATTENTION_RECIPE.key(), "ch18_sharp_model.pt: another recipe"
    model = build_model(SHARP_ATTENTION_RECIPE)
    model.load_state_dict(stored["state_dict"])
    return model.eval()


def cached_model(cfg, what: str):
    """load_or_train, announcing a cold cache: training then happens here."""
    from helpers.checkpoints import checkpoint_path, load_or_train

    path = checkpoint_path(cfg)
    if not path.exists():
        print(
            f"{what}: {path.name} is not in the checkpoint cache: TRAINING it now "
            f"({cfg.max_steps} steps at most, minutes on one thread)",
            flush=True,
        )
    result = load_or_train(cfg, progress=False, verbose=False)
    print(f"{what}: {'loaded from the cache' if result.from_cache else 'trained'} ({path.name})")
    return result.model.eval()


def book_models() -> dict:
    from helpers import BOOK_RECIPE, SHARP_ATTENTION_RECIPE

    twin = dataclasses.replace(SHARP_ATTENTION_RECIPE, init="default")
    return {
        "sharp": ("chapter 18: sharp model (SHARP_ATTENTION_RECIPE)", sharp_model()),
        "twin": ("chapter 18: its default-init twin", cached_model(twin, "default-init twin")),
        "book": ("chapter 10: the book's model (BOOK_RECIPE)", cached_model(BOOK_RECIPE, "book")),
    }


def check_twin_record(data: dict) -> float:
    """Largest gap between the twin's exported mean-of-heads maps of the chapter's example
    and the maps chapter 18 reads from its record (chapters/data/ch18_sharpness.json)."""
    runs = json.loads((ROOT / "chapters" / "data" / "ch18_sharpness.json").read_text())["runs"]
    run = next(r for r in runs if r["name"] == "sharp1000d15default" and r["seed"] == 0)
    ours = data["maps"]["twin"][input_id(INPUTS[0][1])]
    gap = 0.0
    for layer, recorded in zip(ours["layers"], run["maps"]):
        assert recorded["output"] == ours["output"]  # correct: greedy rows = teacher forcing
        for a, b in zip(layer[-1], recorded["weights"]):
            gap = max(gap, max(abs(x - y) for x, y in zip(a, b)))
    return gap


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=OUT, help=f"default: {OUT.relative_to(ROOT)}")
    args = ap.parse_args(argv)
    from helpers.numerics import pin_problems

    problems = pin_problems()
    if problems:
        print(f"warning: not the book's pinned numerics ({problems}); the book runs pinned")
    torch.manual_seed(0)
    data = export(book_models())
    gap = check_twin_record(data)
    print(f"twin vs its record in ch18_sharpness.json (chapter's example): max gap {gap:.4f}")
    text = dumps(data)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    n_maps = sum(
        len(layer) for m in data["maps"].values() for x in m.values() for layer in x["layers"]
    )
    print(
        f"wrote {args.out} ({len(text.encode()) / 1024:.0f} KiB): {len(data['inputs'])} inputs, "
        f"{len(data['models'])} models, {n_maps} maps"
    )
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    sys.exit(main())
