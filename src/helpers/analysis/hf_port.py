"""The book's trained Transformer inside a Hugging Face encoder-decoder. Built in chapter 16.

Two classes of transformers have our wiring (Pre-Norm layers and a final LayerNorm per stack,
sinusoidal positions added to tokens scaled by sqrt(d)), and both name their tensors as BART does
(HF_NAME_MAP):

- PegasusForConditionalGeneration holds the model exactly. Its position table is a frozen
  nn.Embedding, a parameter read at positions 0, 1, ... with no offset; to_pegasus overwrites it
  with our table (HF's own holds the same codes with sines and cosines in two halves).
  Our out_proj.bias goes into its final_logits_bias buffer. The same logits; the table and the
  bias survive save_pretrained / from_pretrained.
- M2M100ForConditionalGeneration has no tensor for out_proj.bias. Its lm_head has no bias and
  it has no final_logits_bias, so the logits miss out_proj.bias: that is all that remains once
  its positions hold ours. (With fewer tokens than dimensions, V <= d and lm_head.weight W of
  rank V, as the book's model, the bias folds into model.decoder.layer_norm.bias: add delta
  with W delta = out_proj.bias. A real vocabulary, V > d, does not allow that in general.)
  Its positions also differ from ours: position p reads row p + padding_idx + 1, counting only
  the non-PAD tokens before it (create_position_ids_from_input_ids; PAD reads the zero row
  padding_idx), the frequencies are exp(-i ln(1e4) / (d/2 - 1)) in sin | cos halves, and the
  table is a non-persistent buffer that from_pretrained rebuilds with HF's formula. to_m2m100
  overwrites it with ours, which a save/load round trip loses, and so does a forward pass on a
  sequence longer than the table (M2M100 then regenerates it with its formula).

Config fields set on purpose. Three change the logits when put back to their default
(tests/test_hf_port.py): activation_function "gelu" (M2M100's default is relu; transformers'
"gelu" is the exact erf form, like nn.GELU()), tie_word_embeddings False (the default ties both
embeddings and lm_head into one tensor), scale_embedding True (Pegasus's default is False).
Training only: no dropout or layerdrop. For generate: the book's special tokens (decoder_start
BOS, eos EOS, pad PAD; Pegasus's forced_eos_token_id None).

max_logit_gap compares logits on the decoder positions whose input is not PAD: the only ones a
loss or a decoder reads (M2M100 gives PAD query rows a zero position code; ours gives them pe[p]).
transformers is imported only inside the functions, so `import helpers` does not need it.
"""

from __future__ import annotations

import re

import torch

from helpers.core.vocab import BOS_ID, EOS_ID, PAD_ID

# Our parameter names -> BART-family names (M2M100, Pegasus); "{i}" is the layer index.
# LayerNorms are matched by the sub-layer they belong to (both sides are Pre-Norm here).
HF_NAME_MAP = {
    "encoder.embed.emb.weight": "model.encoder.embed_tokens.weight",
    "encoder.layers.{i}.mha.W_q": "model.encoder.layers.{i}.self_attn.q_proj",
    "encoder.layers.{i}.mha.W_k": "model.encoder.layers.{i}.self_attn.k_proj",
    "encoder.layers.{i}.mha.W_v": "model.encoder.layers.{i}.self_attn.v_proj",
    "encoder.layers.{i}.mha.W_o": "model.encoder.layers.{i}.self_attn.out_proj",
    "encoder.layers.{i}.ln1": "model.encoder.layers.{i}.self_attn_layer_norm",
    "encoder.layers.{i}.ffn.net.0": "model.encoder.layers.{i}.fc1",
    "encoder.layers.{i}.ffn.net.2": "model.encoder.layers.{i}.fc2",
    "encoder.layers.{i}.ln2": "model.encoder.layers.{i}.final_layer_norm",
    "encoder.ln_final": "model.encoder.layer_norm",
    "decoder.embed.emb.weight": "model.decoder.embed_tokens.weight",
    "decoder.layers.{i}.self_mha.W_q": "model.decoder.layers.{i}.self_attn.q_proj",
    "decoder.layers.{i}.self_mha.W_k": "model.decoder.layers.{i}.self_attn.k_proj",
    "decoder.layers.{i}.self_mha.W_v": "model.decoder.layers.{i}.self_attn.v_proj",
    "decoder.layers.{i}.self_mha.W_o": "model.decoder.layers.{i}.self_attn.out_proj",
    "decoder.layers.{i}.ln1": "model.decoder.layers.{i}.self_attn_layer_norm",
    "decoder.layers.{i}.cross_mha.W_q": "model.decoder.layers.{i}.encoder_attn.q_proj",
    "decoder.layers.{i}.cross_mha.W_k": "model.decoder.layers.{i}.encoder_attn.k_proj",
    "decoder.layers.{i}.cross_mha.W_v": "model.decoder.layers.{i}.encoder_attn.v_proj",
    "decoder.layers.{i}.cross_mha.W_o": "model.decoder.layers.{i}.encoder_attn.out_proj",
    "decoder.layers.{i}.ln2": "model.decoder.layers.{i}.encoder_attn_layer_norm",
    "decoder.layers.{i}.ffn.net.0": "model.decoder.layers.{i}.fc1",
    "decoder.layers.{i}.ffn.net.2": "model.decoder.layers.{i}.fc2",
    "decoder.layers.{i}.ln3": "model.decoder.layers.{i}.final_layer_norm",
    "decoder.ln_final": "model.decoder.layer_norm",
    "out_proj.weight": "lm_head.weight",
    "out_proj.bias": "final_logits_bias",  # Pegasus: a [1, V] buffer; M2M100 has none
}
_LAYER = re.compile(r"^(encoder|decoder)\.layers\.(\d+)\.")


