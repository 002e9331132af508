"""Checkers for the exercises of chapter 15 (checked against torch.nn.Transformer)."""

from __future__ import annotations

import warnings

import torch
import torch.nn as nn

from helpers.analysis.torch_reference import to_torch_transformer, torch_mask_arguments
from helpers.core.attention import MultiHeadAttention
from helpers.core.data import make_reversal_dataset
from helpers.core.model import Transformer
from helpers.core.vocab import VOCAB_SIZE

from ._common import call, expect_close, expect_shape, fail, passed

__all__ = ["check_load_attention", "check_torch_masks"]

MASK_NAMES = ("src_key_padding_mask", "tgt_mask", "tgt_key_padding_mask", "memory_key_padding_mask")


def _mask_batches() -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(description, src, tgt_in): padded batches whose source and target lengths differ."""
    src, tgt = make_reversal_dataset(5, seed=15)
    src_short = src[:, : int((src != 0).sum(1).max())]  # no all-PAD column
    return [
        (f"a batch of 5 reversal pairs (src {tuple(src.shape)}, tgt_in {tuple(tgt[:, :-1].shape)})",
         src, tgt[:, :-1]),
        ("the same batch with the source's all-PAD columns cut off",
         src_short, tgt[:, :-1]),
        ("the first 2 pairs, decoder input cut to 4 tokens", src[:2], tgt[:2, :4]),
    ]  # fmt: skip


def _as_blocked(name: str, mask, where: str) -> torch.Tensor:
    """A bool mask (True = blocked) from the reader's bool mask or additive float mask."""
    if not isinstance(mask, torch.Tensor):
        fail(f"{name} should be a torch.Tensor, got {type(mask).__name__}", where)
    if mask.dtype == torch.bool:
        return mask
    if mask.is_floating_point():
        if bool(((mask == 0) | (mask == float("-inf"))).all()):
            return mask == float("-inf")
        fail(
            f"{name} is a float mask with values other than 0 and -inf",
            where,
            hint="a float mask is added to the scores: 0 where attention is allowed, -inf where "
            "it is blocked (or use a bool mask, True = blocked)",
        )
    fail(
        f"{name} has dtype {mask.dtype}",
        where,
        hint="use a bool mask (True = blocked), e.g. src == PAD_ID",
    )


def check_torch_masks(torch_masks_fn) -> None:
    """Exercise 15.2: torch_masks_fn(src, tgt_in) -> dict of nn.Transformer's mask arguments.

    Used in chapter 15. Compared with helpers.analysis.torch_reference.torch_mask_arguments on three
    fixed batches, then used to run our weights inside nn.Transformer: the logits must be our
    model's.
    """
    for where, src, tgt_in in _mask_batches():
        got = call(torch_masks_fn, src.clone(), tgt_in.clone(), where=where)
        expected = torch_mask_arguments(src, tgt_in)
        if not isinstance(got, dict):
            fail(f"return a dict of mask arguments, got {type(got).__name__}", where)
        missing = [k for k in MASK_NAMES if got.get(k) is None]
        if missing:
            hint = (
                "cross-attention does not reuse src_key_padding_mask: without "
                "memory_key_padding_mask the decoder reads the encoder's padded positions"
                if missing == ["memory_key_padding_mask"]
                else f"nn.Transformer needs all four: {', '.join(MASK_NAMES)}"
            )
            fail(f"no {', '.join(missing)} in your dict", where, hint)
        extra = sorted(k for k, v in got.items() if k not in MASK_NAMES and v is not None)
        if extra:
            fail(
                f"unexpected arguments {extra}",
                where,
                hint="src_mask and memory_mask are not needed here: padding goes in the "
                "*_key_padding_mask arguments, causality in tgt_mask",
            )
        for name in MASK_NAMES:
            want = expected[name]
            mask = _as_blocked(name, got[name], where)
            if mask.dim() == 4 and name != "tgt_mask":
                hint = "drop our two broadcast dimensions: nn.Transformer wants [B, L] here"
            elif mask.dim() == 4:
                hint = (
                    "tgt_mask is the same for every sequence, [Lt, Lt]: the padding goes in "
                    "tgt_key_padding_mask"
                )
            elif name == "tgt_key_padding_mask" and tuple(mask.shape) == tuple(src.shape):
                hint = "the decoder's padding comes from tgt_in, not from src"
            else:
                hint = "key padding masks are [B, L]; tgt_mask is [Lt, Lt]"
            expect_shape(name, mask, want.shape, where, hint)
            if torch.equal(mask, want):
                continue
            if torch.equal(mask, ~want):
                hint = (
                    "the polarity is reversed: in nn.Transformer (as in helpers) True means "
                    "blocked; SDPA and Hugging Face use True = attend"
                )
            elif name == "tgt_mask" and torch.equal(mask, torch.ones_like(want).triu(0)):
                hint = "diagonal=0 blocks the diagonal too: use triu(..., diagonal=1)"
            elif name == "tgt_mask" and torch.equal(mask, torch.ones_like(want).tril(-1)):
                hint = "this blocks the past: the causal mask is True above the diagonal (triu)"
            else:
                hint = "True where a key must not be seen: padding (== PAD_ID) or the future"
            bad = (mask != want).nonzero()[0].tolist()
            fail(
                f"{name}{bad} is {bool(mask[tuple(bad)])}, expected {bool(want[tuple(bad)])} "
                f"({int((mask != want).sum())} of {want.numel()} entries differ)",
                where,
                hint,
            )
    torch.manual_seed(0)
    model = Transformer(VOCAB_SIZE, VOCAB_SIZE).eval()
    ref = to_torch_transformer(model).eval()
    where, src, tgt_in = _mask_batches()[0]
    masks = call(torch_masks_fn, src, tgt_in, where=where)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a float mask beside a bool one warns: allowed here
        h = ref(model.encoder.embed(src), model.decoder.embed(tgt_in), **masks)
        expect_close(
            "the logits through nn.Transformer with your masks",
            model.out_proj(h),
            model(src, tgt_in),
            atol=1e-4,
            where=where,
        )
    passed("check_torch_masks", len(_mask_batches()) + 1, "three batches, then the logits")


