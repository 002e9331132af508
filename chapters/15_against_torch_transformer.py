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
# # 15. Checked against `torch.nn.Transformer`
#
# We load our weights into PyTorch's own `nn.Transformer` and require the same logits.
# Then we break one weight and watch the difference enter at its layer.
# Along the way we meet its mask arguments, which are easy to get wrong.
#
# ![The difference per layer: a faithful copy and one perturbed weight](figures/15_against_torch_transformer.png)

# %% [markdown] tags=["run-time"]
# **Run time:** about 10 s.

# %% [markdown]
# PyTorch {cite}`paszke2019` ships its own encoder-decoder, `torch.nn.Transformer`. Other people
# wrote and tested it, so it is an independent test of ours. Load **our** weights into it and
# feed it the same inputs. In evaluation mode every logit must agree to float precision. If they
# do, our attention, our Pre-Norm wiring, our GELU feed-forward, our final LayerNorms and our
# masks all compute what PyTorch computes. If one piece differed, the logits would move. The
# chapter breaks one weight, then one option at a time, and watches them move.
#
# Section 4 gets the mask arguments wrong on purpose. Section 5 breaks a weight and the options.
# Section 6 shows what `nn.Transformer` does not give you, and what PyTorch's own docstring says it
# is for.
#
# `nn.Transformer` is the two **stacks**: encoder layers plus a final LayerNorm, decoder layers
# plus a final LayerNorm. It has no token embeddings, no positional encoding and no output
# projection. So the comparison runs our embeddings, then its stacks, then our output
# projection.

# %%
import copy
import inspect
import textwrap
import warnings

import matplotlib.pyplot as plt
import torch
import torch.nn as nn

from helpers import (
    BOS_ID,
    PAD_ID,
    VOCAB_SIZE,
    Transformer,
    count_parameters,
    describe,
    encode_digits,
    make_causal_mask,
    make_padding_mask,
)

torch.set_num_threads(1)  # the tensors are small: one CPU thread is enough, and steady
torch.manual_seed(0)
model = Transformer(VOCAB_SIZE, VOCAB_SIZE).eval()

# %% [markdown]
# A fresh model has every bias at zero and every LayerNorm at gain 1, bias 0. Copying those into
# the wrong place, or forgetting to copy them, would go unnoticed: zero is zero wherever it lands.
# So before comparing we give every parameter that is still constant some random values. A test
# should exercise the code paths it claims to check.

# %%
with torch.no_grad():
    randomized = []
    for name, p in model.named_parameters():
        if (p == p.flatten()[0]).all():  # all zeros (biases) or all ones (LayerNorm gains)
            p.add_(0.1 * torch.randn_like(p))
            randomized.append(name)
print(f"randomized {len(randomized)} constant parameters, e.g.", randomized[:3])
assert any("ln_final" in n for n in randomized) and any(n.endswith("W_q.bias") for n in randomized)

# %% [markdown]
# ## 1. Building the reference with matching options
#
# `nn.Transformer`'s constructor has a default for every argument, the sizes of the original
# paper's base model {cite}`vaswani2017`. We pass nine arguments, and the cell counts how many of
# them differ from the defaults:

# %%
OPTIONS = dict(d_model=128, nhead=4, num_encoder_layers=2, num_decoder_layers=2,
               dim_feedforward=512, dropout=0.1, activation="gelu", batch_first=True,
               norm_first=True)  # fmt: skip
defaults = {n: p.default for n, p in inspect.signature(nn.Transformer.__init__).parameters.items()}
differ = [n for n in OPTIONS if OPTIONS[n] != defaults[n]]
print(f"{'argument':<20} {'PyTorch default':>16} {'ours':>8}")
for name in OPTIONS:
    mark = "" if name in differ else "   (the default)"
    default = getattr(defaults[name], "__name__", defaults[name])  # F.relu is a function
    print(f"{name:<20} {default!s:>16} {OPTIONS[name]!s:>8}{mark}")
print(f"{len(differ)} of the {len(OPTIONS)} arguments differ from PyTorch's defaults")
assert len(differ) == 8 and differ == [n for n in OPTIONS if n != "dropout"]

# %% [markdown]
# A wrong size is loud: a different `d_model` or `dim_feedforward` gives weights of other
# shapes, and the copy fails. Five arguments are quiet: with a wrong value every weight keeps its
# shape, the copy succeeds, and the mistake shows only when the model runs. A dropdown after
# Figure 15.1 runs each one wrong, and one wrong size. We leave `layer_norm_eps` at its default,
# because it equals the `eps` of our `nn.LayerNorm`s:
#
# | argument | PyTorch default | ours | a wrong value ... |
# | --- | --- | --- | --- |
# | `batch_first` | `False`: tensors are `[L, B, d]` | `True`: `[B, L, d]` | reads our `[B, L, d]` as `[L, B, d]` |
# | `norm_first` | `False` (Post-Norm) | `True` (Pre-Norm) | computes another function, chapter 05 |
# | `activation` | `"relu"` | `"gelu"` | computes another function, chapter 04 |
# | `nhead` | 8 | 4 | splits the same `[d, d]` projections into other heads |
# | `layer_norm_eps` | `1e-05` | `1e-05` (not passed) | another $\epsilon$ in every LayerNorm |


