"""Chapter 16's checkers accept the book's answers (the name map, M2M100's position table) and
reject the likely mistakes."""

import pytest
import torch

from helpers import PAD_ID
from helpers.exercises import ExerciseError, check_bart_decoder_names, check_m2m100_positions
from helpers.exercises.ch16 import BART_DECODER_LAYER_NAMES


def book_map(name):
    module, leaf = name.rsplit(".", 1)
    return f"{BART_DECODER_LAYER_NAMES[module]}.{leaf}"


def test_the_books_map_names_every_bart_decoder_parameter_with_its_shape():
    from transformers.models.bart import modeling_bart
    from transformers.models.bart.configuration_bart import BartConfig

    from helpers import DecoderLayer

    cfg = BartConfig(vocab_size=13, d_model=32, decoder_attention_heads=4, decoder_ffn_dim=128)
    theirs = dict(modeling_bart.BartDecoderLayer(cfg, layer_idx=0).named_parameters())
    ours = dict(DecoderLayer(32, 4, 128, dropout=0.0).named_parameters())
    mapped = {book_map(n): tuple(p.shape) for n, p in ours.items()}
    assert mapped == {n: tuple(p.shape) for n, p in theirs.items()}


def test_the_books_map_passes(capsys):
    check_bart_decoder_names(book_map)
    assert "check_bart_decoder_names: all 26 checks passed" in capsys.readouterr().out


def test_layer_norms_matched_by_position_are_rejected():
    by_position = {"ln1": "self_attn_layer_norm", "ln2": "final_layer_norm"}

    def wrong(name):
        module, leaf = name.rsplit(".", 1)
        return f"{by_position[module]}.{leaf}" if module in by_position else book_map(name)

    with pytest.raises(ExerciseError, match="ln2 belongs to the cross-attention sub-layer"):
        check_bart_decoder_names(wrong)


def test_cross_attention_under_our_name_is_rejected():
    def wrong(name):
        return book_map(name).replace("encoder_attn.", "cross_attn.")

    with pytest.raises(ExerciseError, match="BART calls cross-attention encoder_attn"):
        check_bart_decoder_names(wrong)


def test_names_with_the_layer_prefix_are_rejected():
    with pytest.raises(ExerciseError, match="relative to one layer"):
        check_bart_decoder_names(lambda name: "layers.0." + book_map(name))


def test_two_names_onto_one_are_rejected():
    def wrong(name):
        return book_map(name).replace("k_proj", "q_proj")

    with pytest.raises(ExerciseError, match="as is bart_name\\('self_mha.W_q.weight'\\)"):
        check_bart_decoder_names(wrong)


def book_positions(pe, padding_idx):
    table = torch.zeros(pe.size(0) + 2, pe.size(1))
    table[padding_idx + 1 : padding_idx + 1 + pe.size(0)] = pe
    return table


def test_the_books_positions_pass_and_equal_what_the_port_writes(capsys):
    from helpers import Transformer
    from helpers.analysis.hf_port import to_m2m100

    check_m2m100_positions(book_positions)
    assert "check_m2m100_positions: all 2 checks passed" in capsys.readouterr().out
    model = Transformer(13, 13, 32, 4, 64, 1, 14)
    port = to_m2m100(model).model.encoder.embed_positions.weights
    assert torch.equal(book_positions(model.encoder.embed.pe, PAD_ID), port)


@pytest.mark.parametrize(
    "wrong, message",
    [
        (lambda pe, i: torch.cat([pe, torch.zeros(2, pe.size(1))]), "does not read row p"),
        (lambda pe, i: torch.cat([torch.zeros(2, pe.size(1)), pe]), "only for M2M100's default"),
        (
            lambda pe, i: book_positions(torch.cat([pe[:, 0::2], pe[:, 1::2]], 1), i),
            "keep our layout",
        ),
        (
            lambda pe, i: book_positions(pe, i) + (torch.arange(pe.size(0) + 2) == i)[:, None],
            "PAD positions read",
        ),  # fmt: skip
        (lambda pe, i: book_positions(pe, i)[:-2], "offset is 2"),
        (lambda pe, i: book_positions(pe.flip(0), i), "must hold pe"),
        (lambda pe, i: book_positions(pe, i).double(), "dtype=pe.dtype"),
    ],
    ids=["from_row_0", "from_row_2", "halves", "pad_row", "no_extra_rows", "reversed", "float64"],
)
def test_each_positions_mistake_is_named(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        check_m2m100_positions(wrong)
