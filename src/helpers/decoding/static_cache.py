"""A preallocated ("static") KV cache for the encoder-decoder Transformer. Built in chapter 13.

The cache of `helpers.DecoderLayer` grows with torch.cat: at every step each layer copies its
whole self-attention K and V into new tensors one position longer. Here each layer's K and V
live in buffers of shape [B, h, L_max, d_k], allocated once. Step t writes its key and value
at position t (write_kv), and attention reads the first t + 1 positions, a view of the buffer
(no copy). The padding mask is a preallocated [B, 1, 1, L_max] buffer too, filled one column
per step. The cross-attention K/V are projected from the memory once per source, at step 0.

The caches follow the protocol of helpers.core.kv_cache (update, reset, reorder), so a step is the
decoder's own forward pass, `model.decoder(..., caches=caches)`, as with the growing cache.
They live as long as their owner keeps them: `StaticCaches.reset()` empties them for the next
batch (a reused cache must not keep the previous source's cross-attention keys).

Each layer's cache reads like chapter 13's dict: self_k, self_v, the shared 'pad' buffer, and
cross_k, cross_v once step 0 has run.
"""

from __future__ import annotations

import torch

from helpers.core.kv_cache import KVCache, MemoryKVCache
from helpers.core.vocab import PAD_ID
from helpers.decoding.greedy import checked_max_len, greedy_tokens, restores_mode


class StaticKVCache(KVCache):
    """The self-attention's preallocated cache: update writes the new positions' keys and values
    into the buffers at the next free position and returns a view of the filled ones.

    Built in chapter 13."""

    def __init__(self, store: dict, prefix: str = "self_"):
        super().__init__(store, prefix)
        self._length = 0

    @property
    def length(self) -> int:
        return self._length

    def update(self, k, v, project):
        K, V = project(k, v)  # [B, h, n, d_k]
        pos, self._length = self._length, self._length + K.size(2)
        # [B, h, pos + n, d_k] each: views of the buffers
        return write_kv(self.store[self.k_name], K, pos), write_kv(self.store[self.v_name], V, pos)

    def reset(self) -> None:
        self.store[self.k_name].zero_()
        self.store[self.v_name].zero_()
        self._length = 0

    def reorder(self, index: torch.Tensor) -> None:
        """Row i takes row index[i] of the buffers. With as many rows as before, in place: the
        buffers stay the ones allocated; another number of rows needs new buffers. The padding
        flags ('pad') are the mask's, not an attention's: a caller that reorders rows reorders
        them too."""
        for name in (self.k_name, self.v_name):
            buf = self.store[name]
            picked = buf.index_select(0, index)
            if picked.shape == buf.shape:
                buf.copy_(picked)
            else:
                self.store[name] = picked


class StaticLayerCache(dict):
    """One decoder layer's preallocated cache: chapter 13's dict (self_k, self_v, the shared
    'pad' buffer, and cross_k/cross_v once step 0 has run), with the caches its two attentions
    write through (self_attn, cross_attn).

    Built in chapter 13."""

    def __init__(self, **buffers):
        super().__init__(buffers)
        self.self_attn = StaticKVCache(self, "self_")
        self.cross_attn = MemoryKVCache(self, "cross_")

    def reset(self) -> None:
        self.self_attn.reset()
        self.cross_attn.reset()
        self["pad"].zero_()


class StaticCaches(list):
    """The preallocated caches of all decoder layers: a list with one StaticLayerCache per layer.

    Built in chapter 13."""

    def reset(self) -> StaticCaches:
        """Empty every layer's cache for a new batch, keeping the buffers (no new allocation):
        the self-attention keys, values and padding flags are zeroed, the cross-attention keys
        and values of the previous source dropped."""
        for cache in self:
            cache.reset()
        return self

    @property
    def batch_size(self) -> int:
        return self[0]["self_k"].size(0)

    @property
    def max_len(self) -> int:
        return self[0]["self_k"].size(2)

    @property
    def length(self) -> int:
        """How many positions the caches hold."""
        return self[0].self_attn.length


