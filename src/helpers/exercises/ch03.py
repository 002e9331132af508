"""Checkers for the exercises of chapter 3 (multi-head attention)."""

from __future__ import annotations

import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers.core.attention import MultiHeadAttention

from ._common import (
    ExerciseError,
    call,
    expect_close,
    expect_dtype,
    expect_shape,
    expect_tensor,
    fail,
    passed,
)

__all__ = [
    "check_additive_mask_attention",
    "check_alibi_bias",
    "check_scaled_dot_product_attention",
    "check_multi_head_attention",
]


def _attention(q, k, v, mask, scale=None, dim=-1, fill_blocked_rows=True):
    """The book's masked attention in float64 (bool mask, True = blocked); a row whose keys
    are all blocked gives zero weights. The keyword arguments reproduce common mistakes."""
    scale = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale
    scores = scores.masked_fill(mask, float("-inf"))
    weights = scores.softmax(dim=dim)
    if fill_blocked_rows:
        weights = weights.masked_fill(mask.all(dim=-1, keepdim=True), 0.0)
    return weights @ v


def _uniform_on_blocked_rows(out, v, mask):
    """out with every fully blocked query row replaced by the plain mean of the values."""
    rows = mask.all(dim=-1, keepdim=True).expand(*out.shape[:-1], 1)
    return torch.where(rows, v.mean(dim=-2, keepdim=True).expand_as(out), out)


def _matches(got, wrong) -> bool:
    return got.shape == wrong.shape and torch.allclose(got.double(), wrong, atol=1e-6)


def _inputs():
    """(description, q, k, v, mask): float64 inputs [B, h, L, d_k], bool masks."""
    g = torch.Generator().manual_seed(0)
    B, h, L, dk = 2, 3, 5, 8
    q, k, v = (torch.randn(B, h, L, dk, generator=g, dtype=torch.float64) for _ in range(3))
    q = q * 2  # scores large enough that a missing 1/sqrt(d_k) shows
    nothing = torch.zeros(B, 1, 1, L, dtype=torch.bool)
    padding = torch.tensor([[0, 0, 0, 1, 1], [0, 0, 0, 0, 0]], dtype=torch.bool)[:, None, None]
    causal = torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1)
    all_blocked = padding.expand(B, 1, L, L).clone()
    all_blocked[0, 0, 1] = True  # sequence 0, query 1: every key blocked
    return [
        ("input 1 (no key blocked)", q, k, v, nothing),
        ("input 2 (padding | causal mask, [B, 1, Lq, Lk])", q, k, v, padding | causal),
        (
            "input 3 (padding mask [B, 1, 1, Lk]; d_k = 4, d_v = 8)",
            q[..., :4],
            k[..., :4],
            v,
            padding,
        ),
        ("input 4 (query 1 of sequence 0 has every key blocked)", q, k, v, all_blocked),
    ]


def check_additive_mask_attention(fn) -> None:
    """Exercise 3.2: fn(q, k, v, mask) -> out, with q [B, h, Lq, d_k], k [B, h, Lk, d_k],
    v [B, h, Lk, d_v] and a bool mask (True = blocked) broadcastable to [B, h, Lq, Lk].

    The reader turns the bool mask into an additive float mask (0 where allowed, -inf where
    blocked); the result must equal the book's masked attention, and a query whose keys are
    all blocked must get a zero output (as F.scaled_dot_product_attention returns in
    torch 2.13), not NaN. Used in chapter 3.
    """
    cases = _inputs()
    for where, q, k, v, mask in cases:
        got = call(fn, q.clone(), k.clone(), v.clone(), mask.clone(), where=where)
        got = expect_tensor("the output", got, where)
        expected = _attention(q, k, v, mask)
        expect_shape("the output", got, expected.shape, where, "[B, h, Lq, d_v]: weights @ v")
        if torch.isnan(got).any():
            fail(
                "the output contains NaN",
                where,
                "a row of scores that is -inf everywhere gives softmax 0/0 = NaN: set the "
                "weights of fully blocked rows to 0 (mask.all(dim=-1, keepdim=True))",
            )
        dk = q.size(-1)
        wrong = [
            (_attention(q, k, v, mask, scale=1.0), "the scores are not divided by sqrt(d_k)"),
            (_attention(q, k, v, mask, scale=1 / dk), "divide by sqrt(d_k), not by d_k"),
            (
                _attention(q, k, v, mask, dim=-2),
                "the weights sum to 1 over the wrong dimension: softmax over the keys (dim=-1)",
            ),
            (
                _attention(q, k, v, ~mask),
                "the mask polarity is reversed: True means blocked, so True -> -inf",
            ),
            (
                _uniform_on_blocked_rows(expected, v, mask),
                "a query whose keys are all blocked should get zero weights (a zero output), "
                "not the uniform average that a finite fill value such as finfo.min gives",
            ),
        ]
        hint = next((h for w, h in wrong if _matches(got, w) and not _matches(expected, w)), "")
        expect_close("the output", got, expected, atol=1e-6, where=where, hint=hint)
    passed("check_additive_mask_attention", len(cases))


