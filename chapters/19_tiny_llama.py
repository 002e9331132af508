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
# # 19. A tiny Llama, equal to Hugging Face's
#
# Chapter 14 built a character-level GPT from the 2017 block. This chapter rebuilds the same model
# with today's block, the one Llama {cite}`touvron2023` made the default: RMSNorm, rotary
# positions, a gated feed-forward, grouped-query attention and no biases. We train it briefly on
# the book's text. Then we copy its weights into `transformers`' `LlamaForCausalLM` and show that
# the two compute the same function: the same logits, and the same greedy text.
# The copy fails first, in four ways. Each one is a convention, and each one gets fixed.
#
# ![Chapter 14's block and today's block, side by side](figures/19_tiny_llama.png)

# %% [markdown] tags=["run-time"]
# **Run time:** about 20 s.

# %% [markdown]
# Figure 19.1 lines up the two blocks. Every part on the right comes from chapter 18's
# `helpers.core.modern`. `helpers.llama.TinyLlama` assembles them into a decoder-only model with
# chapter 14's interface. So chapter 14's tokenizer, training loop and `generate` run it
# unchanged.

# %%
import inspect
import math
import sys
from pathlib import Path
from unittest import mock

import matplotlib.pyplot as plt
import torch
import torch.nn as nn
import torch.nn.functional as F
import transformers
from transformers.models.llama import modeling_llama

import helpers.llama as llama
from helpers import PAD_ID, CharTokenizer, MiniGPT, count_parameters, generate, load_corpus
from helpers.core import modern
from helpers.gpt import fixed_windows, split_train_val, train_gpt
from helpers.llama import TinyLlama, hf_llama_config, hf_llama_name, to_hf_llama

transformers.logging.set_verbosity_error()
torch.set_num_threads(1)  # the tensors are small: one CPU thread is enough
_ = torch.manual_seed(0)
print("transformers", transformers.__version__)


# %% jupyter={"source_hidden": true} tags=["figure", "hide-input", "opening-figure"]
def draw_two_blocks():
    from matplotlib.patches import FancyBboxPatch

    fig, ax = plt.subplots(figsize=(10, 4.9))
    ax.set_xlim(0, 13)
    ax.set_ylim(0.7, 8.6)
    ax.axis("off")

    def box(x, y, w, text, color, h=0.8):
        ax.add_patch(
            FancyBboxPatch(
                (x - w / 2, y - h / 2), w, h, fc=color, ec="0.3", lw=1.0,
                boxstyle="round,pad=0.02,rounding_size=0.1",
            )
        )  # fmt: skip
        ax.text(x, y, text, ha="center", va="center", fontsize=8.5)

    rows = [  # (chapter 14, change, this chapter, colour)
        ("final LayerNorm, Linear head", "", "final RMSNorm, Linear head", "white"),
        ("feed-forward: Linear, GELU, Linear\nwidth 256, biases", "a gate",
         "SwiGLU: down(silu(gate x) * up x)\nwidth 171, no biases", "#d8f0d2"),
        ("LayerNorm (mean, scale, bias)", "no mean, no bias", "RMSNorm (scale only)", "#ececec"),
        ("attention: 4 query, 4 key/value heads\nbiases", "fewer K/V heads,\nrotated q, k",
         "attention: 4 query, 2 key/value heads\nRoPE on q and k, no biases", "#fde2c8"),
        ("LayerNorm (mean, scale, bias)", "no mean, no bias", "RMSNorm (scale only)", "#ececec"),
        ("embedding * sqrt(d) + sinusoidal positions", "positions move\ninto attention",
         "embedding (no positions)", "white"),
    ]  # fmt: skip
    xl, xm, xr = 2.9, 6.5, 10.1
    ax.text(xl, 8.25, "chapter 14: MiniGPT", ha="center", fontsize=11, weight="bold")
    ax.text(xr, 8.25, "this chapter: TinyLlama", ha="center", fontsize=11, weight="bold")
    for i, (left, change, right, color) in enumerate(rows):
        y = 7.3 - i * 1.2
        box(xl, y, 4.6, left, color)
        box(xr, y, 4.6, right, color)
        if change:
            ax.annotate("", xy=(xr - 2.35, y), xytext=(xl + 2.35, y),
                        arrowprops=dict(arrowstyle="-|>", color="#c0392b", lw=1.2))  # fmt: skip
            ax.text(xm, y + 0.08, change, ha="center", va="bottom", fontsize=7.5, color="#c0392b")
    for x in (xl, xr):  # the repeated block: rows 1 to 4
        ax.add_patch(
            FancyBboxPatch(
                (x - 2.5, 2.0), 5.0, 4.75, fc="none", ec="0.55", lw=1.0, ls="--",
                boxstyle="round,pad=0.02,rounding_size=0.15",
            )
        )  # fmt: skip
        ax.text(x - 2.45, 6.5, "x 2", fontsize=8, color="0.35")
    ax.set_title("Figure 19.1: the same model, with today's block", fontsize=11)
    fig.tight_layout()


