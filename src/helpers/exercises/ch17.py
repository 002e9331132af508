"""Checkers for the exercises of chapter 17 (pitfalls and debugging)."""

from __future__ import annotations

import torch

from helpers.core.data import make_reversal_dataset
from helpers.core.masks import make_padding_mask
from helpers.core.model import Transformer
from helpers.core.vocab import PAD_ID, VOCAB_SIZE

from ..debugging import check_model
from ._common import call, expect_close, fail, passed

__all__ = ["check_fixed_model"]  # BuggyTransformer: import it from helpers.exercises.ch17

SMALL = dict(d_model=32, num_heads=2, dff=64, num_layers=2)

_HINTS = {
    "causality probe": "the decoder sees later target tokens: its causal mask must be True "
    "strictly above the diagonal, torch.triu(ones, diagonal=1), with True = blocked",
    "fully masked rows": "some query may attend to no key at all: check each mask's polarity "
    "(helpers: True = blocked) and the causal mask's diagonal",
    "padding invariance": "the encoder or cross-attention reads the source's PAD positions: the "
    "source mask must be True where src == PAD_ID, shaped [B, 1, 1, Ls]",
    "mask dtype": "helpers takes bool masks only: build them with comparisons (== PAD_ID)",
    "eval determinism": "something still runs in training mode after model.eval()",
    "unregistered tensors": "keep layers in nn.ModuleList, not in a plain list",
}


class BuggyTransformer(Transformer):
    """Exercise 17.3's broken model: two pitfalls of chapter 17, in the masks."""

    def encode(self, src):
        src_mask = (src != PAD_ID)[:, None, None, :]
        return self.encoder(src, src_mask), src_mask

    def decode(self, tgt_in, memory, src_mask, need_weights=True):
        L = tgt_in.size(1)
        causal = torch.tril(torch.ones(L, L, dtype=torch.bool, device=tgt_in.device))
        self_mask = causal | make_padding_mask(tgt_in)
        hidden, cross = self.decoder(tgt_in, memory, self_mask, src_mask, need_weights=need_weights)
        return self.out_proj(hidden), cross


def check_fixed_model(model_cls) -> None:
    """Exercise 17.3: model_cls(src_vocab, tgt_vocab, **sizes) fixes BuggyTransformer.

    Used in chapter 17. The fixed model must be a subclass of BuggyTransformer (a healthy model
    written from scratch fixes nothing), pass every check of check_model on a fixed batch, and,
    holding the same weights as a helpers.Transformer, compute the same logits.
    """
    if not (isinstance(model_cls, type) and issubclass(model_cls, BuggyTransformer)):
        fail(
            f"{getattr(model_cls, '__name__', model_cls)!r} is not a subclass of "
            "BuggyTransformer: the exercise is to fix that model, not to start from a healthy one",
            hint="class FixedTransformer(BuggyTransformer): override the methods that build the "
            "wrong masks",
        )
    src, tgt = make_reversal_dataset(8, seed=17)
    torch.manual_seed(0)
    model = call(model_cls, VOCAB_SIZE, VOCAB_SIZE, max_len=src.size(1), **SMALL,
                 where="building the model")  # fmt: skip
    report = call(check_model, model, (src, tgt), verbose=False, where="check_model")
    if not report.ok:
        failed = report.failures
        first = next((f for f in failed if f.check in _HINTS), failed[0])
        fail(
            f"check_model still flags {', '.join(f.check for f in failed)}; first: "
            f"{first.check}: {first.message}",
            "a batch of 8 reversal pairs",
            _HINTS.get(first.check, "print check_model(model, batch) and read the FAIL lines"),
        )
    reference = Transformer(VOCAB_SIZE, VOCAB_SIZE, max_len=src.size(1), **SMALL).eval()
    try:
        reference.load_state_dict(model.state_dict())
    except RuntimeError as err:
        fail(
            f"its weights do not fit a helpers.Transformer: {str(err).splitlines()[0]}",
            hint="fix the masks only; keep the modules the model was built with",
        )
    model.eval()
    with torch.no_grad():
        got = call(model, src, tgt[:, :-1], where="a batch of 8 reversal pairs")
        expect_close(
            "the logits",
            got,
            reference(src, tgt[:, :-1]),
            atol=1e-5,
            where="a batch of 8 reversal pairs",
            hint="with the same weights, the fixed model must compute what helpers.Transformer "
            "computes: the causal mask | the target padding mask in the decoder, the source "
            "padding mask in the encoder and in cross-attention",
        )
    passed(
        "check_fixed_model",
        len(report.findings) + 2,
        "a subclass of BuggyTransformer, every check_model check, then logits",
    )