# %%
def build_reference(**overrides):
    options = {**OPTIONS, **overrides}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ref = nn.Transformer(**options)
    return ref.eval(), [str(w.message) for w in caught]


ref, messages = build_reference()
for msg in messages:
    print("warning:", msg)
layer = ref.decoder.layers[0]
for name, p in layer.named_parameters():
    print(f"decoder.layers.0.{name:<28} {tuple(p.shape)}")

# %% [markdown]
# The warning says that with `norm_first=True` the encoder cannot use its "nested tensor" fast
# path. Nothing below needs it.
#
# ## 2. The name map
#
# `nn.MultiheadAttention` keeps $W_Q, W_K, W_V$ stacked in one `[3d, d]` matrix, `in_proj_weight`,
# in that order; everything else maps one to one:
#
# | ours (`helpers`) | `nn.Transformer` |
# | --- | --- |
# | `mha` (encoder), `self_mha` (decoder): `W_q`, `W_k`, `W_v` | `self_attn.in_proj_weight`, `in_proj_bias` (stacked Q, K, V) |
# | `cross_mha`: `W_q`, `W_k`, `W_v` | `multihead_attn.in_proj_weight`, `in_proj_bias` |
# | `...W_o` | `...out_proj` |
# | `ffn.net[0]`, `ffn.net[2]` | `linear1`, `linear2` |
# | `ln1`, `ln2`, `ln3` | `norm1`, `norm2`, `norm3` (same order: before self-attention, cross-attention, FFN) |
# | `encoder.ln_final`, `decoder.ln_final` | `encoder.norm`, `decoder.norm` |


# %%
@torch.no_grad()
def copy_attention(dst: nn.MultiheadAttention, src) -> None:
    dst.in_proj_weight.copy_(torch.cat([src.W_q.weight, src.W_k.weight, src.W_v.weight]))  # [3d, d]
    dst.in_proj_bias.copy_(torch.cat([src.W_q.bias, src.W_k.bias, src.W_v.bias]))
    dst.out_proj.load_state_dict(src.W_o.state_dict())


@torch.no_grad()
def copy_into(ref: nn.Transformer, model: Transformer) -> nn.Transformer:
    for ours, theirs in zip(model.encoder.layers, ref.encoder.layers):
        copy_attention(theirs.self_attn, ours.mha)
        theirs.linear1.load_state_dict(ours.ffn.net[0].state_dict())
        theirs.linear2.load_state_dict(ours.ffn.net[2].state_dict())
        theirs.norm1.load_state_dict(ours.ln1.state_dict())
        theirs.norm2.load_state_dict(ours.ln2.state_dict())
    for ours, theirs in zip(model.decoder.layers, ref.decoder.layers):
        copy_attention(theirs.self_attn, ours.self_mha)
        copy_attention(theirs.multihead_attn, ours.cross_mha)
        theirs.linear1.load_state_dict(ours.ffn.net[0].state_dict())
        theirs.linear2.load_state_dict(ours.ffn.net[2].state_dict())
        for i in (1, 2, 3):
            getattr(theirs, f"norm{i}").load_state_dict(getattr(ours, f"ln{i}").state_dict())
    ref.encoder.norm.load_state_dict(model.encoder.ln_final.state_dict())
    ref.decoder.norm.load_state_dict(model.decoder.ln_final.state_dict())
    return ref


copy_into(ref, model)
torch.testing.assert_close(
    ref.decoder.layers[1].multihead_attn.in_proj_weight[128:256],
    model.decoder.layers[1].cross_mha.W_k.weight,
)  # K is the middle third
print("copied; cross-attention W_k of layer 1 is rows 128:256 of in_proj_weight")

# %% [markdown]
# ## 3. The same logits
#
# A batch with padding on both sides, so that every mask has work to do: the first sequence fills
# the source, the others are padded. The decoder input is one column wider than the source, as
# happens when a batch's targets are padded to their own longest length.


# %%
def reversal_pair(digits, src_width, tgt_width):
    src = encode_digits(digits, width=src_width)  # digits <eos> <pad>...
    tgt_in = torch.cat(
        [torch.tensor([[BOS_ID]]), encode_digits(digits[::-1], width=tgt_width - 1)], dim=1
    )
    return src, tgt_in  # <bos> reversed digits <eos> <pad>...


pairs = [reversal_pair(d, 7, 8) for d in ("314159", "2718", "161")]
src = torch.cat([s for s, _ in pairs])
tgt_in = torch.cat([t for _, t in pairs])
print("src", tuple(src.shape), "tgt_in", tuple(tgt_in.shape))
for s, t in zip(src, tgt_in):
    print(f"  {describe(s):<36} | {describe(t)}")

# %% [markdown]
# `nn.Transformer`'s masks use the same polarity as ours (`True` = blocked) but are split by
# role, with fewer dimensions; the next section compares them argument by argument.

# %%
src_pad = src == PAD_ID  # [B, Ls]
tgt_pad = tgt_in == PAD_ID  # [B, Lt]
causal = make_causal_mask(tgt_in.size(1))[0, 0]  # [Lt, Lt]


def reference_logits(ref, src, tgt_in, **mask_args):
    h = ref(model.encoder.embed(src), model.decoder.embed(tgt_in), **mask_args)
    return model.out_proj(h)


