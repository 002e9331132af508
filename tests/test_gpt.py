"""helpers.gpt: tokenizer, the decoder-only model, its KV cache, sampling and training."""

import pytest
import torch

from helpers import PAD_ID, EncoderLayer, make_causal_mask
from helpers.gpt import (
    CharTokenizer,
    GPTBlock,
    MiniGPT,
    causal_mask_with_past,
    evaluate_loss,
    fixed_windows,
    generate,
    load_corpus,
    next_token,
    split_train_val,
    top_k_filter,
    top_p_filter,
    train_gpt,
)

TEXT = "the quick brown fox jumps over the lazy dog. THE END\n"


def tiny_gpt(vocab_size=20, seed=0, **kw):
    torch.manual_seed(seed)
    cfg = dict(d_model=32, num_heads=4, dff=64, num_layers=2, max_len=40, dropout=0.0)
    cfg.update(kw)
    return MiniGPT(vocab_size, **cfg).eval()


# ---------------------------------------------------------------- corpus and tokenizer


def test_corpus_ships_with_the_package():
    text = load_corpus()
    assert 15_000 <= len(text.encode()) <= 60_000
    assert text.isascii()


def test_tokenizer_round_trip_and_reserved_pad():
    tok = CharTokenizer(TEXT)
    ids = tok.encode(TEXT)
    assert ids.dtype == torch.long and ids.shape == (len(TEXT),)
    assert tok.decode(ids) == TEXT
    assert tok.decode(ids.tolist()) == TEXT
    assert int(ids.min()) >= 1 and PAD_ID == 0  # id 0 is never a character
    assert tok.vocab_size == len(set(TEXT)) + 1


def test_tokenizer_unknown_character_is_a_clear_error():
    tok = CharTokenizer(TEXT)
    with pytest.raises(ValueError, match=r"'Z' at position 3 is not in the vocabulary"):
        tok.encode("theZ")
    with pytest.raises(ValueError, match="reserved padding id"):
        tok.decode([1, PAD_ID])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([tok.vocab_size])
    with pytest.raises(ValueError, match="1-D"):
        tok.decode(torch.ones(2, 3, dtype=torch.long))


def test_split_is_contiguous_and_windows_shift_by_one():
    ids = torch.arange(100)
    tr, va = split_train_val(ids, 0.1)
    assert torch.equal(torch.cat([tr, va]), ids) and len(va) == 10
    x, y = fixed_windows(ids, 8, max_windows=3)
    assert x.shape == (3, 8) and torch.equal(y, x + 1)


# ---------------------------------------------------------------- model


def test_gpt_block_is_the_encoder_layer_under_a_causal_mask():
    torch.manual_seed(0)
    block = GPTBlock(32, 4, 64, dropout=0.0).eval()
    assert isinstance(block, EncoderLayer)
    x = torch.randn(2, 7, 32)
    mask = make_causal_mask(7)
    ours, _ = block(x, mask)
    theirs, _ = EncoderLayer.forward(block, x, mask, need_weights=False)
    torch.testing.assert_close(ours, theirs)


def test_logits_shape_and_max_len_error():
    m = tiny_gpt()
    ids = torch.randint(1, 20, (3, 11))
    assert m(ids).shape == (3, 11, 20)
    with pytest.raises(ValueError, match="max_len=40"):
        m(torch.randint(1, 20, (1, 41)))


def test_tied_head_shares_the_embedding():
    m = tiny_gpt(tie_weights=True)
    assert m.head.weight is m.embed.emb.weight
    untied = tiny_gpt()
    assert untied.head.weight is not untied.embed.emb.weight
    n = lambda mod: sum(p.numel() for p in mod.parameters())  # noqa: E731
    assert n(untied) - n(m) == 20 * 32


def test_causality_future_tokens_do_not_change_the_past():
    m = tiny_gpt()
    ids = torch.randint(1, 20, (2, 16))
    t = 9
    changed = ids.clone()
    changed[:, t:] = torch.randint(1, 20, (2, 16 - t))
    changed[:, t] = ids[:, t] % 19 + 1  # surely different at t
    a, b = m(ids), m(changed)
    torch.testing.assert_close(a[:, :t], b[:, :t])
    assert (a[:, t:] - b[:, t:]).abs().amax() > 1e-3


