"""helpers.training.evaluation: the test split, the Wilson interval and the overlap count."""

import math

import pytest
import torch

from helpers import BOOK_RECIPE, SEED_RECIPE, make_reversal_dataset
from helpers.core.vocab import VOCAB_SIZE
from helpers.training.evaluation import (
    TEST_SEED,
    TEST_SIZE,
    exact_match_with_interval,
    test_set,
    train_test_overlap,
    wilson_interval,
)


def test_test_seed_is_its_own():
    for recipe in (BOOK_RECIPE, SEED_RECIPE):
        assert TEST_SEED not in (recipe.data_seed, recipe.val_seed)
    assert TEST_SIZE >= 10_000


def test_test_set_is_a_prefix_and_differs_from_validation():
    src, tgt = test_set(50)
    full_src, _ = test_set()
    assert src.shape == (50, 14) and tgt.shape == (50, 14)
    assert full_src.shape[0] == TEST_SIZE
    assert torch.equal(full_src[:50], src)
    assert not torch.equal(make_reversal_dataset(50, seed=BOOK_RECIPE.val_seed)[0], src)
    with pytest.raises(ValueError, match="n must be in"):
        test_set(TEST_SIZE + 1)


def test_wilson_known_values():
    # 0 of n: the upper end is z^2 / (n + z^2); n of n mirrors it
    z2 = 1.959963984540054**2
    low, high = wilson_interval(0, 10)
    assert low == 0.0 and high == pytest.approx(z2 / (10 + z2), abs=1e-12)
    low, high = wilson_interval(10, 10)
    assert high == 1.0 and low == pytest.approx(10 / (10 + z2), abs=1e-12)
    # half of 100 at 95 %: the textbook value 0.4038 to 0.5962
    low, high = wilson_interval(50, 100)
    assert low == pytest.approx(0.40383, abs=1e-5) and high == pytest.approx(0.59617, abs=1e-5)


@pytest.mark.parametrize("k,n", [(1, 7), (37, 120), (9_950, 10_000), (9_999, 10_000)])
def test_wilson_endpoints_solve_the_score_equation(k, n):
    z = 1.959963984540054
    p_hat = k / n
    low, high = wilson_interval(k, n)
    assert 0 <= low < p_hat < high <= 1
    for p in (low, high):  # |p_hat - p| = z * sqrt(p (1 - p) / n) at both ends
        assert abs(p_hat - p) == pytest.approx(z * math.sqrt(p * (1 - p) / n), rel=1e-9)


def test_wilson_narrows_with_n_and_widens_with_confidence():
    widths = [h - lo for lo, h in (wilson_interval(99 * m, 100 * m) for m in (1, 10, 100))]
    assert widths[0] > widths[1] > widths[2]
    lo90, hi90 = wilson_interval(90, 100, confidence=0.90)
    lo99, hi99 = wilson_interval(90, 100, confidence=0.99)
    assert lo99 < lo90 and hi99 > hi90


@pytest.mark.parametrize(
    "args,match",
    [((1, 0), "n must be positive"), ((5, 4), "correct must be"), ((-1, 4), "correct must be")],
)
def test_wilson_rejects_bad_counts(args, match):
    with pytest.raises(ValueError, match=match):
        wilson_interval(*args)
    with pytest.raises(ValueError, match="confidence"):
        wilson_interval(1, 4, confidence=1.0)


class _Oracle(torch.nn.Module):
    """Predicts the teacher-forced target exactly, except for the rows in `wrong`."""

    max_len, src_vocab = 14, VOCAB_SIZE

    def __init__(self, src, tgt, wrong=()):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.table = {tuple(s): t for s, t in zip(src.tolist(), tgt.tolist())}
        self.wrong = {tuple(src[i].tolist()) for i in wrong}

    def forward(self, src, tgt_in):
        rows = []
        for s in src.tolist():
            t = torch.tensor(self.table[tuple(s)][1 : tgt_in.size(1) + 1])
            if tuple(s) in self.wrong:
                t[0] = (t[0] + 1) % VOCAB_SIZE
            rows.append(t)
        return torch.nn.functional.one_hot(torch.stack(rows), VOCAB_SIZE).float() + self.w


