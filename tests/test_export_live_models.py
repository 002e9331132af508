"""tools/build/export_live_models.py and the files it wrote: book_assets/weights_<id>.js (the
weights chapter 21's live explorer runs in the HTML book) and book_assets/live_models.js.

Each file must hold its checkpoint bit for bit (names, shapes, every float32), and a forward
pass computed in NumPy from the file alone, as book_assets/book_model.js computes it, must
give PyTorch's logits. (tools/check/browser/ then proves that the page decodes as
helpers.greedy_decode does, from these files.)
"""

import base64
import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import (
    BOOK_RECIPE,
    SHARP_ATTENTION_RECIPE,
    VOCAB_SIZE,
    Transformer,
    encode_digits,
    greedy_decode,
)
from helpers.training.checkpoints import default_cache_dir, load_checkpoint

ROOT = Path(__file__).resolve().parent.parent
ASSETS = ROOT / "book_assets"


@pytest.fixture(scope="module")
def tool():
    from tools.build import export_live_models

    return export_live_models


@pytest.fixture(scope="module")
def files(tool):
    return {mid: tool.read_script(ASSETS / tool.weights_file(mid)) for mid, _ in tool.MODELS}


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().view(torch.int32)


def assert_same_state(data: dict, state: dict) -> None:
    names = [e["name"] for e in data["tensors"]]
    assert names == list(state)  # every tensor, in state_dict order
    for entry in data["tensors"]:
        want = state[entry["name"]]
        assert entry["shape"] == list(want.shape), entry["name"]
        got = torch.from_numpy(
            np.frombuffer(base64.b64decode(entry["data"]), dtype="<f4").copy()
        ).reshape(entry["shape"])
        assert torch.equal(bits(got), bits(want)), entry["name"]  # bit for bit, NaN-safe


def test_sharp_file_is_the_stored_checkpoint(tool, files):
    stored = torch.load(tool.SHARP_WEIGHTS, weights_only=True)
    assert_same_state(files["sharp"], stored["state_dict"])
    assert files["sharp"]["config"]["model_config"]["d_model"] == SHARP_ATTENTION_RECIPE.d_model


@pytest.mark.parametrize(
    "model_id, cfg",
    [("book", BOOK_RECIPE), ("twin", dataclasses.replace(SHARP_ATTENTION_RECIPE, init="default"))],
)
def test_cached_files_are_their_checkpoints(files, model_id, cfg):
    """The book's model and the twin come from the pinned checkpoint cache (the chapters fill
    it); a machine that has not trained them yet skips this comparison."""
    path = default_cache_dir() / f"reversal-{cfg.key()}.pt"
    if not path.exists():
        pytest.skip(f"{path.name} not in the checkpoint cache (run the chapters first)")
    assert_same_state(files[model_id], load_checkpoint(path, cfg).model.state_dict())


def test_a_changed_bit_is_caught(files):
    stored = torch.load(ROOT / "chapters" / "data" / "ch21_sharp_model.pt", weights_only=True)
    state = {k: v.clone() for k, v in stored["state_dict"].items()}
    name = next(iter(state))
    flat = state[name].view(-1).view(torch.int32)
    flat[0] ^= 1  # the last bit of one float
    with pytest.raises(AssertionError):
        assert_same_state(files["sharp"], state)


def test_index(tool, files):
    index = tool.read_script(ASSETS / tool.INDEX_FILE)
    assert [m["id"] for m in index["models"]] == [mid for mid, _ in tool.MODELS]
    assert index["example"] == tool.EXAMPLE
    for m in index["models"]:
        path = ASSETS / m["file"]
        assert m["bytes"] == path.stat().st_size
        assert m["parameters"] == files[m["id"]]["parameters"]
        assert files[m["id"]]["id"] == m["id"] and files[m["id"]]["label"] == m["label"]


