"""Chapter 6's checker accepts the decoder layer's forward pass and explains wrong ones."""

import pytest

from helpers.exercises import ExerciseError, check_decoder_layer_forward


def forward(layer, x, memory, self_mask, cross_mask, mistake=None):
    h = layer.ln1(x)
    a, w_self = layer.self_mha(h, h, h, attn_mask=self_mask)
    x = x + a
    h = layer.ln2(x)
    if mistake == "kv from decoder":
        a, w = layer.cross_mha(h, h, h, attn_mask=self_mask)
    elif mistake == "memory normalised":
        m = layer.ln2(memory)
        a, w = layer.cross_mha(h, m, m, attn_mask=cross_mask)
    elif mistake == "no cross mask":
        a, w = layer.cross_mha(h, memory, memory)
    else:
        a, w = layer.cross_mha(h, memory, memory, attn_mask=cross_mask)
    x = x + a
    x = x + layer.ffn(x if mistake == "no ln3" else layer.ln3(x))
    return x, (w_self if mistake == "self weights" else w)


def post_norm(layer, x, memory, self_mask, cross_mask):
    a, _ = layer.self_mha(x, x, x, attn_mask=self_mask)
    x = layer.ln1(x + a)
    a, w = layer.cross_mha(x, memory, memory, attn_mask=cross_mask)
    x = layer.ln2(x + a)
    return layer.ln3(x + layer.ffn(x)), w


def test_accepts_the_solution(capsys):
    check_decoder_layer_forward(forward)
    assert "check_decoder_layer_forward: all" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, hint",
    [
        ("kv from decoder", "keys and values from memory"),
        ("memory normalised", "memory is used as it is"),
        ("no cross mask", "cross-attention needs cross_mask"),
        ("no ln3", "reads ln3"),
        ("self weights", "the shape of self-attention weights"),
    ],
)
def test_rejects_plausible_mistakes(mistake, hint):
    def wrong(*args):
        return forward(*args, mistake=mistake)

    with pytest.raises(ExerciseError, match=hint):
        check_decoder_layer_forward(wrong)


def test_rejects_post_norm():
    with pytest.raises(ExerciseError, match="Post-Norm order"):
        check_decoder_layer_forward(post_norm)


def test_rejects_a_single_return_value():
    with pytest.raises(ExerciseError, match="should return a pair"):
        check_decoder_layer_forward(lambda *args: forward(*args)[0])