full_masks = dict(
    src_key_padding_mask=src_pad,
    tgt_mask=causal,
    tgt_key_padding_mask=tgt_pad,
    memory_key_padding_mask=src_pad,
)
with torch.no_grad():
    ours = model(src, tgt_in)
    theirs = reference_logits(ref, src, tgt_in, **full_masks)
gap = (ours - theirs).abs().max().item()
print(f"logits {tuple(ours.shape)}; max |ours - nn.Transformer| = {gap:.5f} (tolerance 0.00001)")
torch.testing.assert_close(theirs, ours, rtol=1e-5, atol=1e-5)

# %% [markdown]
# ## 4. Its mask arguments, against ours
#
# Our attention takes one mask per attention, broadcastable to `[B, h, Lq, Lk]`. `nn.Transformer`
# splits each into two parts: an `*_mask` that is the same for every sequence (`[Lq, Lk]`) and a
# `*_key_padding_mask` that is per sequence and per key (`[B, Lk]`), and combines them inside.
#
# | attention | ours | `nn.Transformer` arguments |
# | --- | --- | --- |
# | encoder self | `make_padding_mask(src)`, `[B, 1, 1, Ls]` | `src_key_padding_mask` `[B, Ls]` (and `src_mask` `[Ls, Ls]`, unused here) |
# | decoder self | `make_causal_mask(Lt) \| make_padding_mask(tgt_in)`, `[B, 1, Lt, Lt]` | `tgt_mask` `[Lt, Lt]` **and** `tgt_key_padding_mask` `[B, Lt]` |
# | cross | `make_padding_mask(src)`, `[B, 1, 1, Ls]` | `memory_key_padding_mask` `[B, Ls]` (and `memory_mask` `[Lt, Ls]`, unused) |
#
# Both use `True` = **blocked** for a bool mask (the opposite of `F.scaled_dot_product_attention`,
# chapter 03).
# `nn.Transformer` also accepts a float mask that is **added** to the scores (a later cell uses
# one); `helpers` accepts only bool masks. Rebuilt from its pieces by broadcasting, the
# translation is exactly what `helpers` builds.

# %%
ours_src = make_padding_mask(src)
ours_self = make_causal_mask(tgt_in.size(1)) | make_padding_mask(tgt_in)
assert torch.equal(ours_src[:, 0, 0, :], full_masks["src_key_padding_mask"])
assert torch.equal(ours_src[:, 0, 0, :], full_masks["memory_key_padding_mask"])
rebuilt = full_masks["tgt_mask"][None, None] | full_masks["tgt_key_padding_mask"][:, None, None, :]
assert torch.equal(ours_self, rebuilt)
print(
    f"src_key_padding_mask {tuple(src_pad.shape)} is ours {tuple(ours_src.shape)} at [:, 0, 0, :]"
)
print(
    f"tgt_mask {tuple(causal.shape)} | tgt_key_padding_mask {tuple(tgt_pad.shape)}, broadcast,"
    f" is ours {tuple(ours_self.shape)}"
)

# %% [markdown]
# ### Pitfall: forgetting `memory_key_padding_mask`
#
# `nn.Transformer` does not reuse `src_key_padding_mask` for cross-attention; the decoder never sees
# it. Leave out `memory_key_padding_mask` and cross-attention reads the encoder's outputs at the
# padded source positions. Nothing fails. Only the sequences that have source padding change, which
# makes the bug easy to miss on a test batch of equal lengths:

# %%
no_memory_mask = {k: v for k, v in full_masks.items() if k != "memory_key_padding_mask"}
with torch.no_grad():
    leaky = reference_logits(ref, src, tgt_in, **no_memory_mask)
per_seq = (leaky - ours).abs().amax(dim=(1, 2))
for i in range(len(src)):
    print(f"sequence {i}: {int(src_pad[i].sum())} source pads, max |logit change| {per_seq[i]:.2f}")
assert per_seq[0] < 1e-5 and (per_seq[1:] > 1e-3).all()

# %% [markdown]
# ### A float `tgt_mask`
#
# `nn.Transformer.generate_square_subsequent_mask(L)` returns the causal mask as a **float**
# matrix, with `-inf` above the diagonal and `0` elsewhere, to be added to the scores. It blocks
# the same positions as the bool mask:

# %%
float_causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.size(1))
print(float_causal.dtype, "\n", float_causal[:4, :4])
assert torch.equal(float_causal == float("-inf"), causal)

# %% [markdown]
# Either way the logits are ours.
#
# :::{dropdown} Going deeper: the deprecation warning
# Pass it together with our bool `tgt_key_padding_mask` and PyTorch 2.13.0 warns that mixing a
# float mask with a bool padding mask is deprecated. Making the padding mask float as well
# (`-inf` at pads) silences it. The logits are ours in both cases.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
with warnings.catch_warnings(record=True) as caught, torch.no_grad():
    warnings.simplefilter("always")
    mixed = reference_logits(ref, src, tgt_in, **{**full_masks, "tgt_mask": float_causal})
print(len(caught), "warning(s), e.g.:", str(caught[0].message) if caught else None)
assert any("mismatched key_padding_mask and attn_mask" in str(w.message) for w in caught)

float_tgt_pad = torch.zeros(tgt_pad.shape).masked_fill(tgt_pad, float("-inf"))
with warnings.catch_warnings(record=True) as caught, torch.no_grad():
    warnings.simplefilter("always")
    all_float = reference_logits(
        ref,
        src,
        tgt_in,
        **{**full_masks, "tgt_mask": float_causal, "tgt_key_padding_mask": float_tgt_pad},
    )
