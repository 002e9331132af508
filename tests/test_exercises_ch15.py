"""Chapter 15's checkers accept the book's answers and reject the likely mistakes."""

import pytest
import torch

from helpers import make_causal_mask, make_padding_mask
from helpers.exercises import ExerciseError, check_copy_attention, check_torch_masks
from helpers.torch_reference import copy_attention, torch_mask_arguments


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def with_mask(name, make):
    return lambda src, tgt_in: {**torch_mask_arguments(src, tgt_in), name: make(src, tgt_in)}


def test_the_books_masks_pass(capsys):
    check_torch_masks(torch_mask_arguments)
    assert "check_torch_masks: all 4 checks passed" in capsys.readouterr().out


def test_additive_float_masks_pass_too(capsys):
    def as_float(src, tgt_in):
        masks = torch_mask_arguments(src, tgt_in)
        return {k: torch.zeros(v.shape).masked_fill(v, float("-inf")) for k, v in masks.items()}

    check_torch_masks(as_float)
    assert "passed" in capsys.readouterr().out


def test_forgetting_the_memory_mask_is_rejected():
    def no_memory_mask(src, tgt_in):
        masks = torch_mask_arguments(src, tgt_in)
        del masks["memory_key_padding_mask"]
        return masks

    with pytest.raises(ExerciseError, match="cross-attention does not reuse src_key_padding"):
        check_torch_masks(no_memory_mask)


def test_reversed_polarity_is_rejected():
    def keep_masks(src, tgt_in):
        return {k: ~v for k, v in torch_mask_arguments(src, tgt_in).items()}

    with pytest.raises(ExerciseError, match="the polarity is reversed"):
        check_torch_masks(keep_masks)


def test_our_4d_masks_are_rejected_with_the_shape_nn_transformer_wants():
    ours_causal = with_mask("tgt_mask", lambda s, t: make_causal_mask(t.size(1)))
    with pytest.raises(ExerciseError, match=r"tgt_mask has shape \(1, 1, 13, 13\), expected"):
        check_torch_masks(ours_causal)
    ours_padding = with_mask("src_key_padding_mask", lambda s, t: make_padding_mask(s))
    with pytest.raises(ExerciseError, match="drop our two broadcast dimensions"):
        check_torch_masks(ours_padding)


def test_causal_mask_with_diagonal_zero_is_rejected():
    diag0 = with_mask(
        "tgt_mask", lambda s, t: torch.ones(t.size(1), t.size(1), dtype=torch.bool).triu(0)
    )
    with pytest.raises(ExerciseError, match=r"diagonal=0 blocks the diagonal too"):
        check_torch_masks(diag0)


def test_target_padding_from_the_source_is_rejected():
    with pytest.raises(ExerciseError, match="the decoder's padding comes from tgt_in"):
        check_torch_masks(with_mask("tgt_key_padding_mask", lambda s, t: s == 0))


def test_the_books_copy_passes(capsys):
    check_copy_attention(copy_attention)
    assert "check_copy_attention: all 4 checks passed" in capsys.readouterr().out


def test_k_q_v_order_is_rejected():
    def kqv(dst, src):
        dst.in_proj_weight.copy_(torch.cat([src.W_k.weight, src.W_q.weight, src.W_v.weight]))
        dst.in_proj_bias.copy_(torch.cat([src.W_k.bias, src.W_q.bias, src.W_v.bias]))
        dst.out_proj.load_state_dict(src.W_o.state_dict())

    with pytest.raises(ExerciseError, match="in_proj_weight stacks K, Q, V: the order is Q, K, V"):
        check_copy_attention(kqv)


def test_forgetting_the_biases_is_rejected():
    def weights_only(dst, src):
        dst.in_proj_weight.copy_(torch.cat([src.W_q.weight, src.W_k.weight, src.W_v.weight]))
        dst.out_proj.weight.copy_(src.W_o.weight)

    with pytest.raises(ExerciseError, match="copy the biases too"):
        check_copy_attention(weights_only)


def test_transposed_weights_are_rejected():
    def transposed(dst, src):
        dst.in_proj_weight.copy_(torch.cat([src.W_q.weight.T, src.W_k.weight.T, src.W_v.weight.T]))
        dst.in_proj_bias.copy_(torch.cat([src.W_q.bias, src.W_k.bias, src.W_v.bias]))
        dst.out_proj.load_state_dict(src.W_o.state_dict())

    with pytest.raises(ExerciseError, match="the weights are transposed"):
        check_copy_attention(transposed)
