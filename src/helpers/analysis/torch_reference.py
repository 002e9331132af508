"""Our weights inside PyTorch's own nn.Transformer, to check one against the other.

Built in chapter 15: the weight map (copy_attention, to_torch_transformer), the mask arguments
nn.Transformer wants (torch_mask_arguments), and our logits through its stacks (torch_forward).
"""

import warnings

import torch
import torch.nn as nn

from helpers.core.masks import make_causal_mask
from helpers.core.vocab import PAD_ID


@torch.no_grad()
def copy_attention(dst: nn.MultiheadAttention, src) -> None:
    """Copy a helpers.MultiHeadAttention into an nn.MultiheadAttention. Built in chapter 15.

    nn.MultiheadAttention keeps W_Q, W_K, W_V stacked in one [3d, d] in_proj_weight (in that
    order, each [out, in] as in nn.Linear), their biases in in_proj_bias, and W_o in out_proj.
    """
    dst.in_proj_weight.copy_(torch.cat([src.W_q.weight, src.W_k.weight, src.W_v.weight]))
    dst.in_proj_bias.copy_(torch.cat([src.W_q.bias, src.W_k.bias, src.W_v.bias]))
    dst.out_proj.weight.copy_(src.W_o.weight)
    dst.out_proj.bias.copy_(src.W_o.bias)


@torch.no_grad()
def _copy_ffn(dst_layer, ffn) -> None:
    lin1, lin2 = ffn.net[0], ffn.net[2]
    dst_layer.linear1.weight.copy_(lin1.weight)
    dst_layer.linear1.bias.copy_(lin1.bias)
    dst_layer.linear2.weight.copy_(lin2.weight)
    dst_layer.linear2.bias.copy_(lin2.bias)


@torch.no_grad()
def _copy_norm(dst: nn.LayerNorm, src: nn.LayerNorm) -> None:
    dst.load_state_dict(src.state_dict())


@torch.no_grad()
def to_torch_transformer(model) -> nn.Transformer:
    """A torch.nn.Transformer (batch_first, norm_first=True, GELU) holding model's weights.

    Built in chapter 15.
    It covers the two layer stacks and their final LayerNorms; embeddings and the output
    projection stay in our model. With them, torch_forward() gives the same logits.
    """
    enc_layers, dec_layers = model.encoder.layers, model.decoder.layers
    first = enc_layers[0]
    with warnings.catch_warnings():
        # with norm_first=True nn.Transformer warns that it cannot use nested tensors: expected
        warnings.filterwarnings("ignore", message="enable_nested_tensor is True")
        ref = nn.Transformer(
            d_model=first.mha.d_model,
            nhead=first.mha.h,
            num_encoder_layers=len(enc_layers),
            num_decoder_layers=len(dec_layers),
            dim_feedforward=first.ffn.net[0].out_features,
            dropout=first.drop.p,
            activation="gelu",
            batch_first=True,
            norm_first=True,
        )
    for ours, theirs in zip(enc_layers, ref.encoder.layers):
        copy_attention(theirs.self_attn, ours.mha)
        _copy_ffn(theirs, ours.ffn)
        _copy_norm(theirs.norm1, ours.ln1)
        _copy_norm(theirs.norm2, ours.ln2)
    for ours, theirs in zip(dec_layers, ref.decoder.layers):
        copy_attention(theirs.self_attn, ours.self_mha)
        copy_attention(theirs.multihead_attn, ours.cross_mha)
        _copy_ffn(theirs, ours.ffn)
        _copy_norm(theirs.norm1, ours.ln1)
        _copy_norm(theirs.norm2, ours.ln2)
        _copy_norm(theirs.norm3, ours.ln3)
    _copy_norm(ref.encoder.norm, model.encoder.ln_final)
    _copy_norm(ref.decoder.norm, model.decoder.ln_final)
    return ref.to(next(model.parameters()).device).train(model.training)


def torch_mask_arguments(
    src: torch.Tensor, tgt_in: torch.Tensor, pad_id: int = PAD_ID
) -> dict[str, torch.Tensor]:
    """The four mask arguments of nn.Transformer.forward for a batch. Built in chapter 15.

    They use our convention (bool, True = blocked) but are split by role: the
    *_key_padding_mask arguments are [B, L] (which keys are padding), tgt_mask is [Lt, Lt]
    (which positions are in the future). Cross-attention needs its own
    memory_key_padding_mask: nn.Transformer does not reuse src_key_padding_mask for it.
    """
    for name, t in (("src", src), ("tgt_in", tgt_in)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2:
            raise ValueError(f"{name} must be a [B, L] tensor of token ids, got {t!r:.60}")
    src_pad = src == pad_id
    return dict(
        src_key_padding_mask=src_pad,
        tgt_mask=make_causal_mask(tgt_in.size(1), tgt_in.device)[0, 0],
        tgt_key_padding_mask=tgt_in == pad_id,
        memory_key_padding_mask=src_pad,
    )


def torch_forward(
    model, ref: nn.Transformer, src: torch.Tensor, tgt_in: torch.Tensor, masks: dict | None = None
) -> torch.Tensor:
    """Logits from our embeddings + ref's stacks + our output projection. Built in chapter 15.

    masks: nn.Transformer's mask arguments; by default torch_mask_arguments(src, tgt_in).
    """
    masks = torch_mask_arguments(src, tgt_in) if masks is None else masks
    h = ref(model.encoder.embed(src), model.decoder.embed(tgt_in), **masks)
    return model.out_proj(h)