print(len(caught), "warning(s) with both decoder masks float")
assert not caught
torch.testing.assert_close(mixed, ours, rtol=1e-5, atol=1e-5)
torch.testing.assert_close(all_float, ours, rtol=1e-5, atol=1e-5)

# %% [markdown]
# ### Pitfall: the padding mask with the opposite polarity
#
# Coming from SDPA or Hugging Face, where `True`/`1` means "attend", it is natural to pass a mask
# that is `True` on the real tokens. `nn.Transformer` then blocks the real tokens and attends only
# to the padding. The logits change, silently, for every sequence:

# %%
keep = ~src_pad  # True = real token: the SDPA / Hugging Face habit
inverted = {**full_masks, "src_key_padding_mask": keep, "memory_key_padding_mask": keep}
with torch.no_grad():
    wrong = reference_logits(ref, src, tgt_in, **inverted)
change = (wrong - ours).abs().flatten(1).amax(1)  # NaN where a logit is NaN
print("max |logit change| per sequence:", [round(c, 2) for c in change.tolist()])
assert ((change > 1e-3) | change.isnan()).all()

# %% [markdown]
# Not quite silently for sequence 0. It has no padding at all, so the inverted mask blocks
# **every** key of every query: the fully masked row of chapter 07. Its logits come out NaN here.
#
# :::{dropdown} Going deeper: NaN or not, by code path
# What comes out of a fully masked row depends on the code path. In eval mode with autograd
# off, the encoder layers take PyTorch's fused inference "fast path", which returns NaN for such
# rows. With autograd on (as in training), or with the fast path switched off
# (`torch.backends.mha.set_fastpath_enabled(False)`), they return finite, meaningless numbers.
# One bug, two symptoms, depending on where you look. This is PyTorch 2.13's behaviour; other
# versions may differ.
# :::


# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
def nan_per_sequence():
    """How many of each sequence's logits are NaN."""
    return reference_logits(ref, src, tgt_in, **inverted).isnan().flatten(1).sum(1).tolist()


with torch.no_grad():
    nan_fast = nan_per_sequence()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        nan_no_fastpath = nan_per_sequence()
    finally:
        torch.backends.mha.set_fastpath_enabled(True)
with torch.enable_grad():
    nan_autograd = nan_per_sequence()
print(f"NaN logits per sequence (of {tgt_in.size(1) * VOCAB_SIZE} each):")
print("  eval + no_grad (fast path):", nan_fast)
print("  fast path switched off:    ", nan_no_fastpath)
print("  autograd on:               ", nan_autograd)
assert nan_fast[0] > 0 and nan_fast[1:] == [0, 0]
assert not any(nan_no_fastpath) and not any(nan_autograd)

# %% [markdown]
# ## 5. The check can fail
#
# A tight tolerance is only worth something if a small error trips it. We add random noise
# (0.01 times a standard normal draw) to a **single** entry of one weight matrix, deep in the
# second decoder layer, and run the same assertion:

# %%
broken = copy.deepcopy(ref)
g = torch.Generator().manual_seed(0)
delta = 0.01 * torch.randn(1, generator=g).item()
with torch.no_grad():
    broken.decoder.layers[1].linear2.weight[5, 7] += delta
    off = reference_logits(broken, src, tgt_in, **full_masks)
print(f"decoder.layers[1].linear2.weight[5, 7] changed by {delta:+.4f}")
try:
    torch.testing.assert_close(off, ours, rtol=1e-5, atol=1e-5)
    raise RuntimeError("the perturbed model passed: the check is too loose")
except AssertionError as e:
    print(type(e).__name__, "|", str(e).strip().splitlines()[0])
# assert_close allows atol + rtol * |expected| at each logit: how far past that is the worst one?
allowed = 1e-5 + 1e-5 * ours.abs()
times = ((off - ours).abs() / allowed).max().item()
print(
    f"max |diff| = {(off - ours).abs().max():.1e}; "
    f"the worst logit is {times:.0f} times its allowance"
)
assert times > 1

# %% [markdown]
# Where does the difference enter? We compare the two models stage by stage: the output of every
# layer and final LayerNorm, for the faithful copy and for the perturbed one (Figure 15.1).
#
# For our model, forward hooks record the stages. The reference needs another method. In
# evaluation mode with autograd off, each `nn.TransformerEncoderLayer` runs a fused "fast path",
# one ATen operator for the whole layer. A forward hook on the layer switches that path off (the
# check is in `TransformerEncoderLayer.forward`). So we call the reference's layers one by one,
# with the masks its `forward` passes them, and no hooks. The next cell counts the fused operator
# in three runs. Called one by one, the layers give the reference's logits bit for bit.

# %%
from helpers.benchmark import record_op_outputs  # every ATen operator a call runs (chapter 22)

STAGES = ["encoder 0", "encoder 1", "encoder norm", "decoder 0", "decoder 1", "decoder norm"]


