"""tools/export_attention.py and the file it wrote, book_assets/attention_explorer_data.js (the
data of chapter 18's HTML attention explorer, as a script that assigns it to a global)."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from helpers import MEAN_OF_HEADS, VOCAB_SIZE, Transformer, cross_attention, mirrored_columns

ROOT = Path(__file__).resolve().parent.parent
JSON = ROOT / "book_assets" / "attention_explorer_data.js"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location(
        "export_attention", ROOT / "tools" / "export_attention.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def data(tool):
    return tool.read_data(JSON)


@pytest.fixture(scope="module")
def sharp(tool):
    return tool.sharp_model()


def test_structure(tool, data):
    assert data["format"] == tool.FORMAT and data["decimals"] == 3
    assert [m["id"] for m in data["models"]] == ["sharp", "twin", "book"]
    ids = [x["id"] for x in data["inputs"]]
    assert ids == [tool.input_id(d) for _, d in tool.INPUTS] and len(set(ids)) == len(ids)
    assert 10 <= len(ids) <= 14 and ids[0] == "7309518"
    assert JSON.stat().st_size < 400_000
    for m in data["models"]:
        assert set(data["maps"][m["id"]]) == set(ids)
        for x in data["inputs"]:
            entry = data["maps"][m["id"]][x["id"]]
            n = len(x["digits"])
            assert entry["cols"] == [str(d) for d in x["digits"]] + ["<eos>"]
            assert entry["rows"] == ["<bos>"] + [str(d) for d in x["digits"][::-1]]
            assert entry["mirror"] == mirrored_columns(n).tolist()
            assert entry["correct"] == (entry["output"] == x["digits"][::-1])
            assert len(entry["layers"]) == m["layers"]
            for layer in entry["layers"]:
                assert len(layer) == m["heads"] + 1  # every head, then the mean
                for w in layer:
                    assert len(w) == n + 1 and all(len(row) == n + 1 for row in w)
                    for row in w:  # each row a distribution, to the rounding
                        assert all(0 <= v <= 1 and round(v, 3) == v for v in row)
                        assert abs(sum(row) - 1) <= 0.0005 * (n + 1) + 1e-9


def test_matches_helpers_cross_attention(data, sharp):
    """The sharp model on the chapter's example: its greedy output is the true reversal, so
    helpers.cross_attention (greedy rows) sees the same decoder input as teacher forcing."""
    entry = data["maps"]["sharp"]["7309518"]
    assert entry["correct"]
    n_layers, n_heads = len(sharp.decoder.layers), sharp.decoder.layers[0].cross_mha.h
    for layer in range(n_layers):
        for k, head in enumerate([*range(n_heads), MEAN_OF_HEADS]):
            amap = cross_attention(sharp, [7, 3, 0, 9, 5, 1, 8], layer=layer, head=head)
            assert amap.row_labels == entry["rows"] and amap.col_labels == entry["cols"]
            stored = torch.tensor(entry["layers"][layer][k], dtype=torch.float64)
            gap = (stored - torch.from_numpy(amap.weights).double()).abs().max().item()
            assert gap <= 0.0005 + 1e-5, (layer, head, gap)  # rounding, plus kernel bits


def test_a_wrong_map_is_caught(data, sharp):
    """The comparison above can fail: layer 0's map is not layer 1's."""
    entry = data["maps"]["sharp"]["7309518"]
    amap = cross_attention(sharp, [7, 3, 0, 9, 5, 1, 8], layer=0)
    stored = torch.tensor(entry["layers"][1][-1], dtype=torch.float64)
    assert (stored - torch.from_numpy(amap.weights).double()).abs().max().item() > 0.01


def test_export_is_deterministic(tool):
    torch.manual_seed(0)
    model = Transformer(VOCAB_SIZE, VOCAB_SIZE, d_model=16, num_heads=2, dff=32, num_layers=1)
    model.eval()
    first = tool.dumps(tool.export({"tiny": ("tiny", model)}, [("three", [5, 2, 8])]))
    second = tool.dumps(tool.export({"tiny": ("tiny", model)}, [("three", [5, 2, 8])]))
    assert first == second
    assert first.startswith(tool.SCRIPT_HEAD)  # a script: it loads from file:// too
    parsed = json.loads(first[len(tool.SCRIPT_HEAD) :].rstrip().rstrip(";"))
    assert list(parsed) == sorted(parsed)  # keys sorted
    layer = parsed["maps"]["tiny"]["528"]["layers"][0]
    assert len(layer) == 3 and len(layer[0]) == 4  # 2 heads + mean; <bos> + 3 digits
