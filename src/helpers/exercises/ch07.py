"""Checkers for the exercises of chapter 7 (masks and the full model)."""

from __future__ import annotations

import re

import torch

from helpers.core.masks import make_causal_mask, make_padding_mask
from helpers.core.vocab import PAD_ID

from ._common import ExerciseError, call, expect_equal, expect_tensor, fail, passed

__all__ = ["check_decoder_masks", "check_decoder_self_mask", "check_hf_to_sdpa"]

_TGT_CASES = {
    "tgt_in [[1, 5, 4, 3], [1, 7, 2, 0]] (sequence 1 padded)": torch.tensor(
        [[1, 5, 4, 3], [1, 7, 2, PAD_ID]]
    ),
    "tgt_in [[1, 9, 8, 7, 2, 0, 0]] (three pads)": torch.tensor([[1, 9, 8, 7, 2, PAD_ID, PAD_ID]]),
    "tgt_in [[1]] (length 1)": torch.tensor([[1]]),
}


def _expected_self_mask(tgt_in: torch.Tensor) -> torch.Tensor:
    return make_causal_mask(tgt_in.size(1)) | make_padding_mask(tgt_in)


def _self_mask_mistakes(tgt_in: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    L = tgt_in.size(1)
    causal, pad = make_causal_mask(L), make_padding_mask(tgt_in)
    ones = torch.ones(L, L, dtype=torch.bool)
    return [
        (
            "the polarity is reversed: in this book True means blocked (SDPA's True = may "
            "attend is the opposite)",
            ~(causal | pad),
        ),
        (
            "the diagonal is blocked too: use triu(..., diagonal=1), so that each position "
            "may attend to itself",
            ones.triu(0)[None, None] | pad,
        ),
        (
            "tril marks the past and the diagonal, the keys a query may read; in this book "
            "True = blocked, so block the future: triu(..., diagonal=1)",
            ones.tril(0)[None, None] | pad,
        ),
        (
            "tril(..., diagonal=-1) blocks the past; in this book True = blocked, so block the "
            "future: triu(..., diagonal=1)",
            ones.tril(-1)[None, None] | pad,
        ),
        (
            "a key must be blocked if it is in the future OR padding: combine with |, not &",
            causal & pad,
        ),
        (
            "the padding part is inverted: it blocks the real tokens; block the keys where "
            "tgt_in == PAD_ID",
            causal | ~pad,
        ),
        ("the causal part is missing: block every key j > i", pad.expand(-1, -1, L, -1)),
        (
            "the padding part is missing: also block the <pad> keys",
            causal.expand(len(tgt_in), -1, -1, -1),
        ),
        (
            "padding blocks keys (the last dim), not queries: the <pad> query rows come out "
            "fully blocked, with nothing to attend to (NaN with -inf). The padding mask is "
            "[B, 1, 1, L], not [B, 1, L, 1]",
            # with right padding, blocking the <pad> rows and keys gives this same mask
            causal | pad.transpose(-1, -2),
        ),
    ]


_NO_UNSQUEEZE = (
    "the padding mask (tgt_in == PAD_ID) is [B, L]: against the [L, L] causal mask, B lines up "
    "with the queries. Add the head and query axes first: [:, None, None, :] gives [B, 1, 1, L]"
)
_DTYPE_HINTS = {
    "float": "a float 0/1 mask is added to the scores by SDPA, so 1.0 is a small bonus, "
    "not a block; build the mask from comparisons and |, which give bool",
    "additive": "a float mask of 0 and -inf is added to the scores (the convention of "
    "nn.Transformer.generate_square_subsequent_mask); this book's mask is bool, True = "
    "blocked: build it from comparisons and |, which give bool",
    torch.uint8: "masked_fill refuses a uint8 mask (it wants bool), and ~ on uint8 flips every "
    "bit; build the mask from comparisons and |, which give bool",
}


def _flat_padding(tgt_in: torch.Tensor) -> torch.Tensor:
    """What causal [L, L] | padding [B, L] gives (or raises): the padding mask not unsqueezed."""
    L = tgt_in.size(1)
    return torch.ones(L, L, dtype=torch.bool).triu(1) | (tgt_in == PAD_ID)


def _match(got: torch.Tensor, candidates, where: str, what: str) -> None:
    """If got equals one known mistake, fail with its hint."""
    for hint, wrong in candidates:
        try:
            shape = torch.broadcast_shapes(got.shape, wrong.shape)
            same = torch.equal(got.expand(shape), wrong.expand(shape))
        except RuntimeError:
            same = False
        if same:
            fail(what, where, hint)


_SIZES = re.compile(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)")


def _mismatched_sizes(err: Exception) -> set[int]:
    """The two sizes a broadcasting RuntimeError names, e.g. {2, 4}; empty for other errors."""
    m = _SIZES.search(str(err)) if isinstance(err, RuntimeError) else None
    return {int(m[1]), int(m[2])} if m else set()


def _call_mask_fn(fn, tgt_in: torch.Tensor, where: str):
    """Run fn; a broadcasting error between B and L (a padding mask left [B, L]) is named."""
    try:
        return fn(tgt_in.clone())
    except ExerciseError:
        raise
    except Exception as err:
        B, L = tgt_in.shape
        if B != L and _mismatched_sizes(err) == {B, L}:
            fail(f"your code raised {type(err).__name__}: {err}", where, _NO_UNSQUEEZE)
        fail(f"your code raised {type(err).__name__}: {err}", where)


def _dtype_hint(got: torch.Tensor) -> str:
    if got.is_floating_point():
        return _DTYPE_HINTS["additive" if bool((got < 0).any()) else "float"]
    return _DTYPE_HINTS.get(
        got.dtype,
        "return a bool tensor: an integer or float 0/1 mask means something else to "
        "masked_fill and to SDPA",
    )


def _check_self_mask_shape(got: torch.Tensor, tgt_in: torch.Tensor, where: str, name: str):
    """Name the shape slips of a [B, 1, L, L] self-attention mask."""
    B, L = tgt_in.shape
    flat_shape = got.dim() == 2 and tuple(got.shape) == (L, L) and B in (1, L)
    if flat_shape and torch.equal(got, _flat_padding(tgt_in).expand(L, L)):
        fail(f"{name} has shape {tuple(got.shape)}, expected {(B, 1, L, L)}", where, _NO_UNSQUEEZE)
    if got.dim() == 3 and tuple(got.shape) == (B, L, L):
        fail(
            f"{name} has shape {tuple(got.shape)}, expected {(B, 1, L, L)}: the head axis is "
            "missing",
            where,
            "against scores [B, h, L, L], a [B, L, L] mask lines B up with the heads; keep "
            "a head axis of size 1: [B, 1, L, L]",
        )
    if B != 1 and tuple(got.shape) == (1, B, L, L):
        fail(
            f"{name} has shape {tuple(got.shape)}, expected {(B, 1, L, L)}: the batch sits on "
            "the head axis",
            where,
            "the batch comes first: (tgt_in == PAD_ID)[:, None, None, :] is [B, 1, 1, L]; "
            "[None, :, None, :] puts B where the heads go",
        )
    if got.dim() != 4:
        fail(
            f"{name} has shape {tuple(got.shape)}, expected rank 4, [B, 1, L, L]",
            where,
            "keep the head dimension (size 1) so that the mask broadcasts to [B, h, L, L]",
        )


def check_decoder_self_mask(fn) -> None:
    """Exercise 7.2: fn(tgt_in [B, L]) -> bool mask, True = blocked, shape [B, 1, L, L]: the
    decoder's self-attention mask (future OR padding). Compared with
    make_causal_mask(L) | make_padding_mask(tgt_in) on three inputs, the first with B != L.
    Used in chapter 7.
    """
    for where, tgt_in in _TGT_CASES.items():
        got = expect_tensor("mask", _call_mask_fn(fn, tgt_in, where), where)
        expected = _expected_self_mask(tgt_in)
        if got.dtype != torch.bool:
            fail(f"mask has dtype {got.dtype}, expected torch.bool", where, _dtype_hint(got))
        _check_self_mask_shape(got, tgt_in, where, "mask")
        if not torch.equal(got, expected):
            _match(got, _self_mask_mistakes(tgt_in), where, "the mask differs from the book's")
        expect_equal(
            "mask",
            got,
            expected,
            where,
            "block key j for query i when j > i or key j is <pad>",
        )
    passed("check_decoder_self_mask", len(_TGT_CASES), "equals causal | padding")


_HF_CASES = {
    "attention_mask [[1, 1, 1, 0], [1, 1, 0, 0]] (int64)": torch.tensor(
        [[1, 1, 1, 0], [1, 1, 0, 0]]
    ),
    "attention_mask [[1, 1, 1]] (no padding)": torch.tensor([[1, 1, 1]]),
    "attention_mask [[1, 0, 0, 0, 0]] (int32)": torch.tensor([[1, 0, 0, 0, 0]], dtype=torch.int32),
}


def check_hf_to_sdpa(fn) -> None:
    """Exercise 7.3: fn(attention_mask [B, L] int, 1 = keep) -> the bool mask that
    F.scaled_dot_product_attention wants, True = may attend, shape [B, 1, 1, L]. Compared on
    three inputs, then used in SDPA against the book's own mask. Used in chapter 7.
    """
    n = 0
    for where, hf in _HF_CASES.items():
        got = expect_tensor("mask", call(fn, hf.clone(), where=where), where)
        if got.dtype != torch.bool:
            hint = (
                "SDPA adds a float mask to the scores (1.0 would be a bonus, not a block) and "
                "rejects integer masks: compare, e.g. attention_mask == 1, to get a bool"
            )
            fail(f"mask has dtype {got.dtype}, expected torch.bool", where, hint)
        B, L = hf.shape
        expected = (hf == 1)[:, None, None, :]
        if tuple(got.shape) == (B, L):
            fail(
                f"mask has shape {tuple(got.shape)}, expected (B, 1, 1, L) = {(B, 1, 1, L)}",
                where,
                "a [B, L] mask lines B up with the query dimension of the scores [B, h, Lq, Lk]: "
                "add the two singleton dims, [:, None, None, :]",
            )
        if got.dim() == 3 and got.numel() == B * L:
            fail(
                f"mask has shape {tuple(got.shape)}, expected (B, 1, 1, L) = {(B, 1, 1, L)}",
                where,
                "one singleton axis is missing: the scores are [B, h, Lq, Lk], so the mask "
                "needs both, [:, None, None, :]",
            )
        bitwise = (~hf).bool()[:, None, None, :]  # ~ on integers: ~1 = -2, ~0 = -1
        if (
            bool((hf == 0).any())  # on a mask without padding the right answer is all True
            and tuple(got.shape) == tuple(expected.shape)
            and (torch.equal(got, bitwise) or torch.equal(got, ~bitwise))
        ):
            fail(
                "the mask is all True or all False",
                where,
                "~ on an integer mask is a bitwise NOT: ~1 = -2 and ~0 = -1 are both non-zero, "
                "so .bool() makes them all True. SDPA's True = may attend is already Hugging "
                "Face's 1 = keep: compare, attention_mask == 1",
            )
        if tuple(got.shape) == tuple(expected.shape) and torch.equal(got, ~expected):
            fail(
                "the mask is reversed",
                where,
                "SDPA's bool mask means True = may attend, like Hugging Face's 1 = keep; "
                "this book's True = blocked is the other one",
            )
        expect_equal("mask", got, expected, where, "True where attention_mask is 1")
        n += 1
    # and SDPA with it gives what the book's own mask gives
    g = torch.Generator().manual_seed(7)
    hf = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    q, k, v = (torch.randn(2, 2, 4, 8, generator=g) for _ in range(3))
    ours = make_padding_mask(torch.where(hf == 1, 3, PAD_ID))
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=~ours)
    got = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=fn(hf.clone()))
    if not torch.allclose(got, want, atol=1e-6):
        fail("SDPA with your mask differs from SDPA with the book's mask converted by ~")
    passed("check_hf_to_sdpa", n + 1, "SDPA gives the same output")