draw_two_blocks()
plt.show()

# %% [markdown]
# ## 1. Today's block, from chapter 18's parts
#
# The text and the tokenizer are chapter 14's. One model is chapter 14's `MiniGPT`, for
# comparison; the other is `TinyLlama`, with the same width, heads and depth. The SwiGLU width is
# $\text{round}(2/3 \cdot 4d) = 171$, so that its three matrices hold about as many weights as the
# two of a $4d$ feed-forward. Two key/value heads serve four query heads: each pair of query
# heads shares one.
#
# We build it with `rope_layout="interleaved"`: each rotated pair of dimensions is $(2i, 2i+1)$,
# as in the RoPE paper {cite}`su2021`. Section 4 shows why that matters.

# %%
text = load_corpus()
tok = CharTokenizer(text)
train_ids, val_ids = split_train_val(tok.encode(text), val_fraction=0.1)

torch.manual_seed(0)
gpt = MiniGPT(tok.vocab_size, d_model=64, num_heads=4, dff=256, num_layers=2, dropout=0.0)
torch.manual_seed(0)
model = TinyLlama(tok.vocab_size, num_kv_heads=2, rope_layout="interleaved")
cfg = model.config
print(cfg)
block = model.blocks[0]
assert type(block.norm1) is nn.RMSNorm and block.norm1.eps == 1e-6
assert type(block.ffn) is modern.SwiGLU and cfg.ffn_dim == modern.swiglu_hidden(4 * 64) == 171
assert not any(n.endswith("bias") for n, _ in model.named_parameters())


def parameters_by_part(m):
    parts = {"embedding": 0, "attention": 0, "feed-forward": 0, "norms": 0, "head": 0}
    for name, p in m.named_parameters():
        if name.startswith("embed"):
            parts["embedding"] += p.numel()
        elif ".mha." in name or ".attn." in name:
            parts["attention"] += p.numel()
        elif ".ffn." in name:
            parts["feed-forward"] += p.numel()
        elif name.startswith("head"):
            parts["head"] += p.numel()
        else:
            parts["norms"] += p.numel()
    return parts


print(f"\n{'parameters':<14}{'MiniGPT':>9}{'TinyLlama':>11}")
for part, (a, b) in zip(
    parameters_by_part(gpt),
    zip(parameters_by_part(gpt).values(), parameters_by_part(model).values()),
):
    print(f"{part:<14}{a:>9,}{b:>11,}")
print(f"{'total':<14}{count_parameters(gpt):>9,}{count_parameters(model):>11,}")

# %% [markdown]
# Attention is smaller: $W_k$ and $W_v$ project to two heads of 16 dimensions, not four. The
# norms have half the parameters, with no bias. The feed-forward is about the same size.
#
# Is the model nothing more than these parts? Run block 0 by hand on two windows of 32
# characters, with the parts of `helpers.core.modern`. The attention step is computed twice:
# with the key/value heads repeated by `repeat_kv`, and by PyTorch's SDPA with `enable_gqa=True`,
# which shares them itself.

# %%
x = fixed_windows(val_ids, 32, 2)[0]
with torch.no_grad():
    h = model.embed(x)
    print("embedded      ", tuple(h.shape))
    attn = block.attn
    a = block.norm1(h)
    angles = modern.rope_angles(torch.arange(x.size(1)), cfg.head_dim, cfg.rope_theta)
    q = modern.apply_rope(attn.heads(attn.W_q(a), 4), angles, "interleaved")
    k = modern.apply_rope(attn.heads(attn.W_k(a), 2), angles, "interleaved")
    v = attn.heads(attn.W_v(a), 2)
    print("q             ", tuple(q.shape), "\nk, v          ", tuple(k.shape))
    K, V = modern.repeat_kv(k, 2), modern.repeat_kv(v, 2)
    print("k, v repeated ", tuple(K.shape))
    out = F.scaled_dot_product_attention(q, K, V, is_causal=True)
    shared = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    torch.testing.assert_close(out, shared)
    h = h + attn.W_o(out.transpose(1, 2).reshape(2, x.size(1), -1))
    h = h + block.ffn(block.norm2(h))
    h = model.blocks[1](h, angles)
    logits_by_hand = model.head(model.norm_final(h))
    print("logits        ", tuple(logits_by_hand.shape))
    torch.testing.assert_close(model(x), logits_by_hand)

