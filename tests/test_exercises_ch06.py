"""Chapter 6's checker accepts the decoder layer's forward pass and names each catalogued
mistake (tests/mistakes_ch06.py) with its own message."""

import re

import mistakes_ch06 as m
import pytest
import torch

from helpers.exercises import ExerciseError, check_decoder_layer_forward

forward = m.correct  # the book's solution; tests/test_exercises_near_miss.py nudges it


def test_accepts_the_solution(capsys):
    check_decoder_layer_forward(forward)
    assert "check_decoder_layer_forward: all 4 checks passed" in capsys.readouterr().out


CATALOGUE = [
    (m.post_norm, "Post-Norm order"),
    (m.no_self_residual, "the self-attention's result is added to the stream"),
    (m.no_cross_residual, "the cross-attention's result is added to the stream too"),
    (m.no_ffn_residual, "the feed-forward's result is added to the stream too"),
    (m.residual_from_normalised, "not to its normalised copy"),
    (m.one_layernorm, "each sub-layer has its own LayerNorm"),
    (m.no_ln3, "reads ln3"),
    (m.memory_normalised, "memory is used as it is"),
    (m.no_causal_mask, r"the self-attention needs self_mask \(causal"),
    (m.no_cross_mask, "cross-attention needs cross_mask"),
    (m.masks_swapped, "the masks are swapped"),
    (m.kv_from_decoder, "keys and values from memory, not from the decoder's stream"),
    (m.queries_from_memory, "memory and x are swapped"),
    (m.self_weights, "the shape of self-attention weights"),
    (m.dropout_on, "dropout is still on"),
    (m.no_ln1, r"self-attention sub-layer reads ln1\(x\)"),
    (m.ln2_ln3_swapped, "the LayerNorms are in the wrong places"),
    (m.masks_inverted, "True means blocked"),
    (m.cross_gets_self_mask, "the cross-attention got self_mask"),
    (m.cross_before_self, "the sub-layers run in a fixed order"),
    (m.cross_weights_none, "when need_weights=False"),
]


def test_the_catalogue_is_complete_and_its_messages_distinct():
    assert [fn for fn, _ in CATALOGUE] == m.CATALOGUE
    assert len({message for _, message in CATALOGUE}) == len(CATALOGUE)


@pytest.mark.parametrize("mistake, message", CATALOGUE, ids=lambda v: getattr(v, "__name__", ""))
def test_names_each_catalogued_mistake(mistake, message):
    with pytest.raises(ExerciseError, match=message) as err:
        check_decoder_layer_forward(mistake)
    others = [msg for fn, msg in CATALOGUE if fn is not mistake]
    assert not any(re.search(msg, str(err.value)) for msg in others)


@pytest.mark.parametrize("variant", m.VARIANTS, ids=lambda v: v.__name__)
def test_accepts_the_solution_written_another_way(variant, capsys):
    check_decoder_layer_forward(variant)
    assert "all 4 checks passed" in capsys.readouterr().out


def test_rejects_a_single_return_value():
    with pytest.raises(ExerciseError, match="should return a pair"):
        check_decoder_layer_forward(lambda *args: m.correct(*args)[0])


def test_refuses_calling_the_layer_itself():
    with pytest.raises(ExerciseError, match=r"calls layer\(x, memory, self_mask, cross_mask\)"):
        check_decoder_layer_forward(lambda layer, *args: layer(*args))


def test_leaves_the_global_random_stream_alone():
    torch.manual_seed(123)
    want = torch.rand(3)
    torch.manual_seed(123)
    check_decoder_layer_forward(m.correct)
    with pytest.raises(ExerciseError):
        check_decoder_layer_forward(m.dropout_on)
    assert torch.equal(torch.rand(3), want)