def test_wrong_examples_are_wrong(tool):
    """The tour's inputs that each model gets wrong: greedy_decode on the file's model gives
    the output the index records, and it is not the reversal."""
    from helpers.core.vocab import EOS_ID, NUM_OFFSET

    index = tool.read_script(ASSETS / tool.INDEX_FILE)
    for m in index["models"]:
        ex = m["wrong_example"]
        model = tool.model_from_file(ASSETS / m["file"])
        out = greedy_decode(model, encode_digits(ex["digits"]))[0, 1:].tolist()
        out = out[: out.index(EOS_ID)] if EOS_ID in out else out
        assert out == ex["output_ids"], m["id"]
        assert out != [d + NUM_OFFSET for d in ex["digits"][::-1]], m["id"]


# ---------------------------------------------------------------- the forward pass in NumPy


def numpy_erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf)(x).astype(x.dtype)


class NumpyModel:
    """The encoder-decoder from an exported file alone: what book_model.js computes (float64
    arithmetic on the float32 weights, as the page)."""

    def __init__(self, data: dict, dtype=np.float64):
        self.c = data["config"]
        self.w = {
            e["name"]: np.frombuffer(base64.b64decode(e["data"]), dtype="<f4")
            .reshape(e["shape"])
            .astype(dtype)
            for e in data["tensors"]
        }
        d, L = self.c["d_model"], self.c["max_len"]
        # the position codes in float32, step by step as helpers (and book_model.js) compute them
        f32 = np.float32
        inv = np.exp(np.arange(0, d, 2, dtype=f32) * f32(-math.log(10000.0) / d))
        pos = np.arange(L, dtype=f32)[:, None]
        self.pe = np.zeros((L, d), dtype=dtype)
        self.pe[:, 0::2], self.pe[:, 1::2] = np.sin(pos * inv), np.cos(pos * inv)

    def lin(self, p, x):
        return x @ self.w[p + ".weight"].T + self.w[p + ".bias"]

    def ln(self, p, x):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)  # biased
        eps = self.c["layer_norm_eps"]
        return (x - mu) / np.sqrt(var + eps) * self.w[p + ".weight"] + self.w[p + ".bias"]

    def ffn(self, p, x):
        h = self.lin(p + ".net.0", x)
        return self.lin(p + ".net.2", 0.5 * h * (1 + numpy_erf(h / math.sqrt(2))))

    def embed(self, which, ids):
        emb = self.w[which + ".embed.emb.weight"][ids]
        return emb * self.c["token_scale"] + self.pe[: len(ids)] * self.c["position_scale"]

    def mha(self, p, q, k, v, blocked):
        h = self.c["num_heads"]
        dk = self.c["d_model"] // h

        def split(x):
            return x.reshape(x.shape[0], h, dk).transpose(1, 0, 2)

        Q, K, V = (
            split(self.lin(p + ".W_q", q)),
            split(self.lin(p + ".W_k", k)),
            split(self.lin(p + ".W_v", v)),
        )
        s = Q @ K.transpose(0, 2, 1) / math.sqrt(dk)
        s = np.where(blocked, -np.inf, s)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        out = (s @ V).transpose(1, 0, 2).reshape(q.shape[0], -1)
        return self.lin(p + ".W_o", out)

    def logits(self, src, tgt_in):
        pad = self.c["ids"]["pad"]
        src, tgt_in = np.asarray(src), np.asarray(tgt_in)
        x = self.embed("encoder", src)
        src_blocked = (src == pad)[None, None, :]
        for i in range(self.c["num_layers"]):
            p = f"encoder.layers.{i}"
            h = self.ln(p + ".ln1", x)
            x = x + self.mha(p + ".mha", h, h, h, src_blocked)
            x = x + self.ffn(p + ".ffn", self.ln(p + ".ln2", x))
        memory = self.ln("encoder.ln_final", x)
        n = len(tgt_in)
        causal = np.triu(np.ones((n, n), dtype=bool), 1) | (tgt_in == pad)[None, :]
        y = self.embed("decoder", tgt_in)
        for i in range(self.c["num_layers"]):
            p = f"decoder.layers.{i}"
            h = self.ln(p + ".ln1", y)
            y = y + self.mha(p + ".self_mha", h, h, h, causal[None])
            h = self.ln(p + ".ln2", y)
            y = y + self.mha(p + ".cross_mha", h, memory, memory, src_blocked)
            y = y + self.ffn(p + ".ffn", self.ln(p + ".ln3", y))
        return self.lin("out_proj", self.ln("decoder.ln_final", y))


