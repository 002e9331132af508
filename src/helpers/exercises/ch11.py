"""Checkers for the exercises of chapter 11 (greedy decoding).

check_wilson_interval(fn)   fn(correct, n, confidence) -> (low, high): the Wilson score
                            interval of an exact-match count (exercise 11.2);
check_beam_search(fn)       fn(model, src [1, Ls], k) -> int64 [1, L]: beam search of width k
                            (exercise 11.3).

Beam search is checked on small random models, whose next-token distributions are flat enough
that greedy decoding often misses the most probable sequence: with k = 1 the answer must be
greedy decoding token for token (helpers.greedy_decode); with k > 1 it must be a well-formed
sequence at least as probable as the book's beam search finds. (Beam search in general does not
promise to beat greedy decoding, since greedy's prefix can drop out of the beam; on these inputs
the book's result never falls below greedy's, and a reader's that does gets a specific hint.)
Every call is made with the model in training mode, as a training loop that scores its model
mid-run would make it: the answer must switch dropout off itself and give the caller's mode
back (helpers.restores_mode), as chapter 11's greedy decoding does.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from statistics import NormalDist

import torch

from ..data import make_reversal_dataset
from ..decoding import greedy_decode
from ..evaluation import wilson_interval
from ..model import Transformer
from ..vocab import BOS_ID, EOS_ID, PAD_ID, VOCAB_SIZE
from ._common import call, expect_tensor, fail, passed

__all__ = ["check_beam_search", "check_wilson_interval"]

_MAX_LEN = 8


@contextmanager
def _one_thread():
    """Run the check on one thread: its models are tiny and decode one sequence at a time, and
    two threads on a busy machine spend most of their time waiting for each other."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _models() -> list[Transformer]:
    models = []
    for i in range(2):
        torch.manual_seed(110 + i)
        m = Transformer(
            VOCAB_SIZE, VOCAB_SIZE, d_model=16, num_heads=2, dff=32, num_layers=1, max_len=_MAX_LEN
        )
        with torch.no_grad():  # a louder output layer: some rows reach <eos> early, some do not
            m.out_proj.weight.mul_(4.0)
        models.append(m.eval())
    return models


def _sources() -> torch.Tensor:
    src, _ = make_reversal_dataset(6, seed=111, min_len=2, max_len=6)
    return src  # [6, 8]


def _upto_eos(seq: torch.Tensor) -> list[int]:
    """The tokens up to and including the first <eos> (all of them if there is none)."""
    out = []
    for t in seq.tolist():
        out.append(t)
        if t == EOS_ID:
            break
    return out


@torch.no_grad()
def _log_prob(model, src: torch.Tensor, seq: list[int]) -> float:
    """Sum of log p(token | prefix, src) over seq's tokens after <bos> (one forward pass)."""
    tokens = torch.tensor([seq])
    logp = model(src, tokens[:, :-1]).log_softmax(-1)[0]
    return float(logp.gather(1, tokens[0, 1:, None]).sum())


@torch.no_grad()
def _book_beam_search(model, src: torch.Tensor, k: int) -> list[int]:
    """The book's beam search: k hypotheses; a finished one (ended by <eos>) stays in the beam
    with its score and competes with the live ones; stop when all are finished or long enough."""
    memory, src_mask = model.encode(src)
    beams = [([BOS_ID], 0.0)]
    for _ in range(model.max_len - 1):
        if all(seq[-1] == EOS_ID for seq, _ in beams):
            break
        candidates = []
        for seq, score in beams:
            if seq[-1] == EOS_ID:
                candidates.append((seq, score))
                continue
            logits, _ = model.decode(torch.tensor([seq]), memory, src_mask, need_weights=False)
            logp = logits[0, -1].log_softmax(-1)
            top = logp.topk(k)
            for lp, tok in zip(top.values.tolist(), top.indices.tolist()):
                candidates.append((seq + [tok], score + lp))
        beams = sorted(candidates, key=lambda c: c[1], reverse=True)[:k]
    return max(beams, key=lambda c: c[1])[0]


def _well_formed(got, model, where: str) -> list[int]:
    got = expect_tensor("the result", got, where)
    if got.dim() != 2 or got.size(0) != 1 or not 2 <= got.size(1) <= model.max_len:
        fail(
            f"the result has shape {tuple(got.shape)}, expected (1, L) with 2 <= L <= "
            f"{model.max_len} (the model's max_len)",
            where,
        )
    seq = got[0].tolist()
    if seq[0] != BOS_ID:
        fail(f"the result starts with token {seq[0]}, expected <bos> ({BOS_ID})", where)
    body = _upto_eos(got[0])
    if any(t != PAD_ID for t in seq[len(body) :]):
        fail("tokens other than <pad> follow the first <eos>", where, "stop a finished hypothesis")
    if any(not 0 <= t < VOCAB_SIZE for t in body):
        fail("the result holds ids outside the vocabulary", where)
    return body


def check_beam_search(fn) -> None:
    """Exercise 11.3: fn(model, src, k) is beam search of width k: greedy decoding at k = 1,
    and at k > 1 a sequence at least as probable as the book's beam search finds. Called in
    training mode, it decodes in eval mode and gives the training mode back."""
    with _one_thread():
        checks = _check_beam_search(fn)
    passed(
        "check_beam_search",
        checks,
        "k=1 equals greedy; k=2, 3 as probable as the book's; the caller's mode given back",
    )


_RESTORE_HINT = (
    "call model.eval() inside beam_search, and give the caller's mode back: decorate it with "
    "helpers.restores_mode (or save model.training and restore it in a finally block)"
)