_PAIR_CASES = {
    "src [2, 7], tgt_in [2, 5] (L_s != L_t, both padded)": (
        torch.tensor([[3, 4, 5, 6, 7, 8, 2], [9, 10, 2, PAD_ID, PAD_ID, PAD_ID, PAD_ID]]),
        torch.tensor([[1, 8, 7, 6, 5], [1, 10, 9, PAD_ID, PAD_ID]]),
    ),
    "src [3, 4], tgt_in [3, 4] (L_s = L_t)": (
        torch.tensor([[3, 4, 5, 2], [6, 2, PAD_ID, PAD_ID], [7, 8, 2, PAD_ID]]),
        torch.tensor([[1, 5, 4, 3], [1, 6, 2, PAD_ID], [1, 8, 7, PAD_ID]]),
    ),
}


def _pair_mistakes(src, tgt_in):
    """(hint, thunk): what each known mistake returns (or raises) on these inputs."""
    Lt, Ls = tgt_in.size(1), src.size(1)
    causal = make_causal_mask(Lt)
    src_pad, tgt_pad = make_padding_mask(src), make_padding_mask(tgt_in)
    return [
        (
            "the self-attention mask uses the source's padding: the decoder's keys are target "
            "positions, so block the <pad> of tgt_in: causal | padding(tgt_in)",
            lambda: (causal | src_pad, src_pad),
        ),
        (
            "the self-attention mask is built from src: its queries and keys are target "
            "positions, so build it from tgt_in, [B, 1, L_t, L_t]",
            lambda: (make_causal_mask(Ls) | src_pad, src_pad),
        ),
        (
            "the cross-attention mask uses the target's padding: its keys are the source "
            "positions (memory), so it is the padding mask of src, [B, 1, 1, L_s]",
            lambda: (causal | tgt_pad, tgt_pad),
        ),
        (
            "the causal mask is in the cross-attention mask: the source is fully known, so every "
            "target position may read every real source token; the padding of src alone",
            lambda: (causal | tgt_pad, src_pad | causal),
        ),
        (
            "the two masks come back swapped: return (self_mask, cross_mask)",
            lambda: (src_pad, causal | tgt_pad),
        ),
        (
            "the cross-attention mask blocks nothing: the queries would read the source's <pad> "
            "positions; use the padding mask of src",
            lambda: (causal | tgt_pad, torch.zeros_like(src_pad)),
        ),
        (
            "the cross-attention mask is reversed: True = blocked, so True at the <pad> "
            "positions of src (src == PAD_ID)",
            lambda: (causal | tgt_pad, ~src_pad),
        ),
        (
            "the self-attention mask has no padding part: block the <pad> keys of tgt_in too",
            lambda: (causal.expand(len(tgt_in), -1, -1, -1), src_pad),
        ),
    ]


