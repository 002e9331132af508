"""Checkers for the exercises of chapter 13 (the KV cache).

check_decode_step(fn)   fn(model, tokens [B, t], memory, src_mask, caches) -> logits [B, V]:
                        one greedy decoding step with a KV cache.

The checker drives a greedy decoding loop with the reader's step on small random models (their
top logits are close together, so any real difference flips some token), compares the logits of
every step with the naive decoder's and the tokens with helpers.greedy_decode(use_cache=True),
and inspects the cache after every step: the self-attention keys and values must grow by one
position along dim 2, the cross-attention ones must be projected once and then reused.
"""

from __future__ import annotations

import torch

from ..data import make_reversal_dataset
from ..decoding import greedy_decode
from ..model import Transformer
from ..vocab import BOS_ID, PAD_ID, VOCAB_SIZE
from ._common import ExerciseError, expect_close, expect_shape, fail, passed

__all__ = ["check_decode_step"]

# small random models (two shapes) and padded sources of 1 to 9 digits
_CONFIGS = (
    dict(d_model=32, num_heads=4, dff=64, num_layers=2),
    dict(d_model=48, num_heads=2, dff=96, num_layers=3),
)
_MAX_LEN = 12


def _model(i: int) -> Transformer:
    torch.manual_seed(130 + i)
    return Transformer(VOCAB_SIZE, VOCAB_SIZE, max_len=_MAX_LEN, dropout=0.0, **_CONFIGS[i]).eval()


def _sources() -> torch.Tensor:
    src, _ = make_reversal_dataset(6, seed=13, min_len=1, max_len=9)
    return src  # [6, 11]: up to 9 digits, <eos>, <pad>


def _cache_hint(caches, B: int, h: int, d_k: int, t: int) -> str:
    """A specific hint when a cache tensor has a shape that points to a known mistake."""
    for i, cache in enumerate(caches):
        k = cache.get("self_k") if isinstance(cache, dict) else None
        if not isinstance(k, torch.Tensor) or k.dim() != 4:
            continue
        if k.size(1) != h:
            return (
                f"layer {i}'s cached self_k has shape {tuple(k.shape)}: dim 1 holds the {h} heads, "
                "so the new keys were appended along the heads dimension; append along the "
                "sequence dimension, dim=2 of [B, h, L, d_k]"
            )
        if k.size(0) != B:
            return (
                f"layer {i}'s cached self_k has shape {tuple(k.shape)}: the new keys were appended "
                "along the batch dimension (dim 0); append along dim=2 of [B, h, L, d_k]"
            )
        if k.size(3) != d_k:
            return (
                f"layer {i}'s cached self_k has shape {tuple(k.shape)}: the new keys were appended "
                "along the last dimension (d_k); append along dim=2 of [B, h, L, d_k]"
            )
        if k.size(2) > t:
            return (
                f"layer {i}'s cached self_k holds {k.size(2)} positions after step {t - 1}, "
                f"expected {t}: feed the decoder only the newest token (tokens[:, -1:]), not "
                "the whole prefix, and append only its keys and values"
            )
    return ""


def _step(fn, model, tokens, memory, src_mask, caches, where):
    """Call the reader's step; turn an exception into an ExerciseError with the best hint."""
    cfg = model.config
    try:
        return fn(model, tokens, memory, src_mask, caches)
    except ExerciseError:
        raise
    except Exception as err:
        hint = _cache_hint(caches, tokens.size(0), cfg.num_heads, cfg.d_k, tokens.size(1))
        fail(f"your code raised {type(err).__name__}: {err}", where, hint)


def _check_cache(caches, model, B: int, t: int, cross_before, where: str) -> list:
    """After the step with t tokens: the cache holds t positions per layer, cross K/V reused."""
    cfg = model.config
    if not isinstance(caches, list) or len(caches) != cfg.num_layers:
        fail(
            f"caches should stay a list of {cfg.num_layers} dicts (one per decoder layer)",
            where,
            "fill the dicts you are given; do not replace the list",
        )
    cross_now = []
    for i, cache in enumerate(caches):
        for key in ("self_k", "self_v", "cross_k", "cross_v"):
            if key not in cache:
                fail(
                    f"layer {i}'s cache has no {key!r} after the step with {t} token(s)",
                    where,
                    "store the self-attention keys and values in cache['self_k'] and "
                    "cache['self_v'] and the projected memory in cache['cross_k'] and "
                    "cache['cross_v'] (the names helpers.DecoderLayer uses)",
                )
        k = cache["self_k"]
        hint = _cache_hint(caches, B, cfg.num_heads, cfg.d_k, t)
        expect_shape(f"layer {i}'s cache['self_k']", k, (B, cfg.num_heads, t, cfg.d_k), where, hint)
        expect_shape(
            f"layer {i}'s cache['self_v']", cache["self_v"], (B, cfg.num_heads, t, cfg.d_k), where
        )
        cross_now.append((cache["cross_k"], cache["cross_v"]))
    if cross_before is not None:
        for i, ((k0, v0), (k1, v1)) in enumerate(zip(cross_before, cross_now)):
            if k1 is not k0 or v1 is not v0:
                fail(
                    f"layer {i}'s cache['cross_k'] / ['cross_v'] is a new tensor at the step "
                    f"with {t} tokens",
                    where,
                    "the encoder's memory does not change while the decoder writes: project it "
                    "to cross-attention keys and values on the first step only (if 'cross_k' "
                    "not in cache), and reuse those tensors afterwards",
                )
    return cross_now


