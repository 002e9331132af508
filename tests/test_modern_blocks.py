"""Issue 31, section 1: today's blocks as options of the book's encoder-decoder.

helpers.core.modern (RMSNorm, SwiGLU, RoPE, ALiBi, repeat_kv) against reference formulas and
reference implementations (torch's own SDPA with enable_gqa, Hugging Face's Llama rotary code
and BLOOM's ALiBi), and ModelConfig's norm / ffn / positions / rope_layout / num_kv_heads
options, whose defaults must build the book's model unchanged."""

import dataclasses
import itertools
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers import ModelConfig, Transformer, count_parameters, greedy_decode
from helpers.core.attention import MultiHeadAttention
from helpers.core.masks import make_causal_mask, make_padding_mask
from helpers.core.modern import (
    RotaryEmbedding,
    SwiGLU,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    repeat_kv,
    rope_angles,
    rope_permutation,
    swiglu_hidden,
)

TINY = dict(src_vocab=11, tgt_vocab=13, d_model=16, num_heads=4, dff=32, num_layers=1, max_len=10)


def tiny(seed=0, **options):
    torch.manual_seed(seed)
    return Transformer(**TINY, dropout=0.0, **options).eval()


def batch(seed=1, Ls=7, Lt=6):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, TINY["src_vocab"], (2, Ls), generator=g)
    tgt = torch.randint(3, TINY["tgt_vocab"], (2, Lt), generator=g)
    src[1, Ls - 2 :] = 0  # some padding in both
    tgt[1, Lt - 2 :] = 0
    tgt[:, 0] = 1  # <bos>
    return src, tgt


# ---------------------------------------------------------------- the defaults are the book's

# Computed with the code before issue 31 (commit 19f7f3b): Transformer(**TINY, dropout=0.0)
# after torch.manual_seed(0).
NAMES_BEFORE = [
    "encoder.embed.emb.weight",
    *(f"encoder.layers.0.{n}.{p}" for n in ("ln1", "ln2") for p in ("weight", "bias")),
    *(f"encoder.layers.0.mha.W_{m}.{p}" for m in "qkvo" for p in ("weight", "bias")),
    *(f"encoder.layers.0.ffn.net.{i}.{p}" for i in (0, 2) for p in ("weight", "bias")),
    "encoder.ln_final.weight",
    "encoder.ln_final.bias",
    "decoder.embed.emb.weight",
    *(f"decoder.layers.0.{n}.{p}" for n in ("ln1", "ln2", "ln3") for p in ("weight", "bias")),
    *(
        f"decoder.layers.0.{a}.W_{m}.{p}"
        for a in ("self_mha", "cross_mha")
        for m in "qkvo"
        for p in ("weight", "bias")
    ),
    *(f"decoder.layers.0.ffn.net.{i}.{p}" for i in (0, 2) for p in ("weight", "bias")),
    "decoder.ln_final.weight",
    "decoder.ln_final.bias",
    "out_proj.weight",
    "out_proj.bias",
]
PARAMETER_SUM_BEFORE = 129.83452124433825  # sum of every parameter, in float64
PARAMETER_ABS_SUM_BEFORE = 1249.8805174303561


def test_default_config_builds_the_same_parameters_as_before():
    model = tiny()
    state = model.state_dict()
    assert list(state) == NAMES_BEFORE
    d, dff = TINY["d_model"], TINY["dff"]
    assert state["encoder.layers.0.ffn.net.0.weight"].shape == (dff, d)
    assert state["decoder.layers.0.self_mha.W_k.weight"].shape == (d, d)
    with torch.no_grad():
        total = sum(float(p.double().sum()) for p in model.parameters())
        abs_total = sum(float(p.double().abs().sum()) for p in model.parameters())
    # the same random draws in the same order: equal up to float64 summation order
    assert total == pytest.approx(PARAMETER_SUM_BEFORE, abs=1e-9)
    assert abs_total == pytest.approx(PARAMETER_ABS_SUM_BEFORE, abs=1e-9)
    assert repr(model.config) == (
        "ModelConfig(src_vocab=11, tgt_vocab=13, d_model=16, num_heads=4, dff=32, "
        "num_layers=1, max_len=10, dropout=0.0)"
    )