def _same_pair(got, wrong) -> bool:
    if not (isinstance(got, tuple) and len(got) == 2):
        return False
    for g, w in zip(got, wrong):
        if not (isinstance(g, torch.Tensor) and g.dtype == w.dtype):
            return False
        try:
            shape = torch.broadcast_shapes(g.shape, w.shape)
        except RuntimeError:
            return False
        if g.dim() != w.dim() or not torch.equal(g.expand(shape), w.expand(shape)):
            return False
    return True


def _as_pair(got):
    return tuple(got) if isinstance(got, list) and len(got) == 2 else got


def _named_pair_mistake(got, src, tgt_in):
    """The hint of the catalogued mistake that gives `got` on these inputs, or None."""
    for hint, thunk in _pair_mistakes(src, tgt_in):
        try:
            wrong = thunk()
        except RuntimeError:  # this mistake raises on these inputs: it cannot be `got`
            continue
        if _same_pair(got, wrong):
            return hint
    return None


def _explain_raise(fn, err, where, src, tgt_in) -> None:
    """fn raised on (src, tgt_in): name the slip from an input where it runs, or the lengths."""
    raised = f"your code raised {type(err).__name__}: {err}"
    for where2, (src2, tgt2) in _PAIR_CASES.items():
        if src2.size(1) != tgt2.size(1):
            continue
        try:
            got2 = _as_pair(fn(src2.clone(), tgt2.clone()))
        except Exception:
            break
        hint = _named_pair_mistake(got2, src2, tgt2)
        if hint is not None:
            fail(raised, where, f"on {where2} it runs, and {hint}")
    Ls, Lt = src.size(1), tgt_in.size(1)
    if _mismatched_sizes(err) == {Ls, Lt}:
        fail(
            raised,
            where,
            f"a mask of the target's length (L_t = {Lt}) met one of the source's length "
            f"(L_s = {Ls}): self_mask uses tgt_in alone (causal | its padding), cross_mask "
            "uses src alone (its padding, no causal part)",
        )
    fail(raised, where)