def _count_embedded(model):
    """A forward hook counting the positions the decoder embeds per call."""
    counts = []
    hook = model.decoder.embed.emb.register_forward_hook(
        lambda mod, inp, out: counts.append(inp[0].shape[1])
    )
    return counts, hook


def _logits_hint(got, want, tokens: torch.Tensor, step: int) -> str:
    """Which mistake the rows whose logits differ point to."""
    if step == 0:
        return (
            "on the first step the cache is empty: the result must equal a plain decoder "
            "pass over <bos> (position 0)"
        )
    if isinstance(got, torch.Tensor) and got.shape == want.shape:
        bad = ~torch.isclose(got.detach().float(), want, atol=1e-4, rtol=1e-4).all(-1)
        has_pad = (tokens == PAD_ID).any(-1)
        if bad.any() and has_pad[bad].all():
            return (
                "only rows whose prefix contains <pad> differ: block those keys with "
                "make_padding_mask(tokens) as the self-attention mask, as the naive loop does"
            )
    return (
        "the first step is right, later ones are not: is the new token embedded at its own "
        "position (start_pos = tokens.size(1) - 1), and does its query attend to every "
        "cached key?"
    )


def check_decode_step(fn) -> None:
    """Check exercise 13.3: fn(model, tokens, memory, src_mask, caches) -> logits [B, V].

    tokens [B, t] are the tokens so far (<bos> first); fn feeds the decoder only the newest one,
    at position t - 1, appends its keys and values to each layer's dict in caches, and returns
    the logits for the next token. Used in chapter 13.
    """
    src = _sources()
    B = src.size(0)
    n_checks = 0
    for i in range(len(_CONFIGS)):
        model = _model(i)
        name = f"random model {i} ({_CONFIGS[i]}), {B} padded sources"
        with torch.no_grad():
            memory, src_mask = model.encode(src)
            out = torch.full((B, 1), BOS_ID, dtype=torch.long)
            caches = [{} for _ in model.decoder.layers]
            cross = None
            counts, hook = _count_embedded(model)
            try:
                for step in range(_MAX_LEN - 1):
                    where = f"{name}, step {step} (tokens [B, {step + 1}])"
                    counts.clear()
                    logits = _step(fn, model, out, memory, src_mask, caches, where)
                    fed = sum(counts)
                    if fed != 1:
                        fail(
                            f"your step embedded {fed} positions",
                            where,
                            "a cached step feeds the decoder only the newest token, "
                            "tokens[:, -1:] of shape [B, 1]; the cache holds the rest",
                        )
                    cross = _check_cache(caches, model, B, step + 1, cross, where)
                    want = model.decode(out, memory, src_mask, need_weights=False)[0][:, -1]
                    hint = _logits_hint(logits, want, out, step)
                    expect_close(
                        "logits", logits, want, atol=1e-4, rtol=1e-4, where=where, hint=hint
                    )
                    out = torch.cat([out, logits.argmax(-1, keepdim=True)], dim=1)
                    n_checks += 1
            finally:
                hook.remove()
        ref = greedy_decode(model, src, use_cache=True, stop_at_eos=False)
        bad = (out != ref).any(1)
        if bad.any():
            row = int(bad.nonzero()[0])
            fail(
                f"row {row} decodes {out[row].tolist()}, greedy_decode(use_cache=True) gives "
                f"{ref[row].tolist()}",
                name,
                "the logits matched within 1e-4 at every step, so the tokens should too",
            )
        n_checks += 1
    passed(
        "check_decode_step",
        n_checks,
        f"{len(_CONFIGS)} random models, {_MAX_LEN - 1} steps each: same logits as the naive "
        "decoder, same tokens as greedy_decode(use_cache=True), cache grows along dim 2",
    )
