"""Chapter 16's checker accepts the book's name map and rejects the likely mistakes."""

import pytest

from helpers.exercises import ExerciseError, check_bart_decoder_names
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