def hf_name(name: str) -> str:
    """Our parameter name -> its name in M2M100 / Pegasus ...ForConditionalGeneration:
    'decoder.layers.1.cross_mha.W_q.weight' -> 'model.decoder.layers.1.encoder_attn.q_proj.weight'.
    """
    m = _LAYER.match(name)
    key = _LAYER.sub(r"\1.layers.{i}.", name) if m else name
    for ours, theirs in HF_NAME_MAP.items():
        if key == ours or key.startswith(ours + "."):
            out = theirs + key[len(ours) :]
            return out.replace("{i}", m.group(2)) if m else out
    raise KeyError(f"{name!r} is not a parameter of the book's Transformer (see HF_NAME_MAP)")


def _check_portable(model) -> None:
    c = model.config
    other = {
        k: getattr(c, k)
        for k, default in (
            ("norm", "layer"),
            ("ffn", "gelu"),
            ("positions", "sinusoidal"),
            ("token_scale", None),
            ("position_scale", 1.0),
        )  # fmt: skip
        if getattr(c, k) != default
    }
    if other:
        raise ValueError(f"only the book's default blocks are ported; this model has {other}")


def _stacks(model, hf):
    return (model.encoder, hf.model.encoder), (model.decoder, hf.model.decoder)


def _config_kwargs(model) -> dict:
    c = model.config
    return dict(
        vocab_size=c.tgt_vocab,
        d_model=c.d_model,
        encoder_layers=c.num_layers,
        decoder_layers=c.num_layers,
        encoder_attention_heads=c.num_heads,
        decoder_attention_heads=c.num_heads,
        encoder_ffn_dim=c.dff,
        decoder_ffn_dim=c.dff,
        max_position_embeddings=c.max_len,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        encoder_layerdrop=0.0,
        decoder_layerdrop=0.0,
        activation_function="gelu",
        scale_embedding=True,
        tie_word_embeddings=False,
        pad_token_id=PAD_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        decoder_start_token_id=BOS_ID,
    )


def pegasus_config(model, **overrides):
    """The transformers.PegasusConfig of model's architecture (nothing downloaded); overrides
    replace any field (to show a mismatch)."""
    from transformers import PegasusConfig

    return PegasusConfig(**{**_config_kwargs(model), "forced_eos_token_id": None, **overrides})


def m2m100_config(model, **overrides):
    """The transformers.M2M100Config of model's architecture (nothing downloaded)."""
    from transformers import M2M100Config

    return M2M100Config(**{**_config_kwargs(model), **overrides})


@torch.no_grad()
def copy_weights(hf, model) -> list[str]:
    """Copy model's parameters into hf by hf_name, one tensor at a time (with tied embeddings,
    several of ours land in one tensor: the last write wins). Returns our names that have no
    tensor of that name and shape in hf (M2M100: ['out_proj.bias'])."""
    target = hf.state_dict()
    homeless = []
    for name, p in model.state_dict().items():
        if name.endswith("embed.pe"):
            continue
        theirs = hf_name(name)
        if theirs in target and target[theirs].numel() == p.numel():
            target[theirs].copy_(p.view_as(target[theirs]))
        else:
            homeless.append(name)
    return homeless


def to_pegasus(model, positions: str = "ours", **config_overrides):
    """A PegasusForConditionalGeneration (eval mode) holding model: the same logits.

    positions="ours" writes our sinusoidal table into both position tables (frozen parameters,
    saved with the model); "hf" keeps Pegasus's own, which holds the same codes in other columns
    (sines, then cosines) and so changes the logits. config_overrides go to pegasus_config."""
    from transformers import PegasusForConditionalGeneration

    _check_portable(model)
    hf = PegasusForConditionalGeneration(pegasus_config(model, **config_overrides)).eval()
    homeless = copy_weights(hf, model)
    if homeless:
        raise RuntimeError(f"Pegasus has no tensor for {homeless}")
    if positions == "ours":
        with torch.no_grad():
            for ours, theirs in _stacks(model, hf):
                theirs.embed_positions.weight.copy_(ours.embed.pe[: model.max_len])
    elif positions != "hf":
        raise ValueError(f"positions must be 'ours' or 'hf', got {positions!r}")
    return hf


