"""Checkers for the exercises of chapter 19 (a tiny Llama, equal to Hugging Face's)."""

from __future__ import annotations

import contextlib

import torch

from helpers.core.modern import rope_permutation
from helpers.llama import TinyLlama, hf_llama_name

from ._common import call, expect_shape, expect_tensor, fail, passed

__all__ = ["check_llama_names", "check_rope_permutation"]

# Our module names -> what to say when the reader's name for one of them is wrong.
_NAME_HINTS = {
    "embed": "the token embedding is model.embed_tokens.weight",
    "norm1": (
        "norm1 normalises the input of attention: input_layernorm (Hugging Face names the "
        "norm before the feed-forward post_attention_layernorm)"
    ),
    "norm2": "norm2 comes after attention, before the feed-forward: post_attention_layernorm",
    "W_q": "LlamaAttention's projections are q_proj, k_proj, v_proj and o_proj",
    "W_k": "LlamaAttention's projections are q_proj, k_proj, v_proj and o_proj",
    "W_v": "LlamaAttention's projections are q_proj, k_proj, v_proj and o_proj",
    "W_o": "the output projection is o_proj in LlamaAttention (out_proj is BART's name)",
    "attn": "attention lives under self_attn in each LlamaDecoderLayer",
    "gate": "LlamaMLP's matrices are gate_proj, up_proj and down_proj, under mlp",
    "up": "LlamaMLP's matrices are gate_proj, up_proj and down_proj, under mlp",
    "down": "LlamaMLP's matrices are gate_proj, up_proj and down_proj, under mlp",
    "ffn": "the feed-forward module is mlp in LlamaDecoderLayer",
    "norm_final": "the norm after the last block is model.norm.weight",
    "head": "the output head sits outside the decoder stack: lm_head.weight, without model.",
}
_ORDER = ("norm_final", "norm1", "norm2", "W_q", "W_k", "W_v", "W_o", "gate", "up", "down",
          "embed", "head", "attn", "ffn")  # fmt: skip


def _name_hint(name: str, got: str, want: str) -> str:
    if got.rsplit(".", 1)[-1] != want.rsplit(".", 1)[-1]:
        return "keep the last part of the name: a weight stays .weight"
    if want.startswith("model.") and not got.startswith("model."):
        return "LlamaForCausalLM keeps the decoder stack under model.: model.layers.{i}...."
    if name.startswith("blocks.") and ".layers." not in f".{got}":
        return "Hugging Face calls the blocks layers: blocks.{i} is model.layers.{i}"
    if name.startswith("blocks.") and got.split(".")[:3] != want.split(".")[:3]:
        i = name.split(".")[1]
        return f"keep the block index: blocks.{i} is model.layers.{i}"
    parts = name.split(".")
    if name.startswith("blocks.") and len(got.split(".")) > 3:
        # model.layers.{i}.<module>...: name the module when that is the part that differs
        module = got.split(".")[3]
        if module != want.split(".")[3] and parts[2] in ("attn", "ffn"):
            return _NAME_HINTS[parts[2]]
    for key in _ORDER:
        if key in parts:
            return _NAME_HINTS[key]
    return ""


def check_llama_names(hf_name_fn) -> None:
    """Exercise 19.2: hf_name_fn(our_name) -> the name of that tensor in LlamaForCausalLM.

    Used in chapter 19. Called on every parameter name of a two-block helpers.llama.TinyLlama
    ('blocks.1.attn.W_q.weight', 'head.weight', ...) and compared with the book's map
    (helpers.llama.LLAMA_NAME_MAP); the map must also be one to one.
    """
    names = [n for n, _ in TinyLlama(60, num_layers=2).named_parameters()]
    seen = {}
    for name in names:
        got = call(hf_name_fn, name, where=f"our name {name!r}")
        if not isinstance(got, str):
            fail(f"hf_name({name!r}) returned {type(got).__name__}, expected a str")
        want = hf_llama_name(name)
        if got != want:
            if got in seen:
                what = f"hf_name({name!r}) is {got!r}, as is hf_name({seen[got]!r})"
            else:
                what = f"hf_name({name!r}) is {got!r}, expected {want!r}"
            fail(what, hint=_name_hint(name, got, want))
        seen[got] = name
    passed("check_llama_names", len(names), "every parameter of a two-block TinyLlama")


