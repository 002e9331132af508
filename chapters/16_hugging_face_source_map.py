# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Transformer book (pinned numerics)
#     language: python
#     name: transformer-book
# ---

# %% [markdown]
# # 16. A source map to Hugging Face `transformers`
#
# Every piece of our Transformer has a counterpart in Hugging Face `transformers` {cite}`wolf2020`.
# We map our classes to **BART** {cite}`lewis2020` and **Marian** {cite}`junczysdowmunt2018`.
# We check every name, and run their layers on our weights.
# The picture is Figure 16.1: our encoder and output head beside BART's, name by name.
# The chapter draws it again where it checks those names.
#
# ![Our encoder's names beside BART's, with how each pair relates](figures/16_hugging_face_source_map.png)

# %% [markdown] tags=["run-time"]
# **Run time:** about 25 s. The first time, it also trains the book's reversal model (`BOOK_RECIPE`) and caches it on disk (about 30 s more); later runs load it.

# %% [markdown]
# Knowing where each piece lives turns `transformers` from a black box into code you can read.
# BART is an encoder-decoder family, and Marian is its sibling, the translation models. We name
# the release the map refers to. We also point out the differences worth knowing before you read
# the real thing.
#
# A source map goes stale: `transformers` moves fast, and names in blog posts can be a few
# releases old. So the map is **checked, not claimed**.
# The book pins one release of `transformers` in `requirements.txt`. The cells below import every
# name in the table from the installed package and check that it is there. Nothing is
# downloaded: every Hugging Face model here is built from a small config, with random weights or
# ours.
#
# Then we go beyond names. Our weights run in BART's layers, our masks are checked against its
# own, and our trained model runs inside Pegasus.
#
# The next cell checks that the installed release is the pinned one:

# %%
import importlib
import importlib.util
import inspect
import math
import re
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import torch
import torch.nn as nn
import torch.nn.functional as F
import transformers
from torch.nn.attention.flex_attention import create_block_mask
from transformers import cache_utils, masking_utils, modeling_utils
from transformers.generation import utils as generation_utils
from transformers.models.bart import modeling_bart
from transformers.models.bart.configuration_bart import BartConfig
from transformers.models.marian import modeling_marian
from transformers.models.marian.configuration_marian import MarianConfig

from helpers import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    VOCAB_SIZE,
    DecoderLayer,
    EncoderLayer,
    MultiHeadAttention,
    Transformer,
    make_causal_mask,
    make_padding_mask,
    make_reversal_dataset,
    sinusoidal_position_encoding,
    to_hf_attention_mask,
    to_sdpa_mask,
)

requirements = Path("..", "requirements.txt").read_text()
pinned = re.search(r"^transformers==(\S+)", requirements, re.M).group(1)
print("transformers pinned in requirements.txt:", pinned)
print("transformers installed:                 ", transformers.__version__)
assert transformers.__version__ == pinned
torch.set_num_threads(1)  # every tensor here is small: one CPU thread is enough, and steady
_ = torch.manual_seed(0)

# %% [markdown]
# ## The map
#
# Paths are relative to `src/transformers/` in the Hugging Face repository (and to the installed
# package folder). "BART" means `models/bart/modeling_bart.py`.
#
# | ours (`helpers`) | Hugging Face `transformers` 5.24 | where |
# | --- | --- | --- |
# | `MultiHeadAttention` | `BartAttention` (`q_proj`, `k_proj`, `v_proj`, `out_proj`) | BART |
# | its handwritten path (`need_weights=True`) | `eager_attention_forward` | BART |
# | its SDPA path (`need_weights=False`) | `sdpa_attention_forward`, picked by name from `ALL_ATTENTION_FUNCTIONS` | `integrations/sdpa_attention.py`, `modeling_utils.py` |
# | `FeedForward` | no class: `fc1`, `activation_fn`, `fc2` inside each layer | BART |
# | `EncoderLayer` | `BartEncoderLayer` | BART |
# | `DecoderLayer` (`self_mha`, `cross_mha`, `ffn`) | `BartDecoderLayer` (`self_attn`, `encoder_attn`, `fc1`/`fc2`) | BART |
# | `Encoder`, `Decoder` | `BartEncoder`, `BartDecoder` | BART |
# | `Transformer` (with `out_proj`) | `BartModel`, and `BartForConditionalGeneration` (with `lm_head`) | BART |
# | `TokenAndPosition`: embedding $\times\sqrt{d}$ | `BartScaledWordEmbedding` (`embed_scale`) | BART |
# | `TokenAndPosition`: positions | `BartLearnedPositionalEmbedding` (learned, offset 2); Marian: `MarianSinusoidalPositionalEmbedding` | BART; `models/marian/modeling_marian.py` |
# | `make_padding_mask` | `create_bidirectional_mask` (mask functions `padding_mask_function`, `bidirectional_mask_function`) | `masking_utils.py` |
# | `make_causal_mask` $\vert$ `make_padding_mask` | `create_causal_mask` (`causal_mask_function`) | `masking_utils.py` |
# | the float mask inside the handwritten path | `eager_mask` (0 or `finfo.min`); SDPA gets `sdpa_mask` (bool, True = attend) | `masking_utils.py` |
# | `to_hf_attention_mask` | the `attention_mask` argument itself: `[B, L]`, 1 = attend | everywhere |
# | `tgt[:, :-1]` (teacher forcing input) | `shift_tokens_right(labels, pad_token_id, decoder_start_token_id)` | BART |
# | `F.cross_entropy(..., ignore_index=PAD_ID)` | `CrossEntropyLoss()` on `labels`, ignored positions set to **-100** | BART (`BartForConditionalGeneration.forward`) |
# | `greedy_decode` | `GenerationMixin.generate` -> `_sample` (greedy when `do_sample=False`) | `generation/utils.py` |
# | the KV cache (`self_k`/`self_v`, `cross_k`/`cross_v` per layer) | `EncoderDecoderCache` of two `DynamicCache`s, with `is_updated` per layer | `cache_utils.py` |
#
# The next cell makes every row of the table a check: it imports the module, looks the name up,
# and prints the file and line where the installed release defines it.

# %%
SOURCE_MAP = [
    # (ours, module, qualified name in transformers)
    ("MultiHeadAttention", "transformers.models.bart.modeling_bart", "BartAttention"),
    ("  handwritten path", "transformers.models.bart.modeling_bart", "eager_attention_forward"),
    ("  SDPA path", "transformers.integrations.sdpa_attention", "sdpa_attention_forward"),
    ("  dispatch by name", "transformers.modeling_utils", "ALL_ATTENTION_FUNCTIONS"),
    ("EncoderLayer", "transformers.models.bart.modeling_bart", "BartEncoderLayer"),
    ("DecoderLayer", "transformers.models.bart.modeling_bart", "BartDecoderLayer"),
    ("Encoder", "transformers.models.bart.modeling_bart", "BartEncoder"),
    ("Decoder", "transformers.models.bart.modeling_bart", "BartDecoder"),
    ("Transformer", "transformers.models.bart.modeling_bart", "BartModel"),
    ("  with out_proj", "transformers.models.bart.modeling_bart", "BartForConditionalGeneration"),
    (
        "TokenAndPosition (tokens)",
        "transformers.models.bart.modeling_bart",
        "BartScaledWordEmbedding",
    ),
    (
        "TokenAndPosition (positions)",
        "transformers.models.bart.modeling_bart",
        "BartLearnedPositionalEmbedding",
    ),
    (
        "sinusoidal_position_encoding",
        "transformers.models.marian.modeling_marian",
        "MarianSinusoidalPositionalEmbedding.create_weight",
    ),
    ("make_padding_mask", "transformers.masking_utils", "create_bidirectional_mask"),
    ("make_causal_mask", "transformers.masking_utils", "create_causal_mask"),
    ("  additive float mask", "transformers.masking_utils", "eager_mask"),
    ("  SDPA bool mask", "transformers.masking_utils", "sdpa_mask"),
    ("tgt[:, :-1]", "transformers.models.bart.modeling_bart", "shift_tokens_right"),
    ("greedy_decode", "transformers.generation.utils", "GenerationMixin.generate"),
    ("  the greedy loop", "transformers.generation.utils", "GenerationMixin._sample"),
    ("KV cache", "transformers.cache_utils", "EncoderDecoderCache"),
    ("  one stack's K/V", "transformers.cache_utils", "DynamicCache"),
]

package_root = Path(transformers.__file__).parent


def resolve(module_name, qualname):
    obj = importlib.import_module(module_name)
    for part in qualname.split("."):
        assert hasattr(obj, part), f"{module_name} has no {qualname} in {transformers.__version__}"
        obj = getattr(obj, part)
    return obj


def where(module_name, obj):
    """'models/bart/modeling_bart.py:142' for a class or function, the module's file otherwise."""
    target = inspect.unwrap(obj) if callable(obj) else obj
    try:
        path, line = inspect.getsourcefile(target), inspect.getsourcelines(target)[1]
    except TypeError:  # an instance (e.g. a registry object): point at its module
        path, line = importlib.import_module(module_name).__file__, None
    rel = Path(path).resolve().relative_to(package_root.resolve()).as_posix()
    return rel + (f":{line}" if line else "")