def test_causality_breaks_without_the_mask():
    """The test above has teeth: the same blocks without a causal mask let the future leak."""
    m = tiny_gpt()
    ids = torch.randint(1, 20, (1, 12))
    changed = ids.clone()
    changed[0, -1] = ids[0, -1] % 19 + 1

    def unmasked(x):
        h = m.embed(x)
        for block in m.blocks:
            h, _ = block(h, None)
        return m.head(m.ln_final(h))

    assert (unmasked(ids)[:, :-1] - unmasked(changed)[:, :-1]).abs().amax() > 1e-3


def test_causal_mask_with_past():
    assert causal_mask_with_past(1, 5) is None
    torch.testing.assert_close(causal_mask_with_past(4, 0), make_causal_mask(4))
    m = causal_mask_with_past(2, 3)
    assert m.shape == (1, 1, 2, 5)
    assert m[0, 0].tolist() == [[False] * 4 + [True], [False] * 5]


# ---------------------------------------------------------------- KV cache


def test_cached_logits_match_full_forward():
    m = tiny_gpt()
    ids = torch.randint(1, 20, (2, 15))
    full = m(ids)
    caches = [{} for _ in m.blocks]
    parts = [m(ids[:, :6], caches=caches)]  # a prompt, then chunks and single tokens
    parts.append(m(ids[:, 6:9], caches=caches))
    for t in range(9, 15):
        parts.append(m(ids[:, t : t + 1], caches=caches))
    torch.testing.assert_close(torch.cat(parts, dim=1), full, atol=1e-5, rtol=1e-5)
    assert caches[0]["self_k"].shape == (2, 4, 15, 8) and MiniGPT.cached_length(caches) == 15


def test_cache_keys_are_the_encoder_decoder_cache_names():
    """Chapters 13 and 14 name the self-attention cache alike: self_k, self_v."""
    from helpers import VOCAB_SIZE, Transformer, make_padding_mask

    m = tiny_gpt()
    caches = [{} for _ in m.blocks]
    m(torch.randint(1, 20, (1, 4)), caches=caches)
    torch.manual_seed(0)
    t = Transformer(VOCAB_SIZE, VOCAB_SIZE, d_model=16, num_heads=2, dff=32, num_layers=1)
    src = torch.tensor([[3, 4, 2]])
    memory, src_mask = t.encode(src)
    dec_caches = [{}]
    tgt = torch.tensor([[1]])
    t.decoder(tgt, memory, make_padding_mask(tgt), src_mask, caches=dec_caches)
    assert set(caches[0]) == {"self_k", "self_v"}
    assert set(dec_caches[0]) == {"self_k", "self_v", "cross_k", "cross_v"}


@pytest.mark.parametrize(
    "cfg", [dict(), dict(num_layers=3, num_heads=2), dict(d_model=48, num_heads=6)]
)
def test_generate_cache_equals_no_cache_greedy(cfg):
    m = tiny_gpt(**cfg)
    prompt = torch.randint(1, 20, (3, 5))
    a = generate(m, prompt, 30, temperature=0, use_cache=False)
    b = generate(m, prompt, 30, temperature=0, use_cache=True)
    assert a.shape == (3, 35) and torch.equal(a[:, :5], prompt)
    assert torch.equal(a, b)


@pytest.mark.parametrize(
    "temperature,top_k,top_p",
    [(1.0, None, None), (0.7, 5, None), (1.5, None, None), (1.0, None, 0.9)],
)
def test_generate_cache_equals_no_cache_seeded_sampling(temperature, top_k, top_p):
    m = tiny_gpt()
    prompt = torch.randint(1, 20, (4, 3))
    runs = [
        generate(
            m,
            prompt,
            30,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            use_cache=c,
            generator=torch.Generator().manual_seed(7),
        )
        for c in (False, True)
    ]
    assert torch.equal(runs[0], runs[1])
    other = generate(
        m,
        prompt,
        30,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        generator=torch.Generator().manual_seed(8),
    )
    assert not torch.equal(
        runs[0], other
    )  # the seed matters: the test compares samples, not argmaxes