# ---------------------------------------------------------------- exercise 19.3


def _book_permute(w: torch.Tensor, head_dim: int) -> torch.Tensor:
    heads = w.size(0) // head_dim
    return w.view(heads, head_dim, -1)[:, rope_permutation(head_dim)].reshape_as(w)


def _known_mistakes(w: torch.Tensor, head_dim: int) -> dict:
    """What each plausible wrong answer gives on w; a mistake that cannot run is left out."""
    perm = rope_permutation(head_dim)
    heads = w.size(0) // head_dim
    candidates = {
        "unchanged": lambda: w,
        "columns": lambda: w.view(w.size(0), -1, head_dim)[..., perm].reshape_as(w),
        "inverse": lambda: w.view(heads, head_dim, -1)[:, perm.argsort()].reshape_as(w),
        "all rows": lambda: w[rope_permutation(w.size(0))],
        "heads last": lambda: w.view(head_dim, heads, -1)[perm].reshape_as(w),
        "first head": lambda: torch.cat([w[:head_dim][perm], w[head_dim:]]),
    }
    out = {}
    for key, make in candidates.items():
        with contextlib.suppress(IndexError, RuntimeError):
            out[key] = make()
    return out


_PERM_HINTS = {
    "unchanged": "the rows are still in the interleaved order: reorder them with "
    "rope_permutation(head_dim) = (0, 2, 4, ..., 1, 3, 5, ...)",
    "columns": "permute the rows of W (its output dimensions, the query or key dimensions), "
    "not its columns (the d_model inputs)",
    "inverse": "that is the inverse permutation: row j of each head should be its row perm[j], "
    "w.view(heads, head_dim, -1)[:, perm]",
    "all rows": "the permutation acts inside each head of head_dim rows, not on all the rows at "
    "once: view W as (heads, head_dim, d_model) first",
    "heads last": "head h owns rows h * head_dim ... h * head_dim + head_dim - 1: view W as "
    "(heads, head_dim, d_model), not (head_dim, heads, d_model)",
    "first head": "only the first head's rows were reordered: every head of head_dim rows needs "
    "the same reordering",
}

# (what, rows, d_model, head_dim): several heads first, so that per-head and whole-matrix
# permutations differ; a square matrix first, so that a column permutation can run on it.
_PERM_CASES = (
    ("W_q of 4 heads of 16 (64 x 64)", 64, 64, 16),
    ("W_k of 2 heads of 16 (32 x 64)", 32, 64, 16),
    ("W_q of 3 heads of 8 (24 x 40)", 24, 40, 8),
    ("W_k of 1 head of 4 (4 x 12)", 4, 12, 4),
)


def check_rope_permutation(permute_fn) -> None:
    """Exercise 19.3: permute_fn(weight, head_dim) -> weight with the rows of each head put in
    the half layout's order.

    Used in chapter 19. weight is a W_q or W_k matrix [heads * head_dim, d_model] of a model
    that rotates interleaved pairs (2i, 2i + 1); the answer must give each head's rows in the
    order rope_permutation(head_dim) = (0, 2, 4, ..., 1, 3, 5, ...), so that Hugging Face's
    rotate_half rotates the same pairs. Compared with the book's on four matrices; a known
    mistake is named.
    """
    g = torch.Generator().manual_seed(19)
    for where, rows, d, hd in _PERM_CASES:
        w = torch.randn(rows, d, generator=g)
        got = call(permute_fn, w.clone(), hd, where=where)
        expect_tensor("the result", got, where)
        expect_shape("the result", got, w.shape, where, hint="only the order of the rows changes")
        want = _book_permute(w, hd)
        if torch.equal(got, want):
            continue
        for key, wrong in _known_mistakes(w, hd).items():
            if wrong.shape == got.shape and torch.equal(got, wrong):
                fail("the rows are not in the half layout's order", where, _PERM_HINTS[key])
        fail(
            "the result differs from the book's permutation of the rows",
            where,
            "in each head, new row j is old row perm[j], with perm = (0, 2, 4, ..., 1, 3, 5, "
            "...): the even rows first, then the odd ones",
        )
    passed("check_rope_permutation", len(_PERM_CASES), "W_q and W_k matrices of 1 to 4 heads")