for ours, module_name, qualname in SOURCE_MAP:
    obj = resolve(module_name, qualname)
    print(f"{ours:<30} {qualname:<50} {where(module_name, obj)}")
print(f"\nall {len(SOURCE_MAP)} names exist in transformers {transformers.__version__}")

# %% [markdown]
# :::{dropdown} Going deeper: names from older releases
# Older tutorials and blog posts use names that the pinned release does not have:
# - Generation: they call greedy decoding `greedy_search` or `_greedy_search`; in the pinned
#   release greedy decoding and sampling share `_sample`, which picks the argmax when
#   `do_sample=False`.
# - Masks: they build BART's masks in methods of the model (`_update_causal_mask`,
#   `_update_cross_attn_mask`) with helpers from `modeling_attn_mask_utils.py` (the home of
#   `AttentionMaskConverter`). In the pinned release BART's masks come from `masking_utils.py`, and
#   `modeling_attn_mask_utils.py` does not exist.
# - The cache argument of BART's attention and decoder is `cache` here; the name those posts use,
#   `past_key_values`, is still accepted, through a deprecation decorator. Passing it warns that
#   release 5.40.0 will drop it.
#
# The next cell checks them too. The generation and mask names are gone from this release.
# Code copied from an older tutorial that uses them stops with an `ImportError` or an
# `AttributeError`; it does not run wrong in silence.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
Mixin, Decoder = generation_utils.GenerationMixin, modeling_bart.BartDecoder
gone = {
    "transformers.modeling_attn_mask_utils (module)": importlib.util.find_spec(
        "transformers.modeling_attn_mask_utils"
    )
    is None,
    "GenerationMixin.greedy_search": not hasattr(Mixin, "greedy_search"),
    "GenerationMixin._greedy_search": not hasattr(Mixin, "_greedy_search"),
    "BartDecoder._update_causal_mask": not hasattr(Decoder, "_update_causal_mask"),
    "BartDecoder._update_cross_attn_mask": not hasattr(Decoder, "_update_cross_attn_mask"),
}
for name, is_gone in gone.items():
    print(f"{name:<48} {'absent' if is_gone else 'PRESENT'}")
assert all(gone.values())

# the cache argument: `cache`, and the old name mapped onto it by a decorator
attn_args = list(inspect.signature(modeling_bart.BartAttention.forward).parameters)
decoder_args = list(inspect.signature(Decoder.forward).parameters)
print("BartAttention.forward arguments:", attn_args)
print("BartDecoder.forward arguments:  ", decoder_args)
renamed = len(re.findall(r'deprecate_kwarg\("past_key_values", [^)]*new_name="cache"\)',
                         inspect.getsource(modeling_bart)))  # fmt: skip
print(f'deprecate_kwarg("past_key_values", ..., new_name="cache") in modeling_bart.py: {renamed}x')
assert "cache" in attn_args and "cache" in decoder_args and renamed > 0
old_config = BartConfig(d_model=8, encoder_attention_heads=2)
old_config._attn_implementation = "eager"
old_style = modeling_bart.BartAttention(8, 2, config=old_config)
with warnings.catch_warnings(record=True) as caught, torch.no_grad():
    warnings.simplefilter("always")
    old_style(torch.zeros(1, 3, 8), past_key_values=None)  # the old name, as old posts pass it
print("BartAttention(..., past_key_values=None) warns:", caught[0].message)
assert len(caught) == 1 and "past_key_values" in str(caught[0].message)
assert "removed in version 5.40.0" in str(caught[0].message)

# greedy decoding and sampling share one loop: the generation mode maps to the method name
mapping = generation_utils.GENERATION_MODES_MAPPING
GenerationMode = generation_utils.GenerationMode
print(
    "greedy search ->",
    mapping[GenerationMode.GREEDY_SEARCH],
    "| sampling ->",
    mapping[GenerationMode.SAMPLE],
)
assert mapping[GenerationMode.GREEDY_SEARCH] == mapping[GenerationMode.SAMPLE] == "_sample"

# %% [markdown]
# ## How attention is dispatched
#
# Our `MultiHeadAttention` has two code paths chosen by `need_weights`. `BartAttention` projects
# Q, K and V itself and then hands them to an *attention function* looked up by name in
# `ALL_ATTENTION_FUNCTIONS`, using `config._attn_implementation` (`"sdpa"`, `"flash_attention_2"`,
# `"flex_attention"`, ...). The handwritten fallback, `eager_attention_forward`, is not in the
# registry: it is the default passed to the lookup. (The registry's `"paged|eager"` is another
# function, for a paged cache.) The source says so:

# %%
registry = modeling_utils.ALL_ATTENTION_FUNCTIONS
print("registered attention functions:", sorted(registry.keys()))
forward_src = inspect.getsource(modeling_bart.BartAttention.forward)
src_lines = forward_src.splitlines()
at = next(i for i, ln in enumerate(src_lines) if "ALL_ATTENTION_FUNCTIONS" in ln)
print("BartAttention.forward:", " ".join(ln.strip() for ln in src_lines[at : at + 3]))
assert "sdpa" in registry and "eager" not in registry
assert modeling_bart.eager_attention_forward not in registry.values()
assert "eager_attention_forward" in forward_src

# %% [markdown]
# Names are one thing; behaviour is another. We build a `BartAttention` from a tiny config, copy
# the four projections of one of our `MultiHeadAttention` modules into it, and feed both the same
# batch with padding. Each side gets the mask in its own convention: ours a `bool` mask with
# True = blocked; BART, in its eager mode, the additive float mask that `masking_utils` builds from
# the `[B, L]` `attention_mask` (1 = attend). With the SDPA implementation BART gets a `bool` mask
# with True = attend, like `F.scaled_dot_product_attention`.

# %%
d_model, heads = 32, 4


def tiny_bart_config(attn="eager", **overrides):
    cfg = BartConfig(
        vocab_size=VOCAB_SIZE,
        d_model=d_model,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=4 * d_model,
        decoder_ffn_dim=4 * d_model,
        max_position_embeddings=16,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        pad_token_id=PAD_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        decoder_start_token_id=BOS_ID,
        forced_eos_token_id=None,
        **overrides,
    )
    cfg._attn_implementation = attn
    return cfg


src, tgt = make_reversal_dataset(3, seed=4)
tgt_in = tgt[:, :-1]
x = torch.randn(src.size(0), src.size(1), d_model)
print("src:", tuple(src.shape), " x:", tuple(x.shape))

ours_mha = MultiHeadAttention(d_model, heads, dropout=0.0).eval()
bart_attn = {}
for attn in ("eager", "sdpa"):
    bart_attn[attn] = modeling_bart.BartAttention(
        d_model, heads, config=tiny_bart_config(attn)
    ).eval()
    for theirs, mine in [
        ("q_proj", "W_q"),
        ("k_proj", "W_k"),
        ("v_proj", "W_v"),
        ("out_proj", "W_o"),
    ]:
        getattr(bart_attn[attn], theirs).load_state_dict(getattr(ours_mha, mine).state_dict())

pad_mask = make_padding_mask(src)  # ours: [B, 1, 1, Ls], True = blocked
with torch.no_grad():
    out_ours, _ = ours_mha(x, x, x, attn_mask=pad_mask)
    for attn in ("eager", "sdpa"):
        hf_mask = masking_utils.create_bidirectional_mask(
            config=tiny_bart_config(attn), inputs_embeds=x, attention_mask=to_hf_attention_mask(src)
        )
        out_hf, _ = bart_attn[attn](x, attention_mask=hf_mask)
        gap = (out_hf - out_ours).abs().max().item()
        print(
            f"{attn:>5}: mask {hf_mask.dtype}, {list(hf_mask.shape)}; max |BART - ours| = {gap:.5f}"
        )
        torch.testing.assert_close(out_hf, out_ours, atol=1e-5, rtol=1e-5)

# %% [markdown]
# Both of BART's implementations compute our attention, to float32 rounding.
#
# ## Masks: the same information, three encodings
#
# `masking_utils` starts from the `[B, L]` `attention_mask` (1 = attend) and, depending on the
# attention implementation, produces a `bool` 4D mask with **True = attend** (`sdpa_mask`) or an
# **additive float** 4D mask, 0 where attention is allowed and `torch.finfo(dtype).min` where it is
# not (`eager_mask`). Note `finfo.min`, not `-1e9`: `-1e9` becomes `-inf` in float16 (chapter 03),
# and `transformers` avoids that as our attention does. Our converters produce both from our
# masks, and they must agree exactly, for the encoder's padding mask and for the decoder's
# causal-plus-padding mask:

# %%
def to_additive(mask, dtype=torch.float32):
    """Ours (bool, True = blocked) -> an additive float mask: 0 = attend, finfo.min = blocked."""
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(mask, torch.finfo(dtype).min)


B, Ls, Lt = src.size(0), src.size(1), tgt_in.size(1)
enc_ours = make_padding_mask(src).expand(B, 1, Ls, Ls)  # the same row for every query
dec_ours = make_causal_mask(Lt) | make_padding_mask(tgt_in)
src_embeds, tgt_embeds = torch.zeros(B, Ls, d_model), torch.zeros(B, Lt, d_model)

