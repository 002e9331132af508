"""The catalogue of plausible wrong answers to chapter 3's implement exercises.

Not collected by pytest (the name does not start with test_): tests/test_exercises_ch03.py
shows each one rejected by its checker with its own message, and tests/plant_mistake.py
plants them into the library to see whether its unit tests notice.

- Attention mistakes (exercise 3.4) are functions `fn(q, k, v, padding_mask=None,
  causal=False) -> (out, weights)`, the exercise's signature. Their library counterparts,
  the `lib_*` functions below them, have the shape of what they replace:
  `MultiHeadAttention._attention_by_hand(self, Q, K, V, attn_mask)`, `make_padding_mask(ids,
  pad_id)` or `make_causal_mask(L, device)`.
- Multi-head attention mistakes (exercise 3.5) are classes like the exercise's module:
  `cls(d_model, num_heads)`, `forward(q, k, v, padding_mask=None, causal=False)`. Each
  subclasses the right answer and overrides one method. Their library counterparts are the
  `lib_mha_*` functions, with the shape of the `MultiHeadAttention` method they replace.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers.core.checks import check_mask, inputs_checked

# --- Scaled dot-product attention (exercise 3.4) ---


def sdpa_correct(q, k, v, padding_mask=None, causal=False):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    Lq, Lk = scores.shape[-2:]
    mask = torch.zeros(Lq, Lk, dtype=torch.bool)
    if padding_mask is not None:
        mask = mask | padding_mask[:, None, None, :]
    if causal:
        mask = mask | torch.ones(Lq, Lk, dtype=torch.bool).triu(diagonal=1)
    weights = scores.masked_fill(mask, torch.finfo(scores.dtype).min).softmax(dim=-1)
    return weights @ v, weights


def _mask(q, k, padding_mask, causal, padding_shape=(slice(None), None, None), diagonal=1):
    """The bool mask (True = blocked) that a solution builds; the keywords give it a mistake."""
    Lq, Lk = q.size(-2), k.size(-2)
    mask = torch.zeros(Lq, Lk, dtype=torch.bool)
    if padding_mask is not None:
        mask = mask | padding_mask[padding_shape]
    if causal:
        mask = mask | torch.ones(Lq, Lk, dtype=torch.bool).triu(diagonal=diagonal)
    return mask


def _masked_softmax(scores, mask, fill=None):
    fill = torch.finfo(scores.dtype).min if fill is None else fill
    return scores.masked_fill(mask, fill).softmax(dim=-1)


def sdpa_no_scale(q, k, v, padding_mask=None, causal=False):
    weights = _masked_softmax(q @ k.transpose(-2, -1), _mask(q, k, padding_mask, causal))
    return weights @ v, weights


def sdpa_scale_d_k(q, k, v, padding_mask=None, causal=False):
    scores = q @ k.transpose(-2, -1) / q.size(-1)
    weights = _masked_softmax(scores, _mask(q, k, padding_mask, causal))
    return weights @ v, weights


def sdpa_scale_d_model(q, k, v, padding_mask=None, causal=False):
    d_model = q.size(1) * q.size(-1)  # h * d_k
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_model)
    weights = _masked_softmax(scores, _mask(q, k, padding_mask, causal))
    return weights @ v, weights


def sdpa_softmax_over_queries(q, k, v, padding_mask=None, causal=False):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    mask = _mask(q, k, padding_mask, causal)
    weights = scores.masked_fill(mask, torch.finfo(scores.dtype).min).softmax(dim=-2)
    return weights @ v, weights


def sdpa_mask_inverted(q, k, v, padding_mask=None, causal=False):  # True = keep
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    weights = _masked_softmax(scores, ~_mask(q, k, padding_mask, causal))
    return weights @ v, weights


def sdpa_padding_not_unsqueezed(q, k, v, padding_mask=None, causal=False):  # [B, Lk] as it is
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    weights = _masked_softmax(scores, _mask(q, k, padding_mask, causal, padding_shape=...))
    return weights @ v, weights


def sdpa_padding_unsqueezed_once(q, k, v, padding_mask=None, causal=False):  # [B, 1, Lk]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    mask = _mask(q, k, padding_mask, causal, padding_shape=(slice(None), None))
    weights = _masked_softmax(scores, mask)
    return weights @ v, weights


def sdpa_fill_minus_1e9(q, k, v, padding_mask=None, causal=False):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    weights = _masked_softmax(scores, _mask(q, k, padding_mask, causal), fill=-1e9)
    return weights @ v, weights


def sdpa_fill_float32_min(q, k, v, padding_mask=None, causal=False):  # out of float16's range
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    fill = torch.finfo(torch.float32).min
    weights = _masked_softmax(scores, _mask(q, k, padding_mask, causal), fill=fill)
    return weights @ v, weights


def sdpa_fill_zero(q, k, v, padding_mask=None, causal=False):  # a score of 0 is not blocked
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    weights = _masked_softmax(scores, _mask(q, k, padding_mask, causal), fill=0.0)
    return weights @ v, weights


def sdpa_padding_on_queries(q, k, v, padding_mask=None, causal=False):  # [B, 1, Lq, 1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    mask = _mask(q, k, padding_mask, causal, padding_shape=(slice(None), None, slice(None), None))
    weights = _masked_softmax(scores, mask)
    return weights @ v, weights


def sdpa_mask_after_softmax(q, k, v, padding_mask=None, causal=False):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    weights = scores.softmax(dim=-1).masked_fill(_mask(q, k, padding_mask, causal), 0.0)
    return weights @ v, weights


def sdpa_mask_ignored(q, k, v, padding_mask=None, causal=False):
    weights = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1)
    return weights @ v, weights


def sdpa_causal_ignored(q, k, v, padding_mask=None, causal=False):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    weights = _masked_softmax(scores, _mask(q, k, padding_mask, causal=False))
    return weights @ v, weights


def sdpa_causal_diagonal_0(q, k, v, padding_mask=None, causal=False):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    weights = _masked_softmax(scores, _mask(q, k, padding_mask, causal, diagonal=0))
    return weights @ v, weights


def sdpa_causal_tril(q, k, v, padding_mask=None, causal=False):  # tril: the allowed keys
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    Lq, Lk = scores.shape[-2:]
    mask = _mask(q, k, padding_mask, causal=False)
    if causal:
        mask = mask | torch.ones(Lq, Lk, dtype=torch.bool).tril()
    weights = _masked_softmax(scores, mask)
    return weights @ v, weights


def sdpa_causal_diagonal_0_inf(q, k, v, padding_mask=None, causal=False):  # -inf: NaN rows
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    mask = _mask(q, k, padding_mask, causal, diagonal=0)
    weights = _masked_softmax(scores, mask, fill=float("-inf"))
    return weights @ v, weights


SDPA_MISTAKES = {  # mistake -> a fragment of the message the checker gives
    sdpa_no_scale: "not divided by sqrt",
    sdpa_scale_d_k: "not by d_k",
    sdpa_scale_d_model: r"sqrt\(h \* d_k\), the model width",
    sdpa_softmax_over_queries: "sum to 1 over queries, not keys",
    sdpa_mask_inverted: "polarity is reversed",
    sdpa_padding_not_unsqueezed: "lines up with the queries",
    sdpa_padding_unsqueezed_once: "lines up its batch dimension with the heads",
    sdpa_fill_minus_1e9: "-1e9 does not exist in float16",
    sdpa_fill_float32_min: "float32's finfo.min",
    sdpa_fill_zero: "a score of 0 still gets weight",
    sdpa_padding_on_queries: r"padding \*keys\*, the last dimension",
    sdpa_mask_after_softmax: "applied after the softmax",
    sdpa_mask_ignored: "padding mask is not applied",
    sdpa_causal_ignored: "must not see the keys after it",
    sdpa_causal_diagonal_0: "also blocks each query's own key",
    sdpa_causal_tril: "blocks the past instead of the future",
    sdpa_causal_diagonal_0_inf: "also blocks each query's own key",
}


# --- Multi-head attention (exercise 3.5) ---


class MHACorrect(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.h, self.d_k = num_heads, d_model // num_heads
        self.W_q, self.W_k, self.W_v, self.W_o = (nn.Linear(d_model, d_model) for _ in range(4))

    def split(self, x):  # [B, L, d_model] -> [B, h, L, d_k]
        return x.view(x.size(0), x.size(1), self.h, self.d_k).transpose(1, 2)

    def merge(self, x):  # [B, h, L, d_k] -> [B, L, d_model]
        return x.transpose(1, 2).reshape(x.size(0), x.size(2), self.h * self.d_k)

    def project(self, q, k, v):
        return self.split(self.W_q(q)), self.split(self.W_k(k)), self.split(self.W_v(v))

    def attention(self, Q, K, V, padding_mask, causal):
        return sdpa_correct(Q, K, V, padding_mask, causal)

    def output(self, out):  # out [B, h, Lq, d_k]
        return self.W_o(self.merge(out))

    def forward(self, q, k, v, padding_mask=None, causal=False):
        out, weights = self.attention(*self.project(q, k, v), padding_mask, causal)
        return self.output(out), weights


class MHAMergeWithoutTranspose(MHACorrect):
    def merge(self, x):
        return x.reshape(x.size(0), x.size(2), self.h * self.d_k)  # no .transpose(1, 2)


class MHAMergeViewAfterTranspose(MHACorrect):
    def merge(self, x):
        return x.transpose(1, 2).view(x.size(0), x.size(2), self.h * self.d_k)


class MHASplitWithoutTranspose(MHACorrect):  # and the matching merge
    def split(self, x):
        return x.view(x.size(0), self.h, x.size(1), self.d_k)

    def merge(self, x):
        return x.reshape(x.size(0), x.size(2), self.h * self.d_k)


class MHANoWo(MHACorrect):
    def output(self, out):
        return self.merge(out)


class MHAWoBiasPerHead(MHACorrect):  # each head through its columns of W_o, bias each time
    def output(self, out):
        cols = [slice(i * self.d_k, (i + 1) * self.d_k) for i in range(self.h)]
        return sum(
            F.linear(out[:, i], self.W_o.weight[:, c], self.W_o.bias) for i, c in enumerate(cols)
        )


class MHAScaleDModel(MHACorrect):
    def attention(self, Q, K, V, padding_mask, causal):
        return sdpa_scale_d_model(Q, K, V, padding_mask, causal)


class MHAQKSwapped(MHACorrect):
    def project(self, q, k, v):
        return self.split(self.W_k(q)), self.split(self.W_q(k)), self.split(self.W_v(v))


class MHAKVFromQuery(MHACorrect):
    def project(self, q, k, v):
        return self.split(self.W_q(q)), self.split(self.W_k(q)), self.split(self.W_v(q))


class MHAValuesFromKeys(MHACorrect):
    def project(self, q, k, v):
        return self.split(self.W_q(q)), self.split(self.W_k(k)), self.split(self.W_v(k))


class MHASplitWithQueryLength(MHACorrect):  # fine in self-attention, wrong when Lk != Lq
    def forward(self, q, k, v, padding_mask=None, causal=False):
        B, Lq, _ = q.shape
        Q, K, V = (
            W(x).view(B, Lq, self.h, self.d_k).transpose(1, 2)
            for W, x in ((self.W_q, q), (self.W_k, k), (self.W_v, v))
        )
        out, weights = self.attention(Q, K, V, padding_mask, causal)
        return self.output(out), weights


class MHAMaskNotOverHeads(MHACorrect):  # padding_mask[:, None, :]: [B, 1, Lk]
    def attention(self, Q, K, V, padding_mask, causal):
        return sdpa_padding_unsqueezed_once(Q, K, V, padding_mask, causal)


MHA_MISTAKES = {
    MHAMergeWithoutTranspose: "scrambles positions and heads",
    MHAMergeViewAfterTranspose: "no longer contiguous",
    MHASplitWithoutTranspose: "cuts the sequence instead of the features",
    MHANoWo: "W_o is missing",
    MHAWoBiasPerHead: "bias is added once per head",
    MHAScaleDModel: r"sqrt\(h \* d_k\), the model width",
    MHAQKSwapped: "queries come from W_k",
    MHAKVFromQuery: "keys and values are projections of q",
    MHAValuesFromKeys: "values are projections of k",
    MHASplitWithQueryLength: "split with the query length",
    MHAMaskNotOverHeads: "lines up its batch dimension with the heads",
}


# --- Library counterparts, for tests/plant_mistake.py ---
# Attention mistakes plant as helpers.core.attention:MultiHeadAttention._attention_by_hand (the path
# that returns the weights; the SDPA path is left as it is), the padding and causal ones as
# helpers.core.masks:make_padding_mask / make_causal_mask.


def _lib_attention(self, Q, K, V, attn_mask, scale=None, dim=-1, fill=None, after=False):
    """The library's _attention_by_hand, with one of the mistakes above when asked."""
    scale = 1 / math.sqrt(self.d_k) if scale is None else scale
    scores = Q @ K.transpose(-2, -1) * scale
    if attn_mask is not None and not after:
        fill = torch.finfo(scores.dtype).min if fill is None else fill
        scores = scores.masked_fill(attn_mask, fill)
    weights = scores.softmax(dim=dim)
    if attn_mask is not None:
        weights = weights.masked_fill(attn_mask if after else attn_mask.all(-1, keepdim=True), 0)
    return self.attn_drop(weights) @ V, weights


