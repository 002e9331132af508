"""Multi-head attention: a handwritten path that returns the weights, and an SDPA path."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers.core.checks import check_features, check_mask, inputs_checked
from helpers.core.modern import RotaryEmbedding, alibi_bias, alibi_slopes, repeat_kv


class MultiHeadAttention(nn.Module):
    """Built in chapter 3. forward(q, k, v, attn_mask=None, need_weights=True, cache=None) ->
    (out [B, Lq, d], weights or None).

    attn_mask: bool, True = blocked, broadcastable to [B, h, Lq, Lk].
    need_weights=True computes softmax(QK^T / sqrt(d_k)) by hand and returns the weights
    [B, h, Lq, Lk] (the heatmap chapters need them); need_weights=False calls
    F.scaled_dot_product_attention, whose fused CPU kernel keeps no weights (its math
    fallback does; chapter 3 shows which backend ran). Both paths compute the same function,
    including on a fully masked query row: its attention weights are zero in both (the
    handwritten path zeroes such rows itself, and SDPA returns zeros there in torch 2.13; older
    releases returned NaN), so the module's output on that row is W_o's bias.
    cache: None, or a KV cache (helpers.core.kv_cache, chapter 13) that keeps the keys and
    values between decoding steps.

    Today's blocks as options for self-attention (the defaults build the module above, unchanged):
    num_kv_heads (None = num_heads): grouped-query attention, W_k and W_v project to
    num_kv_heads heads of d_k (1: multi-query attention), a cache stores those, and each is
    shared by num_heads // num_kv_heads consecutive query heads (modern.repeat_kv);
    rope: a modern.RotaryEmbedding that rotates the queries and keys by their positions;
    alibi=True: ALiBi's per-head bias -m_h * |i - j| added to the scores (modern.alibi_bias).
    Both locate the queries as the last Lq of the Lk key positions (self-attention, with or
    without a cache), and the keys at cache.length + 0, 1, ... when they are projected.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        dropout: float = 0.1,
        num_kv_heads: int | None = None,
        rope: RotaryEmbedding | None = None,
        alibi: bool = False,
    ):
        super().__init__()
        if num_heads < 1 or d_model % num_heads:
            raise ValueError(
                f"d_model={d_model} is not divisible by num_heads={num_heads}: "
                "every head needs d_model // num_heads dimensions"
            )
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if num_kv_heads < 1 or num_heads % num_kv_heads:
            raise ValueError(
                f"num_heads={num_heads} is not divisible by num_kv_heads={num_kv_heads}: "
                "each key/value head serves the same number of query heads"
            )
        self.d_model, self.h, self.d_k = d_model, num_heads, d_model // num_heads
        self.h_kv = num_kv_heads
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, num_kv_heads * self.d_k)
        self.W_v = nn.Linear(d_model, num_kv_heads * self.d_k)
        self.W_o = nn.Linear(d_model, d_model)
        self.attn_drop = nn.Dropout(dropout)
        self.rope = rope
        if alibi:  # not persistent: recomputable, and the state_dict keeps its keys
            self.register_buffer("alibi_slopes", alibi_slopes(num_heads), persistent=False)
        else:
            self.alibi_slopes = None

    # [B, L, heads * d_k] -> [B, heads, L, d_k]; view is fine: a Linear output is contiguous
    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        B, L, _ = x.shape
        return x.view(B, L, -1, self.d_k).transpose(1, 2)

    # [B, h, L, d_k] -> [B, L, d_model]; after transpose the memory is not contiguous: reshape
    def merge_heads(self, x: torch.Tensor) -> torch.Tensor:
        B, _, L, _ = x.shape
        return x.transpose(1, 2).reshape(B, L, self.d_model)

    def project_kv(self, k: torch.Tensor, v: torch.Tensor, start_pos: int = 0):
        """Keys and values split into heads: what a KV cache stores, [B, h, Lk, d_k] each
        ([B, num_kv_heads, Lk, d_k] with grouped-query attention; with RoPE the keys are
        stored rotated, k's first position being start_pos).

        Used in chapter 13."""
        K, V = self.split_heads(self.W_k(k)), self.split_heads(self.W_v(v))
        if self.rope is not None:
            K = self.rope(K, start_pos)
        return K, V

    def forward(self, q, k, v, attn_mask=None, need_weights=True, cache=None):
        if not inputs_checked():  # a layer or the model above checked them already
            for name, t in (("q", q), ("k", k), ("v", v)):
                check_features(name, t, self.d_model)
        if cache is None:
            K, V = self.project_kv(k, v)
        elif self.rope is None:
            K, V = cache.update(k, v, self.project_kv)
        else:  # the new keys come after the positions the cache holds
            start = cache.length
            K, V = cache.update(k, v, lambda k, v: self.project_kv(k, v, start_pos=start))
        return self.attend(q, K, V, attn_mask, need_weights)

    def attend(self, q, K, V, attn_mask=None, need_weights=True):
        """q [B, Lq, d_model] (not yet projected) against already projected K, V [B, h, Lk, d_k]
        ([B, num_kv_heads, Lk, d_k] with grouped-query attention). With RoPE or ALiBi the
        queries are the last Lq of the Lk positions (self-attention)."""
        Q = self.split_heads(self.W_q(q))
        if attn_mask is not None and not inputs_checked():
            check_mask("attn_mask", attn_mask, Q.shape[:3] + (K.size(2),), Q.device)
        query_start = K.size(2) - Q.size(2)
        if self.rope is not None:
            Q = self.rope(Q, query_start)
        if self.h_kv != self.h:
            K, V = repeat_kv(K, self.h // self.h_kv), repeat_kv(V, self.h // self.h_kv)
        bias = None
        if self.alibi_slopes is not None:
            bias = alibi_bias(self.alibi_slopes, Q.size(2), K.size(2), query_start).to(Q.dtype)
        if need_weights:
            out, weights = self._attention_by_hand(Q, K, V, attn_mask, bias)
        elif bias is None:
            out, weights = self._attention_sdpa(Q, K, V, attn_mask), None
        else:
            out, weights = self._attention_sdpa_bias(Q, K, V, attn_mask, bias), None
        return self.W_o(self.merge_heads(out)), weights

    def _attention_by_hand(self, Q, K, V, attn_mask, bias=None):
        scores = Q @ K.transpose(-2, -1) / math.sqrt(self.d_k)  # [B, h, Lq, Lk]
        if bias is not None:  # ALiBi: [h, Lq, Lk]
            scores = scores + bias
        if attn_mask is not None:
            # finfo.min, not -1e9: -1e9 overflows to -inf in fp16 and the softmax breaks
            scores = scores.masked_fill(attn_mask, torch.finfo(scores.dtype).min)
        weights = scores.softmax(dim=-1)
        if attn_mask is not None:
            # a row with every key blocked attends to nothing (SDPA returns 0 there too),
            # instead of spreading uniformly over keys it may not see
            weights = weights.masked_fill(attn_mask.all(dim=-1, keepdim=True), 0.0)
        return self.attn_drop(weights) @ V, weights

    def _attention_sdpa(self, Q, K, V, attn_mask):
        p = self.attn_drop.p if self.training else 0.0
        sdpa_mask = None if attn_mask is None else ~attn_mask  # SDPA: True = may attend
        return F.scaled_dot_product_attention(Q, K, V, attn_mask=sdpa_mask, dropout_p=p)

    def _attention_sdpa_bias(self, Q, K, V, attn_mask, bias):
        """SDPA with ALiBi's float bias; blocked keys get finfo.min (not -inf: no NaN), and a
        query row with every key blocked outputs zeros, as the two paths above do."""
        p = self.attn_drop.p if self.training else 0.0
        if attn_mask is not None:
            bias = bias.masked_fill(attn_mask, torch.finfo(bias.dtype).min)
        out = F.scaled_dot_product_attention(Q, K, V, attn_mask=bias, dropout_p=p)
        if attn_mask is not None:
            out = out.masked_fill(attn_mask.all(dim=-1, keepdim=True), 0.0)
        return out