eager_cfg, sdpa_cfg = tiny_bart_config("eager"), tiny_bart_config("sdpa")
enc_hf = masking_utils.create_bidirectional_mask(eager_cfg, src_embeds, to_hf_attention_mask(src))
dec_hf = masking_utils.create_causal_mask(
    eager_cfg, tgt_embeds, to_hf_attention_mask(tgt_in), cache=None
)
enc_hf_bool = masking_utils.create_bidirectional_mask(
    sdpa_cfg, src_embeds, to_hf_attention_mask(src)
)
dec_hf_bool = masking_utils.create_causal_mask(
    sdpa_cfg, tgt_embeds, to_hf_attention_mask(tgt_in), cache=None
)

print("HF attention_mask for tgt_in[0]:", to_hf_attention_mask(tgt_in)[0].tolist())
print("HF eager causal mask, sequence 0, first 4 queries x 6 keys (finfo.min shown as -inf):")
print(dec_hf[0, 0, :4, :6].clamp(min=-1).masked_fill(dec_hf[0, 0, :4, :6] < -1, float("-inf")))
for name, hf, ours in [
    ("encoder, additive", enc_hf, to_additive(enc_ours)),
    ("decoder, additive", dec_hf, to_additive(dec_ours)),
    ("encoder, bool", enc_hf_bool, to_sdpa_mask(enc_ours)),
    ("decoder, bool", dec_hf_bool, to_sdpa_mask(dec_ours)),
]:
    assert hf.shape == ours.shape and torch.equal(hf, ours), name
    print(f"{name:<18} {str(hf.dtype):<14} {list(hf.shape)}  == ours converted")

# %% [markdown]
# :::{dropdown} Going deeper: when `masking_utils` builds no mask
# One optimisation to know about when you read the code: when the batch has **no** padding,
# `create_bidirectional_mask` returns `None` (nothing to mask), and with SDPA `create_causal_mask`
# returns `None` too, leaving causality to SDPA's own `is_causal` flag. The eager path still
# builds the full causal mask as a dense tensor. `flex_attention` gets a mask too, of another
# kind: its builder, `flex_attention_mask`, returns a `BlockMask` from PyTorch's
# `create_block_mask`. A `BlockMask` cuts the score matrix into blocks of 128 x 128 and records
# which blocks hold any score to compute. For a causal mask at length 512, 6 of the 16 blocks lie
# wholly above the diagonal and are left out. A mask of `None` in that code does not mean
# "unmasked by mistake". The next cell shows each case.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
no_padding = torch.ones(B, Lt, dtype=torch.long)
for name, cfg in [("eager", eager_cfg), ("sdpa", sdpa_cfg)]:
    bidi = masking_utils.create_bidirectional_mask(cfg, tgt_embeds, no_padding)
    causal = masking_utils.create_causal_mask(cfg, tgt_embeds, no_padding, cache=None)
    print(
        f"{name:>5}, no padding: bidirectional -> {bidi}, causal -> "
        f"{None if causal is None else list(causal.shape)}"
    )
    assert bidi is None and (causal is None) == (name == "sdpa")

# with no mask, the SDPA path asks the kernel for causality itself
sdpa_module = importlib.import_module("transformers.integrations.sdpa_attention")
sdpa_source = inspect.getsource(sdpa_module.sdpa_attention_forward)
rule = next(ln.strip() for ln in sdpa_source.splitlines() if "is_causal = q_length" in ln)
print("sdpa_attention_forward:", rule)
assert "attention_mask is None" in rule

# each attention implementation has its own mask builder; flex_attention's returns a BlockMask
mask_builders = masking_utils.ALL_MASK_ATTENTION_FUNCTIONS
flex_builder = mask_builders["flex_attention"]
print({name: fn.__name__ for name, fn in mask_builders.items()})
returns = inspect.signature(flex_builder).return_annotation
returns = getattr(returns, "__name__", returns)  # a class, or its name as a string
flex_source = inspect.getsource(flex_builder)
block_call = next(ln.strip() for ln in flex_source.splitlines() if "create_block_mask(" in ln)
print(f"{flex_builder.__name__} returns {returns}: {block_call} ...")
assert returns == "BlockMask" and "create_block_mask(" in flex_source

# PyTorch's own builder, on a causal mask of length 512 (torch's, not the transformers wrapper)
block_mask = create_block_mask(lambda b, h, q, k: q >= k, None, None, 512, 512, device="cpu")
print(block_mask)
blocks = block_mask.kv_num_blocks.sum() + block_mask.full_kv_num_blocks.sum()
print(f"blocks of {block_mask.BLOCK_SIZE}: {int(blocks)} of 16 computed")
assert block_mask.BLOCK_SIZE == (128, 128) and int(blocks) == 10

# %% [markdown]
# ## Differences worth knowing
#
# ### 1. BART is Post-Norm
#
# Our layers are **Pre-Norm**: $x + f(\mathrm{LN}(x))$, with a final LayerNorm after each stack
# (chapter 05). BART keeps the original paper's **Post-Norm**: $\mathrm{LN}(x + f(x))$, after the
# attention and again after the feed-forward network, plus a `layernorm_embedding` on the input and
# no final LayerNorm. To prove it rather than read it, we load one of our `EncoderLayer`s into a
# `BartEncoderLayer` and compare it with two functions written from our modules: the Pre-Norm one
# our layer computes, and the Post-Norm one.

# %%
ours_layer = EncoderLayer(d_model, heads, 4 * d_model, dropout=0.0).eval()
bart_layer = modeling_bart.BartEncoderLayer(tiny_bart_config("eager")).eval()
for theirs, mine in [
    ("self_attn.q_proj", "mha.W_q"),
    ("self_attn.k_proj", "mha.W_k"),
    ("self_attn.v_proj", "mha.W_v"),
    ("self_attn.out_proj", "mha.W_o"),
    ("self_attn_layer_norm", "ln1"),
    ("fc1", "ffn.net.0"),
    ("fc2", "ffn.net.2"),
    ("final_layer_norm", "ln2"),
]:
    bart_layer.get_submodule(theirs).load_state_dict(ours_layer.get_submodule(mine).state_dict())


def pre_norm(layer, x, mask):  # what helpers.EncoderLayer computes
    h = layer.ln1(x)
    x = x + layer.mha(h, h, h, attn_mask=mask)[0]
    return x + layer.ffn(layer.ln2(x))


def post_norm(layer, x, mask):  # the original paper, and BART
    x = layer.ln1(x + layer.mha(x, x, x, attn_mask=mask)[0])
    return layer.ln2(x + layer.ffn(x))


# an input of standard deviation 3: a residual stream that has grown beyond the LayerNorm's scale
x_big = 3 * torch.randn(B, Ls, d_model)
with torch.no_grad():
    out_bart = bart_layer(x_big, enc_hf)
    out_post, out_pre = (
        post_norm(ours_layer, x_big, pad_mask),
        pre_norm(ours_layer, x_big, pad_mask),
    )
    torch.testing.assert_close(ours_layer(x_big, pad_mask)[0], out_pre)
print(f"max |BART - our Post-Norm| = {(out_bart - out_post).abs().max():.5f}")
print(f"max |BART - our Pre-Norm|  = {(out_bart - out_pre).abs().max():.2f}")
print(
    f"std of each output row: BART {out_bart.std(-1).mean():.2f}, "
    f"Pre-Norm {out_pre.std(-1).mean():.2f} (input {x_big.std(-1).mean():.2f})"
)
torch.testing.assert_close(out_bart, out_post, atol=1e-5, rtol=1e-5)
assert (out_bart - out_pre).abs().max() > 0.1
assert abs(out_bart.std(-1).mean() - 1) < 0.05 < abs(out_pre.std(-1).mean() - 1)

# the LayerNorms of a one-layer BART encoder: one on the input, two per layer, none at the end
bart_encoder = modeling_bart.BartEncoder(tiny_bart_config())
bart_norms = [n for n, m in bart_encoder.named_modules() if isinstance(m, nn.LayerNorm)]
print("LayerNorms in a BartEncoder:", bart_norms)
assert sorted(bart_norms) == [
    "layernorm_embedding",
    "layers.0.final_layer_norm",
    "layers.0.self_attn_layer_norm",
]

# %% [markdown]
# The line with the standard deviations is the practical difference. A Post-Norm layer's output is
# normalised: each row has standard deviation about 1, here for an input of standard deviation 3.
# So the residual stream is squashed at every layer, and gradients must pass through every
# LayerNorm. Xiong et al. {cite}`xiong2020` trace Post-Norm's need for a learning-rate warmup to
# this. A Pre-Norm layer leaves the residual stream alone and only normalises what each sublayer
# reads.
#
# Figure 16.1 puts the names of our encoder and output head side by side, ours
# (`helpers.Transformer`) and BART's (`BartForConditionalGeneration`). The cell checks every
# pair: both names exist, and the weights have the same shape.

# %%
ours_model = Transformer(VOCAB_SIZE, VOCAB_SIZE, d_model=d_model, num_heads=heads,
                         dff=4 * d_model, num_layers=1, max_len=16)  # fmt: skip