def torch_stages(r):
    """The reference's output at each stage of STAGES, then its logits; layers called one by one."""
    x, outs = model.encoder.embed(src), []
    for layer in r.encoder.layers:
        x = layer(x, src_key_padding_mask=src_pad)
        outs.append(x)
    memory = r.encoder.norm(x)
    y = model.decoder.embed(tgt_in)
    outs.append(memory)
    for layer in r.decoder.layers:
        y = layer(y, memory, tgt_mask=causal, tgt_key_padding_mask=tgt_pad,
                  memory_key_padding_mask=src_pad)  # fmt: skip
        outs.append(y)
    outs.append(r.decoder.norm(y))
    return outs + [model.out_proj(outs[-1])]


def fused_layers(run):
    """How many encoder layers ran the fused fast-path operator during run()."""
    with torch.no_grad():
        _, ops = record_op_outputs(run)
    return sum(r.op == "_transformer_encoder_layer_fwd" for r in ops)


hook = ref.encoder.layers[0].register_forward_hook(lambda mod, args, out: None)
with_hook = fused_layers(lambda: reference_logits(ref, src, tgt_in, **full_masks))
hook.remove()
runs = {
    "nn.Transformer's forward": fused_layers(
        lambda: reference_logits(ref, src, tgt_in, **full_masks)
    ),
    "the same, a hook on encoder layer 0": with_hook,
    "layers called one by one": fused_layers(lambda: torch_stages(ref)),
}
for label, n in runs.items():
    print(f"{label:<36} fused encoder layers: {n} of 2")
assert list(runs.values()) == [2, 1, 2]
with torch.no_grad():
    assert torch.equal(torch_stages(ref)[-1], theirs)  # the reference's own logits, bit for bit

# %% [markdown]
# The faithful copy stays at float32 rounding everywhere. The perturbed one agrees up to the
# second decoder layer, where the changed weight sits, and differs from there on.

# %%
ours_stages = []
hooks = [
    m.register_forward_hook(lambda mod, a, o: ours_stages.append(o[0] if type(o) is tuple else o))
    for m in [*model.encoder.layers, model.encoder.ln_final, *model.decoder.layers,
              model.decoder.ln_final]
]  # fmt: skip
with torch.no_grad():
    ours_stages.append(model(src, tgt_in))
for h in hooks:
    h.remove()
stage_diff = {}
for label, r in (("faithful copy", ref), ("one weight perturbed", broken)):
    with torch.no_grad():
        theirs_stages = torch_stages(r)
    stage_diff[label] = [(a - b).abs().max().item() for a, b in zip(ours_stages, theirs_stages)]
    # one digit, and "<1e-5" below the tolerance: float32 rounding differs from CPU to CPU
    shown = [f"{d:.0e}" if d > 1e-5 else "<1e-5" for d in stage_diff[label]]
    print(f"{label:<21}", "  ".join(shown))
assert len(ours_stages) == len(STAGES) + 1 and max(stage_diff["faithful copy"]) < 1e-5
perturbed = stage_diff["one weight perturbed"]
assert max(perturbed[:4]) < 1e-5 and min(perturbed[4:]) > 1e-5  # enters at decoder layer 1

# %% jupyter={"source_hidden": true} tags=["figure", "hide-input", "opening-figure"]
fig, ax = plt.subplots(figsize=(7.5, 3.4))
xs = range(len(STAGES) + 1)
for (label, diffs), color, dx in zip(stage_diff.items(), ("tab:blue", "tab:red"), (-0.2, 0.2)):
    ax.bar([x + dx for x in xs], [max(d, 1e-9) for d in diffs], width=0.4, color=color, label=label)
    for x, d in zip(xs, diffs):
        if d == 0:  # no bar on a log scale: say it
            ax.text(x + dx, 1.3e-9, "0", ha="center", va="bottom", fontsize=8)
ax.axhline(1e-5, color="black", lw=0.8, ls="--", label="tolerance 1e-5")
ax.set_yscale("log")
ax.set_xticks(list(xs), STAGES + ["logits"], fontsize=8)
ax.set_ylabel("max |ours - nn.Transformer|")
ax.set_ylim(1e-9, 1e-1)
ax.set_title("Figure 15.1: the difference, layer by layer (0: no difference at all)")
ax.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# Each of the quiet options matters as well: with a wrong value, the logits move or the call
# fails.
#
# :::{dropdown} Going deeper: each quiet option, wrong
# Build the reference with one of the first four left at its default and copy the same weights.
# With `norm_first`, `activation` or `nhead` wrong, the logits move far beyond the tolerance.
# With `batch_first=False` our `[B, L, d]` tensors are read as `[L, B, d]`. Here the source and
# target "batch sizes" are then their lengths, 7 and 8, and the call fails. With equal lengths it
# runs, and attends across the batch instead of along each sequence. The cell changes one
# sequence of a batch and measures how far another one moves. A wrong size, by contrast, fails
# at the copy. The fifth, `layer_norm_eps`, comes last: its default against ours, and a wrong
# value.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
errors = []
for override in (
    dict(norm_first=False),
    dict(activation="relu"),
    dict(nhead=8),
    dict(batch_first=False),
):
    other, _ = build_reference(**override)
    copy_into(other, model)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Post-Norm's nested-tensor path warns
            diff = (reference_logits(other, src, tgt_in, **full_masks) - ours).abs().max().item()
        print(f"{str(override):<28} max |logit diff| = {diff:.1f}")
        assert diff > 0.01
    except RuntimeError as e:
        errors.append(override)
        print(f"{str(override):<28} {type(e).__name__}: {str(e).splitlines()[0]}")