def reference_forward(model, src, tgt):
    """The book's forward written out with functional ops from the pre-issue-31 code path:
    LayerNorm, Pre-Norm, sinusoidal positions, GELU FFN, SDPA with boolean masks."""
    sd = {k: v for k, v in model.state_dict().items()}
    d, h = model.config.d_model, model.config.num_heads

    def ln(x, p):
        return F.layer_norm(x, (d,), sd[p + ".weight"], sd[p + ".bias"], 1e-5)

    def lin(x, p):
        return F.linear(x, sd[p + ".weight"], sd[p + ".bias"])

    def mha(xq, xkv, p, mask):
        B, Lq, _ = xq.shape
        Q = lin(xq, p + ".W_q").view(B, Lq, h, -1).transpose(1, 2)
        K = lin(xkv, p + ".W_k").view(B, xkv.size(1), h, -1).transpose(1, 2)
        V = lin(xkv, p + ".W_v").view(B, xkv.size(1), h, -1).transpose(1, 2)
        out = F.scaled_dot_product_attention(Q, K, V, attn_mask=~mask)
        return lin(out.transpose(1, 2).reshape(B, Lq, d), p + ".W_o")

    def ffn(x, p):
        return lin(F.gelu(lin(x, p + ".net.0")), p + ".net.2")

    def embed(ids, stack):
        pe = getattr(model, stack).embed.pe[: ids.size(1)]
        return F.embedding(ids, sd[stack + ".embed.emb.weight"]) * math.sqrt(d) + pe

    src_mask, tgt_mask = make_padding_mask(src), make_padding_mask(tgt)
    self_mask = make_causal_mask(tgt.size(1)) | tgt_mask
    x = embed(src, "encoder")
    for i in range(model.config.num_layers):
        p = f"encoder.layers.{i}"
        a = ln(x, p + ".ln1")
        x = x + mha(a, a, p + ".mha", src_mask)
        x = x + ffn(ln(x, p + ".ln2"), p + ".ffn")
    memory = ln(x, "encoder.ln_final")
    y = embed(tgt, "decoder")
    for i in range(model.config.num_layers):
        p = f"decoder.layers.{i}"
        a = ln(y, p + ".ln1")
        y = y + mha(a, a, p + ".self_mha", self_mask)
        y = y + mha(ln(y, p + ".ln2"), memory, p + ".cross_mha", src_mask)
        y = y + ffn(ln(y, p + ".ln3"), p + ".ffn")
    return lin(ln(y, "decoder.ln_final"), "out_proj")


@torch.no_grad()
def test_default_config_computes_the_same_forward_as_before():
    model = tiny()
    src, tgt = batch()
    logits = model(src, tgt)
    # the seeded logits of the code before issue 31 (commit 19f7f3b), float64 sum
    assert float(logits.double().sum()) == pytest.approx(41.344876027083956, abs=1e-4)
    assert torch.allclose(logits, reference_forward(model, src, tgt), atol=1e-5, rtol=0)
    explicit = tiny(norm="layer", ffn="gelu", positions="sinusoidal", num_kv_heads=None)
    assert torch.equal(explicit(src, tgt), logits)


def test_options_are_in_the_config_and_its_repr_only_when_set():
    model = tiny(norm="rms", ffn="swiglu", positions="rope", rope_layout="interleaved")
    cfg = model.config
    assert (cfg.norm, cfg.ffn, cfg.positions, cfg.rope_layout) == (
        "rms",
        "swiglu",
        "rope",
        "interleaved",
    )
    assert "norm='rms'" in repr(cfg) and "num_kv_heads" not in repr(cfg)
    twin = Transformer.from_config(dataclasses.replace(cfg, num_kv_heads=2))
    assert twin.config.num_kv_heads == 2 and twin.config.positions == "rope"
    assert isinstance(cfg, ModelConfig)


