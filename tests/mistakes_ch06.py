"""The catalogue of plausible wrong answers to chapter 6's implement exercise (6.3).

Not collected by pytest (the name does not start with test_): tests/test_exercises_ch06.py
shows each one rejected by its checker with its own message, and tests/plant_mistake.py
plants them into the library to see whether its unit tests notice.

Each mistake is the exercise's fn, written as a learner would write it from the layer's parts:
`forward(layer, x, memory, self_mask, cross_mask) -> (x, cross-attention weights)`.
`lib_<name>` is the same mistake shaped like `helpers.DecoderLayer.forward` (the plugin plants
it there): it keeps the library's input checks, its residual dropouts and its KV caches, so
that only the mistake differs from the library.

    BOOK_MISTAKE="helpers.core.layers:DecoderLayer.forward=tests/mistakes_ch06.py:lib_no_ln3" \
        PYTHONPATH=tests .venv/bin/python -m pytest -p plant_mistake tests/test_model.py -x -q
"""

import torch.nn.functional as F

from helpers.core.checks import checks_inputs
from helpers.core.kv_cache import layer_caches
from helpers.core.layers import DecoderLayer


def correct(layer, x, memory, self_mask, cross_mask):  # the book's solution
    h = layer.ln1(x)
    a, _ = layer.self_mha(h, h, h, attn_mask=self_mask)
    x = x + a
    h = layer.ln2(x)
    a, cross_w = layer.cross_mha(h, memory, memory, attn_mask=cross_mask)
    x = x + a
    return x + layer.ffn(layer.ln3(x)), cross_w


def post_norm(layer, x, memory, self_mask, cross_mask):  # the 2017 paper's order
    a, _ = layer.self_mha(x, x, x, attn_mask=self_mask)
    x = layer.ln1(x + a)
    a, cross_w = layer.cross_mha(x, memory, memory, attn_mask=cross_mask)
    x = layer.ln2(x + a)
    return layer.ln3(x + layer.ffn(x)), cross_w


def no_self_residual(layer, x, memory, self_mask, cross_mask):
    h = layer.ln1(x)
    x, _ = layer.self_mha(h, h, h, attn_mask=self_mask)
    h = layer.ln2(x)
    a, cross_w = layer.cross_mha(h, memory, memory, attn_mask=cross_mask)
    x = x + a
    return x + layer.ffn(layer.ln3(x)), cross_w


def no_cross_residual(layer, x, memory, self_mask, cross_mask):
    h = layer.ln1(x)
    a, _ = layer.self_mha(h, h, h, attn_mask=self_mask)
    x = x + a
    h = layer.ln2(x)
    x, cross_w = layer.cross_mha(h, memory, memory, attn_mask=cross_mask)
    return x + layer.ffn(layer.ln3(x)), cross_w


def no_ffn_residual(layer, x, memory, self_mask, cross_mask):
    h = layer.ln1(x)
    a, _ = layer.self_mha(h, h, h, attn_mask=self_mask)
    x = x + a
    h = layer.ln2(x)
    a, cross_w = layer.cross_mha(h, memory, memory, attn_mask=cross_mask)
    x = x + a
    return layer.ffn(layer.ln3(x)), cross_w


def residual_from_normalised(layer, x, memory, self_mask, cross_mask):
    h = layer.ln1(x)
    a, _ = layer.self_mha(h, h, h, attn_mask=self_mask)
    x = h + a
    h = layer.ln2(x)
    a, cross_w = layer.cross_mha(h, memory, memory, attn_mask=cross_mask)
    x = h + a
    h = layer.ln3(x)
    return h + layer.ffn(h), cross_w


def one_layernorm(layer, x, memory, self_mask, cross_mask):  # ln1 reused for every sub-layer
    h = layer.ln1(x)
    a, _ = layer.self_mha(h, h, h, attn_mask=self_mask)
    x = x + a
    h = layer.ln1(x)
    a, cross_w = layer.cross_mha(h, memory, memory, attn_mask=cross_mask)
    x = x + a
    return x + layer.ffn(layer.ln1(x)), cross_w


def no_ln3(layer, x, memory, self_mask, cross_mask):
    h = layer.ln1(x)
    a, _ = layer.self_mha(h, h, h, attn_mask=self_mask)
    x = x + a
    h = layer.ln2(x)
    a, cross_w = layer.cross_mha(h, memory, memory, attn_mask=cross_mask)
    x = x + a
    return x + layer.ffn(x), cross_w


def memory_normalised(layer, x, memory, self_mask, cross_mask):
    h = layer.ln1(x)
    a, _ = layer.self_mha(h, h, h, attn_mask=self_mask)
    x = x + a
    h, m = layer.ln2(x), layer.ln2(memory)
    a, cross_w = layer.cross_mha(h, m, m, attn_mask=cross_mask)
    x = x + a
    return x + layer.ffn(layer.ln3(x)), cross_w


