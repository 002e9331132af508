"""A tiny Llama-style decoder-only model, and its port into Hugging Face's LlamaForCausalLM.

Built for the part "Today's Transformer". It is chapter 14's character
model (helpers.gpt.MiniGPT) with today's block in place of the 2017 one, from the parts of
helpers.core.modern (the ones the book's encoder-decoder options use):

- RMSNorm instead of LayerNorm (no mean subtracted, no bias), Pre-Norm as before;
- RoPE instead of added position codes: each query/key pair of dimensions is rotated by an
  angle proportional to its position, in self-attention; the embedding carries no position;
- SwiGLU instead of the ReLU/GELU feed-forward: down(silu(gate(x)) * up(x));
- grouped-query attention: num_kv_heads key/value heads, each serving num_heads / num_kv_heads
  query heads (multi-query attention when num_kv_heads = 1);
- no biases anywhere, and an output head that is tied to the embedding or not.

The model keeps MiniGPT's interface (vocab_size, max_len, blocks, forward(ids, caches=None)), so
chapter 14's helpers.gpt.train_gpt, evaluate_loss and generate (with or without its KV cache)
run it unchanged, on the same corpus with the same CharTokenizer.

to_hf_llama(model) copies the weights into a transformers.LlamaForCausalLM built from a
LlamaConfig (nothing downloaded), name by name (LLAMA_NAME_MAP). The conventions the port must
match (measured in tests/test_llama.py, where each one put back fails):

- RoPE layout: Hugging Face rotates split halves, the pairs (i, i + head_dim/2), through
  rotate_half (rope_layout="half", the default here); RoFormer and Meta's first code rotate
  interleaved pairs (2i, 2i + 1). The two layouts are the same model up to a fixed permutation
  of the query and key rows inside each head (modern.rope_permutation), which the port applies
  for rope_layout="interleaved". Copied without it, a trained model's logits move by whole units
  and its greedy text changes.
- rms_norm_eps: LlamaConfig's default 1e-6 is ours; Llama 2 checkpoints use 1e-5 and
  torch.nn.RMSNorm's default is finfo(float32).eps; both change the logits by more than float32
  rounding.
- GQA grouping: key/value head j serves query heads j*rep ... j*rep + rep - 1
  (repeat_interleave, HF's repeat_kv), not j, j + num_kv_heads, ... (tensor.repeat).
- Special tokens: LlamaConfig's default eos_token_id=2 is a character here (' ' in the book's
  corpus), so generate would stop at the first space; the port sets bos and eos to None and pad
  to PAD_ID, and suppresses PAD in generation, as helpers.gpt.next_token does.

Float32 only: the norms are torch's nn.RMSNorm, bitwise equal to HF's LlamaRMSNorm in float32;
in bfloat16 both normalise in float32, but HF casts back before multiplying by the weight and
torch after, so the two differ (chapter 19). transformers is imported only inside
the port, so `import helpers.llama` does not need it.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers.core.checks import checks_inputs
from helpers.core.kv_cache import KVCache
from helpers.core.modern import (
    ROPE_LAYOUTS,
    SwiGLU,
    apply_rope,
    repeat_kv,
    rms_norm,
    rope_angles,
    rope_permutation,
    swiglu_hidden,
)
from helpers.core.vocab import PAD_ID
from helpers.gpt import MiniGPT, causal_mask_with_past


@dataclass(frozen=True)
class TinyLlamaConfig:
    """Every hyperparameter of a TinyLlama; model.config holds one.

    The names follow chapter 14's GPTConfig; hf_llama_config() gives LlamaConfig's names.
    dff: the SwiGLU width (LlamaConfig's intermediate_size); None means
    modern.swiglu_hidden(4 * d_model), the width whose three matrices hold as many weights as a
    4 * d_model feed-forward's two (171 for d_model 64). rope_layout: "half" (Hugging Face's
    rotate_half, pairs (i, i + head_dim/2)) or "interleaved" (RoFormer's pairs (2i, 2i + 1)).
    tie_weights: the output head shares the embedding matrix (tie_word_embeddings).
    """

    vocab_size: int
    d_model: int = 64
    num_heads: int = 4
    num_kv_heads: int = 2
    num_layers: int = 2
    dff: int | None = None
    max_len: int = 128
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_layout: str = "half"
    tie_weights: bool = False

    def __post_init__(self):
        if self.num_heads < 1 or self.d_model % self.num_heads:
            raise ValueError(
                f"d_model {self.d_model} must be a multiple of num_heads {self.num_heads}"
            )
        if self.head_dim % 2:
            raise ValueError(f"RoPE rotates pairs: head_dim {self.head_dim} must be even")
        if not 1 <= self.num_kv_heads <= self.num_heads or self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_kv_heads {self.num_kv_heads} must divide num_heads {self.num_heads}"
            )
        if self.rope_layout not in ROPE_LAYOUTS:
            raise ValueError(f"rope_layout must be one of {ROPE_LAYOUTS}, got {self.rope_layout!r}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @property
    def ffn_dim(self) -> int:
        """The SwiGLU width: dff, or swiglu_hidden(4 * d_model) when dff is None."""
        return swiglu_hidden(4 * self.d_model) if self.dff is None else self.dff


# ---------------------------------------------------------------- the block


class GroupedQueryAttention(nn.Module):
    """Causal self-attention with RoPE and num_kv_heads key/value heads, no biases.

    W_q, W_k, W_v, W_o as in the book's MultiHeadAttention, but W_k and
    W_v project to num_kv_heads * head_dim only: the KV cache holds num_heads / num_kv_heads
    times fewer numbers. Keys are rotated before they are cached, each at its own position;
    modern.repeat_kv then gives each key/value head to its group of query heads."""

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int, layout: str = "half"):
        super().__init__()
        self.h, self.h_kv = num_heads, num_kv_heads
        self.d_k = d_model // num_heads
        self.layout = layout
        self.W_q = nn.Linear(d_model, num_heads * self.d_k, bias=False)
        self.W_k = nn.Linear(d_model, num_kv_heads * self.d_k, bias=False)
        self.W_v = nn.Linear(d_model, num_kv_heads * self.d_k, bias=False)
        self.W_o = nn.Linear(num_heads * self.d_k, d_model, bias=False)

    def heads(self, t: torch.Tensor, n: int) -> torch.Tensor:
        """[B, L, n * d_k] -> [B, n, L, d_k]"""
        return t.view(t.size(0), t.size(1), n, self.d_k).transpose(1, 2)

    def forward(self, x, angles, mask=None, cache: dict | None = None) -> torch.Tensor:
        """x [B, L, d]; angles [L, d_k / 2] for the positions of x (modern.rope_angles); mask:
        None (causal from position 0, or one new query that sees every key) or bool
        [1, 1, L, past + L], True = blocked; cache: None or the block's dict ('self_k' and
        'self_v', chapter 13's names: rotated keys and values [B, num_kv_heads, past, d_k])."""

        def project(k_in, v_in):
            k = apply_rope(self.heads(self.W_k(k_in), self.h_kv), angles, self.layout)
            return k, self.heads(self.W_v(v_in), self.h_kv)

        q = apply_rope(self.heads(self.W_q(x), self.h), angles, self.layout)
        K, V = project(x, x) if cache is None else KVCache(cache, "self_").update(x, x, project)
        rep = self.h // self.h_kv
        K, V = repeat_kv(K, rep), repeat_kv(V, rep)
        if mask is None:
            out = F.scaled_dot_product_attention(q, K, V, is_causal=x.size(1) > 1)
        else:
            out = F.scaled_dot_product_attention(q, K, V, attn_mask=~mask)
        return self.W_o(out.transpose(1, 2).reshape(x.size(0), x.size(1), -1))


class LlamaBlock(nn.Module):
    """Pre-Norm: x + attn(norm1(x)), then x + ffn(norm2(x)); RMSNorm, SwiGLU, no dropout."""

    def __init__(self, config: TinyLlamaConfig):
        super().__init__()
        c = config
        self.norm1 = rms_norm(c.d_model, c.rms_norm_eps)
        self.attn = GroupedQueryAttention(c.d_model, c.num_heads, c.num_kv_heads, c.rope_layout)
        self.norm2 = rms_norm(c.d_model, c.rms_norm_eps)
        self.ffn = SwiGLU(c.d_model, c.ffn_dim)

    def forward(self, x, angles, mask=None, cache=None):
        x = x + self.attn(self.norm1(x), angles, mask, cache)
        return x + self.ffn(self.norm2(x))


class TinyLlama(nn.Module):
    """ids [B, L] -> next-token logits [B, L, vocab_size]: chapter 14's decoder-only model with
    the Llama block.

    TinyLlama(config) or TinyLlama(vocab_size, **fields of TinyLlamaConfig). The embedding has
    no position code and no sqrt(d) scale (RoPE brings the positions inside attention); row
    PAD_ID is zero, as in the book's embeddings. Weights are drawn as LlamaPreTrainedModel
    draws them: normal with std 0.02, norms at 1. forward(ids, caches) follows MiniGPT's
    protocol: caches None, or one dict per block that the call extends (helpers.gpt.generate's
    use_cache=True).
    """

    def __init__(self, config: TinyLlamaConfig | int, **fields):
        super().__init__()
        if not isinstance(config, TinyLlamaConfig):
            config = TinyLlamaConfig(config, **fields)
        elif fields:
            config = dataclasses.replace(config, **fields)
        self.config = c = config
        self.vocab_size, self.max_len = c.vocab_size, c.max_len
        self.embed = nn.Embedding(c.vocab_size, c.d_model, padding_idx=PAD_ID)
        self.blocks = nn.ModuleList(LlamaBlock(c) for _ in range(c.num_layers))
        self.norm_final = rms_norm(c.d_model, c.rms_norm_eps)
        self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)
        with torch.no_grad():
            self.embed.weight[PAD_ID].zero_()
        if c.tie_weights:
            self.head.weight = self.embed.weight

    cached_length = staticmethod(MiniGPT.cached_length)

    def check_inputs(self, ids: torch.Tensor, caches: list[dict] | None = None) -> None:
        MiniGPT.check_inputs(self, ids, caches)  # the ids, and one cache per block
        end = self.cached_length(caches) + ids.size(1)
        if end > self.max_len:
            raise ValueError(f"positions up to {end} exceed the model's max_len={self.max_len}")

    @checks_inputs(check_inputs)
    def forward(self, ids: torch.Tensor, caches: list[dict] | None = None) -> torch.Tensor:
        c = self.config
        past = self.cached_length(caches)
        positions = torch.arange(past, past + ids.size(1), device=ids.device)
        angles = rope_angles(positions, c.head_dim, c.rope_theta)
        mask = causal_mask_with_past(ids.size(1), past, ids.device) if past else None
        x = self.embed(ids)
        for i, block in enumerate(self.blocks):
            x = block(x, angles, mask, None if caches is None else caches[i])
        return self.head(self.norm_final(x))