bart_lm = modeling_bart.BartForConditionalGeneration(tiny_bart_config())
NAME_PAIRS = [  # (ours, BART's): one module each, the same weight shape
    ("encoder.embed.emb", "model.encoder.embed_tokens"),
    ("encoder.layers.0.mha.W_q", "model.encoder.layers.0.self_attn.q_proj"),
    ("encoder.layers.0.mha.W_k", "model.encoder.layers.0.self_attn.k_proj"),
    ("encoder.layers.0.mha.W_v", "model.encoder.layers.0.self_attn.v_proj"),
    ("encoder.layers.0.mha.W_o", "model.encoder.layers.0.self_attn.out_proj"),
    ("encoder.layers.0.ln1", "model.encoder.layers.0.self_attn_layer_norm"),
    ("encoder.layers.0.ffn.net.0", "model.encoder.layers.0.fc1"),
    ("encoder.layers.0.ffn.net.2", "model.encoder.layers.0.fc2"),
    ("encoder.layers.0.ln2", "model.encoder.layers.0.final_layer_norm"),
    ("out_proj", "lm_head"),
]
for ours_name, bart_name in NAME_PAIRS:
    a = ours_model.get_submodule(ours_name).weight
    b = bart_lm.get_submodule(bart_name).weight
    assert a.shape == b.shape, (ours_name, bart_name)
print(f"{len(NAME_PAIRS)} pairs: same weight shapes")
pe_rows = ours_model.encoder.embed.pe.size(0)
bart_rows = bart_lm.get_submodule("model.encoder.embed_positions").weight.size(0)
print(f"positions: ours a fixed buffer of {pe_rows} rows, BART a learned table of {bart_rows} rows")
only_bart = [n for n, m in bart_lm.named_modules() if n.endswith("layernorm_embedding")]
only_ours = [n for n, m in ours_model.named_modules() if n.endswith("ln_final")]
print("only in BART:", only_bart, "| only in ours:", only_ours)
assert (pe_rows, bart_rows) == (16, 18) and only_bart and "encoder.ln_final" in only_ours

# %% [markdown]
# The same shape does not mean a tensor of its own. Our model has three separate matrices of
# shape `[V, d]`: the encoder's embedding, the decoder's embedding and `out_proj`. BART ties
# them. With `tie_word_embeddings=True` (the default of `BartConfig`), `lm_head`, the encoder's
# `embed_tokens` and the decoder's `embed_tokens` are one tensor, `model.shared`. So copying our
# three matrices pair by pair writes three times into one tensor. The last
# write wins: after copying `out_proj` into `lm_head`, BART's token embeddings are our output
# projection.
#
# One more difference sits at the output. Our `out_proj` has a bias; BART's `lm_head` has none.
# Its counterpart is `final_logits_bias`, a buffer of shape `[1, V]`, zeros at initialisation,
# that `BartForConditionalGeneration.forward` adds to the logits. A port name by name misses it.

# %%
def token_matrices(model):
    return {name: model.get_submodule(name).weight for name in
            ("model.encoder.embed_tokens", "model.decoder.embed_tokens", "lm_head")}  # fmt: skip


shared = bart_lm.model.shared.weight
n_tied = len({w.data_ptr() for w in token_matrices(bart_lm).values()})
print(f"tie_word_embeddings = {bart_lm.config.tie_word_embeddings}: {n_tied} tensor for "
      f"{', '.join(token_matrices(bart_lm))}")  # fmt: skip
assert n_tied == 1 and all(w is shared for w in token_matrices(bart_lm).values())

with torch.no_grad():  # the naive port: one copy per pair of names
    for ours_name, bart_name in [("encoder.embed.emb", "model.encoder.embed_tokens"),
                                 ("decoder.embed.emb", "model.decoder.embed_tokens"),
                                 ("out_proj", "lm_head")]:  # fmt: skip
        bart_lm.get_submodule(bart_name).weight.copy_(ours_model.get_submodule(ours_name).weight)
encoder_tokens = bart_lm.model.encoder.embed_tokens.weight
print(
    f"after the port, BART's encoder embed_tokens: max |- our encoder embedding| = "
    f"{(encoder_tokens - ours_model.encoder.embed.emb.weight).abs().max():.2f}, "
    f"max |- our out_proj| = {(encoder_tokens - ours_model.out_proj.weight).abs().max():.2f}"
)
assert torch.equal(encoder_tokens, ours_model.out_proj.weight)
assert not torch.equal(encoder_tokens, ours_model.encoder.embed.emb.weight)

buffers = dict(bart_lm.named_buffers())
logits_bias = buffers["final_logits_bias"]
print(f"lm_head.bias: {bart_lm.lm_head.bias}; final_logits_bias: a buffer of shape "
      f"{list(logits_bias.shape)}, max |value| {logits_bias.abs().max():.1f}; ours: out_proj.bias "
      f"of shape {list(ours_model.out_proj.bias.shape)}")  # fmt: skip
assert not logits_bias.any()
forward_source = inspect.getsource(modeling_bart.BartForConditionalGeneration.forward)
assert bart_lm.lm_head.bias is None and "final_logits_bias" not in dict(bart_lm.named_parameters())
assert "lm_logits + self.final_logits_bias" in forward_source

untied = modeling_bart.BartForConditionalGeneration(tiny_bart_config(tie_word_embeddings=False))
n_tensors = len({w.data_ptr() for w in token_matrices(untied).values()})
print(f"tie_word_embeddings=False: {n_tensors} separate [V, d] tensors, as in our model")
assert n_tensors == 3

# %% [markdown]
# So a port name by name fails even before the layers. Tying is not what stops a port, though:
# `tie_word_embeddings=False` separates the three matrices. The wiring stops it. BART normalises
# after each sublayer (Post-Norm, shown above), normalises its input (`layernorm_embedding`), and
# has no final LayerNorm. A LayerNorm is not the identity for any weights: it gives the same
# output for $x$ and $2x$, up to its small $\epsilon$. So no copy of weights makes a BART compute
# our model, or ours compute BART's. The names map one to one; the functions do not. Moving
# weights between the two needs a model with the same wiring. The next cell shows the LayerNorm's blind spot.

# %% tags=["nbval-ignore-output"]
ln_embedding = bart_lm.model.encoder.layernorm_embedding
with torch.no_grad():
    ln_embedding.weight.normal_(), ln_embedding.bias.normal_()  # any weights at all
    x_any = torch.randn(2, 3, d_model)
    gap = (ln_embedding(x_any) - ln_embedding(2 * x_any)).abs().max().item()
print(f"layernorm_embedding with random weights: max |LN(x) - LN(2x)| = {gap:.1e}")
assert gap < 1e-3  # a map that cannot tell x from 2x is not the identity

# %% jupyter={"source_hidden": true} tags=["figure", "hide-input", "opening-figure"]
def draw_name_map():
    rows = [  # (ours, BART's, how they relate)
        ("encoder.embed.emb  (x sqrt(d))", "encoder.embed_tokens  (x 1; = shared)", "tied"),
        ("encoder.embed.pe  (sinusoids, fixed)", "encoder.embed_positions  (learned, +2 rows)",
         "role"),
        ("", "encoder.layernorm_embedding", "none"),
        ("layers.0.mha.W_q, W_k, W_v, W_o", "layers.0.self_attn.q_proj, k_proj, v_proj, out_proj",
         "same"),
        ("layers.0.ln1  (before attention)", "layers.0.self_attn_layer_norm  (after it)", "role"),
        ("layers.0.ffn.net.0, net.2", "layers.0.fc1, fc2", "same"),
        ("layers.0.ln2  (before the FFN)", "layers.0.final_layer_norm  (after it)", "role"),
        ("encoder.ln_final", "", "none"),
        ("out_proj  (with a bias)", "lm_head  (= shared) + final_logits_bias", "tied"),
    ]  # fmt: skip
    fig, ax = plt.subplots(figsize=(9.5, 4.6))
    ax.set_xlim(0, 10)
    ax.set_ylim(-0.6, len(rows) + 0.4)
    ax.axis("off")
    ax.text(2.2, len(rows) + 0.1, "ours (helpers.Transformer)", ha="center", weight="bold")
    ax.text(7.6, len(rows) + 0.1, "BART (BartForConditionalGeneration)", ha="center", weight="bold")
    style = {"same": ("0.2", "-"), "role": ("tab:orange", "--"), "tied": ("tab:purple", ":")}
    for i, (ours, theirs, kind) in enumerate(rows):
        y = len(rows) - 1 - i
        box = dict(boxstyle="round,pad=0.3", fc="#eef4fb", ec="0.5")
        if ours:
            ax.text(2.2, y, ours, ha="center", va="center", fontsize=8, bbox=box)
        if theirs:
            ax.text(7.6, y, theirs, ha="center", va="center", fontsize=8,
                    bbox={**box, "fc": "#fdf0e0"})  # fmt: skip
        if kind in style:
            color, ls = style[kind]
            ax.plot([4.35, 5.05], [y, y], color=color, ls=ls, lw=1.5)
    ax.plot([], [], color="0.2", label="same role and shape: copy as is")
    ax.plot([], [], color="tab:orange", ls="--", label="counterparts with another role or shape")
    ax.plot([], [], color="tab:purple", ls=":", label="BART: one tied tensor, model.shared")
    ax.legend(loc="lower center", ncol=3, fontsize=8, frameon=False, bbox_to_anchor=(0.5, -0.1))
    ax.set_title(
        "Figure 16.1: our encoder and output head beside BART's\n"
        "(BART's names without their prefix model.)"
    )
    fig.tight_layout()


