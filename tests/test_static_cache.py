"""The preallocated KV cache of chapter 13 (helpers.decoding.static_cache): token-identical to the
growing torch.cat cache and to naive decoding, writes in place, and a planted indexing bug
is caught by the identity check."""

import pytest
import torch

import helpers.decoding.static_cache as sc
from helpers import (
    PAD_ID,
    VOCAB_SIZE,
    Transformer,
    greedy_decode,
    make_padding_mask,
    make_reversal_dataset,
)


def random_model(seed=0, max_len=30, **kw):
    torch.manual_seed(seed)
    cfg = dict(d_model=32, num_heads=4, dff=64, num_layers=2)
    cfg.update(kw)
    return Transformer(VOCAB_SIZE, VOCAB_SIZE, max_len=max_len, **cfg).eval()


def identical_to_cat_cache(model, src, stop_at_eos):
    """The static cache decodes the tokens of the cat cache and of the naive loop."""
    naive = greedy_decode(model, src, use_cache=False, stop_at_eos=stop_at_eos)
    cat = greedy_decode(model, src, use_cache=True, stop_at_eos=stop_at_eos)
    static = sc.greedy_decode_static(model, src, stop_at_eos=stop_at_eos)
    assert torch.equal(naive, cat)  # the reference itself holds
    return naive.shape == static.shape and torch.equal(naive, static)


CONFIGS = [
    (0, dict()),
    (1, dict(d_model=64, num_heads=8, num_layers=3)),
    (2, dict(d_model=16, num_heads=1, dff=32, num_layers=1)),
]


@pytest.mark.parametrize("seed,cfg", CONFIGS)
@pytest.mark.parametrize("stop_at_eos", [True, False])
def test_token_identical_to_cat_cache_and_naive(seed, cfg, stop_at_eos):
    model = random_model(seed, **cfg)
    src, _ = make_reversal_dataset(16, seed=seed, min_len=1, max_len=12)  # padded sources
    assert identical_to_cat_cache(model, src, stop_at_eos)


def model_that_emits_pad():
    """A random model biased toward <pad>: it writes <pad> in mid-sequence, and those keys
    must be blocked at every later step (as make_padding_mask does in the other loops)."""
    model = random_model(4)
    with torch.no_grad():
        model.out_proj.bias[PAD_ID] += 1.0
    src, _ = make_reversal_dataset(32, seed=4, min_len=1, max_len=12)
    return model, src


def test_model_emitted_pad_keys_are_masked():
    model, src = model_that_emits_pad()
    out = greedy_decode(model, src, use_cache=False, stop_at_eos=False)
    assert (out[:, 1:-1] == PAD_ID).float().mean() > 0.05  # <pad> keys to block
    assert identical_to_cat_cache(model, src, stop_at_eos=False)


def test_buffers_hold_the_cat_cache_and_are_never_reallocated():
    model = random_model(5, num_layers=3)
    src, _ = make_reversal_dataset(3, seed=5)
    caches = sc.allocate_static_caches(model, 3, model.max_len)
    ptrs = [(c["self_k"].data_ptr(), c["self_v"].data_ptr()) for c in caches]
    tokens = sc.greedy_decode_static(model, src, stop_at_eos=False, caches=caches)
    assert [(c["self_k"].data_ptr(), c["self_v"].data_ptr()) for c in caches] == ptrs
    # the library's cat cache, driven with the same tokens
    memory, src_mask = model.encode(src)
    cat = [{} for _ in model.decoder.layers]
    with torch.no_grad():
        for s in range(tokens.size(1) - 1):
            model.decoder(
                tokens[:, s : s + 1],
                memory,
                make_padding_mask(tokens[:, : s + 1]),
                src_mask,
                need_weights=False,
                caches=cat,
                start_pos=s,
            )
    t = tokens.size(1) - 1  # positions fed: the last token is never fed back
    for mine, lib in zip(caches, cat):
        for key in ("self_k", "self_v"):
            assert mine[key].shape[2] == model.max_len
            torch.testing.assert_close(mine[key][:, :, :t], lib[key])
            assert not mine[key][:, :, t:].any()  # the rest was never written
        for key in ("cross_k", "cross_v"):
            torch.testing.assert_close(mine[key], lib[key])


