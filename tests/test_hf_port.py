"""helpers.analysis.hf_port: the book's Transformer inside Pegasus (exactly: logits, a save/load
round trip, greedy generation) and inside M2M100 (all but out_proj.bias), with each convention
that the port sets shown failing when it is put back to transformers' default."""

import pytest
import torch
import transformers
from transformers import M2M100ForConditionalGeneration, PegasusForConditionalGeneration

from helpers import PAD_ID, VOCAB_SIZE, Transformer, greedy_decode, make_reversal_dataset
from helpers.analysis import hf_port
from helpers.analysis.hf_port import (
    greedy_margin,
    hf_greedy,
    hf_logits,
    hf_name,
    max_logit_gap,
    step_logit_gap,
    to_m2m100,
    to_pegasus,
    unwritten,
)
from helpers.core.vocab import EOS_ID

transformers.logging.set_verbosity_error()

# Max |logit difference| allowed for "the same logits". Measured on this machine (CPU, float32,
# torch 2.13, transformers 5.24): 0.0 for Pegasus with our positions (the same operations in the
# same order), on the random model below and on the book's trained one; 1.0e-5 for the logits
# generate computes with its cache (book's model); 5.7e-6 with out_proj.bias folded into M2M100's
# last LayerNorm (book's model); 2.5e-5 with attn_implementation="eager" (HF's own attention
# arithmetic). 1e-4 leaves a fourfold margin over that for other kernels; every mismatch below
# is above 0.1.
BOUND = 1e-4


@pytest.fixture(scope="module")
def model():
    """Two layers per stack, with biases and LayerNorm parameters moved off their initial zeros
    and ones, so that a missing bias or a misplaced norm shows."""
    torch.manual_seed(0)
    m = Transformer(VOCAB_SIZE, VOCAB_SIZE, 32, 4, 64, 2, 14, dropout=0.0)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("bias") or ".ln" in name:
                p.add_(0.3 * torch.randn(p.shape, generator=g))
    return m.eval()


@pytest.fixture(scope="module")
def batch():
    src, tgt = make_reversal_dataset(32, seed=7)  # 3-12 digits: padded rows on both sides
    return src, tgt[:, :-1]


def test_every_parameter_has_one_pegasus_tensor_of_its_size(model):
    hf = PegasusForConditionalGeneration(hf_port.pegasus_config(model))
    theirs = hf.state_dict()
    names = [n for n in model.state_dict() if not n.endswith("embed.pe")]
    mapped = [hf_name(n) for n in names]
    assert len(set(mapped)) == len(names)
    for ours, name in zip(names, mapped):
        assert theirs[name].numel() == model.state_dict()[ours].numel(), (ours, name)
    assert hf_name("decoder.layers.1.cross_mha.W_q.weight") == (
        "model.decoder.layers.1.encoder_attn.q_proj.weight"
    )
    assert hf_name("out_proj.bias") == "final_logits_bias"
    with pytest.raises(KeyError, match="HF_NAME_MAP"):
        hf_name("encoder.layers.0.norm1.weight")


def test_pegasus_gives_our_logits_on_every_position(model, batch):
    src, tgt_in = batch
    hf = to_pegasus(model)
    assert unwritten(hf, model) == []
    assert max_logit_gap(hf, model, src, tgt_in) <= BOUND
    # Pegasus reads positions 0, 1, ... like ours: PAD query rows agree too
    everywhere = (hf_logits(hf, src, tgt_in) - model(src, tgt_in)).abs().max().item()
    assert everywhere <= BOUND


def test_pegasus_survives_a_save_and_load_round_trip(model, batch, tmp_path):
    src, tgt_in = batch
    to_pegasus(model).save_pretrained(tmp_path)
    back = PegasusForConditionalGeneration.from_pretrained(tmp_path).eval()
    assert max_logit_gap(back, model, src, tgt_in) <= BOUND
    torch.testing.assert_close(
        back.model.decoder.embed_positions.weight, model.decoder.embed.pe, rtol=0, atol=0
    )


@pytest.mark.parametrize(
    "mismatch",
    [
        dict(positions="hf"),  # Pegasus's table: sines, then cosines
        dict(scale_embedding=False),  # PegasusConfig's default: tokens not times sqrt(d)
        dict(activation_function="relu"),
        dict(tie_word_embeddings=True),  # three of our matrices written into one tensor
    ],
    ids=lambda d: next(iter(d)),
)
def test_each_pegasus_default_put_back_changes_the_logits(model, batch, mismatch):
    src, tgt_in = batch
    assert max_logit_gap(to_pegasus(model, **mismatch), model, src, tgt_in) > 0.1