def _alibi(num_heads: int, L: int, slopes=None, signed=False, sign=-1.0) -> torch.Tensor:
    if slopes is None:
        slopes = [2 ** (-8 * (i + 1) / num_heads) for i in range(num_heads)]
    pos = torch.arange(L, dtype=torch.float64)
    dist = pos[:, None] - pos[None, :]  # query i minus key j
    dist = dist if signed else dist.abs()
    return sign * torch.tensor(slopes, dtype=torch.float64)[:, None, None] * dist


def check_alibi_bias(fn) -> None:
    """Exercise 3.3: fn(num_heads, L) -> [num_heads, L, L] with
    bias[h, i, j] = -m_h * |i - j| and slopes m_h = 2^(-8 (h + 1) / num_heads).

    Compared with the formula of Press et al. (2022) on two head counts. Used in chapter 3.
    """
    for num_heads, L in ((4, 6), (8, 5)):
        where = f"num_heads={num_heads}, L={L}"
        got = expect_tensor("the bias", call(fn, num_heads, L, where=where), where)
        expected = _alibi(num_heads, L)
        expect_shape("the bias", got, expected.shape, where, "[num_heads, Lq, Lk]: one per head")
        heads = range(num_heads)
        wrong = [
            (-expected, "the bias must be a penalty: -m * distance, so far keys lose weight"),
            (
                _alibi(
                    num_heads, L, slopes=[2 ** (-8 * (num_heads - i) / num_heads) for i in heads]
                ),
                "the slopes are in reverse order: head 0 has the largest, 2^(-8/num_heads)",
            ),
            (
                _alibi(num_heads, L, slopes=[2 ** (-8 * i / num_heads) for i in heads]),
                "the slopes start at 2^(-8/num_heads) for head 0, not at 1",
            ),
            (
                _alibi(num_heads, L, slopes=[2 ** -(i + 1) for i in heads]),
                "the slopes are 2^(-8 (h+1) / num_heads): the ratio between heads depends on "
                "num_heads",
            ),
            (
                _alibi(num_heads, L, signed=True),
                "use the distance |i - j|: keys on both sides of the query are penalised",
            ),
            (
                _alibi(num_heads, L, signed=True, sign=1.0),
                "use the distance |i - j|: keys on both sides of the query are penalised",
            ),
        ]
        hint = next((h for w, h in wrong if _matches(got, w)), "")
        expect_close("the bias", got, expected, atol=1e-6, where=where, hint=hint)
    passed("check_alibi_bias", 2)


# --- Exercises 3.4 and 3.5: the machinery that recognises a known mistake ---


def _pair_close(got, want, atol, rtol) -> bool:
    """got and want are both (output, weights) with equal shapes and values (NaN equal NaN)."""
    if not (isinstance(got, tuple) and len(got) == 2):
        return False
    return all(
        isinstance(a, torch.Tensor)
        and a.shape == b.shape
        and torch.allclose(a.detach().double(), b.double(), atol=atol, rtol=rtol, equal_nan=True)
        for a, b in zip(got, want)
    )