def allocate_static_caches(model, batch_size: int, max_len: int | None = None) -> StaticCaches:
    """One cache per decoder layer: self_k, self_v zeros [B, h, max_len, d_k], and a 'pad'
    buffer bool [B, 1, 1, max_len] shared by all layers (True = the key is <pad>).
    cross_k/cross_v are added by step 0 of each decode.

    Built in chapter 13."""
    cfg = model.config
    max_len = model.max_len if max_len is None else int(max_len)
    p = next(model.parameters())
    kv_heads = cfg.num_kv_heads or cfg.num_heads  # grouped-query attention caches fewer heads
    shape = (batch_size, kv_heads, max_len, cfg.d_model // cfg.num_heads)
    pad = torch.zeros(batch_size, 1, 1, max_len, dtype=torch.bool, device=p.device)
    return StaticCaches(
        StaticLayerCache(
            self_k=torch.zeros(shape, dtype=p.dtype, device=p.device),
            self_v=torch.zeros(shape, dtype=p.dtype, device=p.device),
            pad=pad,
        )
        for _ in model.decoder.layers
    )


def write_kv(buf: torch.Tensor, new: torch.Tensor, pos: int) -> torch.Tensor:
    """Write new [B, h, n, d_k] into buf [B, h, L_max, d_k] at positions pos .. pos + n - 1, in
    place; return the view of the filled positions 0 .. pos + n - 1 (no copy).

    Built in chapter 13."""
    n = new.size(2)
    if pos < 0 or pos + n > buf.size(2):
        raise ValueError(
            f"cannot write {n} position(s) at {pos}: the cache holds {buf.size(2)} positions"
        )
    buf[:, :, pos : pos + n] = new
    return buf[:, :, : pos + n]


def decoder_step_static(model, token, pos: int, memory, src_mask, caches) -> torch.Tensor:
    """One cached decoder step: token [B, 1] at position pos -> next-token logits [B, V].
    Step 0 empties the caches (reset), so that a cache reused for a new source never attends
    to the previous source's keys; every step writes its padding flag, and the decoder writes
    the self-attention K/V into the buffers.

    Built in chapter 13."""
    if pos == 0:
        caches.reset()
    pad = caches[0]["pad"]
    pad[:, 0, 0, pos] = token[:, 0] == PAD_ID
    self_mask = pad[..., : pos + 1]  # [B, 1, 1, pos + 1]: the padding keys so far
    h, _ = model.decoder(
        token, memory, self_mask, src_mask, need_weights=False, caches=caches, start_pos=pos
    )
    return model.out_proj(h[:, -1])


@restores_mode
@torch.no_grad()
def greedy_decode_static(
    model,
    src: torch.Tensor,
    max_len: int | None = None,
    stop_at_eos: bool = True,
    caches: StaticCaches | None = None,
) -> torch.Tensor:
    """greedy_decode(use_cache=True) with a preallocated cache: src [B, Ls] -> int64
    [B, <= max_len]. caches: None (allocated here, max_len positions), or the result of
    allocate_static_caches(model, B, >= max_len - 1), which step 0 resets and the steps fill in
    place (so one allocation serves many batches of the same size).

    Built in chapter 13. Decodes in eval mode, then gives back the caller's mode, as
    greedy_decode does."""
    model.eval()
    max_len = checked_max_len(model, src, max_len)
    B = src.size(0)
    if caches is None:
        caches = allocate_static_caches(model, B, max_len)
    elif caches.batch_size != B or caches.max_len < max_len - 1:
        raise ValueError(
            f"caches hold {caches.batch_size} rows of {caches.max_len} positions; this call needs "
            f"{B} rows of at least {max_len - 1} (allocate_static_caches(model, {B}, {max_len}))"
        )
    memory, src_mask = model.encode(src)

    def next_logits(out: torch.Tensor, step: int) -> torch.Tensor:
        return decoder_step_static(model, out[:, -1:], step, memory, src_mask, caches)

    return greedy_tokens(next_logits, B, max_len, stop_at_eos, src.device)
