"""helpers.decoding.beam_search: batched beam search on the KV cache, checked against greedy
decoding,
exhaustive search, the same search without the cache, exercise 11.3's reference, and itself one
source at a time."""

import itertools

import pytest
import torch

from helpers import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    VOCAB_SIZE,
    Transformer,
    greedy_decode,
    make_reversal_dataset,
)
from helpers.decoding.beam_search import DEFAULT_LENGTH_PENALTY, beam_search, gnmt_length_penalty


def random_model(seed=0, max_len=30, tgt_vocab=VOCAB_SIZE, sharpen=1.0, **kw):
    torch.manual_seed(seed)
    cfg = dict(d_model=32, num_heads=4, dff=64, num_layers=2, dropout=0.0)
    cfg.update(kw)
    model = Transformer(VOCAB_SIZE, tgt_vocab, max_len=max_len, **cfg).eval()
    with torch.no_grad():
        model.out_proj.weight.mul_(sharpen)  # > 1: peakier next-token distributions
    return model


def sources(n, seed, max_len=12):
    return make_reversal_dataset(n, seed=seed, min_len=1, max_len=max_len)[0]  # padded


def hypothesis(row: torch.Tensor, length: int) -> tuple:
    """The tokens after <bos>, up to and including <eos> (or `length` of them)."""
    return tuple(row[1 : 1 + length].tolist())


def body_length(row: torch.Tensor) -> int:
    """Number of tokens after <bos> up to the first <eos> (inclusive); a row without <eos> was
    cut at the last step, and all its tokens count (a <pad> the model wrote included)."""
    toks = row[1:].tolist()
    return toks.index(EOS_ID) + 1 if EOS_ID in toks else len(toks)


@torch.no_grad()
def teacher_forced_log_prob(model, src_row, tokens: tuple) -> float:
    """log P(tokens | src) by one forward pass over <bos> + tokens (no cache, no search)."""
    seq = torch.tensor([(BOS_ID, *tokens)])
    logp = model(src_row[None], seq[:, :-1]).log_softmax(-1)[0]
    return float(logp.gather(1, seq[0, 1:, None]).sum())


# ---------------------------------------------------------------- width 1 is greedy decoding


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_width_one_equals_greedy_on_random_models(seed, use_cache):
    model = random_model(seed, sharpen=3.0)
    src = sources(16, seed)
    for max_len in (None, 1, 2, 9):
        greedy = greedy_decode(model, src, max_len=max_len, use_cache=True)
        got = beam_search(model, src, 1, max_len=max_len, use_cache=use_cache)
        assert torch.equal(got.tokens, greedy), max_len


def test_width_one_equals_greedy_on_partly_trained_model(partly_trained_model):
    model = partly_trained_model
    src = sources(128, seed=11)
    greedy = greedy_decode(model, src, use_cache=True)
    ends = {body_length(row) for row in greedy}
    assert len(ends) >= 5  # the rows finish at different steps
    for alpha in (0.0, DEFAULT_LENGTH_PENALTY, 2.0):  # one beam: the penalty cannot matter
        got = beam_search(model, src, 1, length_penalty=alpha)
        assert torch.equal(got.tokens, greedy), alpha


# ---------------------------------------------------------------- exhaustive search

TINY_VOCAB = 5  # <pad>, <bos>, <eos> and two more tokens
TINY_STEPS = 4  # tokens after <bos>: max_len = 5


@torch.no_grad()
def exhaustive(model, src_row, steps, alpha) -> dict:
    """Every complete hypothesis of at most `steps` tokens (ended by <eos>, or `steps` long),
    scored as beam_search scores: log P / gnmt_length_penalty. One forward pass over all
    V ** steps token strings; a string's hypothesis is its prefix up to the first <eos>."""
    V = model.tgt_vocab
    strings = torch.tensor(list(itertools.product(range(V), repeat=steps)))  # [N, steps]
    N = strings.size(0)
    tgt_in = torch.cat([torch.full((N, 1), BOS_ID), strings[:, :-1]], dim=1)
    logp = model(src_row[None].expand(N, -1), tgt_in).log_softmax(-1)
    logp = logp.gather(2, strings[..., None])[..., 0]  # [N, steps]
    is_eos = strings == EOS_ID
    length = torch.where(is_eos.any(1), is_eos.long().argmax(1) + 1, steps)
    upto = torch.arange(steps)[None] < length[:, None]
    log_p = (logp * upto).sum(1)
    score = log_p / gnmt_length_penalty(length, alpha)
    out = {}
    for s, n, sc in zip(strings.tolist(), length.tolist(), score.tolist()):
        out.setdefault(tuple(s[:n]), sc)
    return out


