"""Feed-forward, encoder and decoder layers and stacks (Pre-Norm: x + f(LayerNorm(x))).

Built in chapters 4 (FeedForward), 5 (EncoderLayer, Encoder) and 6 (DecoderLayer, Decoder).
"""

import torch
import torch.nn as nn

from helpers.core.attention import MultiHeadAttention
from helpers.core.checks import check_cross_mask, check_mask_broadcasts, check_same_batch
from helpers.core.embeddings import TokenAndPosition


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

    def forward(self, x, pad_mask, need_weights=True):
        if pad_mask is not None:
            check_mask_broadcasts(
                "pad_mask", pad_mask, (x.size(0), self.mha.h, x.size(1), x.size(1))
            )
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

    def forward(self, x, memory, self_mask, cross_mask, need_weights=True, cache=None):
        """cache: None, or a dict this layer fills and reuses across decoding steps:
        'self_k'/'self_v' grow by the new positions each call (x holds only the new ones);
        'cross_k'/'cross_v' are projected from memory on the first call and then reused."""
        check_same_batch("x", x, "memory", memory)
        B, Lq, h_ = x.size(0), x.size(1), self.self_mha.h
        if cross_mask is not None:
            check_cross_mask(cross_mask, (B, h_, Lq, memory.size(1)))
        h = self.ln1(x)
        if cache is None:
            if self_mask is not None:
                check_mask_broadcasts("self_mask", self_mask, (B, h_, Lq, Lq))
            a, _ = self.self_mha(h, h, h, attn_mask=self_mask, need_weights=False)
        else:
            K, V = self.self_mha.append_kv(h, cache, prefix="self_")
            if self_mask is not None:
                check_mask_broadcasts("self_mask", self_mask, (B, h_, Lq, K.size(2)))
            a, _ = self.self_mha.attend(h, K, V, attn_mask=self_mask, need_weights=False)
        x = x + self.drop1(a)

        h = self.ln2(x)  # Q from the decoder, K/V from the encoder's memory
        if cache is None:
            a, cross_w = self.cross_mha(
                h, memory, memory, attn_mask=cross_mask, need_weights=need_weights
            )
        else:
            if "cross_k" not in cache:
                cache["cross_k"], cache["cross_v"] = self.cross_mha.project_kv(memory, memory)
            a, cross_w = self.cross_mha.attend(
                h,
                cache["cross_k"],
                cache["cross_v"],
                attn_mask=cross_mask,
                need_weights=need_weights,
            )
        x = x + self.drop2(a)
        x = x + self.ffn(self.ln3(x))
        return x, cross_w


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

    def forward(
        self, tgt, memory, self_mask, cross_mask, need_weights=True, caches=None, start_pos=0
    ):
        """-> (hidden [B, Lt, d], cross-attention weights: one [B, h, Lt, Ls] per layer, or
        Nones)."""
        x = self.embed(tgt, start_pos=start_pos)
        cross_weights = []
        for i, layer in enumerate(self.layers):
            cache = None if caches is None else caches[i]
            x, w = layer(x, memory, self_mask, cross_mask, need_weights=need_weights, cache=cache)
            cross_weights.append(w)
        return self.ln_final(x), cross_weights
