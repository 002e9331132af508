"""Chapter 15's checkers accept the book's answers and reject the likely mistakes."""

import pytest
import torch

from helpers import make_causal_mask, make_padding_mask
from helpers.analysis.torch_reference import copy_attention, torch_mask_arguments
from helpers.exercises import ExerciseError, check_load_attention, check_torch_masks


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


def load_attention(dst, src):
    """The book's solution to exercise 15.3: nn.MultiheadAttention -> our MultiHeadAttention."""
    for lin, w, b in zip(
        (dst.W_q, dst.W_k, dst.W_v), src.in_proj_weight.chunk(3), src.in_proj_bias.chunk(3)
    ):
        lin.weight.copy_(w)
        lin.bias.copy_(b)
    dst.W_o.load_state_dict(src.out_proj.state_dict())


def test_the_books_load_passes(capsys):
    check_load_attention(load_attention)
    assert "check_load_attention: all 4 checks passed" in capsys.readouterr().out


def test_k_q_v_order_is_rejected():
    def kqv(dst, src):
        load_attention(dst, src)
        w_q, w_k, _ = src.in_proj_weight.chunk(3)
        dst.W_q.weight.copy_(w_k)
        dst.W_k.weight.copy_(w_q)

    with pytest.raises(ExerciseError, match="in_proj_weight stacks Q, K, V in that order"):
        check_load_attention(kqv)


def test_forgetting_the_biases_is_rejected():
    def weights_only(dst, src):
        for lin, w in zip((dst.W_q, dst.W_k, dst.W_v), src.in_proj_weight.chunk(3)):
            lin.weight.copy_(w)
        dst.W_o.load_state_dict(src.out_proj.state_dict())

    with pytest.raises(ExerciseError, match="copy the biases too"):
        check_load_attention(weights_only)


def test_transposed_weights_are_rejected():
    def transposed(dst, src):
        load_attention(dst, src)
        for lin, w in zip((dst.W_q, dst.W_k, dst.W_v), src.in_proj_weight.chunk(3)):
            lin.weight.copy_(w.T)

    with pytest.raises(ExerciseError, match="the weights are transposed"):
        check_load_attention(transposed)


def test_forgetting_the_output_projection_is_rejected():
    def no_out_proj(dst, src):
        for lin, w, b in zip(
            (dst.W_q, dst.W_k, dst.W_v), src.in_proj_weight.chunk(3), src.in_proj_bias.chunk(3)
        ):
            lin.weight.copy_(w)
            lin.bias.copy_(b)

    with pytest.raises(ExerciseError, match="out_proj \\(weight and bias\\) goes to W_o"):
        check_load_attention(no_out_proj)


def test_copying_the_wrong_way_is_rejected():
    def wrong_way(dst, src):
        copy_attention(src, dst)  # the chapter's direction: ours into nn.MultiheadAttention

    with pytest.raises(ExerciseError, match="dst, our MultiHeadAttention, is unchanged"):
        check_load_attention(wrong_way)
