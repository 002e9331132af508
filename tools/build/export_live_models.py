"""Export the weights of the models that chapter 21's live explorer runs in the HTML book.

Usage (the book's pinned numerics, as the chapters run):
    env $(.venv/bin/python src/helpers/repro/pin.py pinned) .venv/bin/python \\
        -m tools.build.export_live_models

The HTML book runs the trained encoder-decoder in plain JavaScript
(book_assets/book_model.js; the page is book_assets/attention_explorer.js). This script writes
what it reads, into book_assets/ (which _config.yml ships as _static/):

- weights_<id>.js, one per model: a script that sets window.BOOK_MODEL_WEIGHTS[id] to the
  model's config and every tensor of its state_dict, in state_dict order, with its name, its
  shape and its float32 values as base64 of the little-endian bytes (exact: no rounding);
- live_models.js: window.BOOK_MODEL_INDEX, the list of models (label, weights file and its size,
  parameter count) and, for the guided tour, one input each model gets wrong.

Scripts, not JSON: a `fetch` of a local file is refused when the book is opened from disk
(file://); a <script src> from the same folder is not. The files are written with sorted keys
and no spaces, so the same weights give the same bytes.

The models: chapter 10's model (BOOK_RECIPE, from the checkpoint cache), chapter 21's sharp
model (its stored weights, chapters/data/ch21_sharp_model.pt) and its default-init twin
(SHARP_ATTENTION_RECIPE with init="default", from the cache). A model missing from the cache is
trained first (the script says so; the twin takes a few minutes on one thread).

tests/test_export_live_models.py proves that each file holds its checkpoint bit for bit and
that a forward pass computed from the file alone equals PyTorch's; tools/check/browser.py
proves that the page decodes as helpers.greedy_decode does.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

from helpers import (
    BOOK_RECIPE,
    SHARP_ATTENTION_RECIPE,
    Transformer,
    encode_digits,
    greedy_decode,
    test_set,
)
from helpers.core.model import ModelConfig
from helpers.core.vocab import BOS_ID, EOS_ID, NUM_OFFSET, PAD_ID
from helpers.decoding.greedy import sequences_equal
from helpers.repro.numerics import pin_problems
from helpers.training.checkpoints import checkpoint_path, load_or_train
from helpers.training.train import build_model
from tools.common import DATA, ROOT

ASSETS = ROOT / "book_assets"
SHARP_WEIGHTS = DATA / "ch21_sharp_model.pt"
WEIGHTS_GLOBAL = "BOOK_MODEL_WEIGHTS"
INDEX_GLOBAL = "BOOK_MODEL_INDEX"
INDEX_FILE = "live_models.js"
FORMAT = 1
# the chapter's example: the first input the explorer shows and the tour's first two lines
EXAMPLE = [7, 3, 0, 9, 5, 1, 8]
# (id, label) in the order the page lists them; the first is the one it loads first
MODELS = [
    ("book", "chapter 10: the book's model (BOOK_RECIPE)"),
    ("sharp", "chapter 21: the sharp model (SHARP_ATTENTION_RECIPE)"),
    ("twin", "chapter 21: the sharp recipe, PyTorch's default init"),
]


def weights_file(model_id: str) -> str:
    return f"weights_{model_id}.js"


def tensor_entry(name: str, tensor: torch.Tensor) -> dict:
    """One state_dict tensor: name, shape, float32 little-endian bytes in base64."""
    array = tensor.detach().cpu().contiguous().numpy()
    if array.dtype != np.float32:
        raise ValueError(f"{name}: {array.dtype}, the page reads float32 only")
    return {
        "name": name,
        "shape": list(array.shape),
        "data": base64.b64encode(array.astype("<f4").tobytes()).decode("ascii"),
    }


def decode_entry(entry: dict) -> torch.Tensor:
    """The tensor back from tensor_entry's record (bit for bit)."""
    raw = base64.b64decode(entry["data"])
    array = np.frombuffer(raw, dtype="<f4").astype(np.float32).reshape(entry["shape"])
    return torch.from_numpy(array.copy())


