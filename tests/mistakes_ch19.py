"""Plausible wrong answers to chapter 19's exercises: 19.2 (our parameter names -> those of
transformers' LlamaForCausalLM) and 19.3 (the RoPE permutation of the W_q / W_k rows).

Not collected by pytest (the name does not start with test_).
"""

import torch

from helpers.core.modern import rope_permutation
from helpers.llama import hf_llama_name

# ---------------------------------------------------------------- exercise 19.2: names


def names_norms_swapped(name):
    """norm2 read as 'after attention' is right, but norm1 guessed as the other one."""
    out = hf_llama_name(name)
    if ".norm1." in name:
        return out.replace("input_layernorm", "post_attention_layernorm")
    if ".norm2." in name:
        return out.replace("post_attention_layernorm", "input_layernorm")
    return out


def names_without_model_prefix(name):
    return hf_llama_name(name).removeprefix("model.")


def names_head_inside_model(name):
    out = hf_llama_name(name)
    return "model.lm_head.weight" if out == "lm_head.weight" else out


def names_blocks_kept(name):
    return hf_llama_name(name).replace("model.layers.", "model.blocks.")


def names_bart_out_proj(name):
    return hf_llama_name(name).replace("o_proj", "out_proj")


def names_gate_up_swapped(name):
    out = hf_llama_name(name)
    if "gate_proj" in out:
        return out.replace("gate_proj", "up_proj")
    return out.replace("up_proj", "gate_proj")


def names_final_norm(name):
    out = hf_llama_name(name)
    return "model.final_layernorm.weight" if out == "model.norm.weight" else out


def names_attention_module(name):
    """The attention module named after the paper, not LlamaDecoderLayer's attribute."""
    return hf_llama_name(name).replace(".self_attn.", ".attention.")


NAME_MISTAKES = {
    "norms swapped": (names_norms_swapped, "norm1 normalises the input of attention"),
    "no model. prefix": (names_without_model_prefix, "under model."),
    "head inside model": (names_head_inside_model, "lm_head.weight, without model."),
    "blocks kept": (names_blocks_kept, "calls the blocks layers"),
    "BART's out_proj": (names_bart_out_proj, "o_proj in LlamaAttention"),
    "gate and up swapped": (names_gate_up_swapped, "gate_proj, up_proj and down_proj"),
    "final norm": (names_final_norm, "model.norm.weight"),
    "attention module": (names_attention_module, "attention lives under self_attn"),
}

# ---------------------------------------------------------------- exercise 19.3: permutation


def permute_nothing(w, head_dim):
    return w


def permute_columns(w, head_dim):
    """The permutation applied to the columns, in blocks of head_dim."""
    return w.view(w.size(0), -1, head_dim)[..., rope_permutation(head_dim)].reshape_as(w)


def permute_inverse(w, head_dim):
    heads = w.size(0) // head_dim
    return w.view(heads, head_dim, -1)[:, rope_permutation(head_dim).argsort()].reshape_as(w)


def permute_all_rows(w, head_dim):
    return w[rope_permutation(w.size(0))]


def permute_heads_last(w, head_dim):
    heads = w.size(0) // head_dim
    return w.view(head_dim, heads, -1)[rope_permutation(head_dim)].reshape_as(w)


def permute_pairs_swapped(w, head_dim):
    """Swaps the two members of each pair (1, 0, 3, 2, ...): another order, not a known one."""
    heads = w.size(0) // head_dim
    perm = torch.arange(head_dim).view(-1, 2).flip(-1).flatten()
    return w.view(heads, head_dim, -1)[:, perm].reshape_as(w)


def permute_first_head_only(w, head_dim):
    """The per-head order, applied to the first head and forgotten for the others."""
    return torch.cat([w[:head_dim][rope_permutation(head_dim)], w[head_dim:]])


def permute_odd_first(w, head_dim):
    """(1, 3, 5, ..., 0, 2, 4, ...): another order, not a known one."""
    heads = w.size(0) // head_dim
    perm = torch.cat([torch.arange(1, head_dim, 2), torch.arange(0, head_dim, 2)])
    return w.view(heads, head_dim, -1)[:, perm].reshape_as(w)


PERMUTATION_MISTAKES = {
    "unchanged": (permute_nothing, "still in the interleaved order"),
    "columns": (permute_columns, "not its columns"),
    "inverse": (permute_inverse, "inverse permutation"),
    "all rows": (permute_all_rows, "inside each head"),
    "heads last": (permute_heads_last, "not \\(head_dim, heads, d_model\\)"),
    "pairs swapped": (permute_pairs_swapped, "differs from the book's permutation"),
    "first head only": (permute_first_head_only, "only the first head's rows"),
    "odd rows first": (permute_odd_first, "the even rows first, then the odd ones"),
}
