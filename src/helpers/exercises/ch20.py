"""Checkers for the exercises of chapter 20 (beam search on the KV cache).

check_reorder_caches(fn)    fn(caches, parent [B, k]) -> None: reorders each decoder layer's
                            self-attention cache in place, so that beam w of source b takes the
                            past of beam parent[b, w] of the same source (exercise 20.3).

The checker runs in two parts. First on made-up caches of 3 sources and 4 beams whose every row
holds other numbers, with a parent index that moves beams across: every cached row must be the
parent's, the cross-attention keys and values unchanged. Then inside a whole search: the
library's beam search (helpers.beam_search) on a small random model, with the reader's function
doing the reordering after every step but the first; its beams and scores must be the library's,
bit for bit (the same operations run). A wrong answer is compared with the usual mistakes on the
same input, and the one it equals is named.
"""

from __future__ import annotations

import torch

from helpers.core.data import make_reversal_dataset
from helpers.core.model import Transformer
from helpers.core.vocab import VOCAB_SIZE
from helpers.decoding.beam_search import beam_search, search

from ._common import call, expect_tensor, fail, one_thread_isolated, passed

__all__ = ["check_reorder_caches"]

_B, _K, _HEADS, _DK = 3, 4, 2, 3
_T = _B * _K  # as many positions as rows: a reordering along positions keeps the shape


def _made_up_caches(layers: int = 2) -> list[dict]:
    """Caches of _B * _K rows in which every number differs; cross rows equal per source."""
    caches = []
    for layer in range(layers):
        n = _B * _K * _HEADS * _T * _DK
        base = 1000.0 * layer
        self_k = (base + torch.arange(n, dtype=torch.float32)).view(_B * _K, _HEADS, _T, _DK)
        cross = (base + 0.5 + torch.arange(_B * _HEADS * 6 * _DK, dtype=torch.float32)).view(
            _B, _HEADS, 6, _DK
        )
        cross = cross.repeat_interleave(_K, dim=0)  # every beam of a source shares its memory
        caches.append(
            {
                "self_k": self_k,
                "self_v": -self_k,
                "cross_k": cross.clone(),
                "cross_v": -cross,
            }
        )
    return caches


_PARENT = torch.tensor([[1, 1, 0, 3], [2, 0, 0, 1], [3, 2, 1, 0]])  # [B, K], beams move across


def _rows(parent: torch.Tensor) -> torch.Tensor:
    B, k = parent.shape
    return (torch.arange(B)[:, None] * k + parent).reshape(-1)


def _book(caches, parent) -> None:
    rows = _rows(parent)
    for cache in caches:
        cache["self_k"] = cache["self_k"].index_select(0, rows)
        cache["self_v"] = cache["self_v"].index_select(0, rows)


def _variant(caches, parent, mistake: str) -> None:
    """What a known wrong reordering leaves in caches."""
    rows = parent.reshape(-1) if mistake == "local index" else _rows(parent)
    if mistake == "source-major rows":  # row w * B + b instead of b * k + w
        B, k = parent.shape
        rows = (parent * B + torch.arange(B)[:, None]).reshape(-1)
    for cache in caches:
        if mistake == "not reordered":
            continue
        if mistake == "sequence axis":
            cache["self_k"] = cache["self_k"].index_select(2, rows)
            cache["self_v"] = cache["self_v"].index_select(2, rows)
            continue
        cache["self_k"] = cache["self_k"].index_select(0, rows)
        if mistake != "keys only":
            cache["self_v"] = cache["self_v"].index_select(0, rows)


_MISTAKES = {
    "not reordered": "the caches are as they were: after every step, row b * k + w must take the "
    "past of its parent beam (index_select on dim 0), or the beams decode with other beams' "
    "prefixes. Write into the dicts of the list you are given (cache['self_k'] = ...): a new "
    "list or new dicts are not what the decoder reads",
    "local index": "you used parent itself as the rows: parent[b, w] counts among source b's "
    "beams, so the row it means is b * k + parent[b, w]",
    "source-major rows": "you laid the rows out source by source the other way round: beam w of "
    "source b is row b * k + w, not w * B + b",
    "keys only": "you reordered the keys but not the values: self_v must follow the same rows",
    "sequence axis": "you reordered along the sequence axis (dim 2): the beams are the rows, "
    "dim 0 of [rows, heads, positions, d_k]",
}


def _same(a: list[dict], b: list[dict]) -> bool:
    return all(
        x[n].shape == y[n].shape and torch.equal(x[n], y[n])
        for x, y in zip(a, b)
        for n in ("self_k", "self_v", "cross_k", "cross_v")
    )


