"""Plausible wrong answers to chapter 13's exercise 13.3 (one decoder step with a KV cache, and
the reset of the caches between batches), and library-shaped versions of the same slips for
tests/plant_mistake.py.

Not collected by pytest (the name does not start with test_). Each exercise mistake is a pair
(decode_step, reset) like the book's answer.
"""

import torch

from helpers import make_causal_mask, make_padding_mask
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
# helpers.core.attention:MultiHeadAttention.append_kv


def lib_append_kv_on_heads(self, x, cache, prefix=""):
    K, V = self.project_kv(x, x)
    if prefix + "k" in cache:
        K = torch.cat([cache[prefix + "k"], K], dim=1)
        V = torch.cat([cache[prefix + "v"], V], dim=1)
    cache[prefix + "k"], cache[prefix + "v"] = K, V
    return K, V


def lib_append_kv_v_not_appended(self, x, cache, prefix=""):
    K, V = self.project_kv(x, x)
    if prefix + "k" in cache:
        K = torch.cat([cache[prefix + "k"], K], dim=2)
    cache[prefix + "k"], cache[prefix + "v"] = K, V
    return K, V


def lib_append_kv_swapped(self, x, cache, prefix=""):
    K, V = self.project_kv(x, x)
    if prefix + "k" in cache:
        K = torch.cat([cache[prefix + "k"], K], dim=2)
        V = torch.cat([cache[prefix + "v"], V], dim=2)
    cache[prefix + "k"], cache[prefix + "v"] = K, V
    return V, K


def lib_append_kv_after(self, x, cache, prefix=""):
    """Returns the keys so far without the new ones (attention runs before the append);
    on the first step, only the new ones."""
    K, V = self.project_kv(x, x)
    if prefix + "k" not in cache:
        cache[prefix + "k"], cache[prefix + "v"] = K, V
        return K, V
    old = cache[prefix + "k"], cache[prefix + "v"]
    cache[prefix + "k"] = torch.cat([old[0], K], dim=2)
    cache[prefix + "v"] = torch.cat([old[1], V], dim=2)
    return old


# helpers.decoding.static_cache:StaticCaches.reset


def lib_reset_nothing(self):
    return self


def lib_reset_self_only(self):
    for cache in self:
        cache["self_k"].zero_()
        cache["self_v"].zero_()
        cache["pad"].zero_()
    return self


# helpers.core.layers:DecoderLayer.forward (the cached branch) and Decoder.forward


def _layer_forward(self, x, memory, self_mask, cross_mask, need_weights, cache, slip):
    if cache is None:
        return _ORIGINAL_LAYER_FORWARD(self, x, memory, self_mask, cross_mask, need_weights)
    h = self.ln1(x)
    K, V = self.self_mha.append_kv(h, cache, prefix="self_")
    a, _ = self.self_mha.attend(h, K, V, attn_mask=self_mask, need_weights=False)
    x = x + self.drop1(a)
    h = self.ln2(x)
    if slip == "cross_from_decoder":
        if "cross_k" not in cache:
            cache["cross_k"], cache["cross_v"] = self.cross_mha.project_kv(h, h)
        cross_mask = None
    elif slip == "no_source_mask":
        if "cross_k" not in cache:
            cache["cross_k"], cache["cross_v"] = self.cross_mha.project_kv(memory, memory)
        cross_mask = None
    elif slip == "cross_kept_on_layer":
        if "cross_k" not in cache:
            if not hasattr(self, "_kept_kv"):
                self._kept_kv = self.cross_mha.project_kv(memory, memory)
            cache["cross_k"], cache["cross_v"] = self._kept_kv
    elif slip == "cross_every_step" or "cross_k" not in cache:
        cache["cross_k"], cache["cross_v"] = self.cross_mha.project_kv(memory, memory)
    a, w = self.cross_mha.attend(
        h, cache["cross_k"], cache["cross_v"], attn_mask=cross_mask, need_weights=need_weights
    )
    x = x + self.drop2(a)
    x = x + self.ffn(self.ln3(x))
    return x, w


_ORIGINAL_LAYER_FORWARD = DecoderLayer.forward  # loaded before plant_mistake replaces it


def lib_layer_cross_from_decoder(
    self, x, memory, self_mask, cross_mask, need_weights=True, cache=None
):
    return _layer_forward(
        self, x, memory, self_mask, cross_mask, need_weights, cache, "cross_from_decoder"
    )


def lib_layer_cross_every_step(
    self, x, memory, self_mask, cross_mask, need_weights=True, cache=None
):
    return _layer_forward(
        self, x, memory, self_mask, cross_mask, need_weights, cache, "cross_every_step"
    )


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


def lib_append_kv_new_first(self, x, cache, prefix=""):
    """The new positions put before the cached ones."""
    K, V = self.project_kv(x, x)
    if prefix + "k" in cache:
        K = torch.cat([K, cache[prefix + "k"]], dim=2)
        V = torch.cat([V, cache[prefix + "v"]], dim=2)
    cache[prefix + "k"], cache[prefix + "v"] = K, V
    return K, V


def lib_reset_list_emptied(self):
    self.clear()
    return self


def lib_layer_no_source_mask(self, x, memory, self_mask, cross_mask, need_weights=True, cache=None):
    return _layer_forward(
        self, x, memory, self_mask, cross_mask, need_weights, cache, "no_source_mask"
    )


def lib_layer_cross_kept_on_layer(
    self, x, memory, self_mask, cross_mask, need_weights=True, cache=None
):
    return _layer_forward(
        self, x, memory, self_mask, cross_mask, need_weights, cache, "cross_kept_on_layer"
    )


def lib_append_kv_cache_inputs(self, x, cache, prefix=""):
    """The normalised inputs cached, and all of them projected again at every step."""
    if prefix + "k" in cache:
        x = torch.cat([cache[prefix + "k"], x], dim=1)
    cache[prefix + "k"] = cache[prefix + "v"] = x
    return self.project_kv(x, x)