@pytest.mark.parametrize(
    "option", [{"norm": "batch"}, {"ffn": "geglu"}, {"positions": "t5"}, {"num_kv_heads": 3}]
)
def test_an_unknown_option_is_a_value_error(option):
    with pytest.raises(ValueError):
        tiny(**option)


def test_rope_layout_must_be_known():
    with pytest.raises(ValueError, match="layout"):
        tiny(positions="rope", rope_layout="pairs")


# ---------------------------------------------------------------- RMSNorm


def test_rms_norm_replaces_every_layer_norm_and_equals_its_formula():
    model = tiny(norm="rms")
    norms = [m for m in model.modules() if isinstance(m, nn.RMSNorm)]
    assert not any(isinstance(m, nn.LayerNorm) for m in model.modules())
    assert len(norms) == 2 + 3 + 2  # encoder layer, decoder layer, the two final ones
    norm = norms[0]
    assert norm.eps == 1e-6
    torch.manual_seed(0)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(16))
    x = torch.randn(3, 5, 16) * 3 + 1
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * norm.weight
    assert torch.allclose(norm(x), expected, atol=1e-6, rtol=1e-6)
    assert not torch.allclose(norm(x), F.layer_norm(x, (16,), norm.weight), atol=1e-3)


# ---------------------------------------------------------------- SwiGLU


@pytest.mark.parametrize("d, dff", [(16, 32), (32, 64), (128, 512), (512, 2048), (64, 100)])
def test_swiglu_hidden_width_matches_the_two_matrix_parameter_count(d, dff):
    hidden = swiglu_hidden(dff)
    assert hidden == round(2 * dff / 3)
    swiglu = SwiGLU(d, hidden)
    assert count_parameters(swiglu) == 3 * d * hidden  # no biases
    two_matrix_weights = 2 * d * dff
    # rounding hidden moves the count by at most half a step of 3 * d
    assert abs(count_parameters(swiglu) - two_matrix_weights) <= 1.5 * d


def test_swiglu_in_the_model_and_its_formula():
    gelu, swiglu = tiny(), tiny(ffn="swiglu")
    d, dff, hidden = 16, 32, swiglu_hidden(32)
    per_ffn_gelu = 2 * d * dff + dff + d
    per_ffn_swiglu = 3 * d * hidden
    assert count_parameters(gelu) - count_parameters(swiglu) == 2 * (per_ffn_gelu - per_ffn_swiglu)
    ffn = swiglu.encoder.layers[0].ffn
    assert isinstance(ffn, SwiGLU) and ffn.gate.bias is None
    x = torch.randn(2, 3, d)
    g, u = x @ ffn.gate.weight.T, x @ ffn.up.weight.T
    expected = (g * torch.sigmoid(g) * u) @ ffn.down.weight.T
    assert torch.allclose(ffn(x), expected, atol=1e-6)


def test_relu_ffn_is_the_books_with_relu():
    model = tiny(ffn="relu")
    assert isinstance(model.encoder.layers[0].ffn.net[1], nn.ReLU)
    assert count_parameters(model) == count_parameters(tiny())


# ---------------------------------------------------------------- RoPE


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rope_scores_depend_only_on_the_offset(layout):
    torch.manual_seed(0)
    hd = 8
    rope = RotaryEmbedding(hd, layout=layout)
    q, k = torch.randn(1, 1, 1, hd), torch.randn(1, 1, 1, hd)

    def score(m, n):
        return float((rope(q, start_pos=m) * rope(k, start_pos=n)).sum())

    for m, n, shift in [(3, 1, 5), (0, 4, 17), (7, 7, 100), (2, 9, 1000)]:
        assert score(m, n) == pytest.approx(score(m + shift, n + shift), abs=1e-4)
    assert score(3, 1) != pytest.approx(score(3, 2), abs=1e-3)  # the offset does matter
    assert torch.equal(rope(q, start_pos=0), q)  # position 0: no rotation


def test_rope_layouts_are_equal_after_the_permutation():
    torch.manual_seed(0)
    hd = 8
    x = torch.randn(2, 3, 5, hd)
    angles = rope_angles(torch.arange(4, 9), hd)
    perm = rope_permutation(hd)
    assert perm.tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    interleaved = apply_rope(x, angles, "interleaved")
    half = apply_rope(x[..., perm], angles, "half")
    assert torch.allclose(interleaved[..., perm], half, atol=1e-6)
    assert not torch.allclose(apply_rope(x, angles, "half"), interleaved, atol=1e-3)


