"""The encoder-decoder Transformer.

"The reference chapter" in this module is the textbook chapter this book reproduces and measures
itself against; the book's introduction describes it (chapters/intro.md, "The reference
chapter").
"""

import dataclasses
import math
from dataclasses import dataclass

import torch
import torch.nn as nn

from helpers.core.checks import (
    check_cross_mask,
    check_features,
    check_rank,
    check_same_batch,
    check_token_ids,
    checks_inputs,
)
from helpers.core.layers import Decoder, Encoder
from helpers.core.masks import make_causal_mask, make_padding_mask


def xavier_init_linears(module: nn.Module) -> None:
    """Built in chapter 7. Xavier-uniform weights, zero biases, for every nn.Linear in module.

    PyTorch's nn.Linear default (Kaiming-uniform with a=sqrt(5)) has a smaller variance;
    we switch to Xavier per projection matrix. nn.Transformer also uses xavier_uniform_, but on
    every >1-D parameter (its fused [3d, d] in_proj_weight included, so a smaller std per
    projection) and without zeroing biases: chapter 07 prints both.
    """
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:  # SwiGLU's Linears have none
                nn.init.zeros_(m.bias)


@dataclass(frozen=True)
class ModelConfig:
    """Built in chapter 7. Every hyperparameter of a Transformer; model.config holds one.

    Transformer.from_config(dataclasses.replace(model.config, dropout=0.1)) builds a twin
    that differs in one setting.

    Today's blocks as options; each default builds the book's model, unchanged (same
    parameters, same random draws, same logits), and is left out of the repr:
    - norm: "layer" (nn.LayerNorm, eps 1e-5) or "rms" (nn.RMSNorm, eps 1e-6, Hugging Face's
      Llama default), in every sub-layer and for the final norm of each stack;
    - ffn: "gelu" (the book's FeedForward), "relu" (the 2017 paper's), or "swiglu":
      down(silu(gate(x)) * up(x)) without biases, hidden width round(2 * dff / 3) so that its
      3 * d * hidden weights match the 2 * d * dff of the others;
    - positions: "sinusoidal" (added to the embeddings), "learned" (an added trained table of
      max_len rows), "rope" (queries and keys of every self-attention rotated; nothing added)
      or "alibi" (a per-head bias -m * |i - j| on self-attention scores: symmetric in the
      encoder, causal in the decoder, where the mask hides j > i). The cross-attention gets
      neither. With rope and alibi, sequences may be longer than max_len;
    - rope_layout: "half" (pairs (i, i + d_k/2), Hugging Face's rotate_half) or "interleaved"
      (pairs (2i, 2i + 1), the RoFormer paper's);
    - num_kv_heads: None (= num_heads) or a divisor of num_heads: grouped-query attention in
      the self-attentions (1: multi-query); the KV cache then stores num_kv_heads heads.
    """

    src_vocab: int
    tgt_vocab: int
    d_model: int = 128
    num_heads: int = 4
    dff: int = 512
    num_layers: int = 2
    max_len: int = 64
    dropout: float = 0.1
    token_scale: float | None = None  # chapter 12: None multiplies the tokens by sqrt(d_model)
    position_scale: float = 1.0  # chapter 12: multiplies the position codes
    norm: str = "layer"  # "layer" | "rms"
    ffn: str = "gelu"  # "gelu" | "relu" | "swiglu"
    positions: str = "sinusoidal"  # "sinusoidal" | "learned" | "rope" | "alibi"
    rope_layout: str = "half"  # "half" | "interleaved"
    num_kv_heads: int | None = None  # None = num_heads; fewer = grouped-query

    HIDDEN_AT_DEFAULT = (
        "token_scale",
        "position_scale",
        "norm",
        "ffn",
        "positions",
        "rope_layout",
        "num_kv_heads",
    )

    def __repr__(self) -> str:
        """The dataclass's repr, with chapter 12's two scales and today's blocks only where
        they are not the default (so the configs other chapters print read as before)."""
        shown = [
            f"{f.name}={getattr(self, f.name)!r}"
            for f in dataclasses.fields(self)
            if f.name not in self.HIDDEN_AT_DEFAULT or getattr(self, f.name) != f.default
        ]
        return f"ModelConfig({', '.join(shown)})"

    @property
    def d_k(self) -> int:
        return self.d_model // self.num_heads