def lib_no_scale(self, Q, K, V, attn_mask):
    return _lib_attention(self, Q, K, V, attn_mask, scale=1.0)


def lib_scale_d_k(self, Q, K, V, attn_mask):
    return _lib_attention(self, Q, K, V, attn_mask, scale=1 / self.d_k)


def lib_scale_d_model(self, Q, K, V, attn_mask):
    return _lib_attention(self, Q, K, V, attn_mask, scale=1 / math.sqrt(self.d_model))


def lib_softmax_over_queries(self, Q, K, V, attn_mask):
    return _lib_attention(self, Q, K, V, attn_mask, dim=-2)


def lib_mask_inverted(self, Q, K, V, attn_mask):
    return _lib_attention(self, Q, K, V, None if attn_mask is None else ~attn_mask)


def lib_fill_minus_1e9(self, Q, K, V, attn_mask):
    return _lib_attention(self, Q, K, V, attn_mask, fill=-1e9)


def lib_fill_float32_min(self, Q, K, V, attn_mask):
    return _lib_attention(self, Q, K, V, attn_mask, fill=torch.finfo(torch.float32).min)


def lib_fill_zero(self, Q, K, V, attn_mask):
    return _lib_attention(self, Q, K, V, attn_mask, fill=0.0)


def lib_mask_after_softmax(self, Q, K, V, attn_mask):
    return _lib_attention(self, Q, K, V, attn_mask, after=True)


