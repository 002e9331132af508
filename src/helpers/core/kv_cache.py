"""The KV cache of chapter 13, behind one protocol that MultiHeadAttention uses:

    K, V = cache.update(k, v, project)   # the keys and values this step attends to
    cache.reset()                        # empty, for the next batch
    cache.reorder(index)                 # row i takes row index[i]: beam search (chapter 20)

k, v are the attention's key and value inputs (the new positions, or for cross-attention the
encoder's memory), and project is its own projection (MultiHeadAttention.project_kv): a cache
projects what it does not hold yet. Two caches follow the protocol here, the growing one
(torch.cat) and the memory's one (projected once); the preallocated cache
(helpers.decoding.static_cache) is a third.

What a cache holds is what project returns: [B, h, L, d_k] keys and values, or
[B, num_kv_heads, L, d_k] with grouped-query attention (ModelConfig.num_kv_heads:
the memory shrinks by num_heads / num_kv_heads); with RoPE the keys are stored already rotated,
the new ones at positions cache.length, cache.length + 1, ... (MultiHeadAttention.forward reads
length before the update).

Chapter 13 keeps one dict per decoder layer: the self-attention keys and values under
self_k/self_v, the cross-attention ones under cross_k/cross_v. These caches write into such a
dict, so a caller who hands the decoder plain dicts finds them filled.
"""

from __future__ import annotations

import torch


class KVCache:
    """The growing cache of chapter 13, for one attention: each update appends the new
    positions' keys and values [B, h, n, d_k] along the sequence dim (2) with torch.cat.

    store: the layer's dict; the tensors live under prefix + 'k' and prefix + 'v'."""

    def __init__(self, store: dict, prefix: str = "self_"):
        self.store, self.k_name, self.v_name = store, prefix + "k", prefix + "v"

    @property
    def length(self) -> int:
        """How many positions the cache holds."""
        return self.store[self.k_name].size(2) if self.k_name in self.store else 0

    def update(self, k, v, project):
        K, V = project(k, v)
        if self.k_name in self.store:
            K = torch.cat([self.store[self.k_name], K], dim=2)
            V = torch.cat([self.store[self.v_name], V], dim=2)
        self.store[self.k_name], self.store[self.v_name] = K, V
        return K, V

    def reset(self) -> None:
        self.store.pop(self.k_name, None)
        self.store.pop(self.v_name, None)

    def reorder(self, index: torch.Tensor) -> None:
        """Row i takes the keys and values of row index[i] (index_select on dim 0): beam search
        (chapter 20), where every new beam continues its parent beam's past. index may repeat
        rows and change their number (B sources -> B * k beams). An empty cache stays empty."""
        for name in (self.k_name, self.v_name):
            if name in self.store:
                self.store[name] = self.store[name].index_select(0, index)


class MemoryKVCache(KVCache):
    """The cross-attention's cache: the encoder's memory does not change while the decoder
    writes, so its keys and values are projected on the first update of a batch and then
    returned as they are."""

    def update(self, k, v, project):
        if self.k_name not in self.store:
            self.store[self.k_name], self.store[self.v_name] = project(k, v)
        return self.store[self.k_name], self.store[self.v_name]


def layer_caches(cache) -> tuple:
    """What a decoder layer hands its two attentions: (self-attention cache, cross-attention
    cache). cache: None (no caches), a cache that brings its own self_attn and cross_attn
    (helpers.decoding.static_cache's layers), or chapter 13's dict: a growing cache over its
    self_k/self_v and a memory cache over its cross_k/cross_v."""
    if cache is None:
        return None, None
    if hasattr(cache, "self_attn"):
        return cache.self_attn, cache.cross_attn
    return KVCache(cache, "self_"), MemoryKVCache(cache, "cross_")