# ---------------------------------------------------------------- the port to Hugging Face

# Our parameter names -> LlamaForCausalLM's, one entry per tensor; "{i}" is the block index.
# tests/test_llama.py checks that the map reaches every HF tensor once, with its shape.
LLAMA_NAME_MAP = {
    "embed.weight": "model.embed_tokens.weight",
    "blocks.{i}.norm1.weight": "model.layers.{i}.input_layernorm.weight",
    "blocks.{i}.attn.W_q.weight": "model.layers.{i}.self_attn.q_proj.weight",
    "blocks.{i}.attn.W_k.weight": "model.layers.{i}.self_attn.k_proj.weight",
    "blocks.{i}.attn.W_v.weight": "model.layers.{i}.self_attn.v_proj.weight",
    "blocks.{i}.attn.W_o.weight": "model.layers.{i}.self_attn.o_proj.weight",
    "blocks.{i}.norm2.weight": "model.layers.{i}.post_attention_layernorm.weight",
    "blocks.{i}.ffn.gate.weight": "model.layers.{i}.mlp.gate_proj.weight",
    "blocks.{i}.ffn.up.weight": "model.layers.{i}.mlp.up_proj.weight",
    "blocks.{i}.ffn.down.weight": "model.layers.{i}.mlp.down_proj.weight",
    "norm_final.weight": "model.norm.weight",
    "head.weight": "lm_head.weight",
}
_BLOCK = re.compile(r"^blocks\.(\d+)\.")