def test_generate_bad_arguments():
    m = tiny_gpt()
    prompt = torch.randint(1, 20, (1, 10))
    with pytest.raises(ValueError, match="max_len=40"):
        generate(m, prompt, 31)
    with pytest.raises(ValueError, match="temperature"):
        generate(m, prompt, 3, temperature=-1.0)
    with pytest.raises(ValueError, match="token id 20"):
        generate(m, torch.tensor([[20]]), 3)
    with pytest.raises(ValueError, match="top_p"):
        generate(m, prompt, 3, top_p=0.0)


# ---------------------------------------------------------------- sampling


def test_top_k_keeps_exactly_k_candidates():
    torch.manual_seed(0)
    logits = torch.randn(5, 30)
    for k in (1, 3, 30):
        kept = torch.isfinite(top_k_filter(logits, k))
        assert (kept.sum(-1) == k).all()
        # the kept ones are the k largest
        assert torch.equal(
            kept.nonzero()[:, 1].view(5, k).sort(-1).values,
            logits.topk(k, -1).indices.sort(-1).values,
        )
    with pytest.raises(ValueError, match="top_k"):
        top_k_filter(logits, 0)


def test_top_p_keeps_the_smallest_nucleus():
    probs = torch.tensor([[0.05, 0.40, 0.10, 0.30, 0.15]])
    kept = torch.isfinite(top_p_filter(probs.log(), 0.8))[0]
    assert kept.tolist() == [False, True, False, True, True]  # 0.40 + 0.30 + 0.15 >= 0.8
    renormalised = top_p_filter(probs.log(), 0.8).softmax(-1)[0]
    torch.testing.assert_close(renormalised[kept], probs[0, kept] / 0.85)


def test_top_p_extremes_and_rows():
    torch.manual_seed(0)
    logits = torch.randn(6, 30)
    only_best = torch.isfinite(top_p_filter(logits, 1e-6))
    assert torch.equal(only_best.nonzero()[:, 1], logits.argmax(-1))
    assert torch.isfinite(top_p_filter(logits, 1.0)).all()
    # each row on its own: the kept mass reaches p, and is the smallest set that does
    for p in (0.3, 0.7, 0.95):
        probs = logits.softmax(-1)
        kept = torch.isfinite(top_p_filter(logits, p))
        mass = (probs * kept).sum(-1)
        smallest_kept = probs.masked_fill(~kept, 2.0).min(-1).values
        assert (mass >= p - 1e-6).all() and (mass - smallest_kept < p).all()
    with pytest.raises(ValueError, match="top_p"):
        top_p_filter(logits, 1.5)


def test_sampling_stays_inside_top_p():
    logits = torch.tensor([[float("-inf"), 3.0, 2.5, 0.5, -1.0, 1.0]]).expand(2000, 6)  # no PAD
    g = torch.Generator().manual_seed(0)
    draws = next_token(logits, temperature=1.0, top_p=0.7, generator=g)
    allowed = set(torch.isfinite(top_p_filter(logits[:1], 0.7))[0].nonzero().flatten().tolist())
    assert set(draws.tolist()) == allowed == {1, 2}


def test_sampling_stays_inside_top_k():
    torch.manual_seed(0)
    logits = torch.randn(1, 30).expand(2000, 30)
    g = torch.Generator().manual_seed(0)
    draws = next_token(logits, temperature=3.0, top_k=4, generator=g)
    allowed = set(logits[0].topk(4).indices.tolist()) - {PAD_ID}
    assert set(draws.tolist()) <= allowed and len(set(draws.tolist())) >= 3


def test_temperature_zero_is_argmax_and_pad_is_never_chosen():
    logits = torch.randn(6, 10)
    logits[:, PAD_ID] = 100.0  # the model "wants" padding
    greedy = next_token(logits, temperature=0)
    masked = logits.clone()
    masked[:, PAD_ID] = float("-inf")
    assert torch.equal(greedy, masked.argmax(-1))
    g = torch.Generator().manual_seed(0)
    assert (next_token(logits.repeat(100, 1), temperature=5.0, generator=g) != PAD_ID).all()