def _call_in_train_mode(fn, model, src, k: int, where: str):
    """Call fn as a training loop would (model in training mode); check the mode it leaves;
    return its result with the model back in eval mode for the checker's own references."""
    model.train()
    try:
        got = call(fn, model, src, k, where=where)
        if not model.training:
            fail(
                "the model was in training mode before your call and is in eval mode after it",
                where,
                _RESTORE_HINT,
            )
    finally:
        model.eval()
    return got


def _check_beam_search(fn) -> int:
    models, sources = _models(), _sources()
    checks = 0
    for m, model in enumerate(models):
        for i in range(sources.size(0)):
            src = sources[i : i + 1]
            greedy = _upto_eos(greedy_decode(model, src)[0])
            greedy_lp = _log_prob(model, src, greedy)
            where = f"random model {m}, source {i} ({len(src[0][src[0] != PAD_ID]) - 1} digits)"
            raw = _call_in_train_mode(fn, model, src, 1, where + ", k=1")
            got = _well_formed(raw, model, where + ", k=1")
            if got != greedy:
                in_eval = _upto_eos(call(fn, model, src, 1, where=where)[0])
                if in_eval == greedy:  # right in eval mode, wrong in the caller's training mode
                    fail(
                        f"called in training mode you return {got}; in eval mode {in_eval}, "
                        "greedy decoding's: dropout was on while you decoded",
                        where + ", k=1",
                        _RESTORE_HINT,
                    )
                fail(
                    f"with k=1 you return {got}, greedy decoding gives {greedy}",
                    where + ", k=1",
                    "a beam of width 1 keeps only the best token at every step: it must be "
                    "greedy decoding",
                )
            checks += 1
            for k in (2, 3):
                w = f"{where}, k={k}"
                got = _well_formed(_call_in_train_mode(fn, model, src, k, w), model, w)
                lp = _log_prob(model, src, got)
                book = _book_beam_search(model, src, k)
                book_lp = _log_prob(model, src, book)
                if lp >= book_lp - 1e-4:
                    checks += 1
                    continue
                in_eval = _upto_eos(call(fn, model, src, k, where=w)[0])
                if _log_prob(model, src, in_eval) >= book_lp - 1e-4:
                    fail(
                        f"called in training mode you return {got} (log-probability {lp:.4f}); "
                        f"in eval mode {in_eval}, as probable as the book's: dropout was on "
                        "while you decoded",
                        w,
                        _RESTORE_HINT,
                    )
                if lp < greedy_lp - 1e-4:
                    fail(
                        f"your sequence {got} has log-probability {lp:.4f}, greedy decoding's "
                        f"{greedy} {greedy_lp:.4f}, beam search of width {k} {book_lp:.4f}: "
                        "yours found a less probable sequence than both",
                        w,
                        "rank hypotheses by the SUM of their tokens' log-probabilities (not by "
                        "the last token's), and keep a finished hypothesis with its score",
                    )
                fail(
                    f"your sequence {got} has log-probability {lp:.4f}; beam search of "
                    f"width {k} finds {book} with {book_lp:.4f} (greedy: {greedy_lp:.4f})",
                    w,
                    f"keep the {k} best partial sequences at every step, each extended by "
                    "its best next tokens, and rank them all together",
                )
    return checks


def _wilson(correct: int, n: int, z: float) -> tuple[float, float]:
    p = correct / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


def _wald(correct: int, n: int, z: float) -> tuple[float, float]:
    p = correct / n
    half = z * math.sqrt(p * (1 - p) / n)
    return p - half, p + half


def _wilson_hint(correct: int, n: int, conf: float, got: tuple[float, float]) -> str:
    z = NormalDist().inv_cdf(0.5 + conf / 2)
    wrong = (
        (
            _wald(correct, n, z),
            "this is the Wald interval p +- z sqrt(p (1 - p) / n), which has zero width at 0 or "
            "n correct; the Wilson interval holds every x with |p - x| <= z sqrt(x (1 - x) / n)",
        ),
        (
            _wilson(correct, n, NormalDist().inv_cdf(conf)),
            "z is the one-sided quantile: a two-sided interval at confidence c uses the normal "
            "quantile at (1 + c) / 2 (1.96 for 95 %)",
        ),
        (_wilson(correct, n, 1.96), "z is fixed at 1.96: compute it from the confidence level"),
    )
    for value, hint in wrong:
        if all(abs(a - b) < 1e-5 for a, b in zip(value, got)):
            return hint
    return ""


def check_wilson_interval(fn) -> None:
    """Exercise 11.2: fn(correct, n, confidence) is the Wilson score interval (low, high)."""
    cases = [(50, 100, 0.95), (0, 20, 0.95), (9_950, 10_000, 0.95), (37, 120, 0.9), (20, 20, 0.99)]
    for correct, n, conf in cases:
        where = f"{correct} correct of {n}, confidence {conf}"
        got = call(fn, correct, n, conf, where=where)
        try:
            low, high = (float(x) for x in got)
        except (TypeError, ValueError):
            fail(f"expected a pair (low, high), got {got!r}", where)
        want = wilson_interval(correct, n, conf)
        if abs(low - want[0]) > 1e-5 or abs(high - want[1]) > 1e-5:
            fail(
                f"(low, high) = ({low:.6f}, {high:.6f}), expected ({want[0]:.6f}, {want[1]:.6f})",
                where,
                _wilson_hint(correct, n, conf, (low, high)),
            )
    passed("check_wilson_interval", len(cases), "equal to helpers.wilson_interval")
