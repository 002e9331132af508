"""A decoder-only character model (a mini GPT) built from the book's blocks. Built in chapter 14.

Tokenizer, model, training loop and generation (temperature, top-k, top-p, KV cache).

The model reuses what the encoder-decoder chapters built: TokenAndPosition for the input,
and a GPTBlock that *is* the book's EncoderLayer (same sub-modules, same Pre-Norm order)
run under a causal mask, with an optional KV cache. There is no encoder and no
cross-attention: the only mask is causal, and the task is next-character prediction.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers.core.checks import check_token_ids, checks_inputs
from helpers.core.device import device as book_device
from helpers.core.embeddings import TokenAndPosition
from helpers.core.kv_cache import KVCache
from helpers.core.layers import EncoderLayer
from helpers.core.model import xavier_init_linears
from helpers.core.vocab import PAD_ID
from helpers.decoding.greedy import restores_mode
from helpers.repro.paths import PACKAGE_DATA

CORPUS_PATH = PACKAGE_DATA / "corpus.txt"


def load_corpus() -> str:
    """The book's own small English text (about 20 KB, public domain), shipped with helpers.

    Used in chapter 14.
    """
    return CORPUS_PATH.read_text(encoding="utf-8")


# ---------------------------------------------------------------- tokenizer


class CharTokenizer:
    """One id per character seen in `text`; id 0 (PAD_ID) is reserved and is not a character.

    Built in chapter 14.
    Why reserve 0: the book's TokenAndPosition builds its embedding with padding_idx=PAD_ID,
    so row 0 is all zeros and never receives a gradient. A real character with id 0 would
    never learn an embedding.
    """

    def __init__(self, text: str):
        if not text:
            raise ValueError("text must contain at least one character")
        self.chars = sorted(set(text))
        self.stoi = {c: i + 1 for i, c in enumerate(self.chars)}
        self.itos = {i: c for c, i in self.stoi.items()}

    @property
    def vocab_size(self) -> int:
        return len(self.chars) + 1  # + the reserved id 0

    def encode(self, text: str) -> torch.Tensor:
        """str -> int64 [len(text)]; a character outside the vocabulary is a ValueError."""
        try:
            return torch.tensor([self.stoi[c] for c in text], dtype=torch.long)
        except KeyError:
            pos = next(i for i, c in enumerate(text) if c not in self.stoi)
            raise ValueError(
                f"character {text[pos]!r} at position {pos} is not in the vocabulary "
                f"(the {len(self.chars)} characters of the text this tokenizer was built from)"
            ) from None

    def decode(self, ids) -> str:
        """int tensor [L] or list of ids -> str; PAD_ID or an unknown id is a ValueError."""
        if isinstance(ids, torch.Tensor):
            if ids.dim() != 1:
                raise ValueError(
                    f"ids must be 1-D [L], got shape {tuple(ids.shape)}; decode rows one at a time"
                )
            ids = ids.tolist()
        try:
            return "".join(self.itos[int(i)] for i in ids)
        except KeyError:
            bad = next(int(i) for i in ids if int(i) not in self.itos)
            what = "the reserved padding id" if bad == PAD_ID else "outside the vocabulary"
            raise ValueError(
                f"id {bad} is {what}: valid character ids are 1..{len(self.chars)}"
            ) from None

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"


# ---------------------------------------------------------------- model


def causal_mask_with_past(new: int, past: int = 0, device=None) -> torch.Tensor | None:
    """bool [1, 1, new, past + new], True = blocked: query i (at position past + i) may see
    keys 0 .. past + i. With past=0 it is make_causal_mask(new). A single new query is the
    newest position and may see every key, so it needs no mask: returns None.

    Built in chapter 14 (the prompt's prefill with a KV cache)."""
    if new == 1:
        return None
    ones = torch.ones(new, past + new, dtype=torch.bool, device=device)
    return torch.triu(ones, diagonal=past + 1)[None, None]


class GPTBlock(EncoderLayer):
    """Pre-Norm causal self-attention + feed-forward: the book's EncoderLayer, plus a KV cache.

    Built in chapter 14.
    Same sub-modules (ln1, mha, drop, ln2, ffn) and the same computation
    x + drop(mha(ln1(x))), then x + ffn(ln2(x)); the causal mask is what makes it a decoder.
    cache: None, or a dict the block fills with 'self_k'/'self_v' [B, h, L_so_far, d_k] (the
    names DecoderLayer's cache uses, chapter 13) and extends along the sequence dim (dim 2)
    with the keys and values of the new positions in x.
    """

    def forward(self, x, mask=None, need_weights=False, cache=None):
        h = self.ln1(x)
        kv = self.mha.project_kv
        K, V = kv(h, h) if cache is None else KVCache(cache, "self_").update(h, h, kv)
        a, w = self.mha.attend(h, K, V, attn_mask=mask, need_weights=need_weights)
        x = x + self.drop(a)
        x = x + self.ffn(self.ln2(x))
        return x, w


@dataclass(frozen=True)
class GPTConfig:
    """Every hyperparameter of a MiniGPT; model.config holds one. Built in chapter 14."""

    vocab_size: int
    d_model: int = 128
    num_heads: int = 4
    dff: int = 512
    num_layers: int = 4
    max_len: int = 128
    dropout: float = 0.1
    tie_weights: bool = False

    @property
    def d_k(self) -> int:
        return self.d_model // self.num_heads


class MiniGPT(nn.Module):
    """ids [B, L] -> next-token logits [B, L, vocab_size]. Decoder-only, causal mask only.

    Built in chapter 14.
    tie_weights=True shares the output head with the token embedding (one matrix used both
    ways, as in GPT-2): V * d fewer parameters. Off by default: with a character vocabulary the
    saving is tiny, and with the book's sqrt(d)-scaled embedding the untrained tied model
    predicts "the same character again" (the residual stream carries the input's own
    embedding, which the tied head reads back), so it starts well above the ln V loss.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 128,
        num_heads: int = 4,
        dff: int = 512,
        num_layers: int = 4,
        max_len: int = 128,
        dropout: float = 0.1,
        tie_weights: bool = False,
    ):
        super().__init__()
        self.config = GPTConfig(
            vocab_size, d_model, num_heads, dff, num_layers, max_len, dropout, tie_weights
        )
        self.vocab_size, self.max_len = vocab_size, max_len
        self.embed = TokenAndPosition(vocab_size, d_model, max_len, dropout)
        self.blocks = nn.ModuleList(
            GPTBlock(d_model, num_heads, dff, dropout) for _ in range(num_layers)
        )
        # Pre-Norm: normalise the residual stream once at the exit
        self.ln_final = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        xavier_init_linears(self.blocks)
        if tie_weights:
            self.head.weight = self.embed.emb.weight

    @staticmethod
    def cached_length(caches) -> int:
        """How many positions the caches hold (0 for None or empty caches)."""
        if not caches or "self_k" not in caches[0]:
            return 0
        return caches[0]["self_k"].size(2)

    def check_inputs(self, ids: torch.Tensor, caches: list[dict] | None = None) -> None:
        check_token_ids("ids", ids, self.vocab_size)
        if caches is not None and len(caches) != len(self.blocks):
            raise ValueError(
                f"caches must hold one dict per block ({len(self.blocks)}), got {len(caches)}"
            )

    @checks_inputs(check_inputs)
    def forward(self, ids: torch.Tensor, caches: list[dict] | None = None) -> torch.Tensor:
        """caches: None (process ids from position 0), or one dict per block: ids then continue
        the cached sequence, their positions start after it, and the blocks extend the caches
        (helpers.core.kv_cache.KVCache over each dict, as the encoder-decoder's layers do)."""
        past = self.cached_length(caches)
        x = self.embed(ids, start_pos=past)  # raises a clear ValueError beyond max_len
        mask = causal_mask_with_past(ids.size(1), past, ids.device)
        for i, block in enumerate(self.blocks):
            x, _ = block(x, mask, cache=None if caches is None else caches[i])
        return self.head(self.ln_final(x))


# ---------------------------------------------------------------- sampling and generation


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep exactly the k largest logits of each row; set the others to -inf.

    Built in chapter 14 (top-k sampling, Fan et al. 2018).
    """
    if not 1 <= k <= logits.size(-1):
        raise ValueError(f"top_k must be in [1, {logits.size(-1)}] (the vocabulary size), got {k}")
    keep = torch.zeros_like(logits, dtype=torch.bool).scatter_(
        -1, logits.topk(k, dim=-1).indices, True
    )
    return logits.masked_fill(~keep, float("-inf"))


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Nucleus filtering (Holtzman et al. 2020): in each row, keep the smallest set of most
    likely tokens whose probabilities sum to at least p; set the other logits to -inf.

    Built in chapter 14 (exercise 14.3). The most likely token is always kept; p = 1 keeps
    every token of non-zero probability. Softmax of the result is the renormalised nucleus.
    """
    if not 0 < p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {p}")
    probs = logits.float().softmax(-1)
    sorted_probs, order = probs.sort(-1, descending=True)
    mass_before = sorted_probs.cumsum(-1) - sorted_probs  # of the more likely tokens
    keep_sorted = mass_before < p  # keep until the kept mass reaches p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return logits.masked_fill(~keep, float("-inf"))


def next_token(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    top_p: float | None = None,
) -> torch.Tensor:
    """logits [B, V] -> int64 [B]. temperature 0: argmax (greedy); else sample from
    softmax(logits / temperature), restricted to the top_k most likely tokens, then to the
    top_p nucleus, if given. PAD_ID is never chosen: it is not a character.

    Built in chapter 14."""
    logits = logits.float().clone()
    logits[:, PAD_ID] = float("-inf")
    if temperature == 0:
        return logits.argmax(-1)
    logits = logits / temperature
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    probs = logits.softmax(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


@restores_mode
@torch.no_grad()
def generate(
    model: MiniGPT,
    prompt_ids: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    use_cache: bool = False,
    generator: torch.Generator | None = None,
    top_p: float | None = None,
) -> torch.Tensor:
    """prompt_ids [B, T] -> int64 [B, T + max_new_tokens]: the prompt, then the new tokens.

    Built in chapter 14. temperature, top_k and top_p as in next_token.
    use_cache=False feeds the whole sequence every step (the textbook loop).
    use_cache=True feeds the prompt once (filling one K/V cache per block), then only the
    newest token. Both compute the same logits to within float rounding, so greedy decoding
    (temperature=0) gives the same tokens. Sampling with a generator seeded the same way
    almost always does too: both loops make one torch.multinomial call per step with the same
    random numbers, so a token can differ only where float rounding decides between two
    candidates.
    Generates in eval mode (dropout off), then gives back the caller's mode.
    """
    check_token_ids("prompt_ids", prompt_ids, model.vocab_size)
    if prompt_ids.size(1) < 1:
        raise ValueError("prompt_ids must hold at least one token per row")
    if max_new_tokens < 0 or prompt_ids.size(1) + max_new_tokens > model.max_len:
        raise ValueError(
            f"prompt length {prompt_ids.size(1)} + max_new_tokens {max_new_tokens} must be at "
            f"most the model's max_len={model.max_len} (and max_new_tokens >= 0)"
        )
    if temperature < 0 or math.isnan(temperature):
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    model.eval()
    out = prompt_ids
    caches = [{} for _ in model.blocks] if use_cache else None
    for step in range(max_new_tokens):
        if use_cache:
            feed = out if step == 0 else out[:, -1:]  # the prompt once, then one token per step
            logits = model(feed, caches=caches)[:, -1]
        else:
            logits = model(out)[:, -1]
        nxt = next_token(logits, temperature, top_k, generator, top_p)
        out = torch.cat([out, nxt[:, None]], dim=1)
    return out


# ---------------------------------------------------------------- training


def split_train_val(ids: torch.Tensor, val_fraction: float = 0.1):
    """A contiguous split: the last val_fraction of the text is held out (never trained on).
    A random split of overlapping windows would leak training text into validation.

    Built in chapter 14."""
    n_val = int(len(ids) * val_fraction)
    return ids[:-n_val], ids[-n_val:]


def random_windows(ids: torch.Tensor, batch_size: int, block_size: int, generator: torch.Generator):
    """(x, y) int64 [batch_size, block_size]: random windows, and the same shifted by one.

    Built in chapter 14."""
    starts = torch.randint(0, len(ids) - block_size, (batch_size,), generator=generator)
    idx = starts[:, None] + torch.arange(block_size)  # [batch_size, block_size]
    return ids[idx], ids[idx + 1]


def fixed_windows(ids: torch.Tensor, block_size: int, max_windows: int | None = None):
    """(x, y): consecutive non-overlapping windows (the same every call, for evaluation).

    Built in chapter 14."""
    n = (len(ids) - 1) // block_size
    if max_windows is not None:
        n = min(n, max_windows)
    if n < 1:
        raise ValueError(
            f"the text ({len(ids)} tokens) is shorter than one window of {block_size} + 1"
        )
    x = ids[: n * block_size].view(n, block_size)
    y = ids[1 : n * block_size + 1].view(n, block_size)
    return x, y


@restores_mode
@torch.no_grad()
def evaluate_loss(model: MiniGPT, x: torch.Tensor, y: torch.Tensor, batch_size: int = 64) -> float:
    """Mean next-token cross entropy (nats) over fixed windows, in eval mode (no dropout), then
    gives back the caller's mode.

    Used in chapter 14."""
    model.eval()
    total, count = 0.0, 0
    for i in range(0, x.size(0), batch_size):
        logits = model(x[i : i + batch_size])
        total += F.cross_entropy(
            logits.flatten(0, 1), y[i : i + batch_size].flatten(), reduction="sum"
        ).item()
        count += y[i : i + batch_size].numel()
    return total / count


def train_gpt(
    model: MiniGPT,
    train_ids: torch.Tensor,
    val_ids: torch.Tensor,
    steps: int = 600,
    batch_size: int = 32,
    block_size: int | None = None,
    lr: float = 3e-3,
    warmup: int = 50,
    weight_decay: float = 0.01,
    eval_every: int = 50,
    eval_windows: int = 64,
    seed: int = 0,
    keep_best: bool = True,
    progress: bool = True,
    device: str | torch.device | None = None,
) -> dict:
    """Next-token training on random windows: AdamW, linear warmup then cosine decay to lr/10,
    gradient clipping at 1. Built in chapter 14.

    device: where the steps run; None means helpers.device() (the CPU unless
    $TRANSFORMER_BOOK_DEVICE asks for cuda or mps). The windows are drawn on the CPU either way
    (the same windows for a seed), and the model ends on the device it started on.

    Every eval_every steps (and at the end) the loss is measured, in eval mode, on the same
    fixed windows of the training text and of the validation text, so the two numbers are
    comparable. keep_best=True restores the weights with the lowest validation loss at the
    end (early stopping after the fact). Returns the history: lists step, batch_loss, lr,
    eval_step, train_loss, val_loss, and best_step, best_val_loss, seconds.
    """
    from tqdm.auto import tqdm

    block_size = model.max_len if block_size is None else block_size
    if not 1 <= block_size <= model.max_len:
        raise ValueError(
            f"block_size must be in [1, {model.max_len}] (the model's max_len), got {block_size}"
        )
    home = next(model.parameters()).device
    dev = book_device() if device is None else book_device(str(device))
    model.to(dev)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)  # dropout masks
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.99), weight_decay=weight_decay)

    def lr_at(step):  # step counts from 1
        if step <= warmup:
            return lr * step / warmup
        progress_frac = (step - warmup) / max(steps - warmup, 1)
        return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress_frac)))

    train_eval = [t.to(dev) for t in fixed_windows(train_ids, block_size, eval_windows)]
    val_eval = [t.to(dev) for t in fixed_windows(val_ids, block_size, eval_windows)]
    hist = {k: [] for k in ("step", "batch_loss", "lr", "eval_step", "train_loss", "val_loss")}
    best_val, best_step, best_state = float("inf"), 0, None
    t0 = time.perf_counter()
    bar = tqdm(range(1, steps + 1), desc="training", disable=not progress, mininterval=0.5)
    for step in bar:
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        x, y = (t.to(dev) for t in random_windows(train_ids, batch_size, block_size, gen))
        model.train()
        logits = model(x)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        hist["step"].append(step)
        hist["batch_loss"].append(loss.item())
        hist["lr"].append(lr_at(step))
        if step % eval_every == 0 or step == steps:
            tr, va = evaluate_loss(model, *train_eval), evaluate_loss(model, *val_eval)
            hist["eval_step"].append(step)
            hist["train_loss"].append(tr)
            hist["val_loss"].append(va)
            bar.set_postfix(train=f"{tr:.3f}", val=f"{va:.3f}")
            if va < best_val:
                best_val, best_step = va, step
                if keep_best:
                    best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    bar.close()
    if keep_best and best_state is not None:
        model.load_state_dict(best_state)
    model.to(home).eval()
    hist.update(best_step=best_step, best_val_loss=best_val, seconds=time.perf_counter() - t0)
    return hist
