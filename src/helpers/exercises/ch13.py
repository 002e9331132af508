"""Checkers for the exercises of chapter 13 (the KV cache).

check_decode_step(fn, reset)   fn(model, tokens [B, t], memory, src_mask, caches) -> logits
                               [B, V]: one greedy decoding step with a KV cache; reset(caches)
                               empties the caches for the next batch.

The checker drives a greedy decoding loop with the reader's step on small random models (their
top logits are close together, so any real difference flips some token), compares the logits of
every step with the naive decoder's and the tokens with helpers.greedy_decode(use_cache=True),
and inspects the cache after every step: the self-attention keys and values must grow by one
position along dim 2, the cross-attention ones must be projected once and then reused. Each
model decodes two batches of different sources with ONE caches list, emptied by reset between
them: whatever the first batch left in it is named. Once reset has emptied every dict, the
second batch starts from the same empty caches as the first, so its first few steps show
whether the step keeps anything from the last batch outside the caches.

The check runs on one thread (two threads on these tiny models are many times slower on a busy
machine) and leaves the caller's random state as it was.

When the logits differ, the checker runs the known mistakes (_MISTAKES) in lockstep on the same
tokens and names the one whose logits the reader's equal.
"""

from __future__ import annotations

import torch

from helpers.core.data import make_reversal_dataset
from helpers.core.masks import make_causal_mask, make_padding_mask
from helpers.core.model import Transformer
from helpers.core.vocab import BOS_ID, PAD_ID, VOCAB_SIZE
from helpers.decoding.greedy import greedy_decode

from ._common import (
    ExerciseError,
    call,
    expect_close,
    expect_shape,
    fail,
    one_thread_isolated,
    passed,
)

__all__ = ["check_decode_step"]

# small random models (two shapes) and padded sources of 1 to 9 digits
_CONFIGS = (
    dict(d_model=32, num_heads=4, dff=64, num_layers=2),
    dict(d_model=48, num_heads=2, dff=96, num_layers=3),
)
_MAX_LEN = 12
_STEPS_AFTER_RESET = 3  # steps of the second batch: stale state shows at its first step


def _model(i: int) -> Transformer:
    torch.manual_seed(130 + i)
    return Transformer(VOCAB_SIZE, VOCAB_SIZE, max_len=_MAX_LEN, dropout=0.0, **_CONFIGS[i]).eval()


_B = 6  # sources per batch; each model decodes two batches


def _sources() -> torch.Tensor:
    src, _ = make_reversal_dataset(2 * _B, seed=13, min_len=1, max_len=9)
    return src  # [12, 11]: up to 9 digits, <eos>, <pad>


_CROSS_FROM_DECODER = (
    "cross-attention takes its keys and values from the encoder's memory, not from the "
    "decoder's stream: cache['cross_k'], cache['cross_v'] = "
    "layer.cross_mha.project_kv(memory, memory)"
)
_V_NOT_APPENDED = (
    "the values are not appended: cache['self_v'] grows along dim 2 exactly like "
    "cache['self_k'], one position per step"
)