def _recognise(got, reference, case, hints, atol, rtol) -> str:
    """The hint of the first known mistake whose (output, weights) on `case` match got; the
    mistakes are computed with the fill value finfo.min and again with -inf (NaN rows)."""
    expected = reference(case)
    for mistake, hint in hints.items():
        for fill in (None, float("-inf")):
            try:
                wrong = reference(case, mistake, fill)
            except Exception:
                continue
            if _pair_close(got, wrong, atol, rtol) and not _pair_close(expected, wrong, atol, rtol):
                return hint
    return ""


def _same_error(err: Exception, run) -> bool:
    """run() raises an exception of err's type with err's message."""
    try:
        run()
    except Exception as other:
        return type(other) is type(err) and str(other) == str(err)
    return False


def _recognise_error(err, run, reference, case, hints, probes, atol, rtol) -> str:
    """The hint of a known mistake that raises err on `case`; else the first one the reader's
    code matches on a probe input on which that mistake runs silently (B = Lq or B = h)."""
    for mistake, hint in hints.items():
        if _same_error(err, lambda m=mistake: reference(case, m)):
            return hint
    for probe in probes:
        try:
            got = run(probe)
        except Exception:
            continue
        hint = _recognise(got, reference, _as_double(probe), hints, atol, rtol)
        if hint:
            return hint
    return ""


def _as_double(case):
    """The case with its floating-point tensors in float64, for the expected values."""
    return tuple(
        t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in case
    )


def _compare(name, run, reference, cases, hints, probes, what) -> int:
    """Run the reader's code on every case, name a recognised mistake, else say what differs.

    reference(case, mistake=None, fill=None) -> (output, weights) computes in the case's dtype
    (so that a float16 error is reproduced); the expected values come from the case in float64.
    """
    n = 0
    for where, case, atol, rtol in cases:
        try:
            got = run(case)
        except ExerciseError:
            raise
        except Exception as err:
            hint = _recognise_error(err, run, reference, case, hints, probes, atol, rtol)
            fail(f"your code raised {type(err).__name__}: {err}", where, hint)
        if not (isinstance(got, tuple) and len(got) == 2):
            fail(f"{name} should return a pair (output, weights), got {type(got).__name__}", where)
        case64 = _as_double(case)
        expected = reference(case64)
        shapes = [tuple(getattr(t, "shape", ())) for t in (*got, *expected)]
        if shapes[0] == shapes[3] and shapes[1] == shapes[2] and shapes[0] != shapes[1]:
            fail(
                f"{name} returned (weights, output)",
                where,
                f"the output is {list(shapes[2])} and the weights {list(shapes[3])}: "
                "return (output, weights), in that order",
            )
        if not _pair_close(got, expected, atol, rtol):
            hint = _recognise(got, reference, case64, hints, atol, rtol)
            if hint:
                fail(f"the output differs from {what}", where, hint)
        dtype = case[0].dtype
        for label, t, e in (
            ("the output", got[0], expected[0]),
            ("the weights", got[1], expected[1]),
        ):
            expect_dtype(label, t, dtype, where, "keep the dtype of the inputs")
            if torch.isnan(t).any():
                fail(
                    f"{label} contains NaN",
                    where,
                    "no query here has all its keys blocked, yet a row of scores was -inf "
                    "everywhere: check which keys your mask blocks",
                )
            expect_close(label, t, e, atol=atol, rtol=rtol, where=where)
        n += 1
    return n


# --- Exercise 3.4: scaled dot-product attention with a padding mask and a causal flag ---