def test_write_kv_writes_in_place_and_refuses_overflow():
    buf = torch.zeros(1, 2, 4, 3)
    view = sc.write_kv(buf, torch.ones(1, 2, 1, 3), 2)
    assert view.shape == (1, 2, 3, 3) and view.data_ptr() == buf.data_ptr()
    assert buf[:, :, 2].eq(1).all() and not buf[:, :, :2].any() and not buf[:, :, 3].any()
    with pytest.raises(ValueError, match="holds 4 positions"):
        sc.write_kv(buf, torch.ones(1, 2, 2, 3), 3)


def _write_one_late(buf, new, pos):
    """A planted bug: the key of position pos lands at pos + 1 (the read is unchanged)."""
    buf[:, :, pos + 1 : pos + 1 + new.size(2)] = new
    return buf[:, :, : pos + new.size(2)]


def _read_one_short(buf, new, pos):
    """A planted bug: written at pos, but attention reads positions 0 .. pos - 1 (the newest
    key is left out: an off-by-one in the slice; step 0 still reads its one key)."""
    buf[:, :, pos : pos + new.size(2)] = new
    return buf[:, :, : max(pos, 1)]


@pytest.mark.parametrize("bug", [_write_one_late, _read_one_short])
def test_identity_check_catches_a_planted_index_bug(monkeypatch, bug):
    model = random_model(0)
    src, _ = make_reversal_dataset(16, seed=0, min_len=1, max_len=12)
    assert identical_to_cat_cache(model, src, stop_at_eos=False)
    monkeypatch.setattr(sc, "write_kv", bug)
    with pytest.raises((AssertionError, ValueError, RuntimeError)):
        assert identical_to_cat_cache(model, src, stop_at_eos=False)


def test_identity_check_catches_a_missing_padding_flag(monkeypatch):
    model, src = model_that_emits_pad()
    assert identical_to_cat_cache(model, src, stop_at_eos=False)
    step = sc.decoder_step_static

    def forgets_pad(model, token, pos, memory, src_mask, caches):
        caches[0]["pad"].zero_()  # the earlier <pad> keys are no longer blocked
        return step(model, token, pos, memory, src_mask, caches)

    monkeypatch.setattr(sc, "decoder_step_static", forgets_pad)
    assert not identical_to_cat_cache(model, src, stop_at_eos=False)


def test_gives_back_the_callers_mode():
    model = random_model().train()
    src, _ = make_reversal_dataset(4, seed=3)
    sc.greedy_decode_static(model, src)
    assert model.training  # decoded in eval mode (dropout off), then the mode came back


def test_reused_caches_decode_a_new_source_right():
    """One allocation, two batches: the second batch's cross-attention must read its own
    source (a cache that kept step 0's cross keys of batch 1 decoded batch 2 from batch 1)."""
    model = random_model(11, num_layers=2)
    src1, _ = make_reversal_dataset(6, seed=1)
    src2, _ = make_reversal_dataset(6, seed=2)
    caches = sc.allocate_static_caches(model, 6, model.max_len)
    sc.greedy_decode_static(model, src1, stop_at_eos=False, caches=caches)
    again = sc.greedy_decode_static(model, src2, stop_at_eos=False, caches=caches)
    assert torch.equal(again, greedy_decode(model, src2, use_cache=False, stop_at_eos=False))
    # an untrained model may decode the same tokens from either source: check the keys too
    memory, _ = model.encode(src2)
    for layer, cache in zip(model.decoder.layers, caches):
        k, _ = layer.cross_mha.project_kv(memory, memory)
        assert torch.equal(cache["cross_k"], k)