def lib_mask_ignored(self, Q, K, V, attn_mask):
    return _lib_attention(self, Q, K, V, None)


def lib_padding_not_unsqueezed(ids, pad_id=0):  # as helpers.core.masks.make_padding_mask
    return ids == pad_id


def lib_padding_unsqueezed_once(ids, pad_id=0):
    return (ids == pad_id)[:, None, :]


def lib_padding_on_queries(ids, pad_id=0):
    return (ids == pad_id)[:, None, :, None]


def lib_causal_ignored(L, device=None):  # as helpers.core.masks.make_causal_mask
    return torch.zeros(1, 1, L, L, dtype=torch.bool, device=device)


def lib_causal_tril(L, device=None):
    return torch.ones(L, L, dtype=torch.bool, device=device).tril()[None, None]


def lib_causal_diagonal_0(L, device=None):
    return torch.ones(L, L, dtype=torch.bool, device=device).triu(diagonal=0)[None, None]


def _lib_heads(self, Q, K, V, attn_mask, need_weights):
    if need_weights:
        return self._attention_by_hand(Q, K, V, attn_mask)
    return self._attention_sdpa(Q, K, V, attn_mask), None


def lib_mha_merge_without_transpose(self, x):  # as MultiHeadAttention.merge_heads
    return x.reshape(x.size(0), x.size(2), self.d_model)