CASES = [(seed, alpha) for seed in (0, 1, 2) for alpha in (0.0, DEFAULT_LENGTH_PENALTY, 2.0)]


@pytest.mark.parametrize("seed,alpha", CASES)
def test_equals_exhaustive_search_on_a_tiny_vocabulary(seed, alpha):
    model = random_model(seed, max_len=8, tgt_vocab=TINY_VOCAB, d_model=16, dff=32)
    src = sources(3, seed, max_len=6)
    width = TINY_VOCAB**TINY_STEPS  # more places than hypotheses: nothing is ever pruned
    got = beam_search(model, src, width, max_len=TINY_STEPS + 1, length_penalty=alpha)
    for b in range(src.size(0)):
        table = exhaustive(model, src[b], TINY_STEPS, alpha)
        ranked = sorted(table.items(), key=lambda kv: kv[1], reverse=True)
        (best, best_score), (_, second) = ranked[0], ranked[1]
        assert best_score - second > 1e-4  # a unique optimum, so the sequences must agree
        assert hypothesis(got.tokens[b], body_length(got.tokens[b])) == best
        assert got.scores[b].item() == pytest.approx(best_score, abs=1e-5)
        # every complete hypothesis is in the final beam, with its exhaustive score
        finite = got.beam_scores[b][torch.isfinite(got.beam_scores[b])]
        assert finite.numel() == len(table)
        want = torch.tensor([sc for _, sc in ranked], dtype=finite.dtype)
        assert torch.allclose(finite, want, atol=1e-5)


def test_small_widths_against_exhaustive_search():
    """Each width's result is scored correctly and never beats the optimum; width 1 misses it
    on some of these sources (so the exhaustive comparison is not greedy's), a wider beam
    finds it more often. The table prints with -s."""
    found = {w: 0 for w in (1, 2, 3, 4)}
    total = 0
    for seed, alpha in CASES:
        model = random_model(seed, max_len=8, tgt_vocab=TINY_VOCAB, d_model=16, dff=32)
        src = sources(3, seed, max_len=6)
        for b in range(src.size(0)):
            table = exhaustive(model, src[b], TINY_STEPS, alpha)
            best = max(table.values())
            total += 1
            for w in found:
                got = beam_search(
                    model, src[b : b + 1], w, max_len=TINY_STEPS + 1, length_penalty=alpha
                )
                hyp = hypothesis(got.tokens[0], body_length(got.tokens[0]))
                assert got.scores[0].item() == pytest.approx(table[hyp], abs=1e-5)
                assert got.scores[0].item() <= best + 1e-5
                found[w] += got.scores[0].item() >= best - 1e-5
    print(f"optimum found, of {total} sources:", found)
    assert found[1] < total
    assert found[4] >= found[1]


# ---------------------------------------------------------------- the cache changes nothing


@torch.no_grad()
def reference_beam_search(model, src_row, width, max_len, alpha):
    """The same search written plainly for one source: lists of (tokens, log P, finished),
    the decoder re-run over every live prefix at every step, no cache, no batching of
    sources. -> the final beams, best first, as [(tokens, score)]."""
    memory, src_mask = model.encode(src_row[None])
    beams = [([BOS_ID], 0.0, False)]
    for _ in range(max_len - 1):
        if all(done for _, _, done in beams):
            break
        live = [b for b in beams if not b[2]]
        prefixes = torch.tensor([seq for seq, _, _ in live])
        n = len(live)
        logits, _ = model.decode(
            prefixes, memory.expand(n, -1, -1), src_mask.expand(n, -1, -1, -1), need_weights=False
        )
        logp = logits[:, -1].log_softmax(-1).tolist()
        cands = [b for b in beams if b[2]]
        for (seq, lp, _), row in zip(live, logp):
            cands += [(seq + [t], lp + row[t], t == EOS_ID) for t in range(len(row))]

        def rank(c):
            return c[1] / ((5 + len(c[0]) - 1) / 6) ** alpha

        beams = sorted(cands, key=rank, reverse=True)[:width]
    return [(seq, seq_lp / ((5 + len(seq) - 1) / 6) ** alpha) for seq, seq_lp, _ in beams]


