"""Checkers for the exercises of chapter 1 (the task and the architecture)."""

from __future__ import annotations

import torch

from helpers.core.model import Transformer, count_parameters

from ._common import call, fail, passed

__all__ = ["check_parameter_count"]

# (src_vocab, tgt_vocab, d_model, num_heads, dff, num_layers): the book's default model,
# then shapes chosen so that different mistakes give different totals.
_CONFIGS = [
    (13, 13, 128, 4, 512, 2),
    (13, 21, 16, 2, 48, 1),
    (7, 11, 24, 4, 40, 3),
    (7, 11, 24, 8, 40, 3),  # the same model with twice as many heads
]
_MAX_LEN = 64  # Transformer's default max_len


def _mistakes(src_vocab, tgt_vocab, d, h, dff, n):
    """(amount, hint): what a known mistake adds to (+) or removes from (-) the true count."""
    attention = 4 * (d * d + d)
    biases = 3 * n * 4 * d + 2 * n * (dff + d) + tgt_vocab
    return [
        (-2 * d, "each stack ends with one final LayerNorm (2d parameters): count both"),
        (
            -4 * d,
            "each stack ends with one final LayerNorm (2d parameters each): you left both out",
        ),
        (-n * attention, "a decoder layer has two attentions (self- and cross-attention)"),
        (n * attention, "an encoder layer has one attention; only the decoder has cross-attention"),
        (-biases, "every nn.Linear in the model has a bias: add d_out per linear layer"),
        (-tgt_vocab, "the output projection has a bias of tgt_vocab entries"),
        (-(d * tgt_vocab + tgt_vocab), "do not forget the output projection, d -> tgt_vocab"),
        (-d * src_vocab, "there are two embedding tables: src_vocab x d and tgt_vocab x d"),
        (-d * tgt_vocab, "there are two embedding tables: src_vocab x d and tgt_vocab x d"),
        (-(5 * n + 2) * d, "a LayerNorm has a scale and a shift: 2d parameters, not d"),
        (
            2 * _MAX_LEN * d,
            "the sinusoidal position table is a buffer, not a parameter (chapter 2)",
        ),
        (-n * 2 * d, "a decoder layer has three LayerNorms, an encoder layer two"),
        (-n * 4 * d, "each layer has a LayerNorm before every sub-layer (Pre-Norm)"),
    ]


def check_parameter_count(fn) -> None:
    """Exercise 1.3: fn(src_vocab, tgt_vocab, d_model, num_heads, dff, num_layers) -> int.

    Compared with count_parameters(Transformer(...)) on four configurations, the book's
    default among them. Used in chapter 1.
    """
    results = {}
    for config in _CONFIGS:
        src_vocab, tgt_vocab, d, h, dff, n = config
        where = (
            f"src_vocab={src_vocab}, tgt_vocab={tgt_vocab}, d_model={d}, num_heads={h}, "
            f"dff={dff}, num_layers={n}"
        )
        got = call(fn, *config, where=where)
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if not isinstance(got, int) or isinstance(got, bool):
            fail(f"the count should be an int, got {type(got).__name__} {got!r}", where)
        results[config] = (got, where)
    if results[_CONFIGS[2]][0] != results[_CONFIGS[3]][0]:
        fail(
            f"your count changes with num_heads ({results[_CONFIGS[2]][0]:,} with 4 heads, "
            f"{results[_CONFIGS[3]][0]:,} with 8)",
            "two models that differ only in num_heads",
            "the heads split d_model into slices; they add no parameters",
        )
    diffs = {}
    for config, (got, _) in results.items():
        with torch.device("meta"):  # shapes only: nothing is allocated or initialised
            diffs[config] = got - count_parameters(Transformer(*config))
    # a mistake explains the answer only if it gives the same difference on every
    # configuration: one configuration alone can confuse two of them (at num_layers=2,
    # "one LayerNorm short per decoder layer" and "no final LayerNorms" both miss 4d)
    hints = [
        hint
        for k, (_, hint) in enumerate(_mistakes(*_CONFIGS[0]))
        if all(_mistakes(*config)[k][0] == diffs[config] for config in _CONFIGS)
    ]
    hints.append(
        "count component by component: embeddings, attentions, feed-forwards, "
        "LayerNorms, the output projection"
    )
    for config, (got, where) in results.items():
        diff = diffs[config]
        if diff:
            fail(
                f"your count is {got:,}, the model has {got - diff:,} ({diff:+,})", where, hints[0]
            )
    passed("check_parameter_count", len(_CONFIGS), "the book's model has 931,213")