INPUTS = [[7, 3, 0, 9, 5, 1, 8], [5, 2, 8], [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8], [0], [9, 9]]


@pytest.mark.parametrize("model_id", ["book", "sharp", "twin"])
def test_numpy_forward_from_the_file_equals_pytorch(tool, files, model_id):
    """Teacher-forced logits of the file's model (helpers) and of NumPy reading the file
    alone, on the decoder input greedy decoding produces. The same function: within 1e-5 of
    PyTorch computing in float64 (model.double()); PyTorch's float32 logits, the ones
    tools/check/browser/ compares the page with, are within 1e-4 (their float32 rounding
    reaches about 2.5e-5 on the book's model)."""
    data = files[model_id]
    model = tool.model_from_file(ASSETS / tool.weights_file(model_id))
    exact = tool.model_from_file(ASSETS / tool.weights_file(model_id)).double()
    ours = NumpyModel(data)
    worst64 = worst32 = 0.0
    for digits in INPUTS:
        src = encode_digits(digits)
        tokens = greedy_decode(model, src)
        with torch.no_grad():
            want32 = model(src, tokens[:, :-1])[0].double().numpy()
            want64 = exact(src, tokens[:, :-1])[0].numpy()
        got = ours.logits(src[0].tolist(), tokens[0, :-1].tolist())
        assert got.shape == want32.shape == want64.shape
        worst64 = max(worst64, float(np.abs(got - want64).max()))
        worst32 = max(worst32, float(np.abs(got - want32).max()))
        # greedy decoding in NumPy: the argmax of every step is the next token
        assert got.argmax(-1).tolist() == tokens[0, 1:].tolist()
    assert worst64 <= 1e-5, worst64
    assert worst32 <= 1e-4, worst32


def test_numpy_forward_catches_a_wrong_config(tool, files):
    """The comparison can fail: a forward pass without the sqrt(d) token scale is far off."""
    data = dict(files["sharp"])
    model = tool.model_from_file(ASSETS / tool.weights_file("sharp"))
    src = encode_digits([7, 3, 0, 9, 5, 1, 8])
    tokens = greedy_decode(model, src)
    with torch.no_grad():
        want = model(src, tokens[:, :-1])[0].double().numpy()
    data["config"] = dict(data["config"], token_scale=1.0)
    got = NumpyModel(data).logits(src[0].tolist(), tokens[0, :-1].tolist())
    assert np.abs(got - want).max() > 1e-2


def test_export_is_deterministic_and_exact(tool, tmp_path):
    torch.manual_seed(0)
    model = Transformer(VOCAB_SIZE, VOCAB_SIZE, d_model=16, num_heads=2, dff=32, num_layers=1)
    first = tool.script("W", tool.export_model(model, "tiny", "tiny", "test"), key="tiny")
    second = tool.script("W", tool.export_model(model, "tiny", "tiny", "test"), key="tiny")
    assert first == second
    path = tmp_path / "w.js"
    path.write_text(first)
    data = tool.read_script(path)
    assert_same_state(data, model.state_dict())
    assert data["config"]["token_scale"] == 4.0 and data["config"]["activation"] == "gelu_erf"
    twin = tool.model_from_file(path)
    for a, b in zip(twin.state_dict().values(), model.state_dict().values()):
        assert torch.equal(a, b)


def test_unsupported_models_are_refused(tool):
    model = Transformer(VOCAB_SIZE, VOCAB_SIZE, d_model=16, num_heads=2, dff=32, num_layers=1)
    model.encoder.layers[0].ffn.net[1] = torch.nn.GELU(approximate="tanh")
    with pytest.raises(ValueError, match="erf"):
        tool.model_config(model)