def check_decoder_masks(fn) -> None:
    """Exercise 7.4: fn(src [B, L_s], tgt_in [B, L_t]) -> (self_mask, cross_mask), the two masks
    the decoder takes for one batch: self_mask bool [B, 1, L_t, L_t] (future OR target padding),
    cross_mask bool [B, 1, 1, L_s] (source padding), True = blocked. Compared on two inputs, the
    first with L_s != L_t. Used in chapter 7.
    """
    n = 0
    for where, (src, tgt_in) in _PAIR_CASES.items():
        try:
            got = _as_pair(fn(src.clone(), tgt_in.clone()))
        except ExerciseError:
            raise
        except Exception as err:
            _explain_raise(fn, err, where, src, tgt_in)
        if not (isinstance(got, tuple) and len(got) == 2):
            fail(
                f"fn should return a pair (self_mask, cross_mask), got {type(got).__name__}",
                where,
            )
        B, Ls = src.size(0), src.size(1)
        want = (_expected_self_mask(tgt_in), make_padding_mask(src))
        if not _same_pair(got, want) or any(g.shape != w.shape for g, w in zip(got, want)):
            hint = _named_pair_mistake(got, src, tgt_in)
            if hint is not None:
                fail("the masks differ from the book's", where, hint)
        self_mask = expect_tensor("self_mask", got[0], where)
        cross_mask = expect_tensor("cross_mask", got[1], where)
        for name, g in (("self_mask", self_mask), ("cross_mask", cross_mask)):
            if g.dtype != torch.bool:
                fail(f"{name} has dtype {g.dtype}, expected torch.bool", where, _dtype_hint(g))
        _check_self_mask_shape(self_mask, tgt_in, where, "self_mask")
        if not torch.equal(self_mask, want[0]):
            _match(
                self_mask,
                _self_mask_mistakes(tgt_in),
                where,
                "self_mask differs from the book's (Exercise 7.2)",
            )
        expect_equal(
            "self_mask",
            self_mask,
            want[0],
            where,
            "block key j for query i when j > i or tgt_in[j] is <pad> (Exercise 7.2)",
        )
        if tuple(cross_mask.shape) == (B, Ls):
            fail(
                f"cross_mask has shape {(B, Ls)}, expected {(B, 1, 1, Ls)}",
                where,
                "a [B, L_s] mask lines B up with the queries of the scores [B, h, L_t, L_s]: "
                "add the head and query axes, [:, None, None, :]",
            )
        expect_equal(
            "cross_mask",
            cross_mask,
            want[1],
            where,
            "block source key j when src[j] is <pad>, the same for every query: [B, 1, 1, L_s]",
        )
        n += 2
    passed("check_decoder_masks", n, "self: causal | target padding; cross: source padding")