_SDPA_HINTS = {
    "no scale": "the scores are not divided by sqrt(d_k): divide them by sqrt(q.size(-1))",
    "scale d_k": "divide the scores by sqrt(d_k), not by d_k",
    "scale d_model": "the scores are divided by sqrt(h * d_k), the model width: divide by "
    "sqrt(d_k), the width of one head (q.size(-1))",
    "softmax over queries": "your weights sum to 1 over queries, not keys: softmax over the "
    "last dimension (dim=-1)",
    "inverted": "the mask polarity is reversed: True means blocked, so fill the scores where "
    "the mask is True, not where it is False",
    "no unsqueeze": "a [B, Lk] padding mask broadcasts against the scores [B, h, Lq, Lk] from "
    "the right, so its batch dimension lines up with the queries: unsqueeze it to "
    "[B, 1, 1, Lk] (padding_mask[:, None, None, :])",
    "unsqueeze once": "a [B, 1, Lk] padding mask lines up its batch dimension with the heads "
    "of the scores [B, h, Lq, Lk]: unsqueeze it to [B, 1, 1, Lk] (padding_mask[:, None, None, :])",
    "minus 1e9": "the fill value is outside float16's range, which ends at 65504 (-1e9 does "
    "not exist in float16, nor does float32's finfo.min), so masked_fill refuses it: fill "
    "with torch.finfo(scores.dtype).min",
    "fill zero": "the blocked scores are set to 0, and a score of 0 still gets weight: fill "
    "them with a very negative number, torch.finfo(scores.dtype).min",
    "padding on queries": "the padding mask blocks the padding *keys*, the last dimension of "
    "the scores [B, h, Lq, Lk]: padding_mask[:, None, None, :], not [:, None, :, None]",
    "after softmax": "the mask is applied after the softmax, so each row of weights no longer "
    "sums to 1: fill the blocked scores before the softmax",
    "mask ignored": "blocked keys get weight: the padding mask is not applied to the scores",
    "no causal": "with causal=True, query i must not see the keys after it: block every key "
    "j > i with torch.triu(..., diagonal=1)",
    "diagonal 0": "the causal mask also blocks each query's own key: torch.triu(..., "
    "diagonal=1) blocks only the keys j > i",
    "causal tril": "the causal mask blocks the past instead of the future: torch.tril marks "
    "the keys j <= i that a query may see, but True means blocked here: torch.triu(..., "
    "diagonal=1)",
}


def _sdpa(case, mistake=None, fill=None):
    """The book's attention (blocked scores filled with finfo.min), or what `mistake` computes;
    case = (q, k, v, padding_mask, causal)."""
    q, k, v, padding_mask, causal = case
    dk = q.size(-1)
    scale = {"no scale": 1.0, "scale d_k": 1 / dk, "scale d_model": 1 / math.sqrt(q.size(1) * dk)}
    scores = q @ k.transpose(-2, -1) * scale.get(mistake, 1 / math.sqrt(dk))
    Lq, Lk = scores.shape[-2:]
    mask = None
    if padding_mask is not None and mistake != "mask ignored":
        shaped = {
            "no unsqueeze": padding_mask,
            "unsqueeze once": padding_mask[:, None, :],
            "padding on queries": padding_mask[:, None, :, None],
        }
        mask = shaped.get(mistake, padding_mask[:, None, None, :])
    if causal and mistake not in ("mask ignored", "no causal"):
        future = torch.ones(Lq, Lk, dtype=torch.bool)
        if mistake == "causal tril":  # the allowed keys, j <= i
            future = future.tril()
        else:
            future = future.triu(0 if mistake == "diagonal 0" else 1)
        mask = future if mask is None else mask | future
    if mistake == "inverted":  # with no mask given, every key blocked
        mask = ~(torch.zeros(Lq, Lk, dtype=torch.bool) if mask is None else mask)
    if fill is None:
        fills = {"minus 1e9": -1e9, "fill zero": 0.0}
        fill = fills.get(mistake, torch.finfo(scores.dtype).min)
    if mask is not None and mistake != "after softmax":
        scores = scores.masked_fill(mask, fill)
    weights = scores.softmax(dim=-2 if mistake == "softmax over queries" else -1)
    if mask is not None and mistake == "after softmax":
        weights = weights.masked_fill(mask, 0.0)
    return weights @ v, weights


