"""Plausible wrong answers to chapter 13's exercise 13.3 (one decoder step with a KV cache, and
the reset of the caches between batches), and library-shaped versions of the same slips for
tests/plant_mistake.py.

Not collected by pytest (the name does not start with test_). Each exercise mistake is a pair
(decode_step, reset) like the book's answer.
"""

import torch

from helpers import make_causal_mask, make_padding_mask
from helpers.core.kv_cache import layer_caches
from helpers.core.layers import DecoderLayer


def step(model, tokens, memory, src_mask, caches, slip=None):
    """The book's answer to exercise 13.3, or the same with one slip."""
    dec = model.decoder
    t = tokens.size(1)
    x = dec.embed(tokens[:, -1:], start_pos=0 if slip == "position_zero" else t - 1)
    self_mask = make_padding_mask(tokens)
    if slip == "first_causal_row":
        self_mask = self_mask | make_causal_mask(t)[:, :, :1]
    for layer, cache in zip(dec.layers, caches):
        h = layer.ln1(x)
        k, v = layer.self_mha.project_kv(h, h)  # [B, h, 1, d_k]
        dim = 1 if slip == "cat_on_heads" else 2
        if slip == "cache_inputs":  # the normalised vectors cached, attention projects them all
            hs = h if "self_k" not in cache else torch.cat([cache["self_k"], h], dim=1)
            cache["self_k"] = cache["self_v"] = hs
            a, _ = layer.self_mha(h, hs, hs, attn_mask=self_mask, need_weights=False)
        elif slip == "attend_before_append" and "self_k" in cache:
            K, V = cache["self_k"], cache["self_v"]  # the keys so far: attend, then append
            a, _ = layer.self_mha.attend(h, K, V, attn_mask=self_mask[..., :-1], need_weights=False)
            cache["self_k"] = torch.cat([K, k], dim=2)
            cache["self_v"] = torch.cat([V, v], dim=2)
        else:
            if "self_k" in cache and slip == "new_keys_first":
                k = torch.cat([k, cache["self_k"]], dim=2)
                v = torch.cat([v, cache["self_v"]], dim=2)
            elif "self_k" in cache:
                k = torch.cat([cache["self_k"], k], dim=dim)
                if slip != "v_not_appended":
                    v = torch.cat([cache["self_v"], v], dim=dim)
            cache["self_k"], cache["self_v"] = k, v
            K, V = (v, k) if slip == "k_and_v_swapped" else (k, v)
            attend = layer.self_mha if slip == "forward_not_attend" else layer.self_mha.attend
            a, _ = attend(h, K, V, attn_mask=self_mask, need_weights=False)
        x = x + a
        h = layer.ln2(x)
        if slip == "cross_from_decoder":
            if "cross_k" not in cache:
                cache["cross_k"], cache["cross_v"] = layer.cross_mha.project_kv(h, h)
            a, _ = layer.cross_mha.attend(h, cache["cross_k"], cache["cross_v"], need_weights=False)
        elif slip == "cross_kept_on_layer":  # the memory's K/V memoised on the layer object
            if "cross_k" not in cache:
                if not hasattr(layer, "_kept_kv"):
                    layer._kept_kv = layer.cross_mha.project_kv(memory, memory)
                cache["cross_k"], cache["cross_v"] = layer._kept_kv
            a, _ = layer.cross_mha.attend(
                h, cache["cross_k"], cache["cross_v"], attn_mask=src_mask, need_weights=False
            )
        else:
            if slip == "cross_every_step" or "cross_k" not in cache:
                cache["cross_k"], cache["cross_v"] = layer.cross_mha.project_kv(memory, memory)
            a, _ = layer.cross_mha.attend(
                h,
                cache["cross_k"],
                cache["cross_v"],
                attn_mask=None if slip == "no_source_mask" else src_mask,
                need_weights=False,
            )
        x = x + a
        x = x + layer.ffn(layer.ln3(x))
    return model.out_proj(dec.ln_final(x)[:, -1])


def reset(caches):
    """The book's answer: empty every layer's dict in place."""
    for cache in caches:
        cache.clear()


def reset_nothing(caches):
    """The cache is kept as it is for the next batch (stale self- and cross-attention K/V)."""


def reset_self_only(caches):
    """Only the self-attention part dropped, as a preallocated cache overwrites it: the
    cross-attention K/V of the last batch stay."""
    for cache in caches:
        cache.pop("self_k", None)
        cache.pop("self_v", None)


def reset_the_list(caches):
    """The list itself emptied (caches.clear()), not the dicts in it."""
    caches.clear()