def _attention_pair(d: int, h: int, seed: int):
    """Ours with random weights and biases; theirs filled with other random values."""
    g = torch.Generator().manual_seed(seed)
    ours = MultiHeadAttention(d, h, dropout=0.0).eval()
    theirs = nn.MultiheadAttention(d, h, dropout=0.0, batch_first=True).eval()
    with torch.no_grad():
        for p in list(ours.parameters()) + list(theirs.parameters()):
            p.copy_(0.3 * torch.randn(p.shape, generator=g))
    return ours, theirs


def _diagnose_load(ours: MultiHeadAttention, theirs: nn.MultiheadAttention, before: dict) -> str:
    """What a wrong load_attention did, in words; '' when the weights are where they belong."""
    d = ours.W_q.weight.size(0)
    w, b = theirs.in_proj_weight.detach(), theirs.in_proj_bias.detach()
    rows = {n: slice(i * d, (i + 1) * d) for i, n in enumerate("qkv")}
    got_w = {n: getattr(ours, f"W_{n}").weight.detach() for n in "qkv"}
    got_b = {n: getattr(ours, f"W_{n}").bias.detach() for n in "qkv"}
    if all(torch.equal(v, before[k]) for k, v in ours.state_dict().items()):
        return (
            "dst, our MultiHeadAttention, is unchanged: copy from src (the nn.MultiheadAttention) "
            "into dst (ours)"
        )
    if not all(torch.equal(got_w[n], w[rows[n]]) for n in "qkv"):
        if all(torch.equal(got_w[n], w[rows[n]].T) for n in "qkv"):
            return (
                "the weights are transposed: nn.Linear and in_proj_weight both store [out, in], "
                "so copy each block of rows as it is"
            )
        came_from = {
            n: next((m for m in "qkv" if torch.equal(got_w[n], w[rows[m]])), "?") for n in "qkv"
        }
        if sorted(came_from.values()) == ["k", "q", "v"]:
            got = ", ".join(f"W_{n} <- the {came_from[n].upper()} rows" for n in "qkv")
            return (
                f"{got}: in_proj_weight stacks Q, K, V in that order (rows 0:d, d:2d, 2d:3d), "
                "e.g. in_proj_weight.chunk(3)"
            )
        return "W_q.weight is in_proj_weight[:d], W_k.weight [d:2d], W_v.weight [2d:3d]"
    if not all(torch.equal(got_b[n], b[rows[n]]) for n in "qkv"):
        return "copy the biases too: in_proj_bias stacks the biases of W_q, W_k, W_v, in that order"
    if not (
        torch.equal(ours.W_o.weight, theirs.out_proj.weight)
        and torch.equal(ours.W_o.bias, theirs.out_proj.bias)
    ):
        return "out_proj (weight and bias) goes to W_o"
    return ""


def check_load_attention(load_attention_fn) -> None:
    """Exercise 15.3: load_attention_fn(dst: MultiHeadAttention, src: nn.MultiheadAttention).

    Used in chapter 15. The reverse of the chapter's copy_attention: after the call our module
    must compute what nn.MultiheadAttention computes, for self-attention and for cross-attention
    with key padding; compared on two sizes.
    """
    checks = 0
    for d, h, seed in ((16, 4, 0), (24, 3, 1)):
        where = f"d_model={d}, {h} heads"
        ours, theirs = _attention_pair(d, h, seed)
        before = {k: v.clone() for k, v in ours.state_dict().items()}
        with torch.no_grad():
            call(load_attention_fn, ours, theirs, where=where)
        hint = _diagnose_load(ours, theirs, before)
        if hint:
            fail("our module's weights differ from the book's map", where, hint)
        g = torch.Generator().manual_seed(seed + 10)
        x, mem = torch.randn(3, 5, d, generator=g), torch.randn(3, 7, d, generator=g)
        pad = torch.zeros(3, 7, dtype=torch.bool)
        pad[1, 5:], pad[2, 3:] = True, True
        with torch.no_grad():
            for label, (q, kv, mask) in {
                "self-attention": (x, x, None),
                "cross-attention with key padding": (x, mem, pad),
            }.items():
                got, _ = ours(q, kv, kv, attn_mask=None if mask is None else mask[:, None, None])
                want, _ = theirs(q, kv, kv, key_padding_mask=mask, need_weights=False)
                expect_close(f"our {label} output", got, want, atol=1e-5, where=where)
                checks += 1
    passed("check_load_attention", checks, "self- and cross-attention, two sizes")