@pytest.mark.parametrize("width", [2, 4])
def test_equals_a_plain_search_without_cache(partly_trained_model, width):
    """Token for token and in score, every final beam, against the plain one-source search."""
    model = partly_trained_model
    src = sources(6, seed=12)
    got = beam_search(model, src, width)
    for b in range(src.size(0)):
        want = reference_beam_search(model, src[b], width, model.max_len, DEFAULT_LENGTH_PENALTY)
        for w, (seq, score) in enumerate(want):
            assert got.beams[b, w, : len(seq)].tolist() == seq
            assert (got.beams[b, w, len(seq) :] == PAD_ID).all()
            assert got.beam_scores[b, w].item() == pytest.approx(score, abs=1e-5)


@pytest.mark.parametrize("width", [2, 4, 8])
def test_cache_equals_no_cache_on_partly_trained_model(partly_trained_model, width):
    src = sources(24, seed=5)
    cached = beam_search(partly_trained_model, src, width)
    naive = beam_search(partly_trained_model, src, width, use_cache=False)
    assert torch.equal(cached.tokens, naive.tokens)
    assert torch.equal(cached.beams, naive.beams)
    assert torch.allclose(cached.beam_scores, naive.beam_scores, atol=1e-5)


@pytest.mark.parametrize("seed", [0, 1])
def test_cache_equals_no_cache_on_random_models(seed):
    model = random_model(seed, sharpen=3.0)
    src = sources(8, seed)
    for width in (2, 5):
        cached = beam_search(model, src, width, max_len=14)
        naive = beam_search(model, src, width, max_len=14, use_cache=False)
        assert torch.equal(cached.beams, naive.beams)
        assert torch.allclose(cached.beam_scores, naive.beam_scores, atol=1e-5)


def calls(module, run):
    """The input shapes [rows, positions] of every call of module during run()."""
    shapes = []
    hook = module.register_forward_hook(lambda m, inp, out: shapes.append(tuple(inp[0].shape[:2])))
    try:
        run()
    finally:
        hook.remove()
    return shapes


def test_encoder_and_cross_attention_run_once_self_attention_one_row_per_beam():
    model = random_model(3)
    src = sources(3, seed=3)
    B, Ls, W, T = src.size(0), src.size(1), 4, 9

    def run():
        beam_search(model, src, W, max_len=T + 1)

    assert calls(model.encoder, run) == [(B, Ls)]
    for layer in model.decoder.layers:
        assert calls(layer.cross_mha.W_k, run) == [(B, Ls)]  # once per source, not per beam
        steps = calls(layer.self_mha.W_k, run)
        assert steps[0] == (B, 1) and set(steps[1:]) == {(B * W, 1)}  # one new row per beam


def test_finished_beams_are_kept_and_scored_by_the_model(partly_trained_model):
    """Every final beam: <pad> only after its <eos>, and its log-probability is the model's
    teacher-forced log-probability of its tokens (nothing added after <eos>)."""
    model = partly_trained_model
    src = sources(6, seed=8)
    got = beam_search(model, src, 4)
    assert got.beam_scores.isfinite().all()
    for b in range(src.size(0)):
        for w in range(4):
            row = got.beams[b, w]
            n = body_length(row)
            assert (row[1 + n :] == PAD_ID).all()
            lp = teacher_forced_log_prob(model, src[b], hypothesis(row, n))
            assert got.beam_log_probs[b, w].item() == pytest.approx(lp, abs=1e-4)
            penalty = gnmt_length_penalty(torch.tensor(n), DEFAULT_LENGTH_PENALTY)
            assert got.beam_scores[b, w].item() == pytest.approx(lp / penalty.item(), abs=1e-4)
        assert (got.beam_scores[b, :-1] >= got.beam_scores[b, 1:]).all()  # best first