def _cache_hint(caches, B: int, h: int, d_k: int, t: int, Ls: int | None = None) -> str:
    """A specific hint when a cache tensor has a shape that points to a known mistake."""
    for i, cache in enumerate(caches):
        if not isinstance(cache, dict):
            continue
        ck = cache.get("cross_k")
        if Ls is not None and isinstance(ck, torch.Tensor) and ck.dim() == 4 and ck.size(2) != Ls:
            return (
                f"layer {i}'s cache['cross_k'] has shape {tuple(ck.shape)}: {ck.size(2)} "
                f"position(s), where the memory has {Ls}; " + _CROSS_FROM_DECODER
            )
        k, v = cache.get("self_k"), cache.get("self_v")
        if (
            isinstance(k, torch.Tensor)
            and isinstance(v, torch.Tensor)
            and k.dim() == v.dim() == 4
            and k.size(1) == h
            and k.size(2) != v.size(2)
        ):
            return (
                f"layer {i}'s cached self_k holds {k.size(2)} positions, self_v {v.size(2)}: "
                + _V_NOT_APPENDED
            )
    for i, cache in enumerate(caches):
        k = cache.get("self_k") if isinstance(cache, dict) else None
        if isinstance(k, torch.Tensor) and k.dim() == 3 and k.size(-1) == h * d_k:
            return (
                f"layer {i}'s cached self_k has shape {tuple(k.shape)}, vectors of d_model: "
                "cache the keys and values after layer.self_mha.project_kv, [B, h, L, d_k], "
                "so that no step projects the past again"
            )
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
        hint = _cache_hint(
            caches, tokens.size(0), cfg.num_heads, cfg.d_k, tokens.size(1), memory.size(1)
        )
        if not hint and "must have rank 3" in str(err):
            hint = (
                "calling self_mha(h, K, V) or cross_mha(...) projects its inputs again, so it "
                "takes [B, L, d_model]; give the cached K, V [B, h, L, d_k] to "
                "layer.self_mha.attend(h, K, V, attn_mask=...) instead"
            )
        fail(f"your code raised {type(err).__name__}: {err}", where, hint)


def _check_cache(caches, model, B: int, t: int, Ls: int, cross_before, where: str) -> list:
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
        hint = _cache_hint(caches, B, cfg.num_heads, cfg.d_k, t, Ls)
        shape = (B, cfg.num_heads, t, cfg.d_k)
        expect_shape(f"layer {i}'s cache['self_k']", k, shape, where, hint)
        expect_shape(f"layer {i}'s cache['self_v']", cache["self_v"], shape, where, hint)
        expect_shape(
            f"layer {i}'s cache['cross_k']",
            cache["cross_k"],
            (B, cfg.num_heads, Ls, cfg.d_k),
            where,
            hint,
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


def _logits_hint(got, want, tokens: torch.Tensor, step: int, batch: int = 0) -> str:
    """Which mistake the rows whose logits differ point to."""
    if step == 0 and batch > 0:
        return (
            "the first batch decoded right, and this one differs from its first step although "
            "its caches were emptied: your step keeps something from the last batch outside "
            "the caches (the cross-attention keys and values of the old memory?); compute "
            "everything from its arguments and the caches"
        )
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
                "only rows whose prefix contains <pad> differ: make_padding_mask(tokens) "
                "[B, 1, 1, t] blocks the <pad> keys in position order, so pass it as the "
                "self-attention mask and append each new key after the cached ones"
            )
    return (
        "the first step is right, later ones are not: is the new token embedded at its own "
        "position (start_pos = tokens.size(1) - 1), and does its query attend to every "
        "cached key?"
    )


def _reference_step(model, tokens, memory, src_mask, cache_list, mistake=None):
    """The book's cached step, or what a known mistake computes instead (on its own caches)."""
    dec = model.decoder
    t = tokens.size(1)
    x = dec.embed(tokens[:, -1:], start_pos=0 if mistake == "position 0" else t - 1)
    self_mask = make_padding_mask(tokens)
    if mistake == "no padding mask":
        self_mask = None
    elif mistake == "first causal row":
        self_mask = self_mask | make_causal_mask(t)[:, :, :1]
    for layer, cache in zip(dec.layers, cache_list):
        h = layer.ln1(x)
        k, v = layer.self_mha.project_kv(h, h)
        old = (cache["self_k"], cache["self_v"]) if "self_k" in cache else None
        if old is None:
            K, V = k, v
        elif mistake == "new keys first":
            K, V = torch.cat([k, old[0]], 2), torch.cat([v, old[1]], 2)
        else:
            K, V = torch.cat([old[0], k], 2), torch.cat([old[1], v], 2)
        cache["self_k"], cache["self_v"] = K, V
        mask = self_mask
        if mistake == "attend before append" and old is not None:
            K, V = old  # the keys so far, without the new token's
            mask = None if self_mask is None else self_mask[..., :-1]
        if mistake == "k and v swapped":
            K, V = V, K
        a, _ = layer.self_mha.attend(h, K, V, attn_mask=mask, need_weights=False)
        x = x + a
        h = layer.ln2(x)
        if "cross_k" not in cache:
            cache["cross_k"], cache["cross_v"] = layer.cross_mha.project_kv(memory, memory)
        cross_mask = None if mistake == "no source mask" else src_mask
        a, _ = layer.cross_mha.attend(
            h, cache["cross_k"], cache["cross_v"], attn_mask=cross_mask, need_weights=False
        )
        x = x + a
        x = x + layer.ffn(layer.ln3(x))
    return model.out_proj(dec.ln_final(x)[:, -1])


