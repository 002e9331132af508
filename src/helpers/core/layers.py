"""Feed-forward, encoder and decoder layers and stacks (Pre-Norm: x + f(LayerNorm(x))).

Built in chapters 4 (FeedForward), 5 (EncoderLayer, Encoder) and 6 (DecoderLayer, Decoder).

Today's blocks as options (keyword arguments whose defaults build the layers above, unchanged):
norm ("layer" | "rms"), ffn ("gelu" | "relu" | "swiglu"), positions ("sinusoidal" | "learned"
| "rope" | "alibi"), rope_layout ("half" | "interleaved") and num_kv_heads (None = num_heads);
ModelConfig documents them.
"""

import torch
import torch.nn as nn

from helpers.core.attention import MultiHeadAttention
from helpers.core.checks import (
    check_cross_mask,
    check_features,
    check_mask,
    check_same_batch,
    check_token_ids,
    checks_inputs,
)
from helpers.core.embeddings import TokenAndPosition
from helpers.core.kv_cache import layer_caches
from helpers.core.modern import RotaryEmbedding, SwiGLU, rms_norm, swiglu_hidden

NORMS = ("layer", "rms")
FFNS = ("gelu", "relu", "swiglu")
POSITIONS = ("sinusoidal", "learned", "rope", "alibi")


def make_norm(d_model: int, norm: str = "layer") -> nn.Module:
    """ "layer": nn.LayerNorm(d_model) (eps 1e-5, the book's); "rms": nn.RMSNorm(d_model,
    eps=1e-6) (modern.rms_norm)."""
    if norm == "layer":
        return nn.LayerNorm(d_model)
    if norm == "rms":
        return rms_norm(d_model)
    raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")


def make_ffn(d_model: int, dff: int, dropout: float = 0.1, ffn: str = "gelu") -> nn.Module:
    """ "gelu": the book's FeedForward; "relu": the same with ReLU (the 2017 paper's);
    "swiglu": modern.SwiGLU with hidden width swiglu_hidden(dff) = round(2 * dff / 3) and no
    biases, so 3 * d * hidden ~ the 2 * d * dff weights of the other two."""
    if ffn in ("gelu", "relu"):
        return FeedForward(d_model, dff, dropout, activation=ffn)
    if ffn == "swiglu":
        return SwiGLU(d_model, swiglu_hidden(dff), dropout)
    raise ValueError(f"ffn must be one of {FFNS}, got {ffn!r}")