# ---------------------------------------------------------------- the exercise's reference


@pytest.mark.parametrize("width", [2, 3])
def test_no_penalty_equals_exercise_11_3_reference(width):
    """length_penalty=0 is the search of exercise 11.3 (one source, no cache)."""
    from helpers.exercises.ch11 import _book_beam_search  # here: a broken exercise stays local

    model = random_model(6, max_len=10, sharpen=2.0)
    src = sources(4, seed=6, max_len=7)
    got = beam_search(model, src, width, length_penalty=0.0)
    for b in range(src.size(0)):
        want = _book_beam_search(model, src[b : b + 1], width)
        assert got.tokens[b, : len(want)].tolist() == want
        assert (got.tokens[b, len(want) :] == PAD_ID).all()


# ---------------------------------------------------------------- batch, mode, errors


def test_batch_equals_one_source_at_a_time(partly_trained_model):
    model = partly_trained_model
    src = sources(12, seed=9)
    batch = beam_search(model, src, 4)
    for b in range(src.size(0)):
        one = beam_search(model, src[b : b + 1], 4)
        L = one.tokens.size(1)
        assert torch.equal(batch.tokens[b, :L], one.tokens[0])
        assert (batch.tokens[b, L:] == PAD_ID).all()
        assert batch.scores[b].item() == pytest.approx(one.scores[0].item(), abs=1e-5)


def test_searches_in_eval_mode_and_gives_the_mode_back():
    model = random_model(7, dropout=0.5)
    src = sources(6, seed=7)
    want = beam_search(model, src, 3, max_len=12)
    assert not model.training
    model.train()
    got = beam_search(model, src, 3, max_len=12)  # dropout would change the scores
    assert model.training and all(m.training for m in model.modules())
    assert torch.equal(got.beams, want.beams) and torch.equal(got.beam_scores, want.beam_scores)
    with pytest.raises(ValueError):
        beam_search(model, src, 0)
    assert model.training  # given back on an error too


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (dict(beam_width=0), ValueError, "beam_width must be >= 1"),
        (dict(beam_width=-2), ValueError, "beam_width must be >= 1"),
        (dict(beam_width=2.0), TypeError, "beam_width must be an int"),
        (dict(beam_width=True), TypeError, "beam_width must be an int"),
        (dict(beam_width=2, max_len=0), ValueError, "max_len must be in"),
        (dict(beam_width=2, max_len=31), ValueError, "max_len must be in"),
        (dict(beam_width=2, length_penalty=float("nan")), ValueError, "length_penalty"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    model = random_model(0)
    with pytest.raises(error, match=match):
        beam_search(model, sources(2, 0), **kwargs)


@pytest.mark.parametrize(
    "src,error,match",
    [
        (torch.zeros(0, 5, dtype=torch.long), ValueError, "src is empty"),
        (torch.zeros(2, 0, dtype=torch.long), ValueError, "src is empty"),
        (torch.tensor([3, 4, 2]), ValueError, "rank 2"),
        (torch.tensor([[3.0, 4.0, 2.0]]), TypeError, "integer token ids"),
        (torch.tensor([[3, 99, 2]]), ValueError, "outside the vocabulary"),
    ],
)
def test_bad_sources(src, error, match):
    with pytest.raises(error, match=match):
        beam_search(random_model(0), src, 2)


def test_exported_by_helpers():
    import helpers

    assert helpers.beam_search is beam_search


def test_wider_than_the_hypotheses_leaves_empty_beams():
    """A beam wider than all hypotheses: the surplus beams are empty (-inf, <bos> then <pad>)."""
    model = random_model(0, max_len=8, tgt_vocab=TINY_VOCAB, d_model=16, dff=32)
    got = beam_search(model, sources(2, 0, max_len=4), 10, max_len=2)  # 5 one-token hypotheses
    assert got.beams.shape == (2, 10, 2)
    assert got.beam_scores[:, :5].isfinite().all() and (got.beam_scores[:, 5:] == -torch.inf).all()
    assert (got.beams[:, 5:, 1] == PAD_ID).all()
    assert sorted(got.beams[0, :5, 1].tolist()) == list(range(TINY_VOCAB))
