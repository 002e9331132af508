"""Chapter 5's checkers accept the book's answers and name each catalogued mistake
(tests/mistakes_ch05.py) with its own message."""

import mistakes_ch05 as m
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers.exercises import (
    ExerciseError,
    check_encoder_forward,
    check_encoder_layer_forward,
    check_layer_norm,
    check_rms_norm,
)


def rms_norm_class(forward=m.rms_correct):
    class RMSNorm(nn.Module):
        def __init__(self, d_model, eps=1e-6):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(d_model))

    RMSNorm.forward = forward
    return RMSNorm


def layer_norm_class(forward=m.ln_correct):
    class LayerNorm(nn.Module):
        def __init__(self, d_model, eps=1e-5):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(d_model))
            self.bias = nn.Parameter(torch.zeros(d_model))

    LayerNorm.forward = forward
    return LayerNorm


# --- 5.3 RMSNorm ---


def test_rms_norm_accepts_the_solution(capsys):
    check_rms_norm(rms_norm_class())
    assert "check_rms_norm: all" in capsys.readouterr().out


RMS_CATALOGUE = [
    (m.rms_centred, "that is LayerNorm"),
    (m.rms_eps_outside, "eps goes inside the square root"),
    (m.rms_no_weight, "multiply by self.weight"),
    (m.rms_batch_dim, "over the last dimension"),
    (m.rms_sum_not_mean, "not by the root of the sum of squares"),
    (m.rms_std, r"x.std\(\) is not the root mean square"),
    (m.rms_no_sqrt, "take the square root"),
    (m.rms_no_eps, "eps is missing: divide by sqrt"),
]


@pytest.mark.parametrize(
    "mistake, message", RMS_CATALOGUE, ids=lambda v: getattr(v, "__name__", "")
)
def test_rms_norm_names_each_catalogued_mistake(mistake, message):
    with pytest.raises(ExerciseError, match=message):
        check_rms_norm(rms_norm_class(mistake))


def test_rms_norm_rejects_a_layer_without_weight():
    class NoWeight(nn.Module):
        def __init__(self, d_model, eps=1e-6):
            super().__init__()

        def forward(self, x):
            return x

    with pytest.raises(ExerciseError, match="no parameter named `weight`"):
        check_rms_norm(NoWeight)


def test_rms_norm_rejects_a_bias():
    cls = rms_norm_class()

    class WithBias(cls):
        def __init__(self, d_model, eps=1e-6):
            super().__init__(d_model, eps)
            self.bias = nn.Parameter(torch.zeros(d_model))

    with pytest.raises(ExerciseError, match="a scale \\(weight\\) only, no bias"):
        check_rms_norm(WithBias)


# --- 5.4 LayerNorm ---


def test_layer_norm_accepts_the_solution(capsys):
    check_layer_norm(layer_norm_class())
    assert "check_layer_norm: all" in capsys.readouterr().out


LN_CATALOGUE = [
    (m.ln_unbiased, "divide by d, not d - 1"),
    (m.ln_eps_outside, "eps goes inside the square root"),
    (m.ln_std_plus_eps, "Annotated Transformer's slip"),
    (m.ln_batch_dim, r"over the batch dimension \(dim 0\)"),
    (m.ln_sequence_dim, r"over the sequence dimension \(dim -2\)"),
    (m.ln_not_centred, "without centring this is RMSNorm"),
    (m.ln_numerator_not_centred, "the numerator is x - mean"),
    (m.ln_variance_around_zero, r"not the mean of x\*\*2"),
    (m.ln_no_eps, r"eps is missing: \(x - mean\)"),
    (m.ln_weight_bias_swapped, "weight and bias are swapped"),
    (m.ln_no_bias, "add self.bias after scaling"),
    (m.ln_no_weight, "multiply by self.weight before adding"),
    (m.ln_shift_before_scale, "scale first, then shift"),
]


@pytest.mark.parametrize("mistake, message", LN_CATALOGUE, ids=lambda v: getattr(v, "__name__", ""))
def test_layer_norm_names_each_catalogued_mistake(mistake, message):
    with pytest.raises(ExerciseError, match=message):
        check_layer_norm(layer_norm_class(mistake))


def test_layer_norm_rejects_missing_or_misinitialised_parameters():
    class NoBias(nn.Module):
        def __init__(self, d_model, eps=1e-5):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d_model))

    with pytest.raises(ExerciseError, match="no parameter named `bias`"):
        check_layer_norm(NoBias)

    class RandomWeight(layer_norm_class()):
        def __init__(self, d_model, eps=1e-5):
            super().__init__(d_model, eps)
            self.weight = nn.Parameter(torch.randn(d_model))

    with pytest.raises(ExerciseError, match="does not start at ones"):
        check_layer_norm(RandomWeight)


def test_layer_norm_refuses_torch_layer_norm():
    with pytest.raises(ExerciseError, match="uses nn.LayerNorm"):
        check_layer_norm(nn.LayerNorm)
    calls_f = layer_norm_class(lambda s, x: F.layer_norm(x, s.weight.shape, s.weight, s.bias))
    with pytest.raises(ExerciseError, match="calls torch.nn.functional.layer_norm"):
        check_layer_norm(calls_f)
    calls_torch = layer_norm_class(
        lambda s, x: torch.layer_norm(x, s.weight.shape, s.weight, s.bias, s.eps)
    )
    with pytest.raises(ExerciseError, match="calls torch.layer_norm"):
        check_layer_norm(calls_torch)


