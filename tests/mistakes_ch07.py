"""Plausible wrong answers to chapter 7's exercise 7.2 (the decoder's self-attention mask),
and library-shaped versions of the same slips for tests/plant_mistake.py.

Not collected by pytest (the name does not start with test_). Each exercise mistake takes
tgt_in [B, L] like the book's decoder_self_mask; PAD_ID is 0.
"""

import torch

PAD = 0


def _future(L, diagonal=1):
    return torch.ones(L, L, dtype=torch.bool).triu(diagonal)


def _pad_keys(tgt_in):
    return (tgt_in == PAD)[:, None, None, :]


def causal_diagonal_0(tgt_in):
    """triu(diagonal=0): every position blocks itself too."""
    return _future(tgt_in.size(1), 0) | _pad_keys(tgt_in)


def tril_for_triu(tgt_in):
    """tril, the "may attend" triangle of other conventions, used as True = blocked."""
    L = tgt_in.size(1)
    return torch.ones(L, L, dtype=torch.bool).tril() | _pad_keys(tgt_in)


def padding_not_unsqueezed(tgt_in):
    """The [B, L] padding mask OR-ed with the [L, L] causal mask: B lines up with queries."""
    return _future(tgt_in.size(1)) | (tgt_in == PAD)


def and_for_or(tgt_in):
    """Blocked only where a key is in the future AND padding."""
    return _future(tgt_in.size(1)) & _pad_keys(tgt_in)


def float_mask(tgt_in):
    """torch.ones(L, L) is float: the mask comes out as float 0/1."""
    L = tgt_in.size(1)
    return torch.maximum(torch.ones(L, L).triu(1), _pad_keys(tgt_in).float())


def uint8_mask(tgt_in):
    """The older PyTorch convention: a uint8 0/1 mask."""
    return (_future(tgt_in.size(1)) | _pad_keys(tgt_in)).to(torch.uint8)


def no_head_axis(tgt_in):
    """[B, L, L]: the padding mask unsqueezed once, the causal mask without its leading axes."""
    return _future(tgt_in.size(1)) | (tgt_in == PAD)[:, None, :]


def polarity_reversed(tgt_in):
    """True = may attend (SDPA's convention), where this book's True = blocked."""
    return ~(_future(tgt_in.size(1)) | _pad_keys(tgt_in))


def padding_on_queries(tgt_in):
    """The padding mask as [B, 1, L, 1]: it blocks the <pad> queries, not the <pad> keys."""
    return _future(tgt_in.size(1)) | (tgt_in == PAD)[:, None, :, None]


def padding_rows_and_keys(tgt_in):
    """The <pad> keys and the <pad> query rows blocked: rows with nothing to attend to."""
    return _future(tgt_in.size(1)) | _pad_keys(tgt_in) | (tgt_in == PAD)[:, None, :, None]


def int64_mask(tgt_in):
    """An int64 0/1 mask (.long())."""
    return (_future(tgt_in.size(1)) | _pad_keys(tgt_in)).long()


def causal_4d_padding_flat(tgt_in):
    """The causal mask given its [1, 1, L, L] axes, the padding mask left [B, L]."""
    return _future(tgt_in.size(1))[None, None] | (tgt_in == PAD)


def additive_float_mask(tgt_in):
    """The 0 / -inf float mask of nn.Transformer.generate_square_subsequent_mask."""
    blocked = _future(tgt_in.size(1)) | _pad_keys(tgt_in)
    return torch.zeros(blocked.shape).masked_fill(blocked, float("-inf"))


def batch_on_heads(tgt_in):
    """The padding mask as [1, B, 1, L]: the batch lines up with the heads."""
    return _future(tgt_in.size(1)) | (tgt_in == PAD)[None, :, None, :]


def padding_inverted(tgt_in):
    """tgt_in != PAD_ID: the real tokens blocked, the <pad> keys open."""
    return _future(tgt_in.size(1)) | (tgt_in != PAD)[:, None, None, :]


def tril_below_diagonal(tgt_in):
    """tril(diagonal=-1): the past blocked instead of the future."""
    L = tgt_in.size(1)
    return torch.ones(L, L, dtype=torch.bool).tril(-1) | _pad_keys(tgt_in)