def _slipped(slip):
    def decode_step(model, tokens, memory, src_mask, caches):
        return step(model, tokens, memory, src_mask, caches, slip)

    decode_step.__name__ = f"decode_step_{slip}"
    return decode_step


EXERCISE_MISTAKES = {
    # name -> (decode_step, reset, a fragment of the message the checker gives)
    "no_reset": (step, reset_nothing, r"the cache was not emptied, so the next batch reads"),
    "cross_kept_from_last_batch": (
        step,
        reset_self_only,
        r"the cross-attention keys and values are kept from the last batch",
    ),
    "list_emptied": (step, reset_the_list, r"reset changed the list itself"),
    "cross_kept_on_layer": (
        _slipped("cross_kept_on_layer"),
        reset,
        r"keeps something from the last batch outside the caches",
    ),
    "attend_before_append": (
        _slipped("attend_before_append"),
        reset,
        r"the new token's query does not see its own key",
    ),
    "cat_on_heads": (_slipped("cat_on_heads"), reset, r"along the heads dimension"),
    "cross_from_decoder": (
        _slipped("cross_from_decoder"),
        reset,
        r"from the encoder's memory, not from the decoder's stream",
    ),
    "cross_every_step": (
        _slipped("cross_every_step"),
        reset,
        r"project it to cross-attention keys and values on the first step only",
    ),
    "position_zero": (_slipped("position_zero"), reset, r"embedded at position 0 at every step"),
    "k_and_v_swapped": (_slipped("k_and_v_swapped"), reset, r"the keys and values are swapped"),
    "v_not_appended": (_slipped("v_not_appended"), reset, r"the values are not appended"),
    "first_causal_row": (
        _slipped("first_causal_row"),
        reset,
        r"the mask blocks every key but <bos>",
    ),
    "new_keys_first": (
        _slipped("new_keys_first"),
        reset,
        r"put before the cached ones",
    ),
    "cache_inputs": (_slipped("cache_inputs"), reset, r"vectors of d_model: cache the keys"),
    "forward_not_attend": (
        _slipped("forward_not_attend"),
        reset,
        r"projects its inputs again",
    ),
    "no_source_mask": (
        _slipped("no_source_mask"),
        reset,
        r"the cross-attention reads the source's <pad> positions",
    ),
}


# --- the same slips in the library's shape (for tests/plant_mistake.py) ---
# helpers.core.kv_cache:KVCache.update (the growing cache's one method)


def lib_update_on_heads(self, k, v, project):
    K, V = project(k, v)
    if self.k_name in self.store:
        K = torch.cat([self.store[self.k_name], K], dim=1)
        V = torch.cat([self.store[self.v_name], V], dim=1)
    self.store[self.k_name], self.store[self.v_name] = K, V
    return K, V


def lib_update_v_not_appended(self, k, v, project):
    K, V = project(k, v)
    if self.k_name in self.store:
        K = torch.cat([self.store[self.k_name], K], dim=2)
    self.store[self.k_name], self.store[self.v_name] = K, V
    return K, V


def lib_update_swapped(self, k, v, project):
    K, V = project(k, v)
    if self.k_name in self.store:
        K = torch.cat([self.store[self.k_name], K], dim=2)
        V = torch.cat([self.store[self.v_name], V], dim=2)
    self.store[self.k_name], self.store[self.v_name] = K, V
    return V, K


def lib_update_after(self, k, v, project):
    """Returns the keys so far without the new ones (attention runs before the append);
    on the first step, only the new ones."""
    K, V = project(k, v)
    if self.k_name not in self.store:
        self.store[self.k_name], self.store[self.v_name] = K, V
        return K, V
    old = self.store[self.k_name], self.store[self.v_name]
    self.store[self.k_name] = torch.cat([old[0], K], dim=2)
    self.store[self.v_name] = torch.cat([old[1], V], dim=2)
    return old


def lib_update_new_first(self, k, v, project):
    """The new positions put before the cached ones."""
    K, V = project(k, v)
    if self.k_name in self.store:
        K = torch.cat([K, self.store[self.k_name]], dim=2)
        V = torch.cat([V, self.store[self.v_name]], dim=2)
    self.store[self.k_name], self.store[self.v_name] = K, V
    return K, V


def lib_update_cache_inputs(self, k, v, project):
    """The normalised inputs cached, and all of them projected again at every step."""
    if self.k_name in self.store:
        k = torch.cat([self.store[self.k_name], k], dim=1)
    self.store[self.k_name] = self.store[self.v_name] = k
    return project(k, k)