def test_decoder_step_reprojects_cross_keys_at_step_zero_even_without_reset():
    model = random_model(12, num_layers=2)
    src1, _ = make_reversal_dataset(4, seed=3)
    src2, _ = make_reversal_dataset(4, seed=4)
    caches = sc.allocate_static_caches(model, 4, model.max_len)
    bos = torch.full((4, 1), 1, dtype=torch.long)
    with torch.no_grad():
        sc.decoder_step_static(model, bos, 0, *model.encode(src1), caches)
        logits = sc.decoder_step_static(model, bos, 0, *model.encode(src2), caches)
        fresh = sc.decoder_step_static(
            model, bos, 0, *model.encode(src2), sc.allocate_static_caches(model, 4)
        )
    assert torch.equal(logits, fresh)


def test_reset_empties_every_buffer_and_keeps_them():
    model = random_model(13, num_layers=2)
    src, _ = make_reversal_dataset(3, seed=5)
    caches = sc.allocate_static_caches(model, 3, model.max_len)
    ptrs = [c["self_k"].data_ptr() for c in caches]
    sc.greedy_decode_static(model, src, stop_at_eos=False, caches=caches)
    assert all("cross_k" in c and c["self_k"].abs().sum() > 0 for c in caches)
    caches.reset()
    assert all("cross_k" not in c and "cross_v" not in c for c in caches)
    assert all(c["self_k"].abs().sum() == 0 and not c["pad"].any() for c in caches)
    assert [c["self_k"].data_ptr() for c in caches] == ptrs


def test_caches_of_the_wrong_size_are_refused():
    model = random_model(14, num_layers=1)
    src, _ = make_reversal_dataset(3, seed=6)
    with pytest.raises(ValueError, match="caches hold 2 rows"):
        sc.greedy_decode_static(model, src, caches=sc.allocate_static_caches(model, 2))
    with pytest.raises(ValueError, match="at least"):
        sc.greedy_decode_static(
            model, src, max_len=10, caches=sc.allocate_static_caches(model, 3, 4)
        )


@pytest.mark.parametrize("kind", ["growing", "preallocated"])
def test_one_protocol_for_both_caches(kind):
    # MultiHeadAttention fed one position at a time through either cache attends like the
    # attention over the whole prefix (its last query row); reset empties the cache
    from helpers import MultiHeadAttention, make_causal_mask
    from helpers.core.kv_cache import KVCache

    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 2, dropout=0.0).eval()
    x = torch.randn(2, 5, 16)
    if kind == "growing":
        store: dict = {}
        cache = KVCache(store)
    else:
        store = dict(self_k=torch.zeros(2, 2, 7, 8), self_v=torch.zeros(2, 2, 7, 8))
        cache = sc.StaticKVCache(store)
    with torch.no_grad():
        full, _ = mha(x, x, x, attn_mask=make_causal_mask(5))
        for t in range(5):
            step, _ = mha(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], cache=cache)
            torch.testing.assert_close(step[:, 0], full[:, t])
    assert cache.length == 5 and store["self_k"][:, :, :5].abs().sum() > 0
    cache.reset()
    assert cache.length == 0 and not any(t.any() for t in store.values())


@pytest.mark.parametrize("num_kv_heads", [1, 2])
def test_grouped_query_models_decode_with_a_preallocated_cache(num_kv_heads):
    """With num_kv_heads < num_heads the buffers hold only the shared key/value heads, and the
    tokens equal the growing cache's."""
    torch.manual_seed(0)
    model = Transformer(
        VOCAB_SIZE, VOCAB_SIZE, d_model=32, num_heads=4, dff=64, num_layers=2, max_len=12,
        dropout=0.0, num_kv_heads=num_kv_heads,
    ).eval()  # fmt: skip
    src, _ = make_reversal_dataset(6, seed=3, min_len=3, max_len=9)
    caches = sc.allocate_static_caches(model, 6, 12)
    assert caches[0]["self_k"].shape == (6, num_kv_heads, 12, 8)
    expected = greedy_decode(model, src, use_cache=True)
    assert torch.equal(sc.greedy_decode_static(model, src, caches=caches), expected)