def to_m2m100(model, positions: str = "ours", **config_overrides):
    """An M2M100ForConditionalGeneration (eval mode) holding all of model but out_proj.bias,
    for which M2M100 has no tensor: its logits are ours minus that bias.

    positions="ours" writes our table into the rows that positions 0, 1, ... read
    (padding_idx + 1 onwards; the PAD row stays zero). The table is a non-persistent buffer:
    save_pretrained does not save it, and from_pretrained rebuilds HF's. "hf" keeps HF's."""
    from transformers import M2M100ForConditionalGeneration

    _check_portable(model)
    hf = M2M100ForConditionalGeneration(m2m100_config(model, **config_overrides)).eval()
    homeless = copy_weights(hf, model)
    if homeless != ["out_proj.bias"]:
        raise RuntimeError(f"expected only out_proj.bias without a home, got {homeless}")
    if positions == "ours":
        with torch.no_grad():
            for ours, theirs in _stacks(model, hf):
                table = theirs.embed_positions.weights
                table.zero_()
                start = theirs.embed_positions.padding_idx + 1
                table[start : start + model.max_len] = ours.embed.pe[: model.max_len]
    elif positions != "hf":
        raise ValueError(f"positions must be 'ours' or 'hf', got {positions!r}")
    return hf


def unwritten(hf, model) -> list[str]:
    """hf's tensors that no parameter of model was copied into, besides the position tables
    (the ports write them separately) and an untied model's unused model.shared."""
    written = {hf_name(n) for n in model.state_dict() if not n.endswith("embed.pe")}
    skip = ("embed_positions", "model.shared.weight")
    return [k for k in hf.state_dict() if k not in written and not any(s in k for s in skip)]


@torch.no_grad()
def hf_logits(hf, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
    """hf's logits [B, Lt, V] for our batch: padding passed as attention masks (1 = attend)."""
    out = hf(
        input_ids=src,
        attention_mask=(src != PAD_ID).long(),
        decoder_input_ids=tgt_in,
        decoder_attention_mask=(tgt_in != PAD_ID).long(),
    )
    return out.logits


@torch.no_grad()
def max_logit_gap(hf, model, src: torch.Tensor, tgt_in: torch.Tensor) -> float:
    """max |hf's logits - model's| over the decoder positions whose input is not PAD."""
    model.eval()
    real = tgt_in != PAD_ID
    return (hf_logits(hf, src, tgt_in) - model(src, tgt_in))[real].abs().max().item()


@torch.no_grad()
def hf_greedy(hf, src: torch.Tensor, max_len: int, with_logits: bool = False):
    """hf.generate, greedy (do_sample=False, num_beams=1), up to max_len tokens with the start
    token, as helpers.greedy_decode(model, src, max_len) returns them.

    with_logits=True returns (tokens, logits [B, steps, V]): the raw logits each step chose from,
    as generate computed them (with its cache; no decoder_attention_mask)."""
    out = hf.generate(
        input_ids=src,
        attention_mask=(src != PAD_ID).long(),
        do_sample=False,
        num_beams=1,
        max_length=max_len,
        decoder_start_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
        output_logits=with_logits,
        return_dict_in_generate=with_logits,
    )
    return (out.sequences, torch.stack(out.logits, dim=1)) if with_logits else out


@torch.no_grad()
def greedy_margin(model, src: torch.Tensor, tokens: torch.Tensor) -> float:
    """The smallest top-1 minus top-2 logit gap of model over the steps of a greedy path.

    tokens: greedy_decode's output ([BOS, ...], PAD after EOS). Every step up to and including
    the one that produced EOS counts. Two models whose logits differ by less than half this
    margin at every step make the same greedy choices."""
    model.eval()
    logits = model(src, tokens[:, :-1])
    top2 = logits.topk(2, dim=-1).values
    margin = top2[..., 0] - top2[..., 1]
    return margin[_decided(tokens[:, :-1])].min().item()


def _decided(inputs: torch.Tensor) -> torch.Tensor:
    """The steps of a greedy path that chose a token: input a real token, not PAD or EOS."""
    return (inputs != PAD_ID) & (inputs != EOS_ID)


@torch.no_grad()
def step_logit_gap(model, src: torch.Tensor, tokens: torch.Tensor, step_logits) -> float:
    """max |step_logits - model's logits| over the steps of the path tokens that greedy_margin
    counts. step_logits: hf_greedy(..., with_logits=True)'s [B, steps, V], the logits generate
    chose from; tokens: the path ([BOS, ...], at least steps + 1 long)."""
    model.eval()
    inputs = tokens[:, : step_logits.size(1)]
    return (step_logits - model(src, inputs))[_decided(inputs)].abs().max().item()
