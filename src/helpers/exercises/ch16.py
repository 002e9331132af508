"""Checkers for the exercises of chapter 16 (a source map to Hugging Face transformers)."""

from __future__ import annotations

import torch

from helpers.core.embeddings import sinusoidal_position_encoding
from helpers.core.layers import DecoderLayer

from ._common import call, expect_dtype, expect_shape, fail, passed

__all__ = ["check_bart_decoder_names", "check_m2m100_positions"]

# Our DecoderLayer's modules -> BartDecoderLayer's (transformers 5.x), checked in the tests.
# The LayerNorms are matched by the sub-layer they belong to, not by position: ours normalise
# a sub-layer's input (Pre-Norm), BART's its output (Post-Norm).
BART_DECODER_LAYER_NAMES = {
    "self_mha.W_q": "self_attn.q_proj",
    "self_mha.W_k": "self_attn.k_proj",
    "self_mha.W_v": "self_attn.v_proj",
    "self_mha.W_o": "self_attn.out_proj",
    "ln1": "self_attn_layer_norm",
    "cross_mha.W_q": "encoder_attn.q_proj",
    "cross_mha.W_k": "encoder_attn.k_proj",
    "cross_mha.W_v": "encoder_attn.v_proj",
    "cross_mha.W_o": "encoder_attn.out_proj",
    "ln2": "encoder_attn_layer_norm",
    "ffn.net.0": "fc1",
    "ffn.net.2": "fc2",
    "ln3": "final_layer_norm",
}

_HINTS = {
    "ln1": "ln1 belongs to the self-attention sub-layer: self_attn_layer_norm",
    "ln2": "ln2 belongs to the cross-attention sub-layer: encoder_attn_layer_norm",
    "ln3": "ln3 belongs to the feed-forward sub-layer, BART's final_layer_norm",
    "cross_mha": "BART calls cross-attention encoder_attn (its keys come from the encoder)",
    "self_mha": "BART calls self-attention self_attn",
    "W_o": "the output projection is out_proj in both BartAttention and nn.MultiheadAttention",
    "W_q": "q_proj, k_proj, v_proj: one nn.Linear each, as ours",
    "W_k": "q_proj, k_proj, v_proj: one nn.Linear each, as ours",
    "W_v": "q_proj, k_proj, v_proj: one nn.Linear each, as ours",
    "ffn": "BART has no feed-forward module: ffn.net.0 is fc1 and ffn.net.2 is fc2",
}


def _expected(name: str) -> str:
    module, leaf = name.rsplit(".", 1)
    return f"{BART_DECODER_LAYER_NAMES[module]}.{leaf}"


def _hint(name: str, got) -> str:
    if isinstance(got, str) and got.startswith(("layers.", "model.", "decoder.")):
        return "give names relative to one layer, as in BartDecoderLayer.named_parameters()"
    if isinstance(got, str) and got.rsplit(".", 1)[-1] != name.rsplit(".", 1)[-1]:
        return "keep the last part of the name: a weight stays .weight and a bias stays .bias"
    for key in ("ln1", "ln2", "ln3", "cross_mha", "self_mha", "W_o", "W_q", "W_k", "W_v", "ffn"):
        if key in name.split("."):
            return _HINTS[key]
    return ""


def check_bart_decoder_names(bart_name_fn) -> None:
    """Exercise 16.3: bart_name_fn(our_name) -> the name of that tensor in a BartDecoderLayer.

    Used in chapter 16. Called on every parameter name of a helpers.DecoderLayer
    ('self_mha.W_q.weight', ...) and compared with the book's map; the map must also be one to
    one.
    """
    names = [n for n, _ in DecoderLayer(32, 4, 128, dropout=0.0).named_parameters()]
    seen = {}
    for name in names:
        got = call(bart_name_fn, name, where=f"our name {name!r}")
        if not isinstance(got, str):
            fail(f"bart_name({name!r}) returned {type(got).__name__}, expected a str")
        want = _expected(name)
        if got != want:
            if got in seen:
                what = f"bart_name({name!r}) is {got!r}, as is bart_name({seen[got]!r})"
            else:
                what = f"bart_name({name!r}) is {got!r}, expected {want!r}"
            fail(what, hint=_hint(name, got))
        seen[got] = name
    passed("check_bart_decoder_names", len(names), "every parameter of a decoder layer")


def _rows_hold(table: torch.Tensor, start: int, pe: torch.Tensor) -> bool:
    rows = table[start : start + pe.size(0)]
    return rows.shape == pe.shape and torch.allclose(rows, pe, atol=1e-6, rtol=0)


def check_m2m100_positions(positions_fn) -> None:
    """Exercise 16.4: positions_fn(pe, padding_idx) -> M2M100's position buffer holding ours.

    Used in chapter 16. pe is our table [L, d]; the answer must be [L + 2, d] (M2M100 keeps
    max_position_embeddings + offset rows, offset 2), with pe[p] in row p + padding_idx + 1 (the
    row M2M100 reads for position p) and zeros in row padding_idx (what PAD positions read),
    in pe's dtype.
    Tried with padding_idx 0 (ours) and 1 (M2M100Config's default)."""
    length, d = 14, 32
    pe = sinusoidal_position_encoding(length, d)
    in_halves = torch.cat([pe[:, 0::2], pe[:, 1::2]], dim=1)
    for padding_idx in (0, 1):
        where = f"pe of shape {tuple(pe.shape)}, padding_idx={padding_idx}"
        table = call(positions_fn, pe.clone(), padding_idx, where=where)
        expect_shape(
            "the table", table, (length + 2, d), where,
            hint="M2M100 keeps max_position_embeddings + offset rows, and its offset is 2",
        )  # fmt: skip
        expect_dtype(
            "the table", table, pe.dtype, where,
            hint="M2M100's buffer and our pe are float32: build the table with dtype=pe.dtype",
        )  # fmt: skip
        start = padding_idx + 1
        if not _rows_hold(table, start, pe):
            if _rows_hold(table, 0, pe):
                hint = (
                    "position p does not read row p: M2M100 counts positions from "
                    "padding_idx + 1 (create_position_ids_from_input_ids)"
                )
            elif _rows_hold(table, 2, pe):
                hint = (
                    "the offset 2 is padding_idx + 1 only for M2M100's default padding_idx=1; "
                    "position 0 reads row padding_idx + 1"
                )
            elif _rows_hold(table, start, in_halves):
                hint = (
                    "keep our layout: our weights were trained on interleaved sin/cos; only "
                    "M2M100's own table puts the sines in the first half"
                )
            else:
                hint = "row p + padding_idx + 1 must hold pe[p], for every p"
            fail(f"rows {start}..{start + length - 1} do not hold pe", where, hint)
        if table[padding_idx].abs().max() > 0:
            fail(
                f"row {padding_idx} is not zero",
                where,
                hint="row padding_idx is what PAD positions read, and M2M100 keeps it zero",
            )
    passed("check_m2m100_positions", 2, "padding_idx 0 and 1")