def make_self_attention(
    d_model, num_heads, dropout=0.1, positions="sinusoidal", rope_layout="half", num_kv_heads=None
) -> MultiHeadAttention:
    """The self-attention of an encoder or decoder layer: RoPE or ALiBi (positions "rope",
    "alibi") live here, and grouped-query heads (num_kv_heads)."""
    if positions not in POSITIONS:
        raise ValueError(f"positions must be one of {POSITIONS}, got {positions!r}")
    rope = None
    if positions == "rope":
        rope = RotaryEmbedding(d_model // num_heads, layout=rope_layout)
    return MultiHeadAttention(
        d_model, num_heads, dropout, num_kv_heads, rope=rope, alibi=positions == "alibi"
    )


class FeedForward(nn.Module):
    """Built in chapter 4. Position-wise: Linear(d, dff) -> GELU -> Linear(dff, d) -> Dropout."""

    def __init__(self, d_model: int, dff: int, dropout: float = 0.1, activation: str = "gelu"):
        super().__init__()
        act = {"gelu": nn.GELU, "relu": nn.ReLU}[activation]()
        self.net = nn.Sequential(
            nn.Linear(d_model, dff), act, nn.Linear(dff, d_model), nn.Dropout(dropout)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class EncoderLayer(nn.Module):
    """Built in chapter 5. Pre-Norm: x + MHA(LN1(x)), then x + FFN(LN2(x)).

    forward(x [B, L, d], pad_mask [B, 1, 1, L] or None) -> (x, weights [B, h, L, L] or None).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        dff: int,
        dropout: float = 0.1,
        *,
        norm: str = "layer",
        ffn: str = "gelu",
        positions: str = "sinusoidal",
        rope_layout: str = "half",
        num_kv_heads: int | None = None,
    ):
        super().__init__()
        self.ln1, self.ln2 = make_norm(d_model, norm), make_norm(d_model, norm)
        self.mha = make_self_attention(
            d_model, num_heads, dropout, positions, rope_layout, num_kv_heads
        )
        self.ffn = make_ffn(d_model, dff, dropout, ffn)
        self.drop = nn.Dropout(dropout)

    def check_inputs(self, x, pad_mask, need_weights=True):
        check_features("x", x, self.mha.d_model)
        if pad_mask is not None:
            shape = (x.size(0), self.mha.h, x.size(1), x.size(1))
            check_mask("pad_mask", pad_mask, shape, x.device)

    @checks_inputs(check_inputs)
    def forward(self, x, pad_mask, need_weights=True):
        h = self.ln1(x)
        a, w = self.mha(h, h, h, attn_mask=pad_mask, need_weights=need_weights)
        x = x + self.drop(a)
        x = x + self.ffn(self.ln2(x))
        return x, w


class Encoder(nn.Module):
    """Built in chapter 5. Embedding, num_layers EncoderLayers (an nn.ModuleList), final LayerNorm.

    forward(src [B, Ls], pad_mask [B, 1, 1, Ls]) -> memory [B, Ls, d].
    """

    def __init__(
        self, vocab_size, d_model, num_heads, dff, num_layers, max_len, dropout=0.1, **options
    ):
        """options: norm, ffn, positions, rope_layout, num_kv_heads (see EncoderLayer)."""
        super().__init__()
        positions = options.get("positions", "sinusoidal")
        self.embed = TokenAndPosition(vocab_size, d_model, max_len, dropout, positions=positions)
        # ModuleList, not a Python list: only registered modules are trained and moved
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, num_heads, dff, dropout, **options) for _ in range(num_layers)
        )
        # Pre-Norm never normalises the residual stream itself: normalise it once at the exit
        self.ln_final = make_norm(d_model, options.get("norm", "layer"))

    def check_inputs(self, src, pad_mask, need_weights=False):
        check_token_ids("src", src, self.embed.vocab_size)
        if pad_mask is not None and len(self.layers):
            shape = (src.size(0), self.layers[0].mha.h, src.size(1), src.size(1))
            check_mask("pad_mask", pad_mask, shape, src.device)

    @checks_inputs(check_inputs)
    def forward(self, src, pad_mask, need_weights=False):
        x = self.embed(src)
        for layer in self.layers:
            x, _ = layer(x, pad_mask, need_weights=need_weights)
        return self.ln_final(x)


class DecoderLayer(nn.Module):
    """Built in chapter 6. Pre-Norm, three sub-layers: masked self-attention, cross-attention
    (queries from the decoder, keys and values from the encoder's memory), feed-forward.

    forward(x [B, Lt, d], memory [B, Ls, d], self_mask, cross_mask) -> (x, cross weights
    [B, h, Lt, Ls] or None).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        dff: int,
        dropout: float = 0.1,
        *,
        norm: str = "layer",
        ffn: str = "gelu",
        positions: str = "sinusoidal",
        rope_layout: str = "half",
        num_kv_heads: int | None = None,
    ):
        super().__init__()
        self.ln1, self.ln2, self.ln3 = (
            make_norm(d_model, norm),
            make_norm(d_model, norm),
            make_norm(d_model, norm),
        )
        self.self_mha = make_self_attention(
            d_model, num_heads, dropout, positions, rope_layout, num_kv_heads
        )
        # The cross-attention gets no RoPE, no ALiBi and all its heads: a target position and a
        # source position live in two different sequences, so their distance i - j means
        # nothing (the source's order reaches the decoder through the memory, which the
        # encoder's self-attention built).
        # Its keys are projected once per source, so sharing heads would save little.
        self.cross_mha = MultiHeadAttention(d_model, num_heads, dropout)
        self.ffn = make_ffn(d_model, dff, dropout, ffn)
        self.drop1, self.drop2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def check_inputs(self, x, memory, self_mask, cross_mask, need_weights=True, cache=None):
        check_features("x", x, self.self_mha.d_model)
        check_features("memory", memory, self.self_mha.d_model)
        check_same_batch("x", x, "memory", memory)
        check_masks_of_decoder(self, x.shape[:2], memory, self_mask, cross_mask, cache, x.device)

    @checks_inputs(check_inputs)
    def forward(self, x, memory, self_mask, cross_mask, need_weights=True, cache=None):
        """cache: None, or this layer's KV cache (chapter 13's dict, or a preallocated one): the
        self-attention appends the new positions of x, the cross-attention projects the memory
        once."""
        self_cache, cross_cache = layer_caches(cache)
        h = self.ln1(x)  # 1. masked self-attention
        a, _ = self.self_mha(h, h, h, attn_mask=self_mask, need_weights=False, cache=self_cache)
        x = x + self.drop1(a)
        h = self.ln2(x)  # 2. cross-attention: Q from x, K/V from memory
        a, cross_w = self.cross_mha(
            h, memory, memory, attn_mask=cross_mask, need_weights=need_weights, cache=cross_cache
        )
        x = x + self.drop2(a)
        x = x + self.ffn(self.ln3(x))  # 3. feed-forward
        return x, cross_w


def check_masks_of_decoder(layer, target_shape, memory, self_mask, cross_mask, cache, device):
    """The masks a decoder layer gets, checked once where they enter (chapter 7): the
    cross-attention mask blocks source keys [.., Ls]; the self-attention mask covers the keys
    the layer's cache holds plus the target_shape = (B, Lt) new ones."""
    (B, Lt), heads = target_shape, layer.self_mha.h
    if cross_mask is not None:
        check_cross_mask(cross_mask, (B, heads, Lt, memory.size(1)), device)
    if self_mask is not None:
        self_cache, _ = layer_caches(cache)
        Lk = Lt + (0 if self_cache is None else self_cache.length)
        check_mask("self_mask", self_mask, (B, heads, Lt, Lk), device)


class Decoder(nn.Module):
    """Built in chapter 6. Target embedding, num_layers DecoderLayers, final LayerNorm; returns
    the hidden states and one cross-attention weight tensor per layer."""

    def __init__(
        self, vocab_size, d_model, num_heads, dff, num_layers, max_len, dropout=0.1, **options
    ):
        """options: norm, ffn, positions, rope_layout, num_kv_heads (see DecoderLayer)."""
        super().__init__()
        positions = options.get("positions", "sinusoidal")
        self.embed = TokenAndPosition(vocab_size, d_model, max_len, dropout, positions=positions)
        self.layers = nn.ModuleList(
            DecoderLayer(d_model, num_heads, dff, dropout, **options) for _ in range(num_layers)
        )
        self.ln_final = make_norm(d_model, options.get("norm", "layer"))

    def check_inputs(
        self, tgt, memory, self_mask, cross_mask, need_weights=True, caches=None, start_pos=0
    ):
        check_token_ids("tgt", tgt, self.embed.vocab_size)
        check_features("memory", memory, self.embed.d_model)
        check_same_batch("tgt", tgt, "memory", memory)
        if len(self.layers):  # every layer sees the same masks: the first one's checks hold
            cache = None if caches is None else caches[0]
            masks = (self_mask, cross_mask, cache, tgt.device)
            check_masks_of_decoder(self.layers[0], tgt.shape, memory, *masks)

    @checks_inputs(check_inputs)
    def forward(
        self, tgt, memory, self_mask, cross_mask, need_weights=True, caches=None, start_pos=0
    ):
        """-> (hidden [B, Lt, d], cross-attention weights: one [B, h, Lt, Ls] per layer, or
        Nones). caches: None, or one KV cache per layer (chapter 13); start_pos: the position
        of tgt's first token (the number of positions the caches hold)."""
        x = self.embed(tgt, start_pos=start_pos)
        cross_weights = []
        for i, layer in enumerate(self.layers):
            cache = None if caches is None else caches[i]
            x, w = layer(x, memory, self_mask, cross_mask, need_weights=need_weights, cache=cache)
            cross_weights.append(w)
        return self.ln_final(x), cross_weights