def lib_mha_merge_view_after_transpose(self, x):  # as MultiHeadAttention.merge_heads
    return x.transpose(1, 2).view(x.size(0), x.size(2), self.d_model)


def _lib_kv(cache, k, v, project):
    """The keys and values as MultiHeadAttention.forward gets them: through the KV cache when
    a decoder layer hands it one (chapter 13)."""
    return project(k, v) if cache is None else cache.update(k, v, project)


def lib_mha_split_without_transpose(self, q, k, v, attn_mask=None, need_weights=True, cache=None):
    def split(x):  # as MultiHeadAttention.forward, with the matching merge
        return x.view(x.size(0), self.h, x.size(1), self.d_k)

    K, V = _lib_kv(cache, k, v, lambda k, v: (split(self.W_k(k)), split(self.W_v(v))))
    out, w = _lib_heads(self, split(self.W_q(q)), K, V, attn_mask, need_weights)
    return self.W_o(out.reshape(q.size(0), q.size(1), self.d_model)), w


def _lib_queries(self, q, K, attn_mask):
    """The queries as MultiHeadAttention.attend makes them, after its check of the mask."""
    Q = self.split_heads(self.W_q(q))
    if attn_mask is not None and not inputs_checked():
        check_mask("attn_mask", attn_mask, Q.shape[:3] + (K.size(2),), Q.device)
    return Q


def lib_mha_no_wo(self, q, K, V, attn_mask=None, need_weights=True):  # as .attend
    out, w = _lib_heads(self, _lib_queries(self, q, K, attn_mask), K, V, attn_mask, need_weights)
    return self.merge_heads(out), w


def lib_mha_wo_bias_per_head(self, q, K, V, attn_mask=None, need_weights=True):  # as .attend
    out, w = _lib_heads(self, _lib_queries(self, q, K, attn_mask), K, V, attn_mask, need_weights)
    cols = [slice(i * self.d_k, (i + 1) * self.d_k) for i in range(self.h)]
    W, b = self.W_o.weight, self.W_o.bias
    return sum(F.linear(out[:, i], W[:, c], b) for i, c in enumerate(cols)), w