assert errors == [dict(batch_first=False)]  # the only one that fails at the call

# batch_first=False with equal lengths: it runs, and the sequences of a batch see each other
seq_first, _ = build_reference(batch_first=False)
copy_into(seq_first, model)
g = torch.Generator().manual_seed(1)
emb = torch.randn(3, 7, 128, generator=g)  # [B, L, d], no padding
emb_changed = emb.clone()
emb_changed[2] = torch.randn(7, 128, generator=g)  # change sequence 2 only
moved = {}
for label, r in (("batch_first=True", ref), ("batch_first=False", seq_first)):
    with torch.no_grad():
        moved[label] = (r(emb, emb)[0] - r(emb_changed, emb_changed)[0]).abs().max().item()
    print(f"{label:<18} changing sequence 2 moves sequence 0's output by {moved[label]:.2f}")
assert moved["batch_first=True"] < 1e-6 and moved["batch_first=False"] > 0.01

# a wrong size fails at the copy
wide, _ = build_reference(dim_feedforward=2048)
try:
    copy_into(wide, model)
    raise AssertionError("expected a size mismatch")
except RuntimeError as e:
    mismatch = next(ln.strip() for ln in str(e).splitlines() if "size mismatch" in ln)
    print("dim_feedforward=2048, copy:", type(e).__name__, "|", mismatch)

# layer_norm_eps: PyTorch's default and the eps of our LayerNorms
eps_default = defaults["layer_norm_eps"]
our_eps = {m.eps for m in model.modules() if isinstance(m, nn.LayerNorm)}
print(f"layer_norm_eps: nn.Transformer default {eps_default}, our LayerNorms {our_eps}")
assert our_eps == {eps_default} and {ref.encoder.layers[0].norm1.eps} == our_eps
wrong_eps, _ = build_reference(layer_norm_eps=0.1)
copy_into(wrong_eps, model)
with torch.no_grad():
    eps_diff = (reference_logits(wrong_eps, src, tgt_in, **full_masks) - ours).abs().max().item()
print(f"{'layer_norm_eps=0.1':<28} max |logit diff| = {eps_diff:.1f}")
assert eps_diff > 1e-3


# %% [markdown]
# ### Only in evaluation mode
#
# The two models compute the same function with dropout off. In training mode, from the same
# seed, they do not. Dropout draws its masks from one random stream, in the order the layers
# call it. Where do the two streams part? The cell runs both models in training mode from seed 0
# and compares the first encoder layer's self-attention, the layer's output and the logits.

# %% tags=["nbval-ignore-output"]
def train_mode_run(run_reference):
    """Ours, then the reference, in training mode from seed 0: the first encoder layer's
    self-attention output and layer output, and the logits, of each."""
    seen = {}
    watched = {"ours": (model.encoder.layers[0].mha, model.encoder.layers[0]),
               "theirs": (ref.encoder.layers[0].self_attn, ref.encoder.layers[0])}  # fmt: skip
    hooks = [
        m.register_forward_hook(
            lambda mod, a, o, k=(side, i): seen.update({k: o[0] if isinstance(o, tuple) else o})
        )
        for side, mods in watched.items()
        for i, m in enumerate(mods)
    ]
    model.train(), ref.train()
    try:
        with torch.no_grad():
            torch.manual_seed(0)
            a = model(src, tgt_in)
            torch.manual_seed(0)
            b = run_reference()
    finally:
        model.eval(), ref.eval()
        for h in hooks:
            h.remove()
    gaps = [(seen["ours", i] - seen["theirs", i]).abs().max().item() for i in (0, 1)]
    return gaps + [(a - b).abs().max().item()], a


def in_our_order():  # the encoder runs before the target is embedded, as in our forward
    memory = ref.encoder(model.encoder.embed(src), src_key_padding_mask=src_pad)
    out = ref.decoder(model.decoder.embed(tgt_in), memory, tgt_mask=causal,
                      tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad)  # fmt: skip
    return model.out_proj(out)


gaps, ours_train = {}, {}
for label, run in (
    ("reference_logits", lambda: reference_logits(ref, src, tgt_in, **full_masks)),
    ("reference in our order", in_our_order),
):
    gaps[label], ours_train[label] = train_mode_run(run)
print("training mode, seed 0, max |ours - nn.Transformer|:")
print(f"{'':<24} {'self-attention 0':>16} {'encoder layer 0':>16} {'logits':>8}")
for label, g in gaps.items():
    print(f"{label:<24} {g[0]:>16.1e} {g[1]:>16.1e} {g[2]:>8.1f}")
assert gaps["reference_logits"][0] > 0.1  # apart from the first self-attention on
assert gaps["reference in our order"][0] < 1e-5 < 0.1 < gaps["reference in our order"][1]
assert torch.equal(*ours_train.values())  # the same seed, the same masks in our model
assert not model.training and not ref.training
print(inspect.getsource(nn.TransformerEncoderLayer._ff_block).strip())
print("ours:", model.encoder.layers[0].ffn.net)