EXERCISE_MISTAKES = {
    # name -> (wrong answer, a fragment of the message the checker gives)
    "causal_diagonal_0": (causal_diagonal_0, r"the diagonal is blocked too"),
    "tril_for_triu": (tril_for_triu, r"tril marks the past and the diagonal"),
    "padding_not_unsqueezed": (padding_not_unsqueezed, r"Add the head and query axes first"),
    "and_for_or": (and_for_or, r"combine with \|, not &"),
    "float_mask": (float_mask, r"a float 0/1 mask is added to the scores"),
    "uint8_mask": (uint8_mask, r"masked_fill refuses a uint8 mask"),
    "no_head_axis": (no_head_axis, r"the head axis is missing"),
    "polarity_reversed": (polarity_reversed, r"the polarity is reversed"),
    "padding_on_queries": (padding_on_queries, r"padding blocks keys \(the last dim\)"),
    "int64_mask": (int64_mask, r"return a bool tensor"),
    "causal_4d_padding_flat": (causal_4d_padding_flat, r"Add the head and query axes first"),
    "additive_float_mask": (additive_float_mask, r"a float mask of 0 and -inf"),
    "batch_on_heads": (batch_on_heads, r"the batch sits on the head axis"),
    "padding_inverted": (padding_inverted, r"the padding part is inverted"),
    "padding_rows_and_keys": (padding_rows_and_keys, r"the <pad> query rows come out fully"),
    "tril_below_diagonal": (tril_below_diagonal, r"tril\(\.\.\., diagonal=-1\) blocks the past"),
}


# --- the same slips in the library's shape (helpers.core.masks,
# helpers.core.model.Transformer.decode) ---


def lib_causal_diagonal_0(L, device=None):
    return torch.ones(L, L, dtype=torch.bool, device=device).triu(0)[None, None]


def lib_causal_tril(L, device=None):
    return torch.ones(L, L, dtype=torch.bool, device=device).tril()[None, None]


def lib_causal_float(L, device=None):
    return torch.ones(L, L, device=device).triu(1)[None, None]


def lib_causal_uint8(L, device=None):
    return torch.ones(L, L, dtype=torch.uint8, device=device).triu(1)[None, None]


def lib_padding_not_unsqueezed(ids, pad_id=PAD):
    return ids == pad_id


def lib_padding_no_head_axis(ids, pad_id=PAD):
    return (ids == pad_id)[:, None, :]


def lib_padding_on_queries(ids, pad_id=PAD):
    return (ids == pad_id)[:, None, :, None]


def lib_padding_polarity(ids, pad_id=PAD):
    return (ids != pad_id)[:, None, None, :]


def lib_padding_float(ids, pad_id=PAD):
    return (ids == pad_id)[:, None, None, :].float()


def lib_padding_uint8(ids, pad_id=PAD):
    return (ids == pad_id)[:, None, None, :].to(torch.uint8)


def _decode_with(self, tgt_in, memory, src_mask, need_weights, combine):
    from helpers.core.masks import make_causal_mask, make_padding_mask

    self_mask = combine(make_causal_mask(tgt_in.size(1), tgt_in.device), make_padding_mask(tgt_in))
    h, cross_w = self.decoder(tgt_in, memory, self_mask, src_mask, need_weights=need_weights)
    return self.out_proj(h), cross_w


def lib_decode_and(self, tgt_in, memory, src_mask, need_weights=True):
    """Transformer.decode with causal & padding."""
    return _decode_with(self, tgt_in, memory, src_mask, need_weights, lambda c, p: c & p)


def lib_decode_causal_only(self, tgt_in, memory, src_mask, need_weights=True):
    """Transformer.decode without the target padding."""
    return _decode_with(self, tgt_in, memory, src_mask, need_weights, lambda c, p: c)


def lib_decode_source_padding(self, tgt_in, memory, src_mask, need_weights=True):
    """Transformer.decode with the source padding mask in the self-attention mask."""
    return _decode_with(self, tgt_in, memory, src_mask, need_weights, lambda c, p: c | src_mask)


