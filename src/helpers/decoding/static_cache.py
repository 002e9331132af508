"""A preallocated ("static") KV cache for the encoder-decoder Transformer. Built in chapter 13.

The cache of `helpers.DecoderLayer` grows with torch.cat: at every step each layer copies its
whole self-attention K and V into new tensors one position longer. Here each layer's K and V
live in buffers of shape [B, h, L_max, d_k], allocated once. Step t writes its key and value
at position t (write_kv), and attention reads the first t + 1 positions, a view of the buffer
(no copy). The padding mask is a preallocated [B, 1, 1, L_max] buffer too, filled one column
per step. The cross-attention K/V are projected from the memory once per source, at step 0.

The caches live as long as their owner keeps them: `StaticCaches.reset()` empties them for the
next batch (a reused cache must not keep the previous source's cross-attention keys).

The keys of a cache dict are the ones the growing cache uses: self_k, self_v, cross_k, cross_v.
"""

from __future__ import annotations

import torch

from helpers.core.vocab import BOS_ID, EOS_ID, PAD_ID
from helpers.decoding.greedy import checked_max_len, restores_mode


class StaticCaches(list):
    """The preallocated caches of all decoder layers: a list with one dict per layer (self_k,
    self_v, the shared 'pad' buffer, and cross_k/cross_v once step 0 has run).

    Built in chapter 13."""

    def reset(self) -> StaticCaches:
        """Empty every layer's cache for a new batch, keeping the buffers (no new allocation):
        the self-attention keys, values and padding flags are zeroed, the cross-attention keys
        and values of the previous source dropped."""
        for cache in self:
            cache["self_k"].zero_()
            cache["self_v"].zero_()
            cache["pad"].zero_()
            cache.pop("cross_k", None)
            cache.pop("cross_v", None)
        return self

    @property
    def batch_size(self) -> int:
        return self[0]["self_k"].size(0)

    @property
    def max_len(self) -> int:
        return self[0]["self_k"].size(2)


def allocate_static_caches(model, batch_size: int, max_len: int | None = None) -> StaticCaches:
    """One dict per decoder layer: self_k, self_v zeros [B, h, max_len, d_k], and a 'pad'
    buffer bool [B, 1, 1, max_len] shared by all layers (True = the key is <pad>).
    cross_k/cross_v are added by step 0 of each decode.

    Built in chapter 13."""
    cfg = model.config
    max_len = model.max_len if max_len is None else int(max_len)
    p = next(model.parameters())
    shape = (batch_size, cfg.num_heads, max_len, cfg.d_model // cfg.num_heads)
    pad = torch.zeros(batch_size, 1, 1, max_len, dtype=torch.bool, device=p.device)
    return StaticCaches(
        dict(
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
    Writes the step's self-attention K/V and its padding flag into the preallocated caches;
    step 0 (re)projects the cross-attention K/V from this memory, so that a cache reused for a
    new source never attends to the previous source's keys.

    Built in chapter 13."""
    dec = model.decoder
    pad = caches[0]["pad"]
    pad[:, 0, 0, pos] = token[:, 0] == PAD_ID
    self_mask = pad[..., : pos + 1]  # [B, 1, 1, pos + 1]: the padding keys so far
    x = dec.embed(token, start_pos=pos)  # [B, 1, d]
    for layer, cache in zip(dec.layers, caches):
        h = layer.ln1(x)
        k, v = layer.self_mha.project_kv(h, h)  # [B, h, 1, d_k]
        K = write_kv(cache["self_k"], k, pos)  # [B, h, pos + 1, d_k], a view
        V = write_kv(cache["self_v"], v, pos)
        a, _ = layer.self_mha.attend(h, K, V, attn_mask=self_mask, need_weights=False)
        x = x + layer.drop1(a)
        h = layer.ln2(x)
        if pos == 0:  # once per source: step 0 of every decode
            cache["cross_k"], cache["cross_v"] = layer.cross_mha.project_kv(memory, memory)
        a, _ = layer.cross_mha.attend(
            h, cache["cross_k"], cache["cross_v"], attn_mask=src_mask, need_weights=False
        )
        x = x + layer.drop2(a)
        x = x + layer.ffn(layer.ln3(x))
    return model.out_proj(dec.ln_final(x)[:, -1])


@restores_mode
@torch.no_grad()
def greedy_decode_static(
    model,
    src: torch.Tensor,
    max_len: int | None = None,
    stop_at_eos: bool = True,
    caches: list[dict] | None = None,
) -> torch.Tensor:
    """greedy_decode(use_cache=True) with a preallocated cache: src [B, Ls] -> int64
    [B, <= max_len]. caches: None (allocated here, max_len positions), or the result of
    allocate_static_caches(model, B, >= max_len - 1), which is reset and filled in place (so
    one allocation serves many batches of the same size).

    Built in chapter 13. Decodes in eval mode, then gives back the caller's mode, as
    greedy_decode does."""
    model.eval()
    max_len = checked_max_len(model, src, max_len)
    B = src.size(0)
    if caches is None:
        caches = allocate_static_caches(model, B, max_len)
    else:
        have = (caches[0]["self_k"].size(0), caches[0]["self_k"].size(2))
        if have[0] != B or have[1] < max_len - 1:
            raise ValueError(
                f"caches hold {have[0]} rows of {have[1]} positions; this call needs {B} rows "
                f"of at least {max_len - 1} (allocate_static_caches(model, {B}, {max_len}))"
            )
        if isinstance(caches, StaticCaches):
            caches.reset()
    memory, src_mask = model.encode(src)
    out = torch.full((B, 1), BOS_ID, dtype=torch.long, device=src.device)
    finished = torch.zeros(B, dtype=torch.bool, device=src.device)
    for step in range(max_len - 1):
        logits = decoder_step_static(model, out[:, -1:], step, memory, src_mask, caches)
        nxt = logits.argmax(-1).masked_fill(finished, PAD_ID)
        out = torch.cat([out, nxt[:, None]], dim=1)
        if stop_at_eos:
            finished |= nxt == EOS_ID
            if finished.all():
                break
    return out