def test_m2m100_misses_exactly_the_output_bias(model, batch):
    src, tgt_in = batch
    hf = to_m2m100(model)
    bias = model.out_proj.bias.detach()
    real = tgt_in != PAD_ID
    gap = max_logit_gap(hf, model, src, tgt_in)
    with torch.no_grad():
        rest = (hf_logits(hf, src, tgt_in) + bias - model(src, tgt_in))[real].abs().max().item()
    assert rest <= BOUND
    assert abs(gap - bias.abs().max().item()) <= BOUND  # the gap is the largest |bias| entry
    assert gap > 0.1
    assert not hasattr(hf, "final_logits_bias") and hf.lm_head.bias is None


def test_m2m100_takes_the_bias_folded_into_its_last_layer_norm(model, batch):
    # V = 13 rows, d = 32 columns: W delta = b has a solution, and the LayerNorm's bias beta
    # reaches the logits as W beta
    src, tgt_in = batch
    hf = to_m2m100(model)
    W, b = model.out_proj.weight.detach(), model.out_proj.bias.detach()
    assert torch.linalg.matrix_rank(W.double()).item() == W.size(0)
    delta = torch.linalg.lstsq(W.double(), b.double()[:, None]).solution[:, 0].float()
    with torch.no_grad():
        hf.model.decoder.layer_norm.bias += delta
    assert max_logit_gap(hf, model, src, tgt_in) <= BOUND


def test_m2m100_positions_are_shifted_and_lost_on_save(model, batch, tmp_path):
    src, tgt_in = batch
    hf = to_m2m100(model)
    table = hf.model.encoder.embed_positions.weights
    start = hf.model.encoder.embed_positions.padding_idx + 1  # position 0 reads row PAD + 1
    assert start == PAD_ID + 1 and hf.model.encoder.embed_positions.offset == 2
    assert torch.equal(table[start : start + model.max_len], model.encoder.embed.pe)
    assert not table[PAD_ID].any()
    gap = max_logit_gap(hf, model, src, tgt_in)
    assert max_logit_gap(to_m2m100(model, positions="hf"), model, src, tgt_in) > gap + 1
    hf.save_pretrained(tmp_path)  # the table is a non-persistent buffer: HF's formula comes back
    back = M2M100ForConditionalGeneration.from_pretrained(tmp_path).eval()
    assert max_logit_gap(back, model, src, tgt_in) > gap + 1


def test_m2m100_config_defaults_change_the_logits(model, batch):
    src, tgt_in = batch
    gap = max_logit_gap(to_m2m100(model), model, src, tgt_in)
    for mismatch in (dict(activation_function="relu"), dict(tie_word_embeddings=True)):
        assert max_logit_gap(to_m2m100(model, **mismatch), model, src, tgt_in) > gap + 0.1


def test_only_the_books_blocks_are_ported():
    modern = Transformer(VOCAB_SIZE, VOCAB_SIZE, 32, 4, 64, 1, 14, norm="rms")
    with pytest.raises(ValueError, match="norm"):
        to_pegasus(modern)
    with pytest.raises(ValueError, match="positions must be"):
        to_pegasus(Transformer(VOCAB_SIZE, VOCAB_SIZE, 32, 4, 64, 1, 14), positions="learned")


def test_generate_is_greedy_decode_on_a_trained_model(partly_trained_model):
    # A trained model: an untrained one may emit PAD before EOS, which greedy_decode then masks
    # as a key (padding derived from the ids) and generate does not (no decoder_attention_mask).
    model = partly_trained_model.eval()
    src, _ = make_reversal_dataset(64, seed=11)
    ours = greedy_decode(model, src)
    eos_seen = (ours == EOS_ID).long().cumsum(1) > 0
    assert not ((ours == PAD_ID) & ~eos_seen).any()  # the premise: no PAD before EOS
    hf = to_pegasus(model)
    tokens, step_logits = hf_greedy(hf, src, model.max_len, with_logits=True)
    gap = step_logit_gap(model, src, ours, step_logits)
    # generate's logits within gap of ours at every step of the path, and every choice wins by
    # more than twice that: the same argmax at every step
    assert greedy_margin(model, src, ours) > 2 * gap + BOUND
    assert gap <= BOUND and max_logit_gap(hf, model, src, ours[:, :-1]) <= BOUND
    assert torch.equal(tokens, ours) and torch.equal(hf_greedy(hf, src, model.max_len), ours)