# %% [markdown]
# ## 2. A short training run
#
# `helpers.train_gpt` is chapter 14's loop: random windows, AdamW, warm-up then cosine decay,
# gradients clipped at norm 1. Here it runs 150 steps of 16 windows of 48 characters, seed 0.
# Why train at all? A wrong port shows clearly only on trained weights. On an untrained model it
# moves the logits far less (exercise 19.1).

# %% tags=["nbval-ignore-output"]
hist = train_gpt(
    model, train_ids, val_ids, steps=150, batch_size=16, block_size=48, lr=1e-2, warmup=20,
    eval_every=50, eval_windows=16, seed=0, keep_best=False, progress=False,
)  # fmt: skip
model.eval()
ln_v = math.log(tok.vocab_size)
print(f"150 steps in {hist['seconds']:.1f} s")
print(f"held-out loss {hist['val_loss'][0]:.3f} at step {hist['eval_step'][0]}, "
      f"{hist['val_loss'][-1]:.3f} at step {hist['eval_step'][-1]}")  # fmt: skip
print(f"(a uniform guess: ln V = {ln_v:.3f})")
assert hist["val_loss"][-1] < ln_v - 1.5

prompts = torch.stack(
    [tok.encode(p) for p in ("The model ", "Attention ", "A mask is ", "The cache ")]
)
ours = generate(model, prompts, max_new_tokens=100, temperature=0)
print(repr(tok.decode(ours[0])))

# %% [markdown]
# Figure 19.2 shows the loss of each training batch and of the held-out text.

# %% jupyter={"source_hidden": true} tags=["figure", "hide-input"]
fig, ax = plt.subplots(figsize=(7, 3.4))
ax.plot(
    hist["step"], hist["batch_loss"], color="tab:blue", alpha=0.35, lw=0.8, label="training batches"
)
ax.plot(hist["eval_step"], hist["val_loss"], "o-", color="tab:orange", ms=3, label="held-out text")
ax.axhline(ln_v, color="black", lw=0.8, ls="--", label="ln V (uniform guess)")
ax.set_xlabel("step")
ax.set_ylabel("cross entropy (nats per character)")
ax.set_title("Figure 19.2: the tiny Llama on the book's corpus (seed 0)")
ax.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 3. The same weights in `LlamaForCausalLM`
#
# `hf_llama_config` writes the same architecture as a `LlamaConfig`. Nothing is downloaded: the
# model class is built from the config, with random weights, and ours overwrite them. The fields
# that matter:

# %%
config = hf_llama_config(cfg)
for field in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_parameters",
              "hidden_act", "attention_bias", "tie_word_embeddings"):  # fmt: skip
    print(f"{field:<22} {getattr(config, field)}")

# %% [markdown]
# The head is untied, as in `LlamaConfig`'s default (`tie_word_embeddings=False`); the dropdown
# ports a tied one.
#
# :::{dropdown} Going deeper: a tied head
# `TinyLlama(..., tie_weights=True)` shares one matrix between the embedding and the output
# head, like GPT-2. The port then sets `tie_word_embeddings=True`, and `LlamaForCausalLM` ties
# its `lm_head` to `model.embed_tokens`. The cell checks that on a fresh model, and compares the
# logits.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["nbval-ignore-output", "hide-cell"]
print("LlamaConfig().tie_word_embeddings:", transformers.LlamaConfig().tie_word_embeddings)
print("GPT2Config().tie_word_embeddings: ", transformers.GPT2Config().tie_word_embeddings)
torch.manual_seed(0)
tied = TinyLlama(cfg, tie_weights=True).eval()
hf_tied = to_hf_llama(tied)
probe = fixed_windows(val_ids, 32, 2)[0]
with torch.no_grad():
    gap_tied = (hf_tied(probe).logits - tied(probe)).abs().max().item()
print("lm_head is embed_tokens:", hf_tied.lm_head.weight is hf_tied.model.embed_tokens.weight)
print(f"tied: max |logit difference| {gap_tied:.1e}")
assert hf_tied.lm_head.weight is hf_tied.model.embed_tokens.weight and gap_tied < 1e-4

# %% [markdown]
# Each of our tensors has one home in the Hugging Face model. The map below is printed from the
# installed packages, with the class that owns each tensor and where it is defined, as in
# chapter 16.

# %%
hf_plain = transformers.LlamaForCausalLM(config)


def owner(hf_model, hf_name):
    """The class of the module that holds a tensor, and where the installed package defines it."""
    cls = type(hf_model.get_submodule(hf_name.rsplit(".", 1)[0]))
    package = sys.modules[cls.__module__.split(".")[0]]
    root = Path(package.__file__).parent.parent
    path = Path(inspect.getsourcefile(cls)).relative_to(root).as_posix()
    return f"{cls.__name__:<13} {path}:{inspect.getsourcelines(cls)[1]}"