# --- exercise 7.4: decoder_masks(src, tgt_in) -> (self_mask, cross_mask) ---


def decoder_masks(src, tgt_in):
    """The book's answer to exercise 7.4."""
    return _future(tgt_in.size(1)) | _pad_keys(tgt_in), _pad_keys(src)


def self_mask_source_padding(src, tgt_in):
    return _future(tgt_in.size(1)) | _pad_keys(src), _pad_keys(src)


def cross_mask_target_padding(src, tgt_in):
    return _future(tgt_in.size(1)) | _pad_keys(tgt_in), _pad_keys(tgt_in)


def cross_mask_causal(src, tgt_in):
    return _future(tgt_in.size(1)) | _pad_keys(tgt_in), _pad_keys(src) | _future(tgt_in.size(1))


def masks_swapped(src, tgt_in):
    return _pad_keys(src), _future(tgt_in.size(1)) | _pad_keys(tgt_in)


def cross_mask_blocks_nothing(src, tgt_in):
    return _future(tgt_in.size(1)) | _pad_keys(tgt_in), torch.zeros_like(_pad_keys(src))


def self_mask_causal_only(src, tgt_in):
    return _future(tgt_in.size(1))[None, None].expand(len(tgt_in), 1, -1, -1), _pad_keys(src)


def cross_mask_causal_first(src, tgt_in):
    """causal | src_pad (the other order): the error names other sizes than src_pad | causal."""
    return _future(tgt_in.size(1)) | _pad_keys(tgt_in), _future(tgt_in.size(1)) | _pad_keys(src)


def self_mask_from_src(src, tgt_in):
    """Exercise 7.2's function called on src: an [L_s, L_s] self-attention mask."""
    return _future(src.size(1)) | _pad_keys(src), _pad_keys(src)


def cross_mask_reversed(src, tgt_in):
    return _future(tgt_in.size(1)) | _pad_keys(tgt_in), (src != PAD)[:, None, None, :]


def cross_mask_flat(src, tgt_in):
    return _future(tgt_in.size(1)) | _pad_keys(tgt_in), src == PAD


def self_mask_diagonal_0(src, tgt_in):
    """An exercise 7.2 mistake inside the pair."""
    return _future(tgt_in.size(1), 0) | _pad_keys(tgt_in), _pad_keys(src)


PAIR_MISTAKES = {
    "self_mask_source_padding": (self_mask_source_padding, r"uses the source's padding"),
    "cross_mask_target_padding": (cross_mask_target_padding, r"uses the target's padding"),
    "cross_mask_causal": (cross_mask_causal, r"the causal mask is in the cross-attention mask"),
    "masks_swapped": (masks_swapped, r"the two masks come back swapped"),
    "cross_mask_blocks_nothing": (
        cross_mask_blocks_nothing,
        r"cross-attention mask blocks nothing",
    ),
    "self_mask_causal_only": (self_mask_causal_only, r"self-attention mask has no padding part"),
    "cross_mask_causal_first": (
        cross_mask_causal_first,
        r"the causal mask is in the cross-attention mask",
    ),
    "self_mask_from_src": (self_mask_from_src, r"self-attention mask is built from src"),
    "cross_mask_reversed": (cross_mask_reversed, r"the cross-attention mask is reversed"),
    "cross_mask_flat": (cross_mask_flat, r"a \[B, L_s\] mask lines B up with the queries"),
    "self_mask_diagonal_0": (self_mask_diagonal_0, r"(?s)Exercise 7\.2.*the diagonal is blocked"),
}


def _decode_masks(self, tgt_in, memory, src_mask, need_weights, pick):
    from helpers.core.masks import make_causal_mask, make_padding_mask

    causal = make_causal_mask(tgt_in.size(1), tgt_in.device)
    self_mask, cross_mask = pick(causal, make_padding_mask(tgt_in), src_mask)
    h, cross_w = self.decoder(tgt_in, memory, self_mask, cross_mask, need_weights=need_weights)
    return self.out_proj(h), cross_w