def model_config(model) -> dict:
    """What the page needs to rebuild the forward pass, checked against the modules."""
    cfg = model.config
    norms = [m for m in model.modules() if isinstance(m, nn.LayerNorm)]
    eps = {m.eps for m in norms}
    gelus = [m for m in model.modules() if isinstance(m, nn.GELU)]
    if len(eps) != 1 or not all(m.elementwise_affine for m in norms):
        raise ValueError(f"expected one LayerNorm eps, affine: {eps}")
    if not gelus or any(m.approximate != "none" for m in gelus):
        raise ValueError("the page computes the exact (erf) GELU only")
    embeds = (model.encoder.embed, model.decoder.embed)
    if len({(e.token_scale, e.position_scale) for e in embeds}) != 1:
        raise ValueError("encoder and decoder embeddings scale differently")
    return {
        "src_vocab": cfg.src_vocab,
        "tgt_vocab": cfg.tgt_vocab,
        "d_model": cfg.d_model,
        "num_heads": cfg.num_heads,
        "dff": cfg.dff,
        "num_layers": cfg.num_layers,
        "max_len": cfg.max_len,
        "token_scale": embeds[0].token_scale,  # the number the module multiplies by
        "position_scale": embeds[0].position_scale,
        "layer_norm_eps": eps.pop(),
        "norm": "pre",  # x + f(LayerNorm(x)); a final LayerNorm after each stack
        "activation": "gelu_erf",
        "positions": "sinusoidal",
        "ids": {"pad": PAD_ID, "bos": BOS_ID, "eos": EOS_ID, "digit_offset": NUM_OFFSET},
        "model_config": dataclasses.asdict(cfg),
    }


def export_model(model, model_id: str, label: str, source: str) -> dict:
    """The weights file's object for one model."""
    state = model.state_dict()
    return {
        "format": FORMAT,
        "id": model_id,
        "label": label,
        "source": source,
        "generated_by": "tools/build/export_live_models.py",
        "config": model_config(model),
        "parameters": sum(t.numel() for t in state.values()),
        "tensors": [tensor_entry(name, t) for name, t in state.items()],
    }


def script(global_name: str, data: dict, key: str | None = None) -> str:
    """A script assigning data (JSON, sorted keys, no spaces) to window[global_name] or, with a
    key, to window[global_name][key]."""
    body = json.dumps(data, sort_keys=True, separators=(",", ":"))
    if key is None:
        return f"window.{global_name} = {body};\n"
    return (
        f"window.{global_name} = window.{global_name} || {{}};\n"
        f"window.{global_name}[{json.dumps(key)}] = {body};\n"
    )


def read_script(path: Path) -> dict:
    """The object back from a file `script` wrote."""
    text = Path(path).read_text()
    last = text.rstrip().splitlines()[-1]
    if not last.startswith("window.") or " = " not in last or not last.endswith(";"):
        raise ValueError(f"{path} is not a script of export_live_models.py")
    return json.loads(last[last.index(" = ") + 3 : -1])


def state_dict_from(data: dict) -> dict[str, torch.Tensor]:
    return {e["name"]: decode_entry(e) for e in data["tensors"]}


def model_from_file(path: Path):
    """A helpers Transformer holding the weights of an exported file (eval mode)."""
    data = read_script(path)
    model = Transformer.from_config(ModelConfig(**data["config"]["model_config"]))
    model.load_state_dict(state_dict_from(data), strict=True)
    return model.eval()


def sharp_model():
    stored = torch.load(SHARP_WEIGHTS, weights_only=True)
    assert stored["key"] == SHARP_ATTENTION_RECIPE.key(), "ch21_sharp_model.pt: another recipe"
    model = build_model(SHARP_ATTENTION_RECIPE)
    model.load_state_dict(stored["state_dict"])
    return model.eval()


def twin_recipe():
    return dataclasses.replace(SHARP_ATTENTION_RECIPE, init="default")