hf_shapes = {n: p.shape for n, p in hf_plain.state_dict().items()}
for name, p in model.state_dict().items():
    if not name.startswith("blocks.1."):
        theirs = hf_llama_name(name)
        print(f"{name:<25} {theirs:<47} {str(tuple(p.shape)):<10} {owner(hf_plain, theirs)}")
mapped = {hf_llama_name(n): p.shape for n, p in model.state_dict().items()}
assert mapped == hf_shapes  # every Hugging Face tensor reached once, with its shape
print(f"({len(mapped)} tensors; block 1 is mapped as block 0)")

# %% [markdown]
# ## 4. The first copy, and the rotation layout
#
# Copy the weights name by name, as they are. Then run both models on eight held-out windows of
# 96 characters and compare the logits.

# %% tags=["nbval-ignore-output"]
xv = fixed_windows(val_ids, 96, 8)[0]
print("windows", tuple(xv.shape))


def max_gap(hf_model, ids=xv, ref=model):
    with torch.no_grad():
        return (hf_model(ids).logits - ref(ids)).abs().max().item()


as_is = to_hf_llama(model, permute_rope=False)
with torch.no_grad():
    gap_first = (as_is(xv).logits[:, 0] - model(xv)[:, 0]).abs().max().item()
gap_as_is = max_gap(as_is)
print(f"copied as is: max |logit difference| {gap_as_is:.2f}")
print(f"at position 0 only: {gap_first:.1e}")
assert gap_as_is > 1.0 and gap_first < 1e-5

# %% [markdown]
# The logits differ by whole units, except at position 0. There the rotation angle is zero, so
# RoPE changes nothing, whichever dimensions it pairs. That points at RoPE. Here is how the
# installed `transformers` rotates:

# %%
print(inspect.getsource(modeling_llama.rotate_half))

# %% [markdown]
# `rotate_half` splits the head into two halves. It pairs dimension $i$ with dimension
# $i + d_h/2$: the **half** layout. Our model pairs $2i$ with $2i + 1$: the **interleaved**
# layout. Both rotate each pair by the same angle $p\,\theta_i$. They differ only in which
# dimensions form a pair.
#
# So a fixed reordering of each head's dimensions turns one layout into the other:
# $(0, 2, 4, \dots, 1, 3, 5, \dots)$, `modern.rope_permutation`. Reorder a query, rotate it the
# half way, and you get the interleaved rotation, reordered the same way:

# %%
perm = modern.rope_permutation(cfg.head_dim)
print("permutation:", perm.tolist())
with torch.no_grad():
    rotated_interleaved = modern.apply_rope(q, angles, "interleaved")
    rotated_half = modern.apply_rope(q[..., perm], angles, "half")
torch.testing.assert_close(rotated_half, rotated_interleaved[..., perm])
print("half(q[perm]) == interleaved(q)[perm]:", tuple(q.shape))

# %% [markdown]
# Attention only uses dot products $q \cdot k$. A dot product does not change when both vectors
# are reordered the same way. So we reorder the output rows of $W_q$ and $W_k$ inside each head,
# once, in the weights. $W_v$ and $W_o$ stay as they are. By hand, for every block:

# %% tags=["nbval-ignore-output"]
state = {}
for name, p in model.state_dict().items():
    if name.endswith(("attn.W_q.weight", "attn.W_k.weight")):
        heads = p.size(0) // cfg.head_dim  # 4 for W_q, 2 for W_k
        p = p.view(heads, cfg.head_dim, -1)[:, perm].reshape_as(p)
    state[hf_llama_name(name)] = p
hf_by_hand = transformers.LlamaForCausalLM(config)
hf_by_hand.load_state_dict(state, strict=True)
hf_by_hand.eval()
gap_by_hand = max_gap(hf_by_hand)

hf = to_hf_llama(model)  # the library's port does the same
assert all(torch.equal(state[n], p) for n, p in hf.state_dict().items())
gap_fixed = max_gap(hf)
with torch.no_grad():
    scale = model(xv).abs().max().item()
print(f"rows permuted: max |logit difference| {gap_fixed:.1e} (logits up to {scale:.1f})")
assert gap_fixed < 1e-4 and gap_by_hand == gap_fixed