draw_name_map()
plt.show()

# %% [markdown]
#
# ### 2. Positions: learned with an offset of 2 (BART), sinusoidal in halves (Marian)
#
# `BartLearnedPositionalEmbedding` is a plain learned table with **two extra rows**: position $p$
# reads row $p + 2$.
# Marian uses fixed sinusoids like ours, but lays them out differently: all the sines in the first
# half of the vector, all the cosines in the second, instead of interleaving them on even and odd
# dimensions. Same information, permuted columns, which matters the moment you copy weights:

# %%
max_pos, L = 16, 5
bart_pos = modeling_bart.BartLearnedPositionalEmbedding(max_pos, d_model)
print(
    "BART position table:",
    tuple(bart_pos.weight.shape),
    "for max_position_embeddings =",
    max_pos,
    "| offset:",
    bart_pos.offset,
)
rows = bart_pos(torch.zeros(1, L, dtype=torch.long))  # only the shape of the input matters
assert bart_pos.weight.shape[0] == max_pos + 2 and torch.equal(rows[0], bart_pos.weight[2 : 2 + L])

marian_pos = modeling_marian.MarianSinusoidalPositionalEmbedding(max_pos, d_model)
marian_table = marian_pos.create_weight()  # [max_pos, d]: sin(...) | cos(...)
ours_table = sinusoidal_position_encoding(max_pos, d_model)  # sin on even dims, cos on odd dims
ours_in_halves = torch.cat([ours_table[:, 0::2], ours_table[:, 1::2]], dim=1)
print(
    f"max |Marian - ours| as stored: {(marian_table - ours_table).abs().max():.2f}; "
    f"after moving sines to the front: {(marian_table - ours_in_halves).abs().max():.5f}"
)
torch.testing.assert_close(marian_table, ours_in_halves, atol=1e-5, rtol=0)
assert not torch.allclose(marian_table, ours_table, atol=1e-2)

# %% [markdown]
# ### 3. Embedding scale and initialisation
#
# We multiply token embeddings by $\sqrt{d}$ and initialise them with standard deviation
# $d^{-1/2}$, so that scaled tokens (std about 1) and sinusoidal positions (amplitude at most 1) are
# of the same size (chapters 02 and 12). BART and Marian make the scale optional
# (`scale_embedding`, **off** by default: `embed_scale` is 1.0), and initialise every learned
# embedding from $\mathcal{N}(0, 0.02^2)$ (`init_std`). For BART that keeps tokens and positions at
# one scale: its positions are a learned table, initialised like the tokens. A tiny randomly
# initialised `BartModel` shows it:

# %%
bart = modeling_bart.BartModel(tiny_bart_config("eager"))
tok_std = bart.encoder.embed_tokens.weight.std().item()
pos_std = bart.encoder.embed_positions.weight.std().item()
print(
    f"BartConfig().scale_embedding = {BartConfig().scale_embedding}, "
    f"MarianConfig().scale_embedding = {MarianConfig().scale_embedding}; "
    f"embed_scale = {bart.encoder.embed_tokens.embed_scale}"
)
print(
    f"init_std = {bart.config.init_std}; std of token embeddings {tok_std:.3f}, "
    f"of positions {pos_std:.3f}"
)
assert not BartConfig().scale_embedding and not MarianConfig().scale_embedding
assert bart.encoder.embed_tokens.embed_scale == 1.0
assert abs(tok_std - 0.02) < 0.005 and abs(pos_std - 0.02) < 0.005

# %% [markdown]
# Marian's positions are not learned: they are fixed sinusoids, like ours, with values between -1
# and 1. With the scale off, its tokens stay at the 0.02 scale of their initialisation. We build
# a Marian model at `MarianConfig`'s default width (with a vocabulary of 13 and one small layer,
# so it builds quickly) and compare the root mean square of what is added at the input: the
# token vectors, times `embed_scale`, and the position vectors.

# %%
def rms(t):
    return t.pow(2).mean().sqrt().item()


def marian_input_scales(**overrides):
    """RMS of the scaled token vectors and of the position vectors of a fresh Marian encoder."""
    cfg = MarianConfig(vocab_size=VOCAB_SIZE, encoder_layers=1, decoder_layers=1,
                       encoder_ffn_dim=64, decoder_ffn_dim=64, pad_token_id=PAD_ID,
                       decoder_start_token_id=PAD_ID, **overrides)  # fmt: skip
    torch.manual_seed(0)
    encoder = modeling_marian.MarianModel(cfg).encoder
    tokens = encoder.embed_tokens.weight[PAD_ID + 1 :] * encoder.embed_scale
    return cfg.d_model, rms(tokens), rms(encoder.embed_positions.weight)


width, tok_rms, pos_rms = marian_input_scales()
print(
    f"Marian, d_model = {width}, scale_embedding off: token RMS {tok_rms:.3f}, "
    f"position RMS {pos_rms:.3f}: positions {pos_rms / tok_rms:.0f}x louder"
)
assert pos_rms / tok_rms > 30

# %% [markdown]
# So a Marian built from `MarianConfig`'s defaults does not start with its two signals at one
# scale: the position signal is about 36 times larger than the token signal at initialisation.
# That is close to $\sqrt{1/2} / 0.02 \approx 35$. Sines and cosines have an RMS of
# $\sqrt{1/2}$, and the tokens start with standard deviation 0.02 (the ratio of 36 uses the
# measured RMS, 0.020 when rounded).
#
# Exercise 16.1 measures what the scale changes. When you read such a model, check the two
# scales the way this cell does: a config can turn the scale on.

# %% [markdown]
# ### 4. The decoder's first token, and the shift
#
# We build the decoder input by dropping the last target token (`tgt[:, :-1]`, which starts with
# BOS). Hugging Face builds it from the **labels** with `shift_tokens_right`: shift right by one,
# put `decoder_start_token_id` in front, and turn the ignore value **-100** (the labels' padding,
# and `CrossEntropyLoss`'s default `ignore_index`) back into the padding id. From our data the two
# constructions agree:

# %%
labels = tgt[:, 1:].masked_fill(tgt[:, 1:] == PAD_ID, -100)  # what a HF data collator produces
decoder_input_ids = modeling_bart.shift_tokens_right(
    labels, pad_token_id=PAD_ID, decoder_start_token_id=BOS_ID
)
print("labels[0]           :", labels[0].tolist())
print("decoder_input_ids[0]:", decoder_input_ids[0].tolist())
print("tgt_in[0]           :", tgt_in[0].tolist())
assert torch.equal(decoder_input_ids, tgt_in)
assert nn.CrossEntropyLoss().ignore_index == -100  # PyTorch's default, which HF's labels rely on

# %% [markdown]
# The loss row of the map, run. Given `labels`, `BartForConditionalGeneration` builds its decoder
# input with `shift_tokens_right` and returns the loss over the positions that are not -100. Our
# loss on the same logits, with `ignore_index=PAD_ID` on our targets, is the same number:

# %%
torch.manual_seed(0)
loss_lm = modeling_bart.BartForConditionalGeneration(tiny_bart_config()).eval()
with torch.no_grad():
    hf_out = loss_lm(input_ids=src, attention_mask=to_hf_attention_mask(src), labels=labels)
ours_loss = F.cross_entropy(hf_out.logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=PAD_ID)
print(f"BART's loss from labels: {hf_out.loss:.4f}; ours on its logits: {ours_loss:.4f}")
torch.testing.assert_close(hf_out.loss, ours_loss)

# %% [markdown]
# The start symbol itself differs between models, and one choice looks like a bug from our side:

# %%
for name, cfg in [("BART", BartConfig()), ("Marian", MarianConfig())]:
    print(
        f"{name:<7} pad_token_id={cfg.pad_token_id:<6} bos_token_id={str(cfg.bos_token_id):<5} "
        f"eos_token_id={cfg.eos_token_id:<3} decoder_start_token_id={cfg.decoder_start_token_id}"
    )
assert BartConfig().decoder_start_token_id == BartConfig().eos_token_id  # BART starts with </s>
# Marian starts with <pad>
assert MarianConfig().decoder_start_token_id == MarianConfig().pad_token_id

# %% [markdown]
# BART's decoder starts with the end-of-sequence token; Marian's starts with **the padding token**.
# In our model that would be a bug: our decoder derives its padding mask from the ids
# (`tgt_in == PAD_ID`), so a start token equal to PAD blocks the only key the first query may see
# (chapter 17 shows the damage). Marian works because its decoder does not derive the padding
# mask from the ids: it comes from the `decoder_attention_mask` argument, which is all ones when
# not given. And the start token still gives the first position a fixed input. Its embedding row
# is the padding row, which is zero at initialisation. But position 0 still gets its sinusoidal
# encoding, so the first decoder input is that encoding. A tiny Marian, with our PAD id as its
# PAD and its start symbol, shows both. Query 0 attends to key 0, the PAD, with weight 1, and
# the decoder's first input equals position 0's encoding.