def _padding(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.bool)


# float16 rounds to 11 significant bits (unit roundoff u = 2^-11 = 4.9e-4). An output of input
# 4 sums Lk = 6 weight-value products with |v| < 4, so its rounding error is at most about
# 6 * 4 * u = 1.2e-2 (measured for the book's solution: 1.2e-3); every mistake is further off.
_FP16_TOL = (1.2e-2, 1e-2)


def _sdpa_cases():
    """(where, (q, k, v, padding_mask, causal), atol, rtol): B=2 differs from h=3 and from
    Lq, d_k from d_v; the last case is float16."""
    g = torch.Generator().manual_seed(34)

    def rand(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    q, k, v = 2 * rand(2, 3, 4, 8), rand(2, 3, 6, 8), rand(2, 3, 6, 5)
    pad6 = _padding([[0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 0, 0]])
    qs, ks, vs = 2 * rand(2, 3, 5, 8), rand(2, 3, 5, 8), rand(2, 3, 5, 5)
    pad5 = _padding([[0, 0, 0, 1, 1], [0, 0, 0, 0, 0]])
    shapes = "q [2, 3, 4, 8], k [2, 3, 6, 8], v [2, 3, 6, 5]"
    return [
        (f"input 1 (no mask; {shapes})", (q, k, v, None, False), 1e-6, 1e-5),
        (
            f"input 2 (padding_mask [2, 6], sequence 0 ends in 2 pads; {shapes})",
            (q, k, v, pad6, False),
            1e-6,
            1e-5,
        ),
        (
            "input 3 (self-attention, L = 5, padding_mask [2, 5] and causal=True)",
            (qs, ks, vs, pad5, True),
            1e-6,
            1e-5,
        ),
        (
            "input 4 (input 2 in float16)",
            (q.half() / 2, k.half(), v.half(), pad6, False),
            *_FP16_TOL,
        ),
    ]


def _sdpa_probes():
    """Inputs on which a padding mask broadcast the wrong way runs silently: B = Lq, B = h."""
    g = torch.Generator().manual_seed(35)
    pads = _padding([[0, 0, 0, 1], [0, 0, 1, 1], [0, 0, 0, 0], [0, 1, 1, 1]])
    out = []
    for B, h, L in ((4, 3, 4), (3, 3, 5)):
        q, k, v = (torch.randn(B, h, L, 8, generator=g, dtype=torch.float64) for _ in range(3))
        pad = torch.zeros(B, L, dtype=torch.bool)
        pad[:, :4] = pads[:B]
        out.append((q, k, v, pad, False))
    return out


def check_scaled_dot_product_attention(fn) -> None:
    """Exercise 3.4: fn(q, k, v, padding_mask=None, causal=False) -> (out, weights), with
    q [B, h, Lq, d_k], k [B, h, Lk, d_k], v [B, h, Lk, d_v], padding_mask bool [B, Lk]
    (True = a padding key, blocked for every query and head) and causal=True blocking every
    key j > i of query i. out is [B, h, Lq, d_v], weights [B, h, Lq, Lk].

    Compared with the book's attention on four inputs (no mask; a padded batch with B != Lq;
    padding with causal; float16); a wrong answer that matches one of the mistakes in
    _SDPA_HINTS is named. Used in chapter 3.
    """
    n = _compare(
        "fn",
        lambda case: fn(*[None if t is None else t.clone() for t in case[:4]], case[4]),
        _sdpa,
        _sdpa_cases(),
        _SDPA_HINTS,
        _sdpa_probes(),
        "the book's attention",
    )
    passed("check_scaled_dot_product_attention", n)


# --- Exercise 3.5: multi-head attention, a module built around exercise 3.4's attention ---

_MHA_HINTS = {
    "merge without transpose": "the heads are merged without transpose(1, 2): reshape lays "
    "out [h, Lq, d_k] in memory order, which scrambles positions and heads; merge with "
    "out.transpose(1, 2).reshape(B, Lq, d_model)",
    "view after transpose": "view cannot merge the heads after transpose(1, 2), because the "
    "tensor is no longer contiguous: use .reshape(B, Lq, d_model) (or .contiguous().view)",
    "split without transpose": "the heads are split with view(B, h, L, d_k), which cuts the "
    "sequence instead of the features: view(B, L, h, d_k), then transpose(1, 2)",
    "no W_o": "the output projection W_o is missing: apply it to the merged heads",
    "bias per head": "W_o's bias is added once per head: apply W_o once, to the concatenated heads",
    "q k swapped": "the queries come from W_k and the keys from W_q: Q = W_q(q), K = W_k(k)",
    "kv from q": "the keys and values are projections of q: K = W_k(k) and V = W_v(v), which "
    "in cross-attention come from another sequence",
    "v from k": "the values are projections of k: V = W_v(v), from the third argument",
    "split with Lq": "the keys and values are split with the query length Lq, but their length "
    "is Lk (in cross-attention they come from another sequence): split each tensor with its "
    "own length, x.size(1)",
    **_SDPA_HINTS,
}


def _linear(x, lin):
    return F.linear(x, lin.weight.to(x.dtype), lin.bias.to(x.dtype))


def _book_mask(padding_mask, causal, Lq, Lk):
    """The library's rank-4 mask from the exercise's padding_mask [B, Lk] and causal flag."""
    mask = torch.zeros(1, 1, Lq, Lk, dtype=torch.bool)
    if padding_mask is not None:
        mask = mask | padding_mask[:, None, None, :]
    if causal:
        mask = mask | torch.ones(Lq, Lk, dtype=torch.bool).triu(1)
    return mask


def _mha(ref, case, mistake=None, fill=None):
    """helpers.MultiHeadAttention `ref` (its weights in the case's dtype), or what `mistake`
    computes with the same weights; case = (q, k, v, padding_mask, causal)."""
    q, k, v, padding_mask, causal = case
    B, Lq, d = q.shape
    if mistake is None and fill is None:
        lib = copy.deepcopy(ref).to(q.dtype)
        with torch.no_grad():
            return lib(q, k, v, attn_mask=_book_mask(padding_mask, causal, Lq, k.size(1)))
    h, dk = ref.h, ref.d_k
    W_q, W_k = (ref.W_k, ref.W_q) if mistake == "q k swapped" else (ref.W_q, ref.W_k)
    if mistake == "kv from q":
        k = v = q
    if mistake == "v from k":
        v = k

    def split(x):
        if mistake == "split without transpose":
            return x.view(B, h, x.size(1), dk)
        return x.view(B, Lq if mistake == "split with Lq" else x.size(1), h, dk).transpose(1, 2)

    with torch.no_grad():
        Q, K, V = split(_linear(q, W_q)), split(_linear(k, W_k)), split(_linear(v, ref.W_v))
        attention_mistake = mistake if mistake in _SDPA_HINTS else None
        out, w = _sdpa((Q, K, V, padding_mask, causal), attention_mistake, fill)
        if mistake in ("merge without transpose", "split without transpose"):
            merged = out.reshape(B, Lq, d)
        elif mistake == "view after transpose":
            merged = out.transpose(1, 2).view(B, Lq, d)
        else:
            merged = out.transpose(1, 2).reshape(B, Lq, d)
        if mistake == "no W_o":
            return merged, w
        if mistake == "bias per head":
            W, b = ref.W_o.weight.to(q.dtype), ref.W_o.bias.to(q.dtype)
            return sum(F.linear(out[:, i], W[:, i * dk : (i + 1) * dk], b) for i in range(h)), w
        return _linear(merged, ref.W_o), w


_MHA_D, _MHA_H = 24, 3  # d_k = 8: sqrt(d_model) and sqrt(d_k) differ


def _mha_cases():
    """(where, (q, k, v, padding_mask, causal), atol, rtol), float32 as the module is."""
    g = torch.Generator().manual_seed(36)
    x, q, src, val = (torch.randn(2, L, _MHA_D, generator=g) for L in (5, 4, 6, 6))
    pad6 = _padding([[0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 0, 0]])
    pad5 = _padding([[0, 0, 0, 1, 1], [0, 0, 0, 0, 0]])
    tol = (1e-5, 1e-4)
    return [
        ("input 1 (self-attention, x [2, 5, 24], no mask)", (x, x, x, None, False), *tol),
        (
            "input 2 (cross-attention, q [2, 4, 24], k and v two different [2, 6, 24])",
            (q, src, val, None, False),
            *tol,
        ),
        (
            "input 3 (input 2 with padding_mask [2, 6]: source 0 ends in 2 pads)",
            (q, src, src, pad6, False),
            *tol,
        ),
        (
            "input 4 (self-attention, x [2, 5, 24], padding_mask [2, 5] and causal=True)",
            (x, x, x, pad5, True),
            *tol,
        ),
    ]


def _mha_probes():
    """Self-attention inputs on which a padding mask broadcast the wrong way runs silently."""
    g = torch.Generator().manual_seed(37)
    pads = _padding([[0, 0, 0, 1], [0, 0, 1, 1], [0, 0, 0, 0], [0, 1, 1, 1]])
    out = []
    for B, L in ((4, 4), (_MHA_H, 5)):  # B = Lq, then B = h
        x = torch.randn(B, L, _MHA_D, generator=g)
        pad = torch.zeros(B, L, dtype=torch.bool)
        pad[:, :4] = pads[:B]
        out.append((x, x, x, pad, False))
    return out


def check_multi_head_attention(cls) -> None:
    """Exercise 3.5: cls(d_model, num_heads) -> an nn.Module with four nn.Linear(d_model,
    d_model) named W_q, W_k, W_v, W_o and forward(q, k, v, padding_mask=None, causal=False)
    -> (out [B, Lq, d_model], weights [B, h, Lq, Lk]); padding_mask and causal as in exercise
    3.4. The checker loads a helpers.MultiHeadAttention's weights into cls(24, 3) and compares
    the two on self- and cross-attention, with and without masks; a wrong answer that matches
    a mistake in _MHA_HINTS (or _SDPA_HINTS, inside the heads) is named. Used in chapter 3.
    """
    torch.manual_seed(35)
    ref = MultiHeadAttention(_MHA_D, _MHA_H, dropout=0.0).eval()
    where = f"{getattr(cls, '__name__', 'cls')}({_MHA_D}, {_MHA_H})"
    module = call(cls, _MHA_D, _MHA_H, where=where)
    if not isinstance(module, nn.Module):
        fail(f"cls({_MHA_D}, {_MHA_H}) should build an nn.Module, got {type(module).__name__}")
    try:  # buffers of the reader's own (a causal mask, say) may stay as they are
        keys = module.load_state_dict(ref.state_dict(), strict=False)
        buffers = {name for name, _ in module.named_buffers()}
        missing = [key for key in keys.missing_keys if key not in buffers]
        problem = ", ".join(
            f"{what}: {', '.join(found)}"
            for what, found in (("missing", missing), ("unexpected", keys.unexpected_keys))
            if found
        )
    except RuntimeError as err:  # a parameter of another shape
        problem = str(err).splitlines()[-1].strip()
    if problem:
        fail(
            f"helpers.MultiHeadAttention's weights do not load into your module ({problem})",
            where,
            "give it four nn.Linear(d_model, d_model) named W_q, W_k, W_v and W_o, and no "
            "other parameters",
        )
    module.eval()

    def run(case):
        with torch.no_grad():
            return module(*[None if t is None else t.clone() for t in case[:4]], case[4])

    n = _compare(
        "forward",
        run,
        lambda case, mistake=None, fill=None: _mha(ref, case, mistake, fill),
        _mha_cases(),
        _MHA_HINTS,
        _mha_probes(),
        "helpers.MultiHeadAttention's",
    )
    passed("check_multi_head_attention", n, "same output and weights as helpers.MultiHeadAttention")
