"""Feed-forward, encoder and decoder layers and stacks (Pre-Norm: x + f(LayerNorm(x))).

Built in chapters 4 (FeedForward), 5 (EncoderLayer, Encoder) and 6 (DecoderLayer, Decoder).
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


class FeedForward(nn.Module):
    """Built in chapter 4. Position-wise: Linear(d, dff) -> GELU -> Linear(dff, d) -> Dropout."""

    def __init__(self, d_model: int, dff: int, dropout: float = 0.1):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_model, dff), nn.GELU(), nn.Linear(dff, d_model), nn.Dropout(dropout)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class EncoderLayer(nn.Module):
    """Built in chapter 5. Pre-Norm: x + MHA(LN1(x)), then x + FFN(LN2(x)).

    forward(x [B, L, d], pad_mask [B, 1, 1, L] or None) -> (x, weights [B, h, L, L] or None).
    """

    def __init__(self, d_model: int, num_heads: int, dff: int, dropout: float = 0.1):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.mha = MultiHeadAttention(d_model, num_heads, dropout)
        self.ffn = FeedForward(d_model, dff, dropout)
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

    def __init__(self, vocab_size, d_model, num_heads, dff, num_layers, max_len, dropout=0.1):
        super().__init__()
        self.embed = TokenAndPosition(vocab_size, d_model, max_len, dropout)
        # ModuleList, not a Python list: only registered modules are trained and moved
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, num_heads, dff, dropout) for _ in range(num_layers)
        )
        # Pre-Norm never normalises the residual stream itself: normalise it once at the exit
        self.ln_final = nn.LayerNorm(d_model)

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

    def __init__(self, d_model: int, num_heads: int, dff: int, dropout: float = 0.1):
        super().__init__()
        self.ln1, self.ln2, self.ln3 = (
            nn.LayerNorm(d_model),
            nn.LayerNorm(d_model),
            nn.LayerNorm(d_model),
        )
        self.self_mha = MultiHeadAttention(d_model, num_heads, dropout)
        self.cross_mha = MultiHeadAttention(d_model, num_heads, dropout)
        self.ffn = FeedForward(d_model, dff, dropout)
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

    def __init__(self, vocab_size, d_model, num_heads, dff, num_layers, max_len, dropout=0.1):
        super().__init__()
        self.embed = TokenAndPosition(vocab_size, d_model, max_len, dropout)
        self.layers = nn.ModuleList(
            DecoderLayer(d_model, num_heads, dff, dropout) for _ in range(num_layers)
        )
        self.ln_final = nn.LayerNorm(d_model)

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
