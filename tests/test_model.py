import torch

from helpers import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    VOCAB_SIZE,
    Transformer,
    count_parameters,
    exact_match,
    greedy_decode,
    make_reversal_dataset,
    noam_lambda,
    to_torch_transformer,
    torch_forward,
)


def test_default_parameter_count():
    assert count_parameters(Transformer(13, 13)) == 931_213


def test_shapes_and_cross_weights():
    torch.manual_seed(0)
    m = Transformer(13, 13, d_model=32, num_heads=4, dff=64, num_layers=3, max_len=16).eval()
    src, tgt = make_reversal_dataset(5, seed=0)
    memory, src_mask = m.encode(src)
    assert memory.shape == (5, 14, 32) and src_mask.shape == (5, 1, 1, 14)
    logits, cross = m.decode(tgt[:, :-1], memory, src_mask)
    assert logits.shape == (5, 13, 13)
    assert len(cross) == 3 and all(w.shape == (5, 4, 13, 14) for w in cross)
    torch.testing.assert_close(m(src, tgt[:, :-1]), logits, atol=1e-5, rtol=1e-5)


def test_dataset_matches_the_reference_recipe():
    src, tgt = make_reversal_dataset(200, seed=0)
    assert src.shape == tgt.shape == (200, 14) and src.dtype == torch.int64
    assert torch.equal(make_reversal_dataset(200, seed=0)[0], src)
    for s, t in zip(src.tolist(), tgt.tolist()):
        L = s.index(EOS_ID)
        assert 3 <= L <= 12 and t[0] == BOS_ID and t[L + 1] == EOS_ID
        assert t[1 : L + 1] == s[:L][::-1]
        assert all(x == 0 for x in s[L + 1 :]) and all(x == 0 for x in t[L + 2 :])


def test_noam_peak():
    f = noam_lambda(128, 1000)
    values = [f(s) for s in range(3000)]
    peak = max(range(3000), key=values.__getitem__)
    assert peak == 999 and abs(values[peak] - 128**-0.5 * 1000**-0.5) < 1e-12


def test_same_logits_as_torch_transformer():
    torch.manual_seed(1)
    m = Transformer(13, 13, d_model=32, num_heads=4, dff=64, num_layers=2, max_len=16).eval()
    ref = to_torch_transformer(m)
    src, tgt = make_reversal_dataset(6, seed=2)
    torch.testing.assert_close(
        m(src, tgt[:, :-1]), torch_forward(m, ref, src, tgt[:, :-1]), atol=1e-5, rtol=1e-5
    )
    with torch.no_grad():  # and the check can fail
        ref.decoder.layers[1].linear2.weight.add_(
            0.05 * torch.randn_like(ref.decoder.layers[1].linear2.weight)
        )
    assert not torch.allclose(
        m(src, tgt[:, :-1]), torch_forward(m, ref, src, tgt[:, :-1]), atol=1e-3
    )


def test_cache_equals_no_cache_on_random_models():
    for seed, cfg in enumerate(
        [
            dict(d_model=16, num_heads=2, dff=32, num_layers=1),
            dict(d_model=32, num_heads=4, dff=64, num_layers=2),
            dict(d_model=48, num_heads=6, dff=96, num_layers=3),
        ]
    ):
        torch.manual_seed(seed)
        m = Transformer(VOCAB_SIZE, VOCAB_SIZE, max_len=20, **cfg)
        src, _ = make_reversal_dataset(8, seed=seed)
        for stop in (True, False):
            a = greedy_decode(m, src, use_cache=False, stop_at_eos=stop)
            b = greedy_decode(m, src, use_cache=True, stop_at_eos=stop)
            assert torch.equal(a, b)


def test_greedy_pads_after_eos_and_exact_match_range():
    torch.manual_seed(0)
    m = Transformer(13, 13, d_model=16, num_heads=2, dff=32, num_layers=1, max_len=14)
    src, tgt = make_reversal_dataset(32, seed=0)
    out = greedy_decode(m, src)
    assert (out[:, 0] == BOS_ID).all() and out.shape[1] <= 14
    for row in out.tolist():
        if EOS_ID in row[1:]:
            assert all(t == 0 for t in row[row.index(EOS_ID, 1) + 1 :])
    assert 0.0 <= exact_match(m, src, tgt) <= 1.0
    assert m.training  # decoding scores in eval mode, then gives back the caller's mode


def test_greedy_stops_when_the_last_row_finishes():
    """The output ends at the step where the last row produced <eos>: no column of <pad> only
    (a loop that always runs to max_len pads correctly and would pass the tests above)."""
    torch.manual_seed(0)
    m = Transformer(13, 13, d_model=16, num_heads=2, dff=32, num_layers=1, max_len=14).eval()
    with torch.no_grad():
        m.out_proj.bias[EOS_ID] += 1.0  # rows reach <eos> early, at different steps
    src, _ = make_reversal_dataset(16, seed=0)
    for use_cache in (False, True):
        out = greedy_decode(m, src, use_cache=use_cache)
        ends = [row.index(EOS_ID, 1) for row in out.tolist()]  # every row has finished
        assert out.size(1) == max(ends) + 1 < m.max_len and len(set(ends)) > 1
        assert not (out[:, -1] == PAD_ID).all()
