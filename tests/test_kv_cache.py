"""The encoder-decoder KV cache of greedy_decode (chapter 13) and tools/bench/decoding.py."""

import pytest
import torch

from helpers import VOCAB_SIZE, Transformer, greedy_decode, make_padding_mask, make_reversal_dataset
from tools.bench import decoding as bench


def random_model(seed=0, max_len=40, **kw):
    torch.manual_seed(seed)
    cfg = dict(d_model=32, num_heads=4, dff=64, num_layers=2)
    cfg.update(kw)
    return Transformer(VOCAB_SIZE, VOCAB_SIZE, max_len=max_len, **cfg).eval()


def rows_per_call(module, run):
    rows = []
    hook = module.register_forward_hook(lambda m, inp, out: rows.append(inp[0].shape[1]))
    try:
        run()
    finally:
        hook.remove()
    return rows


def test_cross_attention_kv_projected_once_self_kv_one_row_per_step():
    model = random_model()
    src, _ = make_reversal_dataset(3, seed=0)
    for layer in model.decoder.layers:
        cross = rows_per_call(
            layer.cross_mha.W_k,
            lambda: greedy_decode(model, src, max_len=12, use_cache=True, stop_at_eos=False),
        )
        assert cross == [src.size(1)]  # the whole memory, once
        naive = rows_per_call(
            layer.cross_mha.W_k, lambda: greedy_decode(model, src, max_len=12, stop_at_eos=False)
        )
        assert naive == [src.size(1)] * 11  # ... versus every step
        new_k = rows_per_call(
            layer.self_mha.W_k,
            lambda: greedy_decode(model, src, max_len=12, use_cache=True, stop_at_eos=False),
        )
        assert new_k == [1] * 11


def drive_decoder(model, src, tokens):
    """Feed tokens [B, T] one at a time through the cached decoder; return the caches."""
    memory, src_mask = model.encode(src)
    caches = [{} for _ in model.decoder.layers]
    ptrs = []
    with torch.no_grad():
        for step in range(tokens.size(1)):
            model.decoder(
                tokens[:, step : step + 1],
                memory,
                make_padding_mask(tokens[:, : step + 1]),
                src_mask,
                need_weights=False,
                caches=caches,
                start_pos=step,
            )
            assert caches[0]["self_k"].shape[2] == step + 1
            ptrs.append(caches[0]["cross_k"].data_ptr())
    assert len(set(ptrs)) == 1  # the same cross-attention tensor at every step
    return caches


def test_cache_shapes_and_memory_formula():
    model = random_model(d_model=48, num_heads=6, num_layers=3)
    src, _ = make_reversal_dataset(2, seed=1)
    tokens = greedy_decode(model, src, max_len=10, stop_at_eos=False)
    caches = drive_decoder(model, src, tokens[:, :-1])  # the last token is never fed back
    B, t, Ls, d = 2, 9, src.size(1), 48
    for c in caches:
        assert c["self_k"].shape == c["self_v"].shape == (B, 6, t, 8)
        assert c["cross_k"].shape == c["cross_v"].shape == (B, 6, Ls, 8)
    nbytes = sum(x.numel() * x.element_size() for c in caches for x in c.values())
    assert nbytes == 3 * B * 2 * d * 4 * (t + Ls)  # layers * B * 2 d * 4 bytes * (t + Ls)