def test_rope_half_layout_is_hugging_faces_llama_rotation():
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import (
        LlamaRotaryEmbedding,
        apply_rotary_pos_emb,
    )

    torch.manual_seed(0)
    hd, L = 8, 6
    config = LlamaConfig(hidden_size=4 * hd, num_attention_heads=4, max_position_embeddings=64)
    q, k = torch.randn(2, 4, L, hd), torch.randn(2, 2, L, hd)
    positions = torch.arange(3, 3 + L)
    cos, sin = LlamaRotaryEmbedding(config)(q, positions[None])
    q_hf, k_hf = apply_rotary_pos_emb(q, k, cos, sin)
    rope = RotaryEmbedding(hd)
    assert torch.equal(rope(q, start_pos=3), q_hf)
    assert torch.equal(rope(k, start_pos=3), k_hf)


def incremental_logits(model, src, tgt):
    """Decoder logits fed one token at a time through the KV cache (chapter 13's dicts)."""
    memory, src_mask = model.encode(src)
    caches = [{} for _ in model.decoder.layers]
    steps = []
    for t in range(tgt.size(1)):
        h, _ = model.decoder(
            tgt[:, t : t + 1],
            memory,
            None,
            src_mask,
            need_weights=False,
            caches=caches,
            start_pos=t,
        )
        steps.append(model.out_proj(h))
    return torch.cat(steps, dim=1), caches


CACHED_OPTIONS = [
    dict(positions="rope"),
    dict(positions="rope", rope_layout="interleaved"),
    dict(positions="alibi"),
    dict(positions="learned"),
    dict(num_kv_heads=2),
    dict(num_kv_heads=1, positions="rope", norm="rms", ffn="swiglu"),
]


@pytest.mark.parametrize("options", CACHED_OPTIONS, ids=lambda o: "-".join(map(str, o.values())))
@torch.no_grad()
def test_the_kv_cache_gives_the_same_logits_and_tokens(options):
    model = tiny(**options)
    src, tgt = batch()
    tgt[1] = tgt[0]  # no padding in the target: the incremental loop passes no self mask
    full = model(src, tgt)
    steps, _ = incremental_logits(model, src, tgt)
    assert torch.allclose(full, steps, atol=1e-5)
    plain = greedy_decode(model, src, use_cache=False, stop_at_eos=False)
    cached = greedy_decode(model, src, use_cache=True, stop_at_eos=False)
    assert torch.equal(plain, cached)


@pytest.mark.parametrize("positions", ["rope", "alibi"])
@torch.no_grad()
def test_the_preallocated_cache_agrees_with_rope_and_alibi(positions):
    from helpers.decoding.static_cache import greedy_decode_static

    model = tiny(positions=positions)
    src, _ = batch()
    grown = greedy_decode(model, src, use_cache=True, stop_at_eos=False)
    assert torch.equal(greedy_decode_static(model, src, stop_at_eos=False), grown)


@pytest.mark.parametrize("num_kv_heads, expected_heads", [(None, 4), (2, 2), (1, 1)])
@torch.no_grad()
def test_the_kv_cache_stores_only_the_kv_heads(num_kv_heads, expected_heads):
    model = tiny(num_kv_heads=num_kv_heads)
    src, tgt = batch()
    _, caches = incremental_logits(model, src, tgt)
    B, Lt, d_k = tgt.size(0), tgt.size(1), 16 // 4
    assert caches[0]["self_k"].shape == (B, expected_heads, Lt, d_k)
    assert caches[0]["self_v"].shape == (B, expected_heads, Lt, d_k)
    assert caches[0]["cross_k"].shape == (B, 4, src.size(1), d_k)  # cross: every head
    # the self-attention cache holds expected_heads / num_heads of plain attention's memory
    assert caches[0]["self_k"].numel() * 4 == caches[0][
        "cross_k"
    ].numel() * expected_heads * Lt // src.size(1)