def test_exact_match_with_interval_counts_right_sequences():
    src, tgt = make_reversal_dataset(40, seed=11)
    result = exact_match_with_interval(_Oracle(src, tgt, wrong=(3, 17, 29)), src, tgt)
    assert (result.correct, result.n) == (37, 40)
    assert result.exact_match == pytest.approx(37 / 40)
    assert (result.low, result.high) == pytest.approx(wilson_interval(37, 40))
    assert "37 of 40" in str(result)


def test_exact_match_teacher_forced_equals_greedy(partly_trained_model):
    model = partly_trained_model
    src, tgt = test_set(300)
    tf = exact_match_with_interval(model, src, tgt)
    gr = exact_match_with_interval(model, src, tgt, greedy=True, batch_size=64)
    assert 0 < tf.correct < 300, tf  # partly trained: the comparison is not trivially 0 or all
    assert tf == gr


def test_exact_match_with_interval_rejects_mismatched_sets():
    src, tgt = make_reversal_dataset(4, seed=11)
    with pytest.raises(ValueError, match="sequences"):
        exact_match_with_interval(_Oracle(src, tgt), src, tgt[:3])


def test_train_test_overlap_counts_repeated_rows():
    train, _ = make_reversal_dataset(200, seed=11)
    test, _ = make_reversal_dataset(5, seed=12)
    test = torch.cat([test, train[[4, 100, 150]]])
    seen = train_test_overlap(test, train)
    assert seen.dtype == torch.bool and seen.shape == (8,)
    assert seen[-3:].all()
    # a brute-force count over all pairs agrees
    brute = (test[:, None, :] == train[None, :, :]).all(-1).any(-1)
    assert torch.equal(seen, brute)
    with pytest.raises(ValueError, match="same L"):
        train_test_overlap(test[:, :5], train)


def _dropout_model():
    torch.manual_seed(0)
    from helpers import Transformer

    return Transformer(
        13, 13, d_model=16, num_heads=2, dff=32, num_layers=1, max_len=14, dropout=0.5
    )


@pytest.mark.parametrize("mode", [True, False])
def test_decoding_and_scoring_give_back_the_callers_mode(mode):
    from helpers import exact_match, greedy_decode

    model = _dropout_model()
    src, tgt = make_reversal_dataset(16, seed=11)
    reference = greedy_decode(model.eval(), src)
    model.train(mode)
    for call in (
        lambda: greedy_decode(model, src),
        lambda: greedy_decode(model, src, use_cache=True),
        lambda: exact_match(model, src, tgt),
        lambda: exact_match_with_interval(model, src, tgt),
        lambda: exact_match_with_interval(model, src, tgt, greedy=True),
    ):
        out = call()
        assert model.training is mode
        assert all(m.training is mode for m in model.modules())
        if isinstance(out, torch.Tensor):  # decoded with dropout off, whatever the mode
            assert torch.equal(out, reference)


def test_greedy_decode_gives_back_the_mode_when_it_raises():
    from helpers import greedy_decode

    model = _dropout_model().train()
    with pytest.raises(ValueError, match="max_len"):
        greedy_decode(model, make_reversal_dataset(2, seed=11)[0], max_len=99)
    assert model.training


@pytest.mark.parametrize("batch_size", [1, 7, 40, 64])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_match_with_interval_counts_any_wrong_set_in_any_batching(batch_size, seed):
    """Property: whatever sequences a model gets wrong and however the set is batched, the count
    is n minus the wrong ones (a skipped last batch or a double-counted one would show)."""
    src, tgt = make_reversal_dataset(45, seed=20 + seed)
    g = torch.Generator().manual_seed(seed)
    wrong = tuple(
        int(i)
        for i in torch.randperm(45, generator=g)[: int(torch.randint(0, 45, (1,), generator=g))]
    )
    result = exact_match_with_interval(
        _Oracle(src, tgt, wrong=wrong), src, tgt, batch_size=batch_size
    )
    assert (result.correct, result.n) == (45 - len(wrong), 45)
    assert (result.low, result.high) == pytest.approx(wilson_interval(result.correct, 45))