def lib_decode_cross_target_padding(self, tgt_in, memory, src_mask, need_weights=True):
    return _decode_masks(self, tgt_in, memory, src_mask, need_weights, lambda c, t, s: (c | t, t))


def lib_decode_cross_causal(self, tgt_in, memory, src_mask, need_weights=True):
    return _decode_masks(
        self, tgt_in, memory, src_mask, need_weights, lambda c, t, s: (c | t, s | c)
    )


def lib_decode_masks_swapped(self, tgt_in, memory, src_mask, need_weights=True):
    return _decode_masks(self, tgt_in, memory, src_mask, need_weights, lambda c, t, s: (s, c | t))


def lib_decode_cross_blocks_nothing(self, tgt_in, memory, src_mask, need_weights=True):
    return _decode_masks(
        self, tgt_in, memory, src_mask, need_weights, lambda c, t, s: (c | t, None)
    )


# --- exercise 7.3: hf_to_sdpa(attention_mask) -> bool [B, 1, 1, L], True = may attend ---


def hf_reversed(attention_mask):
    """This book's polarity (True = blocked) where SDPA wants True = may attend."""
    return (attention_mask == 0)[:, None, None, :]


def hf_float(attention_mask):
    return attention_mask.float()[:, None, None, :]


def hf_flat(attention_mask):
    return attention_mask == 1


def hf_one_axis(attention_mask):
    return (attention_mask == 1)[:, None, :]


def hf_bitwise_not(attention_mask):
    """~ on the integer mask, then .bool(): every value is non-zero, so all True."""
    return (~attention_mask).bool()[:, None, None, :]


def hf_bitwise_not_twice(attention_mask):
    """A bitwise ~, .bool(), then a logical ~: all False."""
    return ~(~attention_mask).bool()[:, None, None, :]


HF_MISTAKES = {
    "hf_reversed": (hf_reversed, r"the mask is reversed"),
    "hf_float": (hf_float, r"SDPA adds a float mask"),
    "hf_flat": (hf_flat, r"add the two singleton dims"),
    "hf_one_axis": (hf_one_axis, r"one singleton axis is missing"),
    "hf_bitwise_not": (hf_bitwise_not, r"~ on an integer mask is a bitwise NOT"),
    "hf_bitwise_not_twice": (hf_bitwise_not_twice, r"~ on an integer mask is a bitwise NOT"),
}


# --- library-shaped versions of the mistakes added after the first catalogue ---


def lib_causal_additive(L, device=None):
    """The 0 / -inf float causal mask (nn.Transformer's convention)."""
    blocked = torch.ones(L, L, dtype=torch.bool, device=device).triu(1)
    return torch.zeros(L, L, device=device).masked_fill(blocked, float("-inf"))[None, None]


def lib_causal_tril_below(L, device=None):
    return torch.ones(L, L, dtype=torch.bool, device=device).tril(-1)[None, None]


def lib_decode_padding_rows(self, tgt_in, memory, src_mask, need_weights=True):
    """Transformer.decode that also blocks the <pad> query rows of the self-attention mask."""

    def combine(c, p):
        return c | p | p.transpose(-1, -2)

    return _decode_with(self, tgt_in, memory, src_mask, need_weights, combine)


def lib_padding_batch_on_heads(ids, pad_id=PAD):
    return (ids == pad_id)[None, :, None, :]


def lib_decode_cross_reversed(self, tgt_in, memory, src_mask, need_weights=True):
    return _decode_masks(self, tgt_in, memory, src_mask, need_weights, lambda c, t, s: (c | t, ~s))


def lib_decode_cross_flat(self, tgt_in, memory, src_mask, need_weights=True):
    return _decode_masks(
        self, tgt_in, memory, src_mask, need_weights, lambda c, t, s: (c | t, s[:, 0, 0, :])
    )


def lib_decode_self_from_src(self, tgt_in, memory, src_mask, need_weights=True):
    """The self-attention mask built from the source: causal(L_s) | source padding."""
    from helpers.core.masks import make_causal_mask

    def pick(c, t, s):
        return make_causal_mask(s.size(-1), s.device) | s, s

    return _decode_masks(self, tgt_in, memory, src_mask, need_weights, pick)