# %% [markdown]
# What is left is float32 rounding, below $10^{-4}$.
#
# :::{dropdown} Going deeper: the half layout needs no permutation
# The permutation works inside our own model too. Give a `TinyLlama` with `rope_layout="half"`
# the permuted weights, and it computes the interleaved model's function. That model can then be
# copied into `LlamaForCausalLM` with no permutation at all. The library's default layout is
# `"half"` for that reason.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["nbval-ignore-output", "hide-cell"]
half = TinyLlama(cfg, rope_layout="half").eval()
half.load_state_dict(
    {n: state[hf_llama_name(n)] for n in model.state_dict()}  # the permuted weights
)
with torch.no_grad():
    gap_half = (half(xv) - model(xv)).abs().max().item()
gap_half_hf = max_gap(to_hf_llama(half), ref=half)
print(f"half-layout model vs interleaved model: {gap_half:.1e}")
print(f"half-layout model copied without permutation vs LlamaForCausalLM: {gap_half_hf:.1e}")
assert gap_half < 1e-4 and gap_half_hf < 1e-4
print("TinyLlama's default rope_layout:", repr(llama.TinyLlamaConfig(tok.vocab_size).rope_layout))
assert llama.TinyLlamaConfig(tok.vocab_size).rope_layout == "half"

# %% [markdown]
# ## 5. Three more conventions
#
# Three other choices must match too. Each one below fails first, then is fixed.
#
# **Which query heads share a key/value head.** With 4 query heads and 2 key/value heads, key head
# 0 could serve query heads 0 and 1 (`repeat_interleave`), or query heads 0 and 2
# (`tensor.repeat`, tiling). Both are grouped-query attention, but they are different models.
# Hugging Face's `repeat_kv` does the first. Yet the installed model does not call it here. It
# computes attention with PyTorch's SDPA and passes `enable_gqa=True`: the cell watches its calls.
# Section 1 showed that `enable_gqa` groups the heads as `repeat_interleave` does.

# %%
kv = torch.arange(2.0).view(1, 2, 1, 1)  # key/value heads 0 and 1
print("modeling_llama.repeat_kv:", modeling_llama.repeat_kv(kv, 2).flatten().tolist())
print("repeat_interleave:       ", kv.repeat_interleave(2, dim=1).flatten().tolist())
print("repeat (tiling):         ", kv.repeat(1, 2, 1, 1).flatten().tolist())
assert torch.equal(modeling_llama.repeat_kv(kv, 2), kv.repeat_interleave(2, dim=1))

sdpa_calls = []


def watched_sdpa(q, k, v, *args, _sdpa=F.scaled_dot_product_attention, **kwargs):
    sdpa_calls.append((q.size(1), k.size(1), kwargs.get("enable_gqa", False)))
    return _sdpa(q, k, v, *args, **kwargs)


with mock.patch.object(F, "scaled_dot_product_attention", watched_sdpa), torch.no_grad():
    hf(xv)
print("attn_implementation:", hf.config._attn_implementation)
print("SDPA calls (query heads, key heads, enable_gqa):", sdpa_calls)
assert sdpa_calls == [(4, 2, True)] * cfg.num_layers

# %% [markdown]
# Our model with tiling in place of `repeat_interleave`, against the Hugging Face copy:


# %% tags=["nbval-ignore-output"]
def tiled(t, rep):
    return t.repeat(1, rep, 1, 1)


with mock.patch.object(llama, "repeat_kv", tiled):  # our model, tiling instead
    gap_tiled = max_gap(hf)
print(f"our model with tiled heads: max |logit difference| {gap_tiled:.2f}")
print(f"with repeat_interleave:     max |logit difference| {max_gap(hf):.1e}")
assert gap_tiled > 1.0

# %% [markdown]
# **The epsilon of RMSNorm.** $\epsilon$ is added to the mean square before the square root. Ours
# is $10^{-6}$, `LlamaConfig`'s default. `torch.nn.RMSNorm` has `eps=None` by default. That means
# the machine epsilon of the input's type: float32's here. We try that one, and $10^{-5}$:

# %%
print("LlamaConfig().rms_norm_eps:", transformers.LlamaConfig().rms_norm_eps)
print("nn.RMSNorm(64).eps:", nn.RMSNorm(64).eps, "-> finfo(float32).eps =", torch.finfo().eps)
with torch.no_grad():
    small = torch.linspace(-1e-3, 1e-3, 64)  # a mean square near the epsilons
    assert torch.equal(nn.RMSNorm(64)(small), nn.RMSNorm(64, eps=torch.finfo().eps)(small))
    assert not torch.equal(nn.RMSNorm(64)(small), nn.RMSNorm(64, eps=1e-6)(small))

# %% tags=["nbval-ignore-output"]
gaps_eps = {}
for eps in (1e-5, torch.finfo().eps, 1e-6):
    gaps_eps[eps] = max_gap(to_hf_llama(model, rms_norm_eps=eps))
    print(f"rms_norm_eps = {eps:.2e}: max |logit difference| {gaps_eps[eps]:.1e}")