_MISTAKES = {
    "position 0": "the new token is embedded at position 0 at every step: embed it at its own "
    "position, start_pos = tokens.size(1) - 1",
    "attend before append": "the new token's query does not see its own key: append its keys "
    "and values to the cache first, then attend",
    "k and v swapped": "the keys and values are swapped: attend(h, K, V) takes the keys "
    "first, and cache['self_k'] holds keys, cache['self_v'] values",
    "no padding mask": "the <pad> keys are not blocked: pass make_padding_mask(tokens) as the "
    "self-attention mask, as the naive loop does",
    "first causal row": "the mask blocks every key but <bos>: a cached step's one query is the "
    "newest position, and it may read every cached key; make_padding_mask(tokens) alone is "
    "the mask",
    "new keys first": "the new keys and values are put before the cached ones, so the padding "
    "mask, in position order, blocks the wrong keys: torch.cat([cache['self_k'], k], dim=2)",
    "no source mask": "the cross-attention reads the source's <pad> positions: pass src_mask "
    "(from model.encode) as the cross-attention mask",
}


def _matching_mistakes(logits, wrong: dict) -> list:
    """The known mistakes whose logits (run in lockstep on the same tokens) equal the reader's."""
    if not isinstance(logits, torch.Tensor):
        return []
    return [
        m
        for m, w in wrong.items()
        if logits.shape == w.shape and torch.allclose(logits.float(), w, atol=1e-4, rtol=1e-4)
    ]


def _check_reset(caches, reset, where: str) -> None:
    """After reset(caches): every layer's dict is empty, or the next batch reads stale keys."""
    n_layers = len(caches)
    got = call(reset, caches, where=where)
    if got is not None and got is not caches:
        fail(
            "reset returned a new object",
            where,
            "empty the dicts of the list you are given, in place (cache.clear() for every "
            "layer): the decoder keeps using that list",
        )
    if len(caches) != n_layers:
        fail(
            f"after reset, caches holds {len(caches)} dicts, not {n_layers}: reset changed the "
            "list itself",
            where,
            "keep the list and its one dict per layer, and empty each dict: for cache in "
            "caches: cache.clear()",
        )
    for i, cache in enumerate(caches):
        left = sorted(cache)
        if not left:
            continue
        if all(key.startswith("cross_") for key in left):
            fail(
                f"after reset, layer {i}'s cache still holds {left}: the cross-attention keys "
                "and values are kept from the last batch",
                where,
                "the decoder projects the memory only when 'cross_k' is absent, so the next "
                "batch would attend to the previous batch's source without an error; drop "
                "cross_k and cross_v too (cache.clear())",
            )
        k = cache.get("self_k")
        what = f" of shape {tuple(k.shape)}" if isinstance(k, torch.Tensor) else ""
        fail(
            f"after reset, layer {i}'s cache still holds {left}: the cache was not emptied, so "
            f"the next batch reads the first batch's stale keys and values (self_k{what})",
            where,
            "empty every layer's dict in place before the next batch: for cache in caches: "
            "cache.clear()",
        )


def _clear(caches) -> None:
    for cache in caches:
        cache.clear()