def _copy(caches: list[dict]) -> list[dict]:
    return [{n: t.clone() for n, t in c.items()} for c in caches]


def _check_made_up(fn) -> int:
    where = f"made-up caches of {_B} sources x {_K} beams, parent {_PARENT.tolist()}"
    caches, want = _made_up_caches(), _made_up_caches()
    before = _copy(caches)
    result = call(fn, caches, _PARENT.clone(), where=where)
    _book(want, _PARENT)
    if _same(caches, want):
        return 1
    if _same(caches, before) and result is not None:
        fail(
            "the caches are unchanged, and your function returned something",
            where,
            "change the dicts in the list you are given (cache['self_k'] = ...): the decoder "
            "keeps using that list, not what you return",
        )
    for layer, (got, exp) in enumerate(zip(caches, want)):
        for name in ("self_k", "self_v", "cross_k", "cross_v"):
            t = expect_tensor(f"layer {layer}'s {name}", got.get(name), where)
            if t.shape != exp[name].shape:
                fail(
                    f"layer {layer}'s {name} has shape {tuple(t.shape)}, expected "
                    f"{tuple(exp[name].shape)}",
                    where,
                    "index_select on dim 0 with one row per new beam: B * k rows in, B * k out",
                )
    for mistake, hint in _MISTAKES.items():
        wrong = _made_up_caches()
        _variant(wrong, _PARENT, mistake)
        if _same(caches, wrong):
            fail("the reordered caches are not the parents' rows", where, hint)
    self_names = ("self_k", "self_v")
    done = [all(torch.equal(g[n], w[n]) for n in self_names) for g, w in zip(caches, want)]
    kept = [all(torch.equal(g[n], b[n]) for n in self_names) for g, b in zip(caches, before)]
    if any(done) and not all(done) and all(d or k for d, k in zip(done, kept)):
        fail(
            f"layer(s) {[i for i, d in enumerate(done) if d]} hold the parents' rows, layer(s) "
            f"{[i for i, d in enumerate(done) if not d]} were not reordered",
            where,
            "every decoder layer has its own dict in caches: reorder self_k and self_v in each "
            "of them (for cache in caches: ...)",
        )
    for name in ("cross_k", "cross_v"):
        if not all(torch.equal(c[name], w[name]) for c, w in zip(caches, want)):
            fail(
                f"the cross-attention cache ({name}) changed",
                where,
                "the cross-attention keys and values depend on the source only; every beam of "
                "a source already holds the same rows: leave them as they are",
            )
    fail(
        "the self-attention caches hold other rows than the parents'",
        where,
        "row b * k + w must become the old row b * k + parent[b, w], in every layer, keys and "
        "values",
    )
    return 0


def _model(seed: int) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(
        VOCAB_SIZE, VOCAB_SIZE, d_model=16, num_heads=2, dff=32, num_layers=2, max_len=10
    )
    with torch.no_grad():
        model.out_proj.weight.mul_(3.0)  # peakier: beams finish at different steps
    return model.eval()


def _check_in_search(fn) -> int:
    checks = 0
    for seed in (0, 1):
        model = _model(seed)
        src = make_reversal_dataset(5, seed=seed, min_len=2, max_len=8)[0]
        want = beam_search(model, src, 3, length_penalty=0.6)
        where = f"random model {seed}, 5 sources, width 3"

        def reorder(caches, parent, where=where):
            call(fn, caches, parent, where=where)

        got = search(model, src, 3, model.max_len, 0.6, use_cache=True, reorder_self=reorder)
        same = torch.equal(got.beams, want.beams) and torch.equal(got.beam_scores, want.beam_scores)
        if not same:
            fail(
                "with your reordering the search ends with other beams than helpers.beam_search",
                where,
                "after every step, row b * k + w of each layer's self_k and self_v must become "
                "the old row b * k + parent[b, w]",
            )
        checks += 1
    return checks


def check_reorder_caches(fn) -> None:
    """Exercise 20.3: fn(caches, parent) reorders every layer's self-attention cache in place by
    parent beam (row b * k + w takes row b * k + parent[b, w]), cross-attention untouched; on
    made-up caches, then inside a whole beam search against helpers.beam_search."""
    with one_thread_isolated():
        checks = _check_made_up(fn)
        checks += _check_in_search(fn)
    passed(
        "check_reorder_caches",
        checks,
        "the parents' rows on made-up caches; a whole search equals helpers.beam_search",
    )