assert gaps_eps[1e-5] > 1e-3 and 1e-2 > gaps_eps[torch.finfo().eps] > 1e-4 > gaps_eps[1e-6]

# %% [markdown]
# Both wrong values move the logits by more than float32 rounding. Float32's epsilon moves them
# least, but still above $10^{-4}$. A loose bound such as $10^{-2}$ would let it pass.
#
# **Where generation stops.** `generate` ends a sequence when it produces `eos_token_id`.
# `LlamaConfig` sets it to 2 by default. In our vocabulary, id 2 is a space:

# %%
default = transformers.LlamaConfig()
print(f"LlamaConfig(): bos_token_id={default.bos_token_id}, eos_token_id={default.eos_token_id}")
print(f"our id 2: {tok.itos[2]!r}")

# %% tags=["nbval-ignore-output"]
prompt = prompts[:1]
with torch.no_grad():
    early = to_hf_llama(model, eos_token_id=2).generate(prompt, do_sample=False, max_new_tokens=60)
    full = hf.generate(prompt, do_sample=False, max_new_tokens=60)
print(f"eos_token_id=2:    {early.size(1) - 10} of 60 new characters")
print(f"eos_token_id=None: {full.size(1) - 10} of 60 new characters")
assert tok.itos[2] == " " and early.size(1) < full.size(1) == 70 and early[0, -1] == 2

# %% [markdown]
# The port sets `bos_token_id` and `eos_token_id` to `None`: our text has neither. It also keeps
# PAD, id 0, out of the generated text, as chapter 14's `generate` does (see the dropdown).
#
# Figure 19.3 collects the logit measurements. Every wrong convention lands above $10^{-4}$; the
# right port lands below it.

# %% jupyter={"source_hidden": true} tags=["figure", "hide-input"]
bars = [
    ("copied as is\n(RoPE layout)", gap_as_is),
    ("key/value heads\ntiled", gap_tiled),
    ("eps 1e-5", gaps_eps[1e-5]),
    ("eps = float32\nmachine eps", gaps_eps[torch.finfo().eps]),
    ("all four\nconventions matched", gap_fixed),
]
fig, ax = plt.subplots(figsize=(7.5, 3.6))
colors = ["#c0392b"] * 4 + ["#2e86c1"]
ax.bar([b[0] for b in bars], [b[1] for b in bars], color=colors)
ax.set_yscale("log")
ax.axhline(1e-4, color="black", ls="--", lw=0.9, label="bound: 1e-4")
ax.set_ylabel("max |logit difference|")
ax.set_title("Figure 19.3: our model against LlamaForCausalLM, the trained weights")
ax.tick_params(axis="x", labelsize=8)
ax.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# :::{dropdown} Going deeper: PAD in generation
# Chapter 14's `generate` never picks id 0: it is PAD, not a character. `generate` in
# `transformers` knows nothing about that. The port tells it with
# `generation_config.suppress_tokens = [0]`. To see it at work, the cell below makes PAD
# tempting: in a copy of the model, PAD's output-head row becomes twice the space's. Then it
# generates with and without the suppression.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["nbval-ignore-output", "hide-cell"]
padded = TinyLlama(cfg).eval()
padded.load_state_dict(model.state_dict())
with torch.no_grad():
    padded.head.weight[PAD_ID] = 2 * padded.head.weight[tok.stoi[" "]]  # PAD beats ' '
hf_padded = to_hf_llama(padded)
print("suppress_tokens:", hf_padded.generation_config.suppress_tokens)
ours_padded = generate(padded, prompts, 20, temperature=0)
with torch.no_grad():
    suppressed = hf_padded.generate(prompts, do_sample=False, max_new_tokens=20)
    hf_padded.generation_config.suppress_tokens = None
    free = hf_padded.generate(prompts, do_sample=False, max_new_tokens=20)
print(f"PAD among the new ids: ours {(ours_padded[:, 10:] == PAD_ID).sum().item()}, "
      f"suppressed {(suppressed[:, 10:] == PAD_ID).sum().item()}, "
      f"not suppressed {(free[:, 10:] == PAD_ID).sum().item()}")  # fmt: skip
assert (ours_padded[:, 10:] != PAD_ID).all() and (suppressed[:, 10:] != PAD_ID).all()
assert (free[:, 10:] == PAD_ID).any()

# %% [markdown]
# ## 6. The same characters
#
# Equal logits should give equal greedy text: `generate(do_sample=False)` against chapter 14's
# `generate(temperature=0)`, 100 new characters for each of four prompts. One caution. Where the
# two best characters are almost tied, float rounding alone could pick either one. So we keep the
# logits that each loop chose from: ours without and with the KV cache, and the ones `generate`
# returns with `output_logits=True`. Along the paths, we measure the smallest gap between our
# best and second-best logit (PAD left out, as chapter 14's loop leaves it out). To flip a
# choice, rounding must lower the best logit and raise the second by that gap together. If the
# gap is more than twice the largest difference between the three sets of logits, that cannot
# happen, and the texts must agree.