def test_cached_logits_match_naive_logits():
    model = random_model(seed=3)
    src, _ = make_reversal_dataset(4, seed=2)
    tokens = greedy_decode(model, src, max_len=15, stop_at_eos=False)
    memory, src_mask = model.encode(src)
    with torch.no_grad():
        naive, _ = model.decode(tokens, memory, src_mask, need_weights=False)
        caches = [{} for _ in model.decoder.layers]
        steps = []
        for s in range(tokens.size(1)):
            h, _ = model.decoder(
                tokens[:, s : s + 1],
                memory,
                make_padding_mask(tokens[:, : s + 1]),
                src_mask,
                need_weights=False,
                caches=caches,
                start_pos=s,
            )
            steps.append(model.out_proj(h))
    torch.testing.assert_close(torch.cat(steps, dim=1), naive, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "seed,cfg",
    [
        (0, dict()),
        (1, dict(d_model=64, num_heads=8, num_layers=3)),
        (2, dict(d_model=16, num_heads=1, dff=32, num_layers=1)),
    ],
)
def test_long_outputs_identical(seed, cfg):
    model = random_model(seed=seed, max_len=80, **cfg)
    src, _ = make_reversal_dataset(8, seed=seed, min_len=1, max_len=10)  # padded sources
    a = greedy_decode(model, src, use_cache=False, stop_at_eos=False)
    b = greedy_decode(model, src, use_cache=True, stop_at_eos=False)
    assert a.shape == (8, 80) and torch.equal(a, b)


def test_bench_decoding_rows_and_final_line():
    rows = bench.bench([4, 8], repeats=1)
    assert [r["new_tokens"] for r in rows] == [4, 8]
    assert all(r["identical"] and r["naive_ms"] > 0 and r["cached_ms"] > 0 for r in rows)
    assert all(r["static_ms"] > 0 for r in rows)
    fake = [
        dict(new_tokens=256, speedup=6.66, identical=True),
        dict(new_tokens=16, speedup=1.2, identical=False),
    ]
    assert bench.final_line(fake) == "speedup_at_256=6.7 identical=False"


# ---------------------------------------------------------------- reorder (beam search)


def test_reorder_takes_rows_by_index_growing_and_memory_caches():
    from helpers.core.kv_cache import KVCache, MemoryKVCache

    k = torch.arange(4 * 2 * 3 * 5, dtype=torch.float32).view(4, 2, 3, 5)
    store = {"self_k": k.clone(), "self_v": -k, "cross_k": k + 0.5, "cross_v": k - 0.5}
    index = torch.tensor([2, 2, 0, 3, 1, 1])  # repeats rows and changes their number
    KVCache(store, "self_").reorder(index)
    assert torch.equal(store["self_k"], k[index]) and torch.equal(store["self_v"], -k[index])
    assert torch.equal(store["cross_k"], k + 0.5)  # the other attention's cache: untouched
    MemoryKVCache(store, "cross_").reorder(index)
    assert torch.equal(store["cross_k"], (k + 0.5)[index])
    assert torch.equal(store["cross_v"], (k - 0.5)[index])
    empty = {}
    KVCache(empty).reorder(index)  # nothing cached: nothing to reorder
    assert empty == {}


def test_reorder_static_cache_in_place_then_new_buffers():
    from helpers.decoding.static_cache import allocate_static_caches

    torch.manual_seed(0)
    model = Transformer(VOCAB_SIZE, VOCAB_SIZE, d_model=16, num_heads=2, dff=32, num_layers=2)
    caches = allocate_static_caches(model, batch_size=3, max_len=6)
    layer = caches[0]
    layer["self_k"].copy_(torch.randn_like(layer["self_k"]))
    layer["self_v"].copy_(torch.randn_like(layer["self_v"]))
    before_k, before_v, buf = layer["self_k"].clone(), layer["self_v"].clone(), layer["self_k"]
    index = torch.tensor([2, 0, 0])
    layer.self_attn.reorder(index)
    assert layer["self_k"] is buf  # same number of rows: the allocated buffer, rewritten
    assert torch.equal(layer["self_k"], before_k[index])
    assert torch.equal(layer["self_v"], before_v[index])
    layer.self_attn.reorder(torch.tensor([1, 1, 2, 0, 0]))  # another number of rows
    assert layer["self_k"].shape[0] == 5
    assert torch.equal(layer["self_k"], before_k[index][torch.tensor([1, 1, 2, 0, 0])])