# %%
tiny_marian = MarianConfig(vocab_size=VOCAB_SIZE, d_model=d_model, encoder_layers=1,
                           decoder_layers=1, encoder_attention_heads=heads,
                           decoder_attention_heads=heads, encoder_ffn_dim=4 * d_model,
                           decoder_ffn_dim=4 * d_model, max_position_embeddings=16,
                           pad_token_id=PAD_ID, decoder_start_token_id=PAD_ID,
                           eos_token_id=EOS_ID, forced_eos_token_id=None)  # fmt: skip
tiny_marian._attn_implementation = "eager"  # the eager path can return the attention weights
pad_start = tgt_in.clone()
pad_start[:, 0] = tiny_marian.decoder_start_token_id  # PAD
with torch.no_grad():
    out = modeling_marian.MarianModel(tiny_marian).eval()(
        input_ids=src, attention_mask=to_hf_attention_mask(src), decoder_input_ids=pad_start,
        output_attentions=True)  # fmt: skip
first_query = out.decoder_attentions[0][:, :, 0, 0]  # layer 0, every sequence and head: 0 -> 0
print("decoder input starts with:", pad_start[:, 0].tolist(),
      "| weight of query 0 on key 0:", first_query.unique().tolist())  # fmt: skip
assert torch.equal(first_query, torch.ones_like(first_query))
assert out.last_hidden_state.isfinite().all()

# what the decoder's first layer receives: a forward pre-hook records its input
marian = modeling_marian.MarianModel(tiny_marian).eval()
seen = {}


def record_input(module, args, kwargs):
    seen["x"] = args[0] if args else kwargs["hidden_states"]


hook = marian.decoder.layers[0].register_forward_pre_hook(record_input, with_kwargs=True)
with torch.no_grad():
    marian(input_ids=src, attention_mask=to_hf_attention_mask(src), decoder_input_ids=pad_start)
hook.remove()
pad_row = marian.decoder.embed_tokens.weight[PAD_ID]
position_0 = marian.decoder.embed_positions.weight[0]
first_input = seen["x"][:, 0]  # every sequence's input at position 0, the PAD
print(f"PAD's embedding row: max |value| = {pad_row.abs().max():.1f}; decoder input at position 0: "
      f"norm {first_input.norm(dim=-1).min():.2f}, max |- position 0's encoding| = "
      f"{(first_input - position_0).abs().max():.1f}")  # fmt: skip
assert torch.equal(pad_row, torch.zeros_like(pad_row))
assert torch.equal(first_input, position_0.expand_as(first_input)) and position_0.norm() > 1

# %% [markdown]
# A mask derived from token ids and a mask passed alongside them are different designs; know which
# one the code you read uses.
#
# ### 5. Generation and the cache
#
# `generate()` works out a *generation mode* from its arguments (`num_beams=1, do_sample=False` is
# greedy search) and runs `_sample`, which takes the argmax at every step when sampling is off. It
# passes `_sample` an `EncoderDecoderCache`: a `DynamicCache` for the self-attention keys and
# values (our `self_k`/`self_v`) and one for cross-attention, with a per-layer `is_updated` flag
# (our `cross_k`/`cross_v`, projected once). We run `generate` on a tiny random BART and compare it
# with a plain argmax loop that re-runs the whole decoder every step without any cache: the tokens
# must be identical, the same property our KV-cache chapter checks. A spy on `_sample` records
# which loop ran and the cache it was given. Like our `greedy_decode`, `generate` pads a sequence
# with PAD once it has produced EOS (id 2).

# %%
torch.manual_seed(2)
# init_std=1.0: large random weights, so that the untrained model's argmax varies from step to step
gen_model = modeling_bart.BartForConditionalGeneration(
    tiny_bart_config("eager", init_std=1.0)
).eval()
src_ids, src_keep = src, to_hf_attention_mask(src)

calls, caches = [], []
original_sample = generation_utils.GenerationMixin._sample


def spy(self, *args, **kwargs):
    calls.append(type(self).__name__)
    caches.append(kwargs.get("cache"))
    return original_sample(self, *args, **kwargs)


generation_utils.GenerationMixin._sample = spy
try:
    with torch.no_grad():
        hf_tokens = gen_model.generate(
            input_ids=src_ids,
            attention_mask=src_keep,
            max_new_tokens=8,
            do_sample=False,
            num_beams=1,
        )
finally:
    generation_utils.GenerationMixin._sample = original_sample