def test_rms_norm_refuses_torch_rms_norm():
    with pytest.raises(ExerciseError, match="through nn.RMSNorm"):
        check_rms_norm(nn.RMSNorm)
    with pytest.raises(ExerciseError, match="calls torch.nn.functional.rms_norm"):
        check_rms_norm(rms_norm_class(lambda s, x: F.rms_norm(x, s.weight.shape, s.weight, s.eps)))


def test_checkers_leave_the_global_random_stream_alone():
    torch.manual_seed(123)
    want = torch.rand(3)
    torch.manual_seed(123)
    check_encoder_layer_forward(m.enc_correct)
    check_encoder_forward(m.encoder_correct)
    assert torch.equal(torch.rand(3), want)


def test_refuses_calling_the_module_itself():
    with pytest.raises(ExerciseError, match=r"calls layer\(x, pad_mask\) itself"):
        check_encoder_layer_forward(lambda layer, x, pad_mask: layer(x, pad_mask))
    with pytest.raises(ExerciseError, match=r"calls encoder\(src, pad_mask\) itself"):
        check_encoder_forward(lambda encoder, src, pad_mask: encoder(src, pad_mask))


# --- 5.5 the Pre-Norm encoder layer ---


def test_encoder_layer_accepts_the_solution(capsys):
    check_encoder_layer_forward(m.enc_correct)
    assert "check_encoder_layer_forward: all" in capsys.readouterr().out


ENC_CATALOGUE = [
    (m.enc_post_norm, "Post-Norm order"),
    (m.enc_no_attention_residual, "the attention's result is added to the stream"),
    (m.enc_no_ffn_residual, "the feed-forward's result is added to the stream too"),
    (m.enc_residual_from_normalised, "not to its normalised copy"),
    (m.enc_one_layernorm, "each sub-layer has its own LayerNorm"),
    (m.enc_no_pad_mask, "pass pad_mask to the attention"),
    (m.enc_dropout_on, "dropout is still on"),
    (m.enc_ffn_unnormalised, "the feed-forward reads ln2"),
    (m.enc_final_layernorm, "returns the stream without normalising it"),
    (m.enc_attention_unnormalised, "the attention reads ln1"),
    (m.enc_layernorms_swapped, "ln1 and ln2 are swapped"),
    (m.enc_mask_inverted, r"not ~pad_mask"),
    (m.enc_no_residual_dropout, r"through layer.drop before adding it"),
]


@pytest.mark.parametrize(
    "mistake, message", ENC_CATALOGUE, ids=lambda v: getattr(v, "__name__", "")
)
def test_encoder_layer_names_each_catalogued_mistake(mistake, message):
    with pytest.raises(ExerciseError, match=message):
        check_encoder_layer_forward(mistake)


def test_encoder_layer_rejects_a_single_return_value():
    with pytest.raises(ExerciseError, match="should return a pair"):
        check_encoder_layer_forward(lambda *args: m.enc_correct(*args)[0])


def test_encoder_layer_rejects_missing_weights():
    with pytest.raises(ExerciseError, match="attention weights should be a torch.Tensor"):
        check_encoder_layer_forward(lambda *args: (m.enc_correct(*args)[0], None))


# --- 5.5, second part: the encoder stack ---


def test_encoder_stack_accepts_the_solution(capsys):
    check_encoder_forward(m.encoder_correct)
    assert "check_encoder_forward: all" in capsys.readouterr().out


STACK_CATALOGUE = [
    (m.encoder_no_final_ln, "the encoder ends with encoder.ln_final"),
    (m.encoder_ln_every_layer, "runs once, after the loop"),
    (m.encoder_no_pad_mask, "pass pad_mask to every layer"),
    (m.encoder_layers_read_embedding, "each layer reads the previous layer's output"),
    (m.encoder_layers_reversed, "the layers run in the order of encoder.layers"),
    (m.encoder_unweighted_final_ln, "not a bare F.layer_norm"),
    (m.encoder_ln_at_start, "not on the embedding"),
    (m.encoder_mask_inverted, "not ~pad_mask"),
    (m.encoder_no_unpack, "unpack it in the loop"),
]


@pytest.mark.parametrize(
    "mistake, message", STACK_CATALOGUE, ids=lambda v: getattr(v, "__name__", "")
)
def test_encoder_stack_names_each_catalogued_mistake(mistake, message):
    with pytest.raises(ExerciseError, match=message):
        check_encoder_forward(mistake)


def test_encoder_stack_rejects_a_pair():
    with pytest.raises(ExerciseError, match="fn returned a tuple"):
        check_encoder_forward(lambda *args: (m.encoder_correct(*args), None))


# --- every checker refuses a near miss: the accepted answer moved by 0.1 % ---


def _nudged_layer_norm(self, x):
    return m.ln_correct(self, x) * 1.001


def _nudged_rms_norm(self, x):
    return m.rms_correct(self, x) * 1.001


@pytest.mark.parametrize(
    "checker, answer",
    [
        (check_rms_norm, rms_norm_class(_nudged_rms_norm)),
        (check_layer_norm, layer_norm_class(_nudged_layer_norm)),
        (
            check_encoder_layer_forward,
            lambda *a: (m.enc_correct(*a)[0] * 1.001, m.enc_correct(*a)[1]),
        ),
        (check_encoder_forward, lambda *a: m.encoder_correct(*a) * 1.001),
    ],
    ids=["rms_norm", "layer_norm", "encoder_layer", "encoder"],
)
def test_refuses_a_near_miss(checker, answer):
    with pytest.raises(ExerciseError, match="values differ"):
        checker(answer)