@pytest.mark.parametrize("positions", ["rope", "alibi"])
@torch.no_grad()
def test_rope_and_alibi_run_past_max_len(positions):
    model = tiny(positions=positions)
    assert model.max_len == 10
    src, tgt = batch(Ls=15, Lt=13)
    logits = model(src, tgt)
    assert logits.shape == (2, 13, 13) and torch.isfinite(logits).all()
    # a causal decoder: the logits of a prefix do not depend on what follows it
    assert torch.allclose(model(src, tgt[:, :8]), logits[:, :8], atol=1e-5)
    with pytest.raises(ValueError, match="max_len"):
        tiny()(src, tgt)


@torch.no_grad()
def test_rope_leaves_the_cross_attention_unrotated_and_adds_no_positions():
    model = tiny(positions="rope")
    layer = model.decoder.layers[0]
    assert isinstance(layer.self_mha.rope, RotaryEmbedding)
    assert layer.cross_mha.rope is None and model.encoder.layers[0].mha.rope is not None
    assert not hasattr(model.decoder.embed, "pe")
    ids = torch.tensor([[1, 5, 6]])
    expected = model.decoder.embed.emb(ids) * math.sqrt(16)
    assert torch.equal(model.decoder.embed(ids), expected)


def test_learned_positions_are_a_trained_table():
    model = tiny(positions="learned")
    assert model.encoder.embed.pos.weight.shape == (10, 16)
    assert count_parameters(model) == count_parameters(tiny()) + 2 * 10 * 16
    ids = torch.tensor([[1, 5, 6]])
    embed = model.encoder.embed
    expected = embed.emb(ids) * math.sqrt(16) + embed.pos.weight[:3]
    assert torch.equal(embed(ids), expected)


# ---------------------------------------------------------------- ALiBi


def test_alibi_slopes_are_the_geometric_sequence():
    assert torch.equal(alibi_slopes(8), 2.0 ** -torch.arange(1, 9, dtype=torch.float32))
    s4 = alibi_slopes(4)
    assert torch.allclose(s4, torch.tensor([2**-2, 2**-4, 2**-6, 2**-8]))
    assert torch.allclose(s4[1:] / s4[:-1], torch.full((3,), 2**-2))


@pytest.mark.parametrize("num_heads", [1, 2, 4, 6, 8, 12])
def test_alibi_slopes_match_bloom(num_heads):
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    bloom = build_alibi_tensor(torch.ones(1, 3), num_heads, torch.float32)  # [h, 1, L]
    assert torch.allclose(alibi_slopes(num_heads), bloom[:, 0, 1], atol=0, rtol=1e-6)


def test_alibi_bias_shape_and_values():
    slopes = alibi_slopes(4)
    bias = alibi_bias(slopes, 3, 5, query_start=2)  # the queries are positions 2, 3, 4
    assert bias.shape == (4, 3, 5)
    i, j = torch.arange(2, 5)[:, None], torch.arange(5)[None, :]
    assert torch.allclose(bias, -slopes[:, None, None] * (i - j).abs())
    full = alibi_bias(slopes, 5, 5)
    assert torch.equal(full, full.transpose(1, 2))  # the encoder's: symmetric
    causal = ~make_causal_mask(5)[0, 0]  # the decoder's keys j <= i: -m * (i - j)
    expected = -slopes[:, None, None] * (i.new_tensor(range(5))[:, None] - j).float()
    assert torch.allclose(full[:, causal], expected[:, causal])


@pytest.mark.parametrize("need_weights", [True, False])
@torch.no_grad()
def test_alibi_attention_adds_the_bias_to_the_scores(need_weights):
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, dropout=0.0, alibi=True).eval()
    x = torch.randn(2, 5, 16)
    mask = make_padding_mask(torch.tensor([[1, 4, 5, 6, 7], [1, 4, 5, 0, 0]]))
    out, _ = mha(x, x, x, attn_mask=mask, need_weights=need_weights)
    Q, K, V = (mha.split_heads(W(x)) for W in (mha.W_q, mha.W_k, mha.W_v))
    scores = Q @ K.transpose(-2, -1) / 2.0 + alibi_bias(alibi_slopes(4), 5, 5)
    weights = scores.masked_fill(mask, float("-inf")).softmax(-1)
    expected = mha.W_o(mha.merge_heads(weights @ V))
    assert torch.allclose(out, expected, atol=1e-5)