# %% tags=["nbval-ignore-output"]
with torch.no_grad():
    out = hf.generate(
        prompts, do_sample=False, max_new_tokens=100, output_logits=True,
        return_dict_in_generate=True,
    )  # fmt: skip
    theirs = out.sequences
    logits_theirs = torch.stack(out.logits, dim=1)  # [4, 100, V]: what generate chose from
    # what chapter 14's loop chose from: the text so far, each step
    logits_ours = torch.stack([model(ours[:, :t])[:, -1] for t in range(10, 110)], dim=1)
    caches = [{} for _ in model.blocks]  # the same with the KV cache: the prompt, then one token
    logits_cached = torch.stack(
        [model(ours[:, :10] if t == 10 else ours[:, t - 1 : t], caches)[:, -1]
         for t in range(10, 110)], dim=1,
    )  # fmt: skip
scores = logits_ours.clone()
scores[..., PAD_ID] = float("-inf")  # chapter 14's generate never picks PAD
top2 = scores.topk(2, dim=-1).values
margin = (top2[..., 0] - top2[..., 1]).min().item()
gap_path = max((logits_ours - other).abs().max().item() for other in (logits_theirs, logits_cached))
print(f"smallest top-1 minus top-2 logit along the paths: {margin:.1e}")
print(f"largest logit difference along the paths:         {gap_path:.1e}")
print("shapes:", tuple(ours.shape), tuple(theirs.shape), "logits", tuple(logits_theirs.shape))
assert margin > 2 * gap_path
assert torch.equal(theirs, ours)
assert torch.equal(generate(model, prompts, 100, temperature=0, use_cache=True), ours)
for row in theirs[:2]:
    print(repr(tok.decode(row)))

# %% [markdown]
# The four texts are identical, character for character. Chapter 14's loop, with or without its
# KV cache, and `LlamaForCausalLM.generate` make the same choices.
#
# :::{dropdown} Going deeper: bfloat16, and where the norm computes
# In bfloat16, `transformers`' `LlamaRMSNorm` casts its input to float32, normalises, casts back,
# and only then multiplies by its weight: the cell below prints its `forward`. `torch.nn.RMSNorm`
# also normalises in float32, but it multiplies by the weight before it casts back. So it rounds
# to bfloat16 once, not twice. In float32 the two are the same function. The cell checks each
# description on one input, and compares both with the same norm in float64.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["nbval-ignore-output", "hide-cell"]
print(inspect.getsource(modeling_llama.LlamaRMSNorm.forward))
norm_hf = modeling_llama.LlamaRMSNorm(64, eps=1e-6)
norm_torch = nn.RMSNorm(64, eps=1e-6)
with torch.no_grad():
    weight = 1 + 0.3 * torch.randn(64, generator=torch.Generator().manual_seed(0))
    norm_hf.weight.copy_(weight)
    norm_torch.weight.copy_(weight)
    xb = 3 * torch.randn(8, 64, generator=torch.Generator().manual_seed(1))
    assert torch.equal(norm_hf(xb), norm_torch(xb))  # float32: the same
    xb16, w16 = xb.bfloat16(), weight.bfloat16()
    out_hf = norm_hf.bfloat16()(xb16)
    out_torch = norm_torch.bfloat16()(xb16)
    x32 = xb16.float()
    normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)  # in float32
    assert torch.equal(out_hf, normed.bfloat16() * w16)  # cast back, then the weight
    assert torch.equal(out_torch, (normed * w16.float()).bfloat16())  # the weight, then cast
    x64 = xb16.double()
    exact = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6) * w16.double()
gap16 = (out_hf.float() - out_torch.float()).abs().max().item()
print(f"bfloat16 input: max |LlamaRMSNorm - nn.RMSNorm| = {gap16:.1e}")
print(f"error against float64: LlamaRMSNorm {(out_hf.double() - exact).abs().max():.1e}, "
      f"nn.RMSNorm {(out_torch.double() - exact).abs().max():.1e}")  # fmt: skip
assert gap16 > 1e-3  # more than float32 rounding: the two compute differently