def lib_mha_qk_swapped(self, q, k, v, attn_mask=None, need_weights=True, cache=None):
    # as .forward
    def project(k, v):
        return self.split_heads(self.W_q(k)), self.split_heads(self.W_v(v))

    K, V = _lib_kv(cache, k, v, project)
    out, w = _lib_heads(self, self.split_heads(self.W_k(q)), K, V, attn_mask, need_weights)
    return self.W_o(self.merge_heads(out)), w


def lib_mha_kv_from_query(self, q, k, v, attn_mask=None, need_weights=True, cache=None):
    K, V = _lib_kv(cache, q, q, self.project_kv)  # as .forward
    return self.attend(q, K, V, attn_mask, need_weights)


def lib_mha_values_from_keys(self, q, k, v, attn_mask=None, need_weights=True, cache=None):
    K, V = _lib_kv(cache, k, k, self.project_kv)  # as .forward
    return self.attend(q, K, V, attn_mask, need_weights)


def lib_mha_split_with_query_length(self, q, k, v, attn_mask=None, need_weights=True, cache=None):
    def split(x):  # as MultiHeadAttention.forward
        return x.view(q.size(0), q.size(1), self.h, self.d_k).transpose(1, 2)

    K, V = _lib_kv(cache, k, v, lambda k, v: (split(self.W_k(k)), split(self.W_v(v))))
    out, w = _lib_heads(self, split(self.W_q(q)), K, V, attn_mask, need_weights)
    return self.W_o(self.merge_heads(out)), w


# catalogue entry -> (library target, its counterpart); lib_scale_d_model and the padding mask
# broadcast over heads each serve two entries; the -inf variant of diagonal=0 plants as
# diagonal=0 (the library chooses its own fill value)
_A, _M = "helpers.core.attention:MultiHeadAttention.", "helpers.core.masks:"
PLANTS = {
    sdpa_no_scale: (_A + "_attention_by_hand", lib_no_scale),
    sdpa_scale_d_k: (_A + "_attention_by_hand", lib_scale_d_k),
    sdpa_scale_d_model: (_A + "_attention_by_hand", lib_scale_d_model),
    sdpa_softmax_over_queries: (_A + "_attention_by_hand", lib_softmax_over_queries),
    sdpa_mask_inverted: (_A + "_attention_by_hand", lib_mask_inverted),
    sdpa_padding_not_unsqueezed: (_M + "make_padding_mask", lib_padding_not_unsqueezed),
    sdpa_padding_unsqueezed_once: (_M + "make_padding_mask", lib_padding_unsqueezed_once),
    sdpa_fill_minus_1e9: (_A + "_attention_by_hand", lib_fill_minus_1e9),
    sdpa_fill_float32_min: (_A + "_attention_by_hand", lib_fill_float32_min),
    sdpa_fill_zero: (_A + "_attention_by_hand", lib_fill_zero),
    sdpa_padding_on_queries: (_M + "make_padding_mask", lib_padding_on_queries),
    sdpa_mask_after_softmax: (_A + "_attention_by_hand", lib_mask_after_softmax),
    sdpa_mask_ignored: (_A + "_attention_by_hand", lib_mask_ignored),
    sdpa_causal_ignored: (_M + "make_causal_mask", lib_causal_ignored),
    sdpa_causal_diagonal_0: (_M + "make_causal_mask", lib_causal_diagonal_0),
    sdpa_causal_tril: (_M + "make_causal_mask", lib_causal_tril),
    sdpa_causal_diagonal_0_inf: (_M + "make_causal_mask", lib_causal_diagonal_0),
    MHAMergeWithoutTranspose: (_A + "merge_heads", lib_mha_merge_without_transpose),
    MHAMergeViewAfterTranspose: (_A + "merge_heads", lib_mha_merge_view_after_transpose),
    MHASplitWithoutTranspose: (_A + "forward", lib_mha_split_without_transpose),
    MHANoWo: (_A + "attend", lib_mha_no_wo),
    MHAWoBiasPerHead: (_A + "attend", lib_mha_wo_bias_per_head),
    MHAScaleDModel: (_A + "_attention_by_hand", lib_scale_d_model),
    MHAQKSwapped: (_A + "forward", lib_mha_qk_swapped),
    MHAKVFromQuery: (_A + "forward", lib_mha_kv_from_query),
    MHAValuesFromKeys: (_A + "forward", lib_mha_values_from_keys),
    MHASplitWithQueryLength: (_A + "forward", lib_mha_split_with_query_length),
    MHAMaskNotOverHeads: (_M + "make_padding_mask", lib_padding_unsqueezed_once),
}
