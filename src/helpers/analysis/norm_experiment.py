"""Pre-Norm vs Post-Norm on an encoder-only version of the reversal task. Built in chapter 5.

The decoder does not exist yet in chapter 5, so the experiment tags every source position with
the token the reversed sequence has there (the reversed digit, then `<eos>`), using only an
encoder and a linear read-out. Both variants start from identical weights and see identical
batches; only the LayerNorms differ: their place, and Pre-Norm's final one.

    run = train_tagger("post", seed=0, steps=300, lr=2e-3)
    run.losses, run.val_loss, run.exact_match

tools/record/ch05_norm_sweep.py runs it over several seeds and learning rates and stores the
result in chapters/data/ch05_norm_sweep.json, which the Experiments page
appendix/experiment_norm_placement shows (chapter 5 cites it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers.core.data import make_reversal_dataset
from helpers.core.embeddings import TokenAndPosition
from helpers.core.layers import EncoderLayer
from helpers.core.masks import make_padding_mask
from helpers.core.model import xavier_init_linears
from helpers.core.vocab import EOS_ID, NUM_OFFSET, PAD_ID, VOCAB_SIZE

NORMS = ("pre", "post")


class PostNormEncoderLayer(EncoderLayer):
    """Built in chapter 5. The original layout, x <- LN(x + f(x)); same parameters as
    EncoderLayer (the Pre-Norm layer), so weights load from one into the other."""

    def forward(self, x, pad_mask, need_weights=True):
        a, w = self.mha(x, x, x, attn_mask=pad_mask, need_weights=need_weights)
        x = self.ln1(x + self.drop(a))
        x = self.ln2(x + self.ffn(x))
        return x, w


class EncoderTagger(nn.Module):
    """Used in chapter 5. Embedding, num_layers encoder layers ("pre" or "post"), a final
    LayerNorm for Pre-Norm only, and a linear read-out to the vocabulary at every position.

    No dropout; Xavier initialisation as in the book's model. Seeded identically, the "pre" and
    "post" taggers have identical weights (Pre-Norm's final LayerNorm starts at 1 and 0).
    """

    def __init__(
        self, norm: str, d_model: int = 64, num_heads: int = 4, dff: int = 256, num_layers: int = 6
    ):
        super().__init__()
        if norm not in NORMS:
            raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
        layer_cls = EncoderLayer if norm == "pre" else PostNormEncoderLayer
        self.embed = TokenAndPosition(VOCAB_SIZE, d_model, max_len=16, dropout=0.0)
        self.layers = nn.ModuleList(
            layer_cls(d_model, num_heads, dff, 0.0) for _ in range(num_layers)
        )
        self.ln_final = nn.LayerNorm(d_model) if norm == "pre" else nn.Identity()
        self.out = nn.Linear(d_model, VOCAB_SIZE)
        xavier_init_linears(self)

    def forward(self, src: torch.Tensor) -> torch.Tensor:
        """src [B, L] -> logits [B, L, VOCAB_SIZE]."""
        mask = make_padding_mask(src)
        x = self.embed(src)
        for layer in self.layers:
            x, _ = layer(x, mask, need_weights=False)
        return self.out(self.ln_final(x))


def tagging_labels(tgt: torch.Tensor) -> torch.Tensor:
    """Used in chapter 5. Decoder targets <bos> y1 ... yL <eos> <pad>... -> the label of every
    source position: y1 ... yL <eos> <pad>... (the targets shifted left by one)."""
    return torch.cat([tgt[:, 1:], torch.full((len(tgt), 1), PAD_ID)], dim=1)


@dataclass
class TaggerRun:
    """Used in chapter 5. One training run: the loss of every step and the held-out scores."""

    norm: str
    seed: int
    lr: float
    steps: int
    losses: list = field(default_factory=list)
    val_loss: float = float("nan")
    exact_match: float = float("nan")
    correct: torch.Tensor | None = None  # bool [n_held_out]: which sequences came out right


def tagger_data(train_size: int = 20_000, val_size: int = 1000):
    """Used in chapter 5. (train_src, train_lab, val_src, val_lab): seeds 0 and 1."""
    train_src, train_tgt = make_reversal_dataset(train_size, seed=0)
    val_src, val_tgt = make_reversal_dataset(val_size, seed=1)
    return train_src, tagging_labels(train_tgt), val_src, tagging_labels(val_tgt)


def train_tagger(
    norm: str,
    seed: int = 0,
    steps: int = 300,
    lr: float = 2e-3,
    batch_size: int = 64,
    num_layers: int = 6,
    data=None,
) -> TaggerRun:
    """Used in chapter 5. Train an EncoderTagger with Adam at a constant lr (no warmup), on one
    thread; `seed` fixes the initial weights and the batches. Returns the per-step training
    losses and the loss and exact match (every label of a sequence right) on the held-out set,
    and which held-out sequences came out right (`correct`, for a paired test between runs).

    Training itself is taught in chapter 10; this loop is the smallest one that runs the
    comparison.
    """
    train_src, train_lab, val_src, val_lab = tagger_data() if data is None else data
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(seed)
        model = EncoderTagger(norm, num_layers=num_layers)
        opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98))
        gen = torch.Generator().manual_seed(seed)
        run = TaggerRun(norm, seed, lr, steps)
        for _ in range(steps):
            idx = torch.randint(0, len(train_src), (batch_size,), generator=gen)
            logits = model(train_src[idx])
            loss = F.cross_entropy(
                logits.flatten(0, 1), train_lab[idx].flatten(), ignore_index=PAD_ID
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
            run.losses.append(loss.item())
        model.eval()
        with torch.no_grad():
            logits = model(val_src)
        run.val_loss = F.cross_entropy(
            logits.flatten(0, 1), val_lab.flatten(), ignore_index=PAD_ID
        ).item()
        right = (logits.argmax(-1) == val_lab) | (val_lab == PAD_ID)
        run.correct = right.all(dim=1)
        run.exact_match = run.correct.float().mean().item()
        return run
    finally:
        torch.set_num_threads(threads)


def running_mean(values, window: int = 20) -> torch.Tensor:
    """Chapter 5's Experiments page (Pre/Post-Norm). Running mean over the last `window`
    values (fewer at the start): element i averages values[max(0, i - window + 1) .. i]."""
    t = torch.as_tensor(values, dtype=torch.float64)
    c = torch.cat([torch.zeros(1, dtype=torch.float64), t.cumsum(0)])
    hi = torch.arange(1, len(t) + 1)
    lo = (hi - window).clamp(min=0)
    return (c[hi] - c[lo]) / (hi - lo)


def order_blind_loss(src: torch.Tensor, lab: torch.Tensor) -> float:
    """Chapter 5's Experiments page (Pre/Post-Norm). Cross-entropy of a guess that knows
    which digits a source holds, and how often, but not their order: at a digit position it
    gives each digit its count / the number of digits; at the `<eos>` position (where the
    source has its `<eos>`) it is certain. Averaged over every non-padding position."""
    is_digit = src >= NUM_OFFSET
    counts = torch.zeros(len(src), VOCAB_SIZE).scatter_add_(1, src, is_digit.float())
    p_digit = counts / is_digit.sum(1, keepdim=True)  # [N, V]: the multiset of the digits
    p_label = p_digit.gather(1, lab)  # the probability it gives each position's label
    p_label[lab == EOS_ID] = 1.0
    return -p_label[lab != PAD_ID].log().mean().item()