def no_causal_mask(layer, x, memory, self_mask, cross_mask):
    h = layer.ln1(x)
    a, _ = layer.self_mha(h, h, h)
    x = x + a
    h = layer.ln2(x)
    a, cross_w = layer.cross_mha(h, memory, memory, attn_mask=cross_mask)
    x = x + a
    return x + layer.ffn(layer.ln3(x)), cross_w


def no_cross_mask(layer, x, memory, self_mask, cross_mask):
    h = layer.ln1(x)
    a, _ = layer.self_mha(h, h, h, attn_mask=self_mask)
    x = x + a
    h = layer.ln2(x)
    a, cross_w = layer.cross_mha(h, memory, memory)
    x = x + a
    return x + layer.ffn(layer.ln3(x)), cross_w


def masks_swapped(layer, x, memory, self_mask, cross_mask):
    h = layer.ln1(x)
    a, _ = layer.self_mha(h, h, h, attn_mask=cross_mask)
    x = x + a
    h = layer.ln2(x)
    a, cross_w = layer.cross_mha(h, memory, memory, attn_mask=self_mask)
    x = x + a
    return x + layer.ffn(layer.ln3(x)), cross_w


def kv_from_decoder(layer, x, memory, self_mask, cross_mask):  # a second self-attention
    h = layer.ln1(x)
    a, _ = layer.self_mha(h, h, h, attn_mask=self_mask)
    x = x + a
    h = layer.ln2(x)
    a, cross_w = layer.cross_mha(h, h, h, attn_mask=self_mask)
    x = x + a
    return x + layer.ffn(layer.ln3(x)), cross_w


def queries_from_memory(layer, x, memory, self_mask, cross_mask):  # memory and x swapped
    h = layer.ln1(x)
    a, _ = layer.self_mha(h, h, h, attn_mask=self_mask)
    x = x + a
    h = layer.ln2(x)
    a, cross_w = layer.cross_mha(memory, h, h, attn_mask=cross_mask)
    x = x + a
    return x + layer.ffn(layer.ln3(x)), cross_w


def self_weights(layer, x, memory, self_mask, cross_mask):
    h = layer.ln1(x)
    a, self_w = layer.self_mha(h, h, h, attn_mask=self_mask)
    x = x + a
    h = layer.ln2(x)
    a, _ = layer.cross_mha(h, memory, memory, attn_mask=cross_mask)
    x = x + a
    return x + layer.ffn(layer.ln3(x)), self_w


def dropout_on(layer, x, memory, self_mask, cross_mask):
    h = layer.ln1(x)
    a, _ = layer.self_mha(h, h, h, attn_mask=self_mask)
    x = x + F.dropout(a, p=0.1)  # F.dropout's training=True by default, whatever eval() says
    h = layer.ln2(x)
    a, cross_w = layer.cross_mha(h, memory, memory, attn_mask=cross_mask)
    x = x + F.dropout(a, p=0.1)
    return x + layer.ffn(layer.ln3(x)), cross_w


def no_ln1(layer, x, memory, self_mask, cross_mask):  # the self-attention reads x itself
    a, _ = layer.self_mha(x, x, x, attn_mask=self_mask)
    x = x + a
    h = layer.ln2(x)
    a, cross_w = layer.cross_mha(h, memory, memory, attn_mask=cross_mask)
    x = x + a
    return x + layer.ffn(layer.ln3(x)), cross_w


def ln2_ln3_swapped(layer, x, memory, self_mask, cross_mask):
    h = layer.ln1(x)
    a, _ = layer.self_mha(h, h, h, attn_mask=self_mask)
    x = x + a
    h = layer.ln3(x)
    a, cross_w = layer.cross_mha(h, memory, memory, attn_mask=cross_mask)
    x = x + a
    return x + layer.ffn(layer.ln2(x)), cross_w


def masks_inverted(layer, x, memory, self_mask, cross_mask):  # True read as "keep"
    h = layer.ln1(x)
    a, _ = layer.self_mha(h, h, h, attn_mask=~self_mask)
    x = x + a
    h = layer.ln2(x)
    a, cross_w = layer.cross_mha(h, memory, memory, attn_mask=~cross_mask)
    x = x + a
    return x + layer.ffn(layer.ln3(x)), cross_w


def cross_gets_self_mask(layer, x, memory, self_mask, cross_mask):
    h = layer.ln1(x)
    a, _ = layer.self_mha(h, h, h, attn_mask=self_mask)
    x = x + a
    h = layer.ln2(x)
    a, cross_w = layer.cross_mha(h, memory, memory, attn_mask=self_mask)
    x = x + a
    return x + layer.ffn(layer.ln3(x)), cross_w


