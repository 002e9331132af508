"""Multi-head attention: a handwritten path that returns the weights, and an SDPA path."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers.core.checks import check_features, check_mask, inputs_checked


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
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.1):
        super().__init__()
        if num_heads < 1 or d_model % num_heads:
            raise ValueError(
                f"d_model={d_model} is not divisible by num_heads={num_heads}: "
                "every head needs d_model // num_heads dimensions"
            )
        self.d_model, self.h, self.d_k = d_model, num_heads, d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)
        self.W_o = nn.Linear(d_model, d_model)
        self.attn_drop = nn.Dropout(dropout)

    # [B, L, d_model] -> [B, h, L, d_k]; view is fine: a Linear output is contiguous
    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        B, L, _ = x.shape
        return x.view(B, L, self.h, self.d_k).transpose(1, 2)

    # [B, h, L, d_k] -> [B, L, d_model]; after transpose the memory is not contiguous: reshape
    def merge_heads(self, x: torch.Tensor) -> torch.Tensor:
        B, _, L, _ = x.shape
        return x.transpose(1, 2).reshape(B, L, self.d_model)

    def project_kv(self, k: torch.Tensor, v: torch.Tensor):
        """Keys and values split into heads: what a KV cache stores, [B, h, Lk, d_k] each.

        Used in chapter 13."""
        return self.split_heads(self.W_k(k)), self.split_heads(self.W_v(v))

    def forward(self, q, k, v, attn_mask=None, need_weights=True, cache=None):
        if not inputs_checked():  # a layer or the model above checked them already
            for name, t in (("q", q), ("k", k), ("v", v)):
                check_features(name, t, self.d_model)
        K, V = self.project_kv(k, v) if cache is None else cache.update(k, v, self.project_kv)
        return self.attend(q, K, V, attn_mask, need_weights)

    def attend(self, q, K, V, attn_mask=None, need_weights=True):
        """q [B, Lq, d_model] (not yet projected) against already projected K, V [B, h, Lk, d_k]."""
        Q = self.split_heads(self.W_q(q))
        if attn_mask is not None and not inputs_checked():
            check_mask("attn_mask", attn_mask, Q.shape[:3] + (K.size(2),), Q.device)
        if need_weights:
            out, weights = self._attention_by_hand(Q, K, V, attn_mask)
        else:
            out, weights = self._attention_sdpa(Q, K, V, attn_mask), None
        return self.W_o(self.merge_heads(out)), weights

    def _attention_by_hand(self, Q, K, V, attn_mask):
        scores = Q @ K.transpose(-2, -1) / math.sqrt(self.d_k)  # [B, h, Lq, Lk]
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