out = torch.full((B, 1), BOS_ID)  # decoder_start_token_id
with torch.no_grad():
    for _ in range(8):
        logits = gen_model(
            input_ids=src_ids, attention_mask=src_keep, decoder_input_ids=out, use_cache=False
        ).logits
        out = torch.cat([out, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
print("generate() with its cache:", hf_tokens.tolist())
print("argmax loop, no cache:    ", out.tolist())
print("_sample called for:", calls)
assert calls == ["BartForConditionalGeneration"]
# generate() pads a row after it produced EOS; compare up to and including the first EOS
finished = 0
for row_hf, row_loop in zip(hf_tokens, out):
    end = (row_loop == EOS_ID).nonzero()
    n = int(end[0]) + 1 if len(end) else len(row_loop)
    assert torch.equal(row_hf[:n], row_loop[:n])
    if len(end):  # after EOS: only PAD
        finished += 1
        assert (row_hf[n:] == PAD_ID).all()
assert finished >= 1  # this seed produces at least one EOS, so the padding rule is exercised

edc = caches[0]  # the cache generate() handed to _sample, as it was left after the last step
self_len, cross_len = edc.get_seq_length(), edc.cross_attention_cache.get_seq_length()
print(f"cache: {type(edc).__name__} = {type(edc.self_attention_cache).__name__} (self, "
      f"{self_len} positions) + {type(edc.cross_attention_cache).__name__} (cross, {cross_len} "
      f"positions); is_updated: {edc.is_updated}")  # fmt: skip
assert isinstance(edc, cache_utils.EncoderDecoderCache)
assert isinstance(edc.self_attention_cache, cache_utils.DynamicCache)
assert isinstance(edc.cross_attention_cache, cache_utils.DynamicCache)
assert cross_len == src_ids.size(1) and edc.is_updated == {0: True}  # the source, projected once

# %% [markdown]
# ## Reading order
#
# With the map, `models/bart/modeling_bart.py` reads top to bottom in one sitting:
# `shift_tokens_right`, the two embeddings, `eager_attention_forward` and `BartAttention` (our
# chapter 03), `BartEncoderLayer` and `BartDecoderLayer` (chapters 05 and 06, in Post-Norm),
# `BartEncoder` and `BartDecoder` (the masks of chapter 07 arrive through `masking_utils`), then
# `BartForConditionalGeneration.forward` for the loss with -100 labels. Then follow the cache
# into `cache_utils.py` and `generate` into `generation/utils.py`. The differences that bite when
# you move weights or habits between the two codebases, all checked above:
#
# | | this book | BART / Marian in `transformers` |
# | --- | --- | --- |
# | normalisation | Pre-Norm, final LayerNorm per stack | Post-Norm, `layernorm_embedding`, no final LayerNorm |
# | positions | sinusoidal, interleaved sin/cos | BART: learned, offset 2; Marian: sinusoidal, sines then cosines |
# | token scale | $\times\sqrt{d}$, init std $d^{-1/2}$ | `scale_embedding` off by default, init std 0.02 |
# | masks | `bool`, True = blocked | `[B, L]` ints, 1 = attend; inside: additive float (eager) or `bool` True = attend (SDPA) |
# | decoder padding | derived from `tgt_in == PAD_ID` | passed as `decoder_attention_mask` (all ones by default) |
# | start symbol | BOS (differs from PAD) | BART: EOS; Marian: PAD |
# | ignored targets | `ignore_index=PAD_ID` | labels set to -100 |
# | token matrices | three: two embeddings and `out_proj` | one, `model.shared`, when `tie_word_embeddings=True` (the default) |
# | output bias | `out_proj.bias` | the buffer `final_logits_bias`; `lm_head` has no bias |

# %% [markdown]
# ## Our trained model inside `transformers`
#
# The map pays off when our weights run inside `transformers`. BART and Marian are Post-Norm.
# **M2M100** and **Pegasus** have our wiring: Pre-Norm, a final LayerNorm per stack, and
# sinusoidal positions added to tokens scaled by $\sqrt{d}$ (with `scale_embedding=True`). Their
# tensors have BART's names.
# `helpers.analysis.hf_port` builds each from a config and copies in the book's trained
# reversal model (chapter 10). We compare logits where the decoder input is not PAD.

# %% tags=["nbval-ignore-output"]
from transformers import M2M100ForConditionalGeneration, PegasusForConditionalGeneration

from helpers import BOOK_RECIPE, greedy_decode, load_or_train
from helpers.analysis import hf_port

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()  # none from save_pretrained, from_pretrained
book_model = load_or_train(BOOK_RECIPE, progress=False, verbose=False).model
book_src, book_tgt = make_reversal_dataset(64, seed=7)
book_tgt_in = book_tgt[:, :-1]
print("transformers", transformers.__version__, "|", book_model.config)
print("src:", tuple(book_src.shape), " tgt_in:", tuple(book_tgt_in.shape))


def gap(hf):
    """max |logits of hf - ours| on the decoder positions whose input is not PAD"""
    return hf_port.max_logit_gap(hf, book_model, book_src, book_tgt_in)


# %% [markdown]
# First M2M100, with `M2M100Config`'s defaults (ReLU, one tied embedding matrix), then GELU and
# three separate matrices. Both are far from ours:

# %% tags=["nbval-ignore-output"]
naive = hf_port.to_m2m100(book_model, positions="hf", activation_function="relu",
                          tie_word_embeddings=True)  # fmt: skip
m2m_own_positions = hf_port.to_m2m100(book_model, positions="hf")
naive_gap, own_positions_gap = gap(naive), gap(m2m_own_positions)
print(f"M2M100, config defaults:       max |logit gap| = {naive_gap:.2f}")
print(f"M2M100, GELU and untied:       max |logit gap| = {own_positions_gap:.2f}")
assert naive_gap > 1 and own_positions_gap > 1

# %% [markdown]
# M2M100's own position table differs from ours in three ways. Position $p$ reads row
# $p + 1 +$ `padding_idx`; PAD reads row `padding_idx`, which is zero. Its frequency $i$ is
# $10000^{-i/(d/2 - 1)}$, ours $10000^{-i/(d/2)}$. And the sines fill the first half of each row,
# the cosines the second. The cell checks each:

# %%
m2m_positions = m2m_own_positions.model.encoder.embed_positions
table = m2m_positions.weights  # [max_len + 2, d]
half, pad_row = book_model.config.d_model // 2, m2m_positions.padding_idx
start = pad_row + 1  # the row position 0 reads


def sin_cos_halves(angle_rows, denominator):  # row r: sin(r w_i) | cos(r w_i), w_i = 1e4^(-i/den)
    angles = angle_rows[:, None] * torch.exp(torch.arange(half) * -(math.log(10000) / denominator))
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)


positions = torch.arange(book_model.max_len)
ours_pe = book_model.encoder.embed.pe
ours_in_halves = torch.cat([ours_pe[:, 0::2], ours_pe[:, 1::2]], dim=1)
torch.testing.assert_close(ours_in_halves, sin_cos_halves(positions, half), atol=1e-6, rtol=0)
hf_rows = table[start : start + book_model.max_len]
read = m2m_positions(book_src)  # what M2M100 adds to our source tokens: [B, Ls, d]
expected_read = torch.where(
    (book_src != PAD_ID)[..., None], hf_rows[: book_src.size(1)], table[pad_row]
)
print(f"offset {m2m_positions.offset}: position 0 reads row {start}; PAD reads row "
      f"{pad_row}, max |value| {table[pad_row].abs().max():.1f}")  # fmt: skip
print(f"M2M100 reads those rows for our source batch {tuple(read.shape)}: "
      f"{torch.equal(read, expected_read)}")  # fmt: skip
print(f"max |M2M100's rows - the formula| = "
      f"{(hf_rows - sin_cos_halves(positions + start, half - 1)).abs().max():.1e}")  # fmt: skip
print(f"max |M2M100's rows - ours in halves| = {(hf_rows - ours_in_halves).abs().max():.2f}")
torch.testing.assert_close(hf_rows, sin_cos_halves(positions + start, half - 1), atol=1e-6, rtol=0)
assert torch.equal(read, expected_read) and not table[pad_row].any()
assert (hf_rows - ours_in_halves).abs().max() > 0.5

# %% [markdown]
# With our table in those rows, one difference is left: M2M100 has no tensor for our
# `out_proj.bias`. Its logits are ours minus that bias, to float32 rounding:

# %% tags=["nbval-ignore-output"]
m2m = hf_port.to_m2m100(book_model)  # our position table written into its rows
real = book_tgt_in != PAD_ID
bias = book_model.out_proj.bias.detach()
with torch.no_grad():
    ours_logits = book_model(book_src, book_tgt_in)
    m2m_logits = hf_port.hf_logits(m2m, book_src, book_tgt_in)
rest = (m2m_logits + bias - ours_logits)[real].abs().max().item()
m2m_gap = gap(m2m)
print(f"M2M100, our positions:         max |logit gap| = {m2m_gap:.3f}")
print(
    f"largest |out_proj.bias| entry: {bias.abs().max():.3f}; "
    f"max |M2M100 + out_proj.bias - ours| = {rest:.1e}"
)
print("M2M100's lm_head.bias:", m2m.lm_head.bias, "| its buffers:",
      [name for name, _ in m2m.named_buffers()])  # fmt: skip
assert rest < 1e-5 and abs(m2m_gap - bias.abs().max().item()) < 1e-5 and m2m_gap > 0.01
for name, default in [("ReLU", dict(activation_function="relu")),
                      ("tied matrices", dict(tie_word_embeddings=True))]:  # fmt: skip
    put_back = gap(hf_port.to_m2m100(book_model, **default))  # each config default alone
    print(f"  with {name + ':':<15} max |logit gap| = {put_back:.2f}")
    assert put_back > m2m_gap + 0.1

# %% [markdown]
# :::{dropdown} Going deeper: the bias folded into the last LayerNorm
# For this model the bias can move into a tensor M2M100 has. The decoder's last LayerNorm ends
# by adding its bias $\beta$. Then `lm_head` multiplies by $W$, of shape $[V, d]$. So the logits
# contain $W\beta$. Adding $\delta$ to $\beta$ adds $W\delta$ to every logit vector. We need
# $W\delta = b$, our `out_proj.bias`. Here $W$ has 13 rows and 32 columns, and rank 13, so such
# a $\delta$ exists. A real vocabulary has far more tokens than dimensions; there $W\delta$ can
# reach only a $d$-dimensional part of all bias vectors, and most biases lie outside it. The cell
# solves for $\delta$ by least squares and adds it to `model.decoder.layer_norm.bias`.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell", "nbval-ignore-output"]
W, b = book_model.out_proj.weight.detach(), book_model.out_proj.bias.detach()
delta = torch.linalg.lstsq(W.double(), b.double()[:, None]).solution[:, 0].float()
folded = hf_port.to_m2m100(book_model)
with torch.no_grad():
    folded.model.decoder.layer_norm.bias += delta
rank, folded_gap = torch.linalg.matrix_rank(W.double()).item(), gap(folded)
print(f"lm_head weight {list(W.shape)}, rank {rank}; max |W delta - b| = "
      f"{(W @ delta - b).abs().max():.1e}")  # fmt: skip
print(f"M2M100, bias folded into its last LayerNorm: max |logit gap| = {folded_gap:.1e} "
      f"(before: {m2m_gap:.3f})")  # fmt: skip
assert rank == W.size(0) and folded_gap < 1e-4  # float32 rounding: tests/test_hf_port.py's BOUND

# %% [markdown]
# :::{dropdown} Going deeper: M2M100 forgets our positions when saved
# M2M100 keeps its position table in a buffer registered with `persistent=False`.
# `save_pretrained` leaves it out of the file, and `from_pretrained` rebuilds it with its own
# formula. The port does not survive a round trip:
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell", "nbval-ignore-output"]
import tempfile

import safetensors.torch

with tempfile.TemporaryDirectory() as folder:
    m2m.save_pretrained(folder)
    saved = set(safetensors.torch.load_file(Path(folder, "model.safetensors")))
    m2m_back = M2M100ForConditionalGeneration.from_pretrained(folder).eval()
print("position tables in the saved file:", [k for k in saved if "embed_positions" in k])
back_gap = gap(m2m_back)
print(f"after save and load: max |logit gap| = {back_gap:.2f}")
assert not any("embed_positions" in k for k in saved) and back_gap > 1

# %% [markdown]
# Pegasus keeps the bias in its `final_logits_bias` buffer. Its position table is a frozen
# `nn.Embedding`, read from row 0 for position 0, as ours. It holds our codes in halves, so it
# takes our table too. Then the logits are ours, also after a save and load:

# %% tags=["nbval-ignore-output"]
pegasus_own_positions = hf_port.to_pegasus(book_model, positions="hf")
pegasus = hf_port.to_pegasus(book_model)  # our table in both stacks, out_proj.bias in the buffer
own_table = pegasus_own_positions.model.encoder.embed_positions.weight
with tempfile.TemporaryDirectory() as folder:
    pegasus.save_pretrained(folder)
    pegasus_back = PegasusForConditionalGeneration.from_pretrained(folder).eval()
print(
    f"Pegasus's own table: max |- ours in halves| = {(own_table - ours_in_halves).abs().max():.0e}"
)
gaps = {"its own positions": gap(pegasus_own_positions), "our positions": gap(pegasus),
        "after save and load": gap(pegasus_back)}  # fmt: skip
for name, value in gaps.items():
    shown = f"{value:.2f}" if value > 0.01 else f"{value:.1e}"
    print(f"Pegasus, {name + ':':<21} max |logit gap| = {shown}")
torch.testing.assert_close(own_table, ours_in_halves, atol=1e-6, rtol=0)
assert gaps["its own positions"] > 1
assert gaps["our positions"] < 1e-5 and gaps["after save and load"] < 1e-5

# %% [markdown]
# `generate(do_sample=False, num_beams=1)` on Pegasus gives `greedy_decode`'s tokens. Every
# greedy choice beats the runner-up by far more than generate's logits differ from ours, so no
# step can flip:

# %% tags=["nbval-ignore-output"]
ours_tokens = greedy_decode(book_model, book_src)
hf_tokens, step_logits = hf_port.hf_greedy(pegasus, book_src, book_model.max_len, with_logits=True)
path_gap = hf_port.step_logit_gap(book_model, book_src, ours_tokens, step_logits)  # with its cache
margin = hf_port.greedy_margin(book_model, book_src, ours_tokens)
same_rows = int((hf_tokens == ours_tokens).all(1).sum())
print(f"generate: {tuple(hf_tokens.shape)}, greedy_decode: {tuple(ours_tokens.shape)}; "
      f"equal rows: {same_rows} of {len(ours_tokens)}")  # fmt: skip
print(
    f"smallest top-1 minus top-2 logit along the path {margin:.2f}; logit gap there {path_gap:.1e}"
)
assert margin > 2 * path_gap + 1e-4
assert torch.equal(hf_tokens, ours_tokens)

# %% [markdown]
# :::{dropdown} Going deeper: PAD before EOS
# A model that emits PAD before EOS goes on from other logits in the two. Our decoder masks
# that PAD as a key: its padding mask comes from the ids. `generate` builds no such mask, so
# Pegasus attends to the PAD. The cell hands `generate` decoder inputs with a PAD inside. It
# compares the next step's logits with ours, and with Pegasus given the mask.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell", "nbval-ignore-output"]
holed = book_tgt_in[:, :4].clone()
holed[:, 2] = PAD_ID  # BOS, a digit, PAD, a digit: every target has at least 3 digits
with torch.no_grad():
    ours_next = book_model(book_src, holed)[:, -1]
    generated = pegasus.generate(
        input_ids=book_src, attention_mask=to_hf_attention_mask(book_src),
        decoder_input_ids=holed, max_new_tokens=1, do_sample=False, num_beams=1,
        output_logits=True, return_dict_in_generate=True)  # fmt: skip
generate_next = generated.logits[0]  # [B, V]: the step after the four inputs
masked_next = hf_port.hf_logits(pegasus, book_src, holed)[:, -1]  # the mask from the ids
generate_gap = (generate_next - ours_next).abs().max().item()
masked_gap = (masked_next - ours_next).abs().max().item()
print(f"after a PAD, max |logit gap|: generate {generate_gap:.2f}; "
      f"Pegasus with decoder_attention_mask {masked_gap:.1e}")  # fmt: skip
assert generate_gap > 0.1 and masked_gap < 1e-5

# %% [markdown]
# ## Summary
#
# - A map from every piece of `helpers` to its counterpart in `transformers` (BART, and Marian's
#   positions), each name imported from the pinned release and located by file and line; the
#   names older tutorials use are checked to be gone. Figure 16.1 maps our encoder and
#   output head name by name.
# - Our attention weights loaded into `BartAttention` give our outputs, in its eager and its SDPA
#   implementation; our masks converted to its conventions equal the masks `masking_utils` builds.
# - A `BartEncoderLayer` holding our weights computes the Post-Norm function of our modules, not
#   our Pre-Norm one.
# - BART ties its two embeddings and `lm_head` into one tensor by default, and adds a
#   `final_logits_bias` buffer where we have `out_proj.bias`: a port name by name overwrites.
#   No weight copy makes BART compute our model: it is Post-Norm, with a LayerNorm on its input
#   and none at the end.
# - BART's tokens and learned positions start at the same scale. A Marian built from the default
#   config starts with positions about 36 times louder than its tokens; `scale_embedding=True`
#   changes that (exercise 16.1).
# - `generate` with its cache gives the tokens of a plain argmax loop without one.
# - Our trained model inside `transformers`. M2M100 has no tensor for `out_proj.bias`: its
#   logits are ours minus that bias. With 13 tokens and 32 dimensions, the bias folds into its
#   last LayerNorm. A save forgets our positions. Pegasus holds it exactly: the same logits,
#   also after a save and load, and `generate` gives `greedy_decode`'s tokens.
# - The one thing to remember: check a source map against the installed code, because the names
#   move from release to release.
#
# ## Exercises
#
# ### Exercise 16.1 (predict, then run): Marian with `scale_embedding=True`
#
# `scale_embedding=True` multiplies Marian's token vectors by $\sqrt{d}$ before the positions are
# added. Predict the ratio of position RMS to token RMS at `MarianConfig`'s default width, and at
# `d_model=256`: does it still depend on the width? Then run `marian_input_scales`.

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
# Solution to exercise 16.1
for overrides in (dict(scale_embedding=True), dict(scale_embedding=True, d_model=256)):
    width, tok_rms, pos_rms = marian_input_scales(**overrides)
    print(
        f"d_model = {width:>4}, scale on: token RMS {tok_rms:.3f}, position RMS {pos_rms:.3f}, "
        f"ratio {pos_rms / tok_rms:.1f} (0.02 x sqrt(d) = {0.02 * math.sqrt(width):.3f})"
    )
    # the tokens grow with sqrt(d); the sinusoids keep an RMS of sqrt(1/2) at every width
    assert (
        abs(tok_rms - 0.02 * math.sqrt(width)) < 0.05 * tok_rms and abs(pos_rms - 0.5**0.5) < 1e-3
    )

# %% [markdown]
# ### Exercise 16.2 (predict, then run): where BART scales its scores
#
# Our attention divides the scores by $\sqrt{d_k}$. Predict the factor `BartAttention` applies in
# the attention section (`bart_attn["eager"]`: `d_model` 32, 4 heads), and whether it divides the
# scores or multiplies them. Then find it: search the source of its `__init__` and `forward` with
# `inspect.getsource`, print the lines, and check the value on `bart_attn["eager"]`.

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
# Solution to exercise 16.2
for method in (modeling_bart.BartAttention.__init__, modeling_bart.BartAttention.forward):
    for line in inspect.getsource(method).splitlines():
        if "scaling" in line:
            print(f"{method.__qualname__}: {line.strip()}")
scaling = bart_attn["eager"].scaling
print(
    f"scaling = {scaling:.4f}; 1 / sqrt(d_k) = 1 / sqrt({d_model // heads}) = "
    f"{1 / math.sqrt(d_model // heads):.4f}"
)
assert math.isclose(scaling, 1 / math.sqrt(d_model // heads))
# eager_attention_forward multiplies the scores by it
assert "* scaling" in inspect.getsource(modeling_bart.eager_attention_forward)

# %% [markdown]
# ### Exercise 16.3 (implement): a decoder layer, name by name
#
# Figure 16.1 maps an encoder layer. Write `bart_name(name)` for a decoder layer: it takes the name
# of a parameter of our `DecoderLayer` (`"self_mha.W_q.weight"`, `"ln2.bias"`, ...) and returns
# the name of the tensor that plays the same part in a `BartDecoderLayer`
# (`"self_attn.q_proj.weight"`, ...). Match each LayerNorm by the sub-layer it belongs to. Find
# BART's names with `modeling_bart.BartDecoderLayer(tiny_bart_config(), layer_idx=0)` and its
# `named_parameters()`.
# `check_bart_decoder_names` calls your function on all 26 parameter names of a `DecoderLayer`.

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 16.3
from helpers.exercises import check_bart_decoder_names

DECODER_MAP = {"self_mha": "self_attn", "cross_mha": "encoder_attn", "W_q": "q_proj",
               "W_k": "k_proj", "W_v": "v_proj", "W_o": "out_proj", "ln1": "self_attn_layer_norm",
               "ln2": "encoder_attn_layer_norm", "ln3": "final_layer_norm"}  # fmt: skip


def bart_name(name):
    name = name.replace("ffn.net.0", "fc1").replace("ffn.net.2", "fc2")
    return ".".join(DECODER_MAP.get(part, part) for part in name.split("."))


bart_params = dict(
    modeling_bart.BartDecoderLayer(tiny_bart_config(), layer_idx=0).named_parameters()
)
ours_params = dict(DecoderLayer(d_model, heads, 4 * d_model, dropout=0.0).named_parameters())
assert {bart_name(n): p.shape for n, p in ours_params.items()} == {
    n: p.shape for n, p in bart_params.items()
}  # every BART name reached once, with our tensor's shape
check_bart_decoder_names(bart_name)

# %% [markdown]
# ### Exercise 16.4 (implement): our positions in M2M100's table
#
# Write `m2m100_positions(pe, padding_idx)`. It takes our table `pe` of shape `[L, d]` and
# returns the `[L + 2, d]` buffer M2M100 needs so that position $p$ gets `pe[p]` and PAD gets
# zeros. Keep `pe`'s dtype. `check_m2m100_positions` tries `padding_idx` 0 (ours) and 1
# (M2M100's default).

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 16.4
from helpers.exercises import check_m2m100_positions


def m2m100_positions(pe, padding_idx):
    table = torch.zeros(pe.size(0) + 2, pe.size(1))
    table[padding_idx + 1 : padding_idx + 1 + pe.size(0)] = pe  # the PAD row stays zero
    return table


assert torch.equal(m2m100_positions(ours_pe, PAD_ID), m2m.model.encoder.embed_positions.weights)
check_m2m100_positions(m2m100_positions)