def hf_llama_name(name: str) -> str:
    """Our parameter name -> its name in LlamaForCausalLM ('blocks.3.attn.W_q.weight' ->
    'model.layers.3.self_attn.q_proj.weight'), through LLAMA_NAME_MAP."""
    m = _BLOCK.match(name)
    key = _BLOCK.sub("blocks.{i}.", name) if m else name
    if key not in LLAMA_NAME_MAP:
        raise KeyError(f"{name!r} is not a TinyLlama parameter name (see LLAMA_NAME_MAP)")
    return LLAMA_NAME_MAP[key].replace("{i}", m.group(1)) if m else LLAMA_NAME_MAP[key]


def hf_llama_config(config: TinyLlamaConfig, **overrides):
    """The transformers.LlamaConfig of the same architecture (nothing downloaded).

    Matched on purpose: rms_norm_eps, rope_theta, tie_word_embeddings,
    no biases, silu; bos and eos None (LlamaConfig's eos_token_id=2 would end generation at a
    character) and pad PAD_ID. overrides replace any LlamaConfig field (to show a mismatch)."""
    from transformers import LlamaConfig

    c = config
    kwargs = dict(
        vocab_size=c.vocab_size,
        hidden_size=c.d_model,
        intermediate_size=c.ffn_dim,
        num_hidden_layers=c.num_layers,
        num_attention_heads=c.num_heads,
        num_key_value_heads=c.num_kv_heads,
        head_dim=c.head_dim,
        max_position_embeddings=c.max_len,
        rms_norm_eps=c.rms_norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": c.rope_theta},
        tie_word_embeddings=c.tie_weights,
        hidden_act="silu",
        attention_bias=False,
        mlp_bias=False,
        attention_dropout=0.0,
        pad_token_id=PAD_ID,
        bos_token_id=None,
        eos_token_id=None,
    )
    kwargs.update(overrides)
    return LlamaConfig(**kwargs)