# %% [markdown]
# As `reference_logits` calls it, the streams part at the first encoder self-attention. That
# function embeds the target before the reference runs its encoder, so the decoder embedding's
# dropout draws its mask first. Ours draws it after the encoder. Call the reference in our order,
# and the first self-attention agrees. The first encoder layer's output still differs. In the
# feed-forward block theirs drops out after the activation too (`self.dropout` in `_ff_block`,
# printed last). Ours drops out only after the second linear layer (`net[3]`, where theirs has
# `dropout2`). So theirs draws one mask more in every layer, and no seed can give the two models
# the same masks.

# %% [markdown]
# ## 6. What `nn.Transformer` does not give you
#
# **Attention weights.** Its layers call `nn.MultiheadAttention` without asking for weights, and
# `nn.Transformer.forward` has no argument to ask for them. A forward hook on a cross-attention
# module shows what comes back:

# %%
captured = {}
cross0 = ref.decoder.layers[0].multihead_attn
hook = cross0.register_forward_hook(lambda mod, args, out: captured.update(out=out))
with torch.no_grad():
    reference_logits(ref, src, tgt_in, **full_masks)
hook.remove()
out, weights = captured["out"]
print("cross-attention output", tuple(out.shape), "| weights:", weights)
forward_args = list(inspect.signature(nn.Transformer.forward).parameters)
assert weights is None and not any("weight" in a for a in forward_args)

with torch.no_grad():
    _, our_cross = model.decode(tgt_in, *model.encode(src))
print("ours: one cross-attention map per layer:", [tuple(w.shape) for w in our_cross])

# %% [markdown]
# **A KV cache.** `nn.TransformerDecoder.forward` takes the whole target prefix every time; there is
# no argument to carry keys and values from one decoding step to the next:

# %%
params = list(inspect.signature(nn.TransformerDecoder.forward).parameters)
print(params)
assert not any("cache" in p or "past" in p for p in params)

# and the layer itself: these are all the choices its constructor offers
layer_args = list(inspect.signature(nn.TransformerEncoderLayer.__init__).parameters)[1:]
print("nn.TransformerEncoderLayer:", layer_args)
assert layer_args == ["d_model", "nhead", "dim_feedforward", "dropout", "activation",
                      "layer_norm_eps", "batch_first", "norm_first", "bias", "device",
                      "dtype"]  # fmt: skip

# %% [markdown]
# **When to use which.** PyTorch's own docstring answers part of it. In torch 2.13 it calls
# `nn.Transformer` a reference implementation and points elsewhere for efficient layers:

# %%
doc = " ".join(nn.Transformer.__doc__.split())
intent = doc[doc.index("The intent") : doc.index("Args:")].strip()
print(f"torch {torch.__version__.split('+')[0]}, nn.Transformer.__doc__:")
print(textwrap.fill(intent, 100))
assert "reference implementation" in intent and "building blocks" in intent

# %% [markdown]
# That is the role it plays in this chapter: an independent reference to test ours against.
# Its limits are the ones shown above. It gives no per-layer attention weights, which the
# heatmaps of the cross-attention chapter need. It has no KV cache, so greedy decoding
# recomputes the whole prefix at every step; the KV cache chapter shows what a cache saves. And
# the block is fixed. The constructor's arguments choose sizes, the activation and where the
# LayerNorms go. They do not offer another normalisation (RMSNorm), rotary positions (RoPE
# {cite}`su2021`) or grouped-query attention {cite}`ainslie2023`. Any of those means writing your
# own layer. Its masks, split by role and with the opposite polarity from SDPA, are easy to get
# wrong. Libraries such as Hugging Face `transformers` write their own layers too (chapter 16).
# The value of a handwritten model is that you know exactly what every line computes.
#
# ## 7. Parameter count
#
# `nn.Transformer` holds exactly the parameters of our two stacks (layers plus final LayerNorms).
# Our embeddings and output projection make up the rest of the 931,213.

# %%
n_ref = count_parameters(ref)
stacks = (
    model.encoder.layers,
    model.decoder.layers,
    model.encoder.ln_final,
    model.decoder.ln_final,
)
n_stacks = sum(count_parameters(m) for m in stacks)
rest = (model.encoder.embed, model.decoder.embed, model.out_proj)
n_rest = sum(count_parameters(m) for m in rest)
print(f"nn.Transformer:                 {n_ref:>9,}")
print(f"our stacks:                     {n_stacks:>9,}")
print(f"+ embeddings, output projection {n_rest:>9,}")
print(f"= our model                     {count_parameters(model):>9,}")
assert n_ref == n_stacks and n_stacks + n_rest == count_parameters(model) == 931_213

# %% [markdown]
# ## 8. Check against `helpers`
#
# The library packages this chapter's code; it gives exactly the same tensors and logits.
#
# :::{dropdown} Going deeper: the three helpers
# `helpers.to_torch_transformer` is the copy we wrote above, `helpers.torch_mask_arguments`
# builds the four masks, and `helpers.torch_forward` is our `reference_logits` with them. They
# must agree with this chapter exactly: the same state dict, the same masks, and the same logits.
# :::

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
from helpers import to_torch_transformer, torch_forward, torch_mask_arguments

lib_masks = torch_mask_arguments(src, tgt_in)
assert lib_masks.keys() == full_masks.keys()
assert all(torch.equal(lib_masks[k], full_masks[k]) for k in full_masks)
lib_ref = to_torch_transformer(model).eval()
ours_state, lib_state = ref.state_dict(), lib_ref.state_dict()
assert ours_state.keys() == lib_state.keys()
assert all(torch.equal(ours_state[k], lib_state[k]) for k in ours_state)
with torch.no_grad():
    lib_logits = torch_forward(model, lib_ref, src, tgt_in)
