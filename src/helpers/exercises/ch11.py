"""Checkers for the exercises of chapter 11 (greedy decoding).

check_wilson_interval(fn)   fn(correct, n, confidence) -> (low, high): the Wilson score
                            interval of an exact-match count (exercise 11.2);
check_beam_search(fn)       fn(model, src [1, Ls], k) -> int64 [1, L]: beam search of width k
                            (exercise 11.3);
check_greedy_decode(fn)     fn(model, src [B, Ls], max_len) -> int64 [B, <= max_len]: greedy
                            decoding of a batch (exercise 11.4).

Beam search is checked on small random models, whose next-token distributions are flat enough
that greedy decoding often misses the most probable sequence: with k = 1 the answer must be
greedy decoding token for token (helpers.greedy_decode); with k > 1 it must be a well-formed
sequence at least as probable as the book's beam search finds. (Beam search in general does not
promise to beat greedy decoding, since greedy's prefix can drop out of the beam; on these inputs
the book's result never falls below greedy's, and a reader's that does gets a specific hint.)
Every call is made with the model in training mode, as a training loop that scores its model
mid-run would make it: the answer must switch dropout off itself and give the caller's mode
back (helpers.restores_mode), as chapter 11's greedy decoding does.

Greedy decoding is checked against helpers.greedy_decode, token for token, on a batch of six
sources whose rows finish at different steps, with max_len large enough for every row to finish
and small enough that some rows do not. The models have dropout 0.3 and are called in training
mode (dropout masks drawn from a fixed seed) and in eval mode. Their output layer never picks
<pad> or <bos> on its own, so a finished row that is not padded shows.
Last, it is called in training mode on sources too long for the model, which raise: the
caller's mode must come back all the same (a finally block).

Both checkers recognise the usual mistakes: they run each one on the same input and name the
one whose output the reader's equals.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import torch

from helpers.core.data import make_reversal_dataset
from helpers.core.model import Transformer
from helpers.core.vocab import BOS_ID, EOS_ID, PAD_ID, VOCAB_SIZE
from helpers.decoding.greedy import greedy_decode
from helpers.training.evaluation import wilson_interval

from ._common import call, expect_tensor, fail, one_thread_isolated, passed

__all__ = ["check_beam_search", "check_greedy_decode", "check_wilson_interval"]

_MAX_LEN = 8


def _models() -> list[Transformer]:
    models = []
    for seed in (116, 129):  # seeds on which each known mistake shows on its own
        torch.manual_seed(seed)
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
def _book_beam_search(model, src: torch.Tensor, k: int, mistake: str | None = None) -> list[int]:
    """The book's beam search: k hypotheses; a finished one (ended by <eos>) stays in the beam
    with its score and competes with the live ones; stop when all are finished or long enough.
    With `mistake`, what a known wrong version returns instead (see _BEAM_MISTAKES)."""
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
            if mistake == "probabilities added":
                step = logp.exp()
            elif mistake == "logits added":
                step = logits[0, -1]
            else:
                step = logp
            top = step.topk(1 if mistake == "one token per beam" and len(seq) > 1 else k)
            for s, tok in zip(top.values.tolist(), top.indices.tolist()):
                if mistake == "last token only":
                    new = s
                elif mistake == "mean log-probability":
                    new = (score * (len(seq) - 1) + s) / len(seq)
                else:
                    new = score + s
                candidates.append((seq + [tok], new))
        beams = sorted(candidates, key=lambda c: c[1], reverse=True)[:k]
    if mistake == "last beam returned":
        return beams[-1][0]
    return max(beams, key=lambda c: c[1])[0]


_BEAM_MISTAKES = {
    "last token only": "you ranked hypotheses by their last token's log-probability; rank them "
    "by the SUM of their tokens' log-probabilities",
    "probabilities added": "you added the tokens' probabilities; a sequence's probability is "
    "their PRODUCT: add log-probabilities (log_softmax), not probabilities (softmax)",
    "logits added": "you added raw logits; logits are not log-probabilities until "
    "log_softmax normalises them over the vocabulary",
    "one token per beam": "after the first step each of your hypotheses grows by its own best "
    "token only, so the beam never branches again: extend each by its k best tokens and rank "
    "all the candidates together",
    "mean log-probability": "you ranked by the mean log-probability per token (length "
    "normalisation); this exercise ranks by the sum",
    "last beam returned": "you returned the last hypothesis of the final beam, the least "
    "probable one; return the one with the highest score",
}


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
    with one_thread_isolated():
        checks = _check_beam_search(fn)
    passed(
        "check_beam_search",
        checks,
        "k=1 equals greedy; k=2, 3 as probable as the book's; the caller's mode given back",
    )


_WIDTH_HINT = (
    "you return greedy decoding's sequence, as if k were 1: keep the {k} best partial "
    "sequences at every step"
)

_RESTORE_HINT = (
    "call model.eval() inside beam_search, and give the caller's mode back: put the body in "
    "the chapter's `with eval_mode(model):` (or save model.training and restore it in a "
    "finally block, or decorate it with helpers.restores_mode)"
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
    checks, first_failure, always_greedy = 0, None, True
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
                always_greedy &= got == greedy
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
                message = (
                    f"your sequence {got} has log-probability {lp:.4f}; beam search of "
                    f"width {k} finds {book} with {book_lp:.4f} (greedy: {greedy_lp:.4f})"
                )
                named = [  # the known mistakes that give the reader's sequence here
                    hint
                    for mistake, hint in _BEAM_MISTAKES.items()
                    if got == _book_beam_search(model, src, k, mistake)
                ]
                if len(named) == 1 and got != greedy:  # one mistake explains it: name it
                    fail(message, w, named[0])
                if first_failure is None:  # several (or none) explain it: look further
                    width_hint = _WIDTH_HINT.format(k=k)
                    if lp < greedy_lp - 1e-4:
                        first_failure = (
                            f"{message}: yours is less probable than both",
                            w,
                            "rank hypotheses by the SUM of their tokens' log-probabilities, and "
                            "keep a finished hypothesis with its score",
                            width_hint,
                        )
                    else:
                        first_failure = (
                            message,
                            w,
                            f"keep the {k} best partial sequences at every step, each extended "
                            "by its best next tokens, and rank them all together",
                            width_hint,
                        )
    if first_failure is not None:
        message, where, hint, width_hint = first_failure
        fail(message, where, width_hint if always_greedy else hint)  # greedy's at every k?
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
    if got[0] > got[1]:
        return (
            "your low bound is above your high bound: is your z negative? The normal quantile "
            "at a probability below 0.5 is; take it at (1 + c) / 2"
        )
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


_GREEDY_MAX_LEN = 10  # the checker models' max_len


def _greedy_models() -> list[Transformer]:
    """Two small random models with dropout 0.3. The output layer is louder (some rows reach
    <eos> early, some late) and never picks <pad> or <bos> by itself."""
    models = []
    for seed, eos_bias in ((123, 4.0), (129, 1.0)):
        torch.manual_seed(seed)
        m = Transformer(
            VOCAB_SIZE,
            VOCAB_SIZE,
            d_model=16,
            num_heads=2,
            dff=32,
            num_layers=1,
            max_len=_GREEDY_MAX_LEN,
            dropout=0.3,
        )
        with torch.no_grad():
            m.out_proj.weight.mul_(4.0)
            m.out_proj.bias[PAD_ID] = m.out_proj.bias[BOS_ID] = -30.0
            m.out_proj.bias[EOS_ID] += eos_bias
        models.append(m.eval())
    return models


def _greedy_cases():
    """(where, model index, max_len, called in training mode). With max_len 10 every row
    finishes, at different steps; with max_len 5 some rows do not."""
    return [
        ("random model 0, max_len 10, called in training mode", 0, 10, True),
        ("random model 1, max_len 10, called in training mode", 1, 10, True),
        ("random model 0, max_len 5, called in eval mode", 0, 5, False),
        ("random model 1, max_len 5, called in training mode", 1, 5, True),
    ]


@torch.no_grad()
def _greedy_variant(model, src: torch.Tensor, max_len: int, mistake: str) -> torch.Tensor:
    """What greedy decoding with a known mistake returns (in the model's current mode)."""
    memory, src_mask = model.encode(src)
    B = src.size(0)
    out = torch.full((B, 1), BOS_ID, dtype=torch.long)
    finished = torch.zeros(B, dtype=torch.bool)
    for _ in range(max_len if mistake == "one step too many" else max_len - 1):
        logits = model.decode(out, memory, src_mask, need_weights=False)[0]  # [B, t, V]
        if mistake == "argmax over positions":
            nxt = logits.argmax(1)[:, -1]
        elif mistake == "first position":
            nxt = logits[:, 0].argmax(-1)
        else:
            nxt = logits[:, -1].argmax(-1)
        if mistake == "eos overwritten":  # finished before the fill: <eos> becomes <pad>
            finished |= nxt == EOS_ID
        if mistake == "padded with eos":
            nxt = nxt.masked_fill(finished, EOS_ID)
        elif mistake != "no padding":
            nxt = nxt.masked_fill(finished, PAD_ID)
        out = torch.cat([out, nxt[:, None]], dim=1)
        if mistake == "finished forgotten":  # only the rows whose newest token is <eos>
            finished = nxt == EOS_ID
        else:
            finished |= nxt == EOS_ID
        if mistake == "stops at the first row" and finished.any():
            break
        if mistake != "never stops early" and finished.all():
            break
    return out


_GREEDY_MISTAKES = {
    "no padding": "a row that has produced <eos> goes on producing tokens: keep a `finished` "
    "flag per row and overwrite its next tokens with <pad> (nxt.masked_fill(finished, PAD_ID))",
    "stops at the first row": "you stopped when the first row finished; stop when EVERY row has "
    "produced <eos> (finished.all()), or at max_len",
    "never stops early": "you went on to max_len after every row had finished; stop as soon as "
    "every row has produced <eos> (finished.all())",
    "one step too many": "your output is one token longer than max_len allows: max_len counts "
    "<bos>, so the loop runs at most max_len - 1 times",
    "argmax over positions": "you took the argmax over the positions, not over the "
    "vocabulary: the logits are [B, t, V], so pick logits[:, -1].argmax(-1)",
    "first position": "you read the logits of the first position at every step; the next "
    "token is predicted by the LAST position: logits[:, -1]",
    "eos overwritten": "your rows lose their <eos>: you marked a row finished before filling "
    "its finished rows with <pad>, so the <eos> itself became <pad>; fill first, then update "
    "`finished`",
    "padded with eos": "you filled finished rows with <eos>; they get <pad> (PAD_ID), the token "
    "the loss and exact match ignore",
    "finished forgotten": "a row is finished for one step only: `finished = nxt == EOS_ID` "
    "forgets the rows that finished earlier, whose <pad> is not <eos>; accumulate with "
    "`finished |= nxt == EOS_ID`",
}

_GREEDY_MODE_HINT = (
    "call model.eval() inside your function, and give the caller's mode back: save "
    "was_training = model.training and call model.train(was_training) in a finally block "
    "(or put the body in the chapter's `with eval_mode(model):`)"
)


def check_greedy_decode(fn) -> None:
    """Exercise 11.4: fn(model, src, max_len) is greedy decoding of the batch src [B, Ls]:
    int64 [B, <= max_len], <bos> first, <pad> after a row's <eos>, stopping when every row has
    finished or at max_len; it decodes in eval mode and gives the caller's mode back, even when
    it raises. Compared with helpers.greedy_decode, token for token."""
    with one_thread_isolated():
        checks = _check_greedy_decode(fn)
    passed(
        "check_greedy_decode",
        checks,
        "equal to helpers.greedy_decode; <eos>, max_len and the caller's mode handled",
    )


def _check_greedy_decode(fn) -> int:
    models, (src, _) = _greedy_models(), make_reversal_dataset(6, seed=111, min_len=2, max_len=8)
    checks = 0
    for where, m, max_len, in_training in _greedy_cases():
        model = models[m]
        want = greedy_decode(model, src, max_len)
        model.train(in_training)
        try:
            with torch.random.fork_rng():
                torch.manual_seed(11)  # the same dropout masks on every run of the checker
                got = call(fn, model, src, max_len, where=where)
            if in_training and not model.training:
                fail(
                    "the model was in training mode before your call and is in eval mode after it",
                    where,
                    _GREEDY_MODE_HINT,
                )
            if not in_training and model.training:
                fail(
                    "the model was in eval mode before your call and is in training mode "
                    "after it: you switched to training mode whatever the caller's mode was",
                    where,
                    "save was_training = model.training first and give it back with "
                    "model.train(was_training)",
                )
        finally:
            model.eval()
        got = expect_tensor("the result", got, where)
        if got.dim() != 2 or got.size(0) != src.size(0):
            fail(
                f"the result has shape {tuple(got.shape)}, expected ({src.size(0)}, L): one "
                "row per source",
                where,
            )
        if got.dtype != torch.long:
            fail(f"the result has dtype {got.dtype}, expected torch.int64 (token ids)", where)
        checks += 1
        if torch.equal(got, want):
            continue
        if in_training and torch.equal(call(fn, model, src, max_len, where=where), want):
            fail(
                "called in training mode your tokens differ from greedy decoding's; called "
                "in eval mode they are equal: dropout was on while you decoded",
                where,
                _GREEDY_MODE_HINT,
            )
        if (got[:, 0] != BOS_ID).any():
            fail(
                f"your output starts with token {int(got[0, 0])}, not <bos> ({BOS_ID})",
                where,
                "the decoder's input starts as a column of <bos> (torch.full((B, 1), BOS_ID)), "
                "and the output keeps it",
            )
        for mistake, hint in _GREEDY_MISTAKES.items():
            wrong = _greedy_variant(model, src, max_len, mistake)
            if not torch.equal(wrong, want) and torch.equal(got, wrong):
                fail("your output differs from helpers.greedy_decode's", where, hint)
        if got.size(1) > max_len:
            fail(
                f"your output has {got.size(1)} tokens per row, more than max_len = {max_len}",
                where,
                "max_len counts <bos>",
            )
        if got.size(1) != want.size(1):
            fail(
                f"your output has {got.size(1)} tokens per row, greedy decoding {want.size(1)}",
                where,
                "stop when every row has produced <eos>, or at max_len",
            )
        row = int((got != want).any(1).nonzero()[0, 0])
        fail(
            f"row {row} is {got[row].tolist()}, greedy decoding gives {want[row].tolist()}",
            where,
            "append the argmax of the last position's logits at every step",
        )
    checks += _check_mode_after_an_error(fn, models[0], src)
    return checks


def _check_mode_after_an_error(fn, model, src: torch.Tensor) -> int:
    """Call fn in training mode on sources longer than the model's max_len, which the model
    refuses with a ValueError: the caller's mode must come back all the same."""
    too_long = torch.cat([src, src, src], dim=1)  # 24 tokens; the model holds 10
    where = f"random model 0, sources of {too_long.size(1)} tokens (the model holds 10)"
    model.train()
    try:
        try:
            fn(model, too_long, _GREEDY_MAX_LEN)
        except Exception as err:  # the model refuses the source: that is expected
            raised = type(err).__name__
        else:
            raised = None
        if raised is not None and not model.training:
            fail(
                f"the model was in training mode before your call, your call raised {raised}, "
                "and the model is in eval mode after it: the line that gives the mode back was "
                "skipped",
                where,
                "give the caller's mode back in a `finally` block (or use the chapter's "
                "`with eval_mode(model):`), so that it runs even when decoding raises",
            )
    finally:
        model.eval()
    return 1