def check_decode_step(fn, reset=None) -> None:
    """Check exercise 13.3: fn(model, tokens, memory, src_mask, caches) -> logits [B, V], and
    reset(caches), which empties the caches for the next batch (None: dict.clear by the checker).

    tokens [B, t] are the tokens so far (<bos> first); fn feeds the decoder only the newest one,
    at position t - 1, appends its keys and values to each layer's dict in caches, and returns
    the logits for the next token. Each model decodes a batch with one caches list, then, after
    reset, the first steps of a second batch with the same list. Used in chapter 13.
    """
    with one_thread_isolated():
        n_checks = _check_all(fn, reset)
    passed(
        "check_decode_step",
        n_checks,
        f"{len(_CONFIGS)} random models, {_MAX_LEN - 1} steps, then {_STEPS_AFTER_RESET} steps "
        "of a second batch through the same caches after reset: same logits as the naive "
        "decoder, same tokens as greedy_decode(use_cache=True), cache grows along dim 2",
    )


def _check_all(fn, reset) -> int:
    src = _sources()
    halves = (src[:_B], src[_B:])
    n_checks = 0
    for i in range(len(_CONFIGS)):
        model = _model(i)
        caches = [{} for _ in model.decoder.layers]
        for b, batch in enumerate(halves):
            name = f"random model {i} ({_CONFIGS[i]}), batch {b + 1} of 2 ({_B} padded sources)"
            steps = _MAX_LEN - 1 if b == 0 else _STEPS_AFTER_RESET
            if b > 0:
                _check_reset(caches, reset or _clear, f"{name}, before its first step")
                n_checks += 1
            out = _decode_batch(fn, model, batch, caches, name, steps, b)
            n_checks += steps
            ref = greedy_decode(model, batch, max_len=steps + 1, use_cache=True, stop_at_eos=False)
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
    return n_checks


def _decode_batch(fn, model, src, caches, name: str, steps: int, batch: int) -> torch.Tensor:
    """Greedy decoding of src with the reader's step on the reader's caches, checked per step.

    At the first step whose logits differ, the known mistakes are replayed on the same tokens
    and then run in lockstep; a mistake is named once it is the only one that still matches
    (two can agree on a step: both "attend before append" and "first causal row" read key 0
    alone at step 1)."""
    B = src.size(0)
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        Ls = memory.size(1)
        out = torch.full((B, 1), BOS_ID, dtype=torch.long)
        lockstep, suspects, first_where = None, None, ""
        cross = None
        counts, hook = _count_embedded(model)
        try:
            for step in range(steps):
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
                cross = _check_cache(caches, model, B, step + 1, Ls, cross, where)
                want = model.decode(out, memory, src_mask, need_weights=False)[0][:, -1]
                right = (
                    isinstance(logits, torch.Tensor)
                    and logits.shape == want.shape
                    and torch.allclose(logits.float(), want, atol=1e-4, rtol=1e-4)
                )
                if not right and lockstep is None:  # replay the mistakes up to this step
                    lockstep = {m: [{} for _ in model.decoder.layers] for m in _MISTAKES}
                    for j in range(step):
                        for m, c in lockstep.items():
                            _reference_step(model, out[:, : j + 1], memory, src_mask, c, m)
                    first_where = where
                if lockstep is not None:
                    wrong = {
                        m: _reference_step(model, out, memory, src_mask, c, m)
                        for m, c in lockstep.items()
                    }
                    now = [m for m in _matching_mistakes(logits, wrong) if m in (suspects or wrong)]
                    if suspects is not None and not now:  # they stopped matching: name the first
                        now = suspects[:1]
                    suspects = now
                    if len(suspects) == 1 or (suspects and step == steps - 1):
                        fail(
                            "the logits differ from the naive decoder's",
                            first_where,
                            _MISTAKES[suspects[0]],
                        )
                    if not suspects:
                        hint = _logits_hint(logits, want, out, step, batch)
                        expect_close(
                            "logits", logits, want, atol=1e-4, rtol=1e-4, where=where, hint=hint
                        )
                out = torch.cat([out, logits.argmax(-1, keepdim=True)], dim=1)
        finally:
            hook.remove()
    return out