torch.testing.assert_close(lib_logits, theirs, rtol=0, atol=0)
torch.testing.assert_close(lib_logits, ours, rtol=1e-5, atol=1e-5)
print(f"helpers.to_torch_transformer: same {len(lib_state)} tensors; torch_forward: same logits")

# %% [markdown]
# ## Summary
#
# - With our weights copied in, `nn.Transformer`'s two stacks between our embeddings and our
#   output projection give our logits to within 1e-5, on a batch padded on both sides.
# - The check is sharp: one weight moved by 0.015 moves the logits beyond the tolerance, from
#   the layer that holds it on (Figure 15.1). Four quiet constructor options (`norm_first`,
#   `activation`, `nhead`, `layer_norm_eps`) move them too; `batch_first=False` fails at the
#   call here and, with equal lengths, lets the sequences of a batch change each other's
#   outputs.
# - The match holds in evaluation mode only. In training mode the dropout streams part at the
#   first encoder self-attention (the target was embedded first). Called in our order, that
#   self-attention agrees, but the layer's output does not: each feed-forward block drops out
#   once more in theirs.
# - `nn.Transformer` splits each mask by role (`tgt_mask` `[Lt, Lt]`, `*_key_padding_mask`
#   `[B, L]`) with our polarity (True = blocked); forgetting `memory_key_padding_mask` or
#   reversing the polarity runs without an error and changes the logits.
# - It returns no attention weights and has no KV cache; the parameter count of its stacks is
#   ours exactly. Its docstring (torch 2.13) calls it a reference implementation.
# - The one thing to remember: an independent implementation makes a strong test of a model,
#   if the test can be shown to fail.
#
# ## Exercises
#
# ### Exercise 15.1 (predict, then run): the other padding mask
#
# Section 4 left out `memory_key_padding_mask` and saw the padded sequences change. Now keep it and
# leave out `src_key_padding_mask` instead: the encoder's self-attention then reads the padded
# source positions. Which of the three sequences change, and why not the others? Predict, then
# run.

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
# Solution to exercise 15.1
no_src_mask = {k: v for k, v in full_masks.items() if k != "src_key_padding_mask"}
with torch.no_grad():
    enc_leak = reference_logits(ref, src, tgt_in, **no_src_mask)
change = (enc_leak - ours).abs().amax(dim=(1, 2))
for i in range(len(src)):
    print(f"sequence {i}: {int(src_pad[i].sum())} source pads, max |logit change| {change[i]:.2f}")
# only the padded sequences: sequence 0 has no source padding, so there is nothing to leak
assert change[0] < 1e-5 and (change[1:] > 1e-3).all()

# %% [markdown]
# ### Exercise 15.2 (implement): our masks as `nn.Transformer`'s arguments
#
# Write `torch_masks(src, tgt_in)` that returns a dict with the four mask arguments
# `nn.Transformer.forward` needs for a batch: `src_key_padding_mask`, `tgt_mask`,
# `tgt_key_padding_mask` and `memory_key_padding_mask`, each with the shape `nn.Transformer`
# expects. `check_torch_masks` compares them with the book's on three batches (source and target
# lengths differ), then runs our weights inside `nn.Transformer` with your masks: the logits must
# be our model's.

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 15.2
from helpers.exercises import check_torch_masks


def torch_masks(src, tgt_in):
    src_pad = src == PAD_ID  # [B, Ls], True = padding = blocked
    return dict(
        src_key_padding_mask=src_pad,
        tgt_mask=make_causal_mask(tgt_in.size(1))[0, 0],  # [Lt, Lt], True above the diagonal
        tgt_key_padding_mask=tgt_in == PAD_ID,  # [B, Lt]
        memory_key_padding_mask=src_pad,  # cross-attention's keys are the source positions
    )


check_torch_masks(torch_masks)

# %% [markdown]
# ### Exercise 15.3 (implement): the map the other way
#
# Section 2 copied our attention into `nn.MultiheadAttention`. Write the way back, which you need to
# start from weights trained with PyTorch's layers: `load_attention(dst, src)` copies an
# `nn.MultiheadAttention` (`src`, built with `batch_first=True`) into one of our
# `MultiHeadAttention` modules (`dst`). Split `in_proj_weight` and `in_proj_bias` into the three
# input projections, and copy `out_proj` into `W_o`. `check_load_attention` runs it on two sizes,
# with random weights and biases on both sides, then compares the two modules' outputs for
# self-attention and for cross-attention with key padding.

# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 15.3
from helpers.exercises import check_load_attention


def load_attention(dst, src):  # the checker calls it under torch.no_grad()
    w_q, w_k, w_v = src.in_proj_weight.chunk(3)  # [3d, d] -> three [d, d]: Q, K, V in order
    b_q, b_k, b_v = src.in_proj_bias.chunk(3)
    for ours, w, b in ((dst.W_q, w_q, b_q), (dst.W_k, w_k, b_k), (dst.W_v, w_v, b_v)):
        ours.weight.copy_(w)
        ours.bias.copy_(b)
    dst.W_o.load_state_dict(src.out_proj.state_dict())


check_load_attention(load_attention)