# ---------------------------------------------------------------- grouped-query attention


@pytest.mark.parametrize("num_kv_heads", [1, 2])
@pytest.mark.parametrize("need_weights", [True, False])
@torch.no_grad()
def test_gqa_equals_sdpa_with_enable_gqa(num_kv_heads, need_weights):
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, dropout=0.0, num_kv_heads=num_kv_heads).eval()
    assert mha.W_k.weight.shape == (num_kv_heads * 4, 16)
    x = torch.randn(2, 5, 16)
    mask = make_causal_mask(5)
    out, _ = mha(x, x, x, attn_mask=mask, need_weights=need_weights)
    Q, K, V = (mha.split_heads(W(x)) for W in (mha.W_q, mha.W_k, mha.W_v))
    assert K.shape == (2, num_kv_heads, 5, 4)
    ref = F.scaled_dot_product_attention(Q, K, V, attn_mask=~mask, enable_gqa=True)
    assert torch.allclose(out, mha.W_o(mha.merge_heads(ref)), atol=1e-6)
    # repeat_kv is repeat_interleave: head j of K serves query heads j*r .. j*r + r - 1
    r = 4 // num_kv_heads
    assert torch.equal(repeat_kv(K, r)[:, r - 1], K[:, 0])


@torch.no_grad()
def test_gqa_with_all_heads_is_plain_mha_bit_for_bit():
    torch.manual_seed(0)
    plain = MultiHeadAttention(16, 4, dropout=0.0).eval()
    torch.manual_seed(0)
    grouped = MultiHeadAttention(16, 4, dropout=0.0, num_kv_heads=4).eval()
    for (n1, p1), (n2, p2) in zip(plain.state_dict().items(), grouped.state_dict().items()):
        assert n1 == n2 and torch.equal(p1, p2)
    x = torch.randn(2, 5, 16)
    for need_weights in (True, False):
        a, _ = plain(x, x, x, attn_mask=make_causal_mask(5), need_weights=need_weights)
        b, _ = grouped(x, x, x, attn_mask=make_causal_mask(5), need_weights=need_weights)
        assert torch.equal(a, b)
    src, tgt = batch()
    assert torch.equal(tiny()(src, tgt), tiny(num_kv_heads=4)(src, tgt))


def test_mqa_model_has_fewer_parameters():
    d, d_k, layers_self_attn = 16, 4, 2  # one encoder and one decoder self-attention
    saved = layers_self_attn * 2 * (d * (d - d_k) + (d - d_k))  # W_k and W_v, weight and bias
    assert count_parameters(tiny()) - count_parameters(tiny(num_kv_heads=1)) == saved


# ---------------------------------------------------------------- every combination trains

COMBINATIONS = [
    dict(norm=n, ffn=f, positions=p, rope_layout=r, num_kv_heads=k)
    for n, f, (p, r), k in itertools.product(
        ("layer", "rms"),
        ("gelu", "relu", "swiglu"),
        (
            ("sinusoidal", "half"),
            ("learned", "half"),
            ("rope", "half"),
            ("rope", "interleaved"),
            ("alibi", "half"),
        ),
        (None, 1),
    )
]


@pytest.mark.parametrize("positions", ["sinusoidal", "learned", "rope", "alibi"])
def test_every_option_combination_trains(positions):
    src, tgt = batch()
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
    combos = [c for c in COMBINATIONS if c["positions"] == positions]
    assert len(combos) == (24 if positions == "rope" else 12)
    for options in combos:
        model = tiny(**options).train()
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        losses = []
        for _ in range(6):
            logits = model(src, tgt_in)
            loss = F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=0)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert all(math.isfinite(v) for v in losses), options
        assert losses[-1] < losses[0] - 0.1, (options, losses)