def hf_llama_state_dict(model: TinyLlama, permute_rope: bool | None = None) -> dict:
    """Our weights under LlamaForCausalLM's names.

    permute_rope: reorder the q and k rows inside each head by rope_permutation (None: exactly
    when the model rotates interleaved pairs, which HF's half layout needs). False on an
    interleaved model reproduces the layout bug."""
    c = model.config
    if permute_rope is None:
        permute_rope = c.rope_layout == "interleaved"
    perm = rope_permutation(c.head_dim)
    out = {}
    for name, p in model.state_dict().items():
        p = p.detach().clone()
        if permute_rope and name.endswith(("attn.W_q.weight", "attn.W_k.weight")):
            heads = p.size(0) // c.head_dim  # num_heads for q, num_kv_heads for k
            p = p.view(heads, c.head_dim, -1)[:, perm].reshape_as(p)
        out[hf_llama_name(name)] = p
    return out


def to_hf_llama(model: TinyLlama, permute_rope: bool | None = None, **config_overrides):
    """A transformers.LlamaForCausalLM (eval mode) holding model's weights: the same logits to
    within float32 rounding, and generate(do_sample=False) giving helpers.gpt.generate's greedy
    tokens.

    Built from hf_llama_config(model.config, **config_overrides), weights from
    hf_llama_state_dict(model, permute_rope) loaded strictly (every HF tensor written). Its
    generation_config says what the book's generation does: no bos, no eos, and PAD_ID never
    generated (suppress_tokens). For a mismatch on purpose: permute_rope=False on an interleaved
    model, or a config override such as rms_norm_eps=1e-5."""
    import transformers

    config = hf_llama_config(model.config, **config_overrides)
    hf = transformers.LlamaForCausalLM(config)
    hf.load_state_dict(hf_llama_state_dict(model, permute_rope), strict=True)
    if config.tie_word_embeddings and hf.lm_head.weight is not hf.model.embed_tokens.weight:
        raise RuntimeError("tie_word_embeddings=True, but LlamaForCausalLM did not tie its head")
    # bos, eos and pad come from the config (LlamaConfig's own defaults: bos 1, eos 2)
    hf.generation_config.suppress_tokens = [PAD_ID]
    return hf.eval()