# %% [markdown]
# ## Summary
#
# - `TinyLlama` is chapter 14's model with today's block: RMSNorm, RoPE inside attention,
#   SwiGLU of width 171, 2 key/value heads for 4 query heads, no biases (Figure 19.1). It has
#   98,240 parameters against `MiniGPT`'s 107,776. Its block, run by hand from chapter 18's parts,
#   gives its logits, and SDPA with `enable_gqa=True` gives the same attention.
# - Chapter 14's training loop and `generate` run it unchanged (Figure 19.2).
# - Copied name by name into `LlamaForCausalLM`, the trained model's logits moved by whole units,
#   except at position 0. Our RoPE pairs dimensions $(2i, 2i+1)$; Hugging Face's `rotate_half`
#   pairs $(i, i + d_h/2)$. Reordering the rows of $W_q$ and $W_k$ inside each head fixes it:
#   the difference falls below $10^{-4}$ (Figure 19.3).
# - Three more conventions must match: key/value head $j$ serves query heads $2j$ and $2j+1$
#   (`repeat_interleave`, not tiling); `rms_norm_eps` is $10^{-6}$, not $10^{-5}$ or float32's
#   epsilon; `eos_token_id` is `None`, since `LlamaConfig`'s 2 is a space here.
# - With the four matched, `generate(do_sample=False)` gives our greedy characters on four
#   prompts. The smallest top-2 margin along the paths was more than twice the logit difference,
#   so rounding could not have flipped a choice.
# - The one thing to remember: two implementations agree only when every convention does. Test
#   the port on a trained model: untrained, the wrong layout moved the logits by less than 0.1.
#
# ## Exercises
#
# ### Exercise 19.1 (predict, then run): the layout bug, untrained
#
# Section 4 copied the trained model without the permutation, and the logits moved by whole units.
# Build a fresh `TinyLlama` with the interleaved layout (seed 0), untrained, and copy it the same
# way (`to_hf_llama(fresh, permute_rope=False)`). Predict: will the logit difference be above
# 1, between $10^{-4}$ and 1, or below $10^{-4}$? Then measure it on `xv`, and its largest logit.

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
# Solution to exercise 19.1
torch.manual_seed(0)
fresh = TinyLlama(tok.vocab_size, rope_layout="interleaved").eval()
gap_fresh = max_gap(to_hf_llama(fresh, permute_rope=False), ref=fresh)
with torch.no_grad():
    largest = fresh(xv).abs().max().item()
print(
    f"untrained, copied as is: max |logit difference| {gap_fresh:.1e} (logits up to {largest:.2f})"
)
# small weights (std 0.02) give small logits, and a small gap, still above float32 rounding
assert 1e-4 < gap_fresh < 0.1 and largest < 1

# %% [markdown]
# ### Exercise 19.2 (implement): the name map
#
# Write `hf_name(our_name)`, which turns one of our parameter names into its name in
# `LlamaForCausalLM`: for example `'blocks.1.attn.W_q.weight'` into
# `'model.layers.1.self_attn.q_proj.weight'`. Use the map printed in section 3, not
# `helpers.llama`. `check_llama_names` calls it on every parameter of a two-block `TinyLlama` and
# names the first mistake.

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 19.2
from helpers.exercises import check_llama_names

PARTS = {
    "norm1": "input_layernorm", "norm2": "post_attention_layernorm",
    "attn.W_q": "self_attn.q_proj", "attn.W_k": "self_attn.k_proj",
    "attn.W_v": "self_attn.v_proj", "attn.W_o": "self_attn.o_proj",
    "ffn.gate": "mlp.gate_proj", "ffn.up": "mlp.up_proj", "ffn.down": "mlp.down_proj",
}  # fmt: skip


def hf_name(name):
    module, leaf = name.rsplit(".", 1)
    if module == "embed":
        return f"model.embed_tokens.{leaf}"
    if module == "norm_final":
        return f"model.norm.{leaf}"
    if module == "head":
        return f"lm_head.{leaf}"
    _, i, part = module.split(".", 2)  # blocks.{i}.part
    return f"model.layers.{i}.{PARTS[part]}.{leaf}"


check_llama_names(hf_name)

# %% [markdown]
# ### Exercise 19.3 (implement): the RoPE permutation of the rows
#
# Write `permute_qk(weight, head_dim)`. `weight` is a $W_q$ or $W_k$ matrix
# `[heads * head_dim, d_model]` of a model that rotates interleaved pairs. Return it with the
# rows of each head reordered for the half layout: $(0, 2, 4, \dots, 1, 3, 5, \dots)$ within
# each block of `head_dim` rows. `check_rope_permutation` runs it on four matrices of one to four
# heads, and names a known mistake.

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 19.3
from helpers.exercises import check_rope_permutation


def permute_qk(weight, head_dim):
    heads = weight.size(0) // head_dim
    order = torch.cat([torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)])
    return weight.view(heads, head_dim, -1)[:, order].reshape_as(weight)


check_rope_permutation(permute_qk)