def cross_before_self(layer, x, memory, self_mask, cross_mask):  # the sub-layers reordered
    h = layer.ln2(x)
    a, cross_w = layer.cross_mha(h, memory, memory, attn_mask=cross_mask)
    x = x + a
    h = layer.ln1(x)
    a, _ = layer.self_mha(h, h, h, attn_mask=self_mask)
    x = x + a
    return x + layer.ffn(layer.ln3(x)), cross_w


def cross_weights_none(layer, x, memory, self_mask, cross_mask):
    h = layer.ln1(x)
    a, _ = layer.self_mha(h, h, h, attn_mask=self_mask, need_weights=False)
    x = x + a
    h = layer.ln2(x)
    a, cross_w = layer.cross_mha(h, memory, memory, attn_mask=cross_mask, need_weights=False)
    x = x + a
    return x + layer.ffn(layer.ln3(x)), cross_w


# Right answers written another way: the checker must accept each.
def variant_keywords_and_indexing(layer, x, memory, self_mask, cross_mask):
    h = layer.ln1(x)
    x = x + layer.self_mha(q=h, k=h, v=h, attn_mask=self_mask, need_weights=False)[0]
    out = layer.cross_mha(layer.ln2(x), memory, memory, cross_mask, True)
    x = x + out[0]
    return [x + layer.ffn(layer.ln3(x)), out[1]]


def variant_sub_modules(layer, x, memory, self_mask, cross_mask):  # dropouts kept, ffn unrolled
    h = layer.ln1(x)
    a, _ = layer.self_mha(h, h, h, attn_mask=self_mask.clone())
    x = x + layer.drop1(a)
    h = layer.ln2(x)
    a, cross_w = layer.cross_mha(h, memory, memory, attn_mask=cross_mask.clone())
    x = x + F.dropout(a, 0.1, training=layer.training)
    linear1, gelu, linear2, drop = layer.ffn.net
    return x + drop(linear2(gelu(linear1(layer.ln3(x))))), cross_w


VARIANTS = [variant_keywords_and_indexing, variant_sub_modules]


CATALOGUE = [
    post_norm,
    no_self_residual,
    no_cross_residual,
    no_ffn_residual,
    residual_from_normalised,
    one_layernorm,
    no_ln3,
    memory_normalised,
    no_causal_mask,
    no_cross_mask,
    masks_swapped,
    kv_from_decoder,
    queries_from_memory,
    self_weights,
    dropout_on,
    no_ln1,
    ln2_ln3_swapped,
    masks_inverted,
    cross_gets_self_mask,
    cross_before_self,
    cross_weights_none,
]


# --- the same mistakes shaped like helpers.DecoderLayer.forward, for tests/plant_mistake.py ---


class _Attention:
    """layer.self_mha or layer.cross_mha as the learner's code calls it, (q, k, v, attn_mask=...),
    with the layer's KV cache for that attention, followed by the layer's residual dropout, as
    in helpers.DecoderLayer.forward."""

    def __init__(self, mha, drop, cache, kind, need_weights):
        self.mha, self.drop, self.cache, self.kind = mha, drop, cache, kind
        self.need_weights = need_weights

    def __call__(self, q, k, v, attn_mask=None, need_weights=True):
        # the cross-attention's weights follow the caller's need_weights, unless the learner's
        # code switches them off itself
        nw = need_weights if self.kind == "self" else self.need_weights and need_weights
        a, w = self.mha(q, k, v, attn_mask=attn_mask, need_weights=nw, cache=self.cache)
        return self.drop(a), w


class _Parts:
    """The layer's parts as the learner's fn sees them, with the two attentions wrapped."""

    def __init__(self, layer, cache, need_weights):
        self_cache, cross_cache = layer_caches(cache)
        self.ln1, self.ln2, self.ln3, self.ffn = layer.ln1, layer.ln2, layer.ln3, layer.ffn
        self.self_mha = _Attention(layer.self_mha, layer.drop1, self_cache, "self", need_weights)
        self.cross_mha = _Attention(
            layer.cross_mha, layer.drop2, cross_cache, "cross", need_weights
        )


def _library_shaped(fn):
    @checks_inputs(DecoderLayer.check_inputs)
    def forward(self, x, memory, self_mask, cross_mask, need_weights=True, cache=None):
        out, w = fn(_Parts(self, cache, need_weights), x, memory, self_mask, cross_mask)
        return out, (w if need_weights else None)

    forward.__name__ = f"lib_{fn.__name__}"
    return forward


lib_correct = _library_shaped(correct)
for _fn in CATALOGUE:
    globals()[f"lib_{_fn.__name__}"] = _library_shaped(_fn)