class Transformer(nn.Module):
    """Built in chapter 7. The encoder-decoder model of the book.

    encode(src) -> (memory, src_mask); decode(tgt_in, memory, src_mask) -> (logits, cross_weights).
    """

    def __init__(
        self,
        src_vocab,
        tgt_vocab,
        d_model=128,
        num_heads=4,
        dff=512,
        num_layers=2,
        max_len=64,
        dropout=0.1,
        token_scale=None,
        position_scale=1.0,
        norm="layer",
        ffn="gelu",
        positions="sinusoidal",
        rope_layout="half",
        num_kv_heads=None,
    ):
        super().__init__()
        self.config = ModelConfig(
            src_vocab,
            tgt_vocab,
            d_model,
            num_heads,
            dff,
            num_layers,
            max_len,
            dropout,
            token_scale,
            position_scale,
            norm,
            ffn,
            positions,
            rope_layout,
            num_kv_heads,
        )
        self.src_vocab, self.tgt_vocab, self.max_len = src_vocab, tgt_vocab, max_len
        options = {}  # today's blocks, passed only where they differ: the defaults build as before
        for name, value, default in (
            ("norm", norm, "layer"),
            ("ffn", ffn, "gelu"),
            ("positions", positions, "sinusoidal"),
            ("rope_layout", rope_layout, "half"),
            ("num_kv_heads", num_kv_heads, None),
        ):
            if value != default:
                options[name] = value
        stack = (d_model, num_heads, dff, num_layers, max_len, dropout)
        self.encoder = Encoder(src_vocab, *stack, **options)
        self.decoder = Decoder(tgt_vocab, *stack, **options)
        for embed in (self.encoder.embed, self.decoder.embed):  # chapter 12's two options
            embed.token_scale = math.sqrt(d_model) if token_scale is None else float(token_scale)
            embed.position_scale = float(position_scale)
        self.out_proj = nn.Linear(d_model, tgt_vocab)
        xavier_init_linears(self)

    @classmethod
    def from_config(cls, config: ModelConfig) -> "Transformer":
        return cls(**dataclasses.asdict(config))

    # Each entry point checks everything the layers below it will see, once (the layers and
    # attentions inside skip their own checks): the token ids, the batch sizes, the source mask.

    @property
    def length_limit(self) -> int | None:
        """The longest sequence the model embeds: max_len, or None (no limit) with rope or
        alibi positions, which need no table."""
        return None if self.config.positions in ("rope", "alibi") else self.max_len

    def check_encode(self, src):
        check_token_ids("src", src, self.src_vocab, self.length_limit)

    def check_decode(self, tgt_in, memory, src_mask, need_weights=True):
        check_token_ids("tgt_in", tgt_in, self.tgt_vocab, self.length_limit)
        check_features("memory", memory, self.config.d_model)
        check_same_batch("tgt_in", tgt_in, "memory", memory)
        if src_mask is not None:
            shape = (memory.size(0), self.config.num_heads, tgt_in.size(1), memory.size(1))
            check_cross_mask(src_mask, shape, tgt_in.device)

    def check_forward(self, src, tgt_in):
        check_rank("src", src, 2, "[B, Ls]")
        check_rank("tgt_in", tgt_in, 2, "[B, Lt]")
        check_same_batch("src", src, "tgt_in", tgt_in)
        self.check_encode(src)
        check_token_ids("tgt_in", tgt_in, self.tgt_vocab, self.length_limit)

    @checks_inputs(check_encode)
    def encode(self, src: torch.Tensor):
        """src [B, Ls] -> (memory [B, Ls, d], src_mask [B, 1, 1, Ls])."""
        src_mask = make_padding_mask(src)
        return self.encoder(src, src_mask), src_mask

    @checks_inputs(check_decode)
    def decode(self, tgt_in, memory, src_mask, need_weights=True):
        """tgt_in [B, Lt] -> (logits [B, Lt, V], cross_weights: one [B, h, Lt, Ls] per layer).

        The decoder's self-attention blocks a key if it is in the future OR is padding.
        Cross-attention takes the source padding mask only: every target position may look
        at every real source token.
        """
        self_mask = make_causal_mask(tgt_in.size(1), tgt_in.device) | make_padding_mask(tgt_in)
        h, cross_w = self.decoder(tgt_in, memory, self_mask, src_mask, need_weights=need_weights)
        return self.out_proj(h), cross_w

    @checks_inputs(check_forward)
    def forward(self, src, tgt_in):
        """-> logits [B, Lt, tgt_vocab]. Uses the SDPA path everywhere (no weights needed)."""
        memory, src_mask = self.encode(src)
        logits, _ = self.decode(tgt_in, memory, src_mask, need_weights=False)
        return logits


def count_parameters(model: nn.Module, trainable_only: bool = True) -> int:
    """Built in chapter 7. The number of (trainable) parameters of model."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def apply_default_init(model: nn.Module) -> nn.Module:
    """Used in chapter 12. Re-initialise every Linear and Embedding with PyTorch's own defaults.

    This is the "first version" of the reference chapter: no N(0, d^-1/2) embeddings, no
    Xavier. Embeddings go back to N(0, 1) (PAD row zero), Linears to Kaiming-uniform(a=sqrt 5).
    """
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            m.reset_parameters()
    return model