# helpers.decoding.static_cache:StaticCaches.reset


def lib_reset_nothing(self):
    return self


def lib_reset_self_only(self):
    """The self-attention buffers and padding flags emptied, the cross-attention keys kept."""
    for cache in self:
        cache.self_attn.reset()
        cache["pad"].zero_()
    return self


def lib_reset_list_emptied(self):
    self.clear()
    return self


# helpers.core.layers:DecoderLayer.forward (with a cache) and Decoder.forward


class _KeptOnLayer:
    """A cross-attention cache whose projection of the memory is memoised on the layer object:
    the first batch's keys and values, for every later batch."""

    def __init__(self, layer, cache):
        self.layer, self.cache = layer, cache

    def update(self, k, v, project):
        if not hasattr(self.layer, "_kept_kv"):
            self.layer._kept_kv = project(k, v)
        return self.cache.update(k, v, lambda k, v: self.layer._kept_kv)


def _layer_forward(self, x, memory, self_mask, cross_mask, need_weights, cache, slip):
    if cache is None:
        return _ORIGINAL_LAYER_FORWARD(self, x, memory, self_mask, cross_mask, need_weights)
    self_cache, cross_cache = layer_caches(cache)
    h = self.ln1(x)
    a, _ = self.self_mha(h, h, h, attn_mask=self_mask, need_weights=False, cache=self_cache)
    x = x + self.drop1(a)
    h = self.ln2(x)
    kv_from = memory
    if slip == "cross_from_decoder":
        kv_from, cross_mask = h, None
    elif slip == "no_source_mask":
        cross_mask = None
    elif slip == "cross_every_step":
        cross_cache.reset()
    elif slip == "cross_kept_on_layer":
        cross_cache = _KeptOnLayer(self, cross_cache)
    a, w = self.cross_mha(
        h, kv_from, kv_from, attn_mask=cross_mask, need_weights=need_weights, cache=cross_cache
    )
    x = x + self.drop2(a)
    x = x + self.ffn(self.ln3(x))
    return x, w


_ORIGINAL_LAYER_FORWARD = DecoderLayer.forward  # loaded before plant_mistake replaces it


def _layer_slip(slip):
    def forward(self, x, memory, self_mask, cross_mask, need_weights=True, cache=None):
        return _layer_forward(self, x, memory, self_mask, cross_mask, need_weights, cache, slip)

    forward.__name__ = f"lib_layer_{slip}"
    return forward


lib_layer_cross_from_decoder = _layer_slip("cross_from_decoder")
lib_layer_cross_every_step = _layer_slip("cross_every_step")
lib_layer_no_source_mask = _layer_slip("no_source_mask")
lib_layer_cross_kept_on_layer = _layer_slip("cross_kept_on_layer")


def lib_decoder_position_zero(
    self, tgt, memory, self_mask, cross_mask, need_weights=True, caches=None, start_pos=0
):
    """Decoder.forward that embeds every call's tokens from position 0."""
    x = self.embed(tgt, start_pos=0)
    cross_weights = []
    for i, layer in enumerate(self.layers):
        cache = None if caches is None else caches[i]
        x, w = layer(x, memory, self_mask, cross_mask, need_weights=need_weights, cache=cache)
        cross_weights.append(w)
    return self.ln_final(x), cross_weights


# catalogue entry -> (library target, its library-shaped twin)
_U = "helpers.core.kv_cache:KVCache.update"
_L = "helpers.core.layers:DecoderLayer.forward"
_R = "helpers.decoding.static_cache:StaticCaches.reset"
PLANTS = {
    "no_reset": (_R, lib_reset_nothing),
    "cross_kept_from_last_batch": (_R, lib_reset_self_only),
    "list_emptied": (_R, lib_reset_list_emptied),
    "cross_kept_on_layer": (_L, lib_layer_cross_kept_on_layer),
    "attend_before_append": (_U, lib_update_after),
    "cat_on_heads": (_U, lib_update_on_heads),
    "cross_from_decoder": (_L, lib_layer_cross_from_decoder),
    "cross_every_step": (_L, lib_layer_cross_every_step),
    "position_zero": ("helpers.core.layers:Decoder.forward", lib_decoder_position_zero),
    "k_and_v_swapped": (_U, lib_update_swapped),
    "v_not_appended": (_U, lib_update_v_not_appended),
    "new_keys_first": (_U, lib_update_new_first),
    "cache_inputs": (_U, lib_update_cache_inputs),
    "no_source_mask": (_L, lib_layer_no_source_mask),
}