def cached_model(cfg, what: str):
    """load_or_train, announcing a cold cache: training then happens here."""
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
    """{id: (model, where its weights come from)}"""
    return {
        "book": (cached_model(BOOK_RECIPE, "book"), f"BOOK_RECIPE ({BOOK_RECIPE.key()})"),
        "sharp": (sharp_model(), "chapters/data/ch21_sharp_model.pt"),
        "twin": (
            cached_model(twin_recipe(), "default-init twin"),
            f"SHARP_ATTENTION_RECIPE, init='default' ({twin_recipe().key()})",
        ),
    }


@torch.no_grad()
def wrong_on_test_set(model) -> tuple[int, int, dict | None]:
    """(wrong, total, the shortest wrong input with the model's output) on helpers.test_set."""
    src, tgt = test_set()
    wrong = []
    for i in range(0, src.size(0), 1000):
        pred = greedy_decode(model, src[i : i + 1000], use_cache=True)
        bad = (~sequences_equal(pred, tgt[i : i + 1000])).nonzero().flatten() + i
        wrong += bad.tolist()
    if not wrong:
        return 0, src.size(0), None
    lengths = [int((src[i] != 0).sum()) - 1 for i in wrong]
    i = wrong[lengths.index(min(lengths))]
    digits = [int(t) - NUM_OFFSET for t in src[i] if int(t) >= NUM_OFFSET]
    out = greedy_decode(model, src[i : i + 1, : len(digits) + 1])[0, 1:].tolist()
    out = out[: out.index(EOS_ID)] if EOS_ID in out else out
    return len(wrong), src.size(0), {"digits": digits, "output_ids": out}


@torch.no_grad()
def wrong_short_input(model) -> dict | None:
    """The first input of one or two digits (shorter than any training input) the model gets
    wrong, for a model that gets the whole test set right."""
    for n in (1, 2):
        for k in range(10**n):
            digits = [int(c) for c in f"{k:0{n}d}"]
            out = greedy_decode(model, encode_digits(digits))[0].tolist()
            want = [BOS_ID] + [d + NUM_OFFSET for d in digits[::-1]] + [EOS_ID]
            if out != want:
                return {"digits": digits, "output_ids": out[1:]}
    return None


def index(models: dict, files: dict[str, str]) -> dict:
    entries = []
    for model_id, label in MODELS:
        model, source = models[model_id]
        n_wrong, total, example = wrong_on_test_set(model)
        outside = None if example else wrong_short_input(model)
        entries.append(
            {
                "id": model_id,
                "label": label,
                "source": source,
                "file": weights_file(model_id),
                "bytes": len(files[model_id].encode()),
                "parameters": sum(p.numel() for p in model.parameters()),
                "test_wrong": n_wrong,
                "test_total": total,
                "wrong_example": example or outside,
                "wrong_example_from": "test set" if example else "1 or 2 digits",
            }
        )
    return {
        "format": FORMAT,
        "generated_by": "tools/build/export_live_models.py",
        "example": EXAMPLE,
        "models": entries,
    }


def write(models: dict, out: Path = ASSETS) -> dict[str, Path]:
    """Write every weights file and the index; returns {name: path}."""
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for model_id, label in MODELS:
        model, source = models[model_id]
        files[model_id] = script(
            WEIGHTS_GLOBAL, export_model(model, model_id, label, source), key=model_id
        )
    written = {}
    for model_id, text in files.items():
        path = out / weights_file(model_id)
        path.write_text(text)
        written[path.name] = path
    path = out / INDEX_FILE
    path.write_text(script(INDEX_GLOBAL, index(models, files)))
    written[path.name] = path
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ASSETS, help="default: book_assets/")
    args = ap.parse_args(argv)
    problems = pin_problems()
    if problems:
        print(f"warning: not the book's pinned numerics ({problems}); the book runs pinned")
    for path in write(book_models(), args.out).values():
        print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    for m in read_script(args.out / INDEX_FILE)["models"]:
        print(
            f"{m['id']}: {m['parameters']:,} parameters, {m['test_wrong']} of "
            f"{m['test_total']:,} test inputs wrong; tour example {m['wrong_example']} "
            f"({m['wrong_example_from']})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