def test_low_temperature_concentrates_samples():
    torch.manual_seed(0)
    logits = torch.randn(1, 30).expand(3000, 30)
    g = torch.Generator().manual_seed(0)
    cold = next_token(logits, temperature=0.2, generator=g)
    hot = next_token(logits, temperature=2.0, generator=g)
    assert len(cold.unique()) < len(hot.unique())


# ---------------------------------------------------------------- training


def test_train_gpt_learns_and_keeps_best():
    text = "abcabcabdabcabcabd" * 20
    tok = CharTokenizer(text)
    tr, va = split_train_val(tok.encode(text), 0.2)
    m = tiny_gpt(vocab_size=tok.vocab_size, max_len=16)
    hist = train_gpt(
        m,
        tr,
        va,
        steps=60,
        batch_size=8,
        lr=3e-3,
        warmup=10,
        eval_every=20,
        eval_windows=8,
        progress=False,
    )
    assert hist["eval_step"] == [20, 40, 60]
    assert hist["val_loss"][-1] < hist["val_loss"][0] < 2.0
    assert hist["best_val_loss"] == min(hist["val_loss"])
    assert not m.training


@pytest.fixture
def abc_text():
    """A tokenizer and a train/validation split of a short repetitive text."""
    text = "abcabcabdabcabcabd" * 10
    tok = CharTokenizer(text)
    return tok, *split_train_val(tok.encode(text), 0.2)


def _train_briefly(m, tr, va, **kw):
    return train_gpt(
        m,
        tr,
        va,
        steps=6,
        batch_size=4,
        warmup=2,
        eval_every=3,
        eval_windows=2,
        progress=False,
        **kw,
    )


def test_train_gpt_trains_on_helpers_device_and_hands_the_model_back(monkeypatch, abc_text):
    tok, tr, va = abc_text
    monkeypatch.setenv("TRANSFORMER_BOOK_DEVICE", "cpu")
    torch.manual_seed(0)
    a = tiny_gpt(vocab_size=tok.vocab_size, max_len=16)
    hist_env = _train_briefly(a, tr, va)
    torch.manual_seed(0)
    b = tiny_gpt(vocab_size=tok.vocab_size, max_len=16)
    hist_arg = _train_briefly(b, tr, va, device="cpu")
    assert hist_env["val_loss"] == hist_arg["val_loss"]  # the same windows, the same steps
    assert next(a.parameters()).device.type == "cpu"
    monkeypatch.setenv("TRANSFORMER_BOOK_DEVICE", "tpu7")
    with pytest.raises(ValueError, match="TRANSFORMER_BOOK_DEVICE"):
        _train_briefly(tiny_gpt(vocab_size=tok.vocab_size, max_len=16), tr, va)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_train_gpt_on_cuda_returns_the_model_on_the_cpu(abc_text):
    tok, tr, va = abc_text
    m = tiny_gpt(vocab_size=tok.vocab_size, max_len=16)
    hist = _train_briefly(m, tr, va, device="cuda")
    assert next(m.parameters()).device.type == "cpu" and len(hist["val_loss"]) == 2


@pytest.mark.parametrize("use_cache", [False, True])
def test_generate_and_evaluate_loss_give_back_the_callers_mode(use_cache):
    """Chapter 11 teaches giving the caller's mode back: a sampler that left the model in eval
    mode would silently turn dropout off for the rest of a training run."""
    m = tiny_gpt().train()
    prompt = torch.randint(1, 20, (2, 3), generator=torch.Generator().manual_seed(0))
    generate(m, prompt, 4, temperature=0, use_cache=use_cache)
    assert m.training and all(mod.training for mod in m.modules())
    x = torch.randint(1, 20, (4, 8), generator=torch.Generator().manual_seed(1))
    evaluate_loss(m, x, x)
    assert m.training
    m.eval()
    generate(m, prompt, 4, temperature=0, use_cache=use_cache)
    assert not m.training
