"""Greedy decoding, naive or with a KV cache, and exact-match accuracy. Built in chapter 11; the
KV cache in chapter 13."""

import functools

import torch

from helpers.core.checks import check_token_ids
from helpers.core.masks import make_padding_mask
from helpers.core.vocab import BOS_ID, EOS_ID, PAD_ID


def restores_mode(fn):
    """Decorator: fn(model, ...) may switch the model to eval mode; on return, or on an error,
    model.train(mode) gives back the caller's mode (one flag for all submodules). The decoders,
    the evaluations, gpt.generate and evaluate_loss, check_model and check_masks wear it.
    Built in chapter 11."""

    @functools.wraps(fn)
    def wrapper(model, *args, **kwargs):
        was_training = model.training
        try:
            return fn(model, *args, **kwargs)
        finally:
            model.train(was_training)

    return wrapper


def checked_max_len(model, src: torch.Tensor, max_len: int | None) -> int:
    """The output length a greedy decoder may produce for src (model.max_len when None), after
    checking it and src's token ids; a ValueError names what is wrong."""
    max_len = model.max_len if max_len is None else int(max_len)
    if not 1 <= max_len <= model.max_len:
        raise ValueError(
            f"max_len must be in [1, {model.max_len}] (the model's max_len), got {max_len}"
        )
    check_token_ids("src", src, model.src_vocab, model.max_len)
    return max_len


@restores_mode
@torch.no_grad()
def greedy_decode(
    model,
    src: torch.Tensor,
    max_len: int | None = None,
    use_cache: bool = False,
    stop_at_eos: bool = True,
) -> torch.Tensor:
    """src [B, Ls] -> int64 [B, <= max_len]: <bos>, then the argmax token at every step.

    Built in chapter 11 (use_cache=True: chapter 13).

    Rows that produced <eos> are padded with <pad> until every row is done.
    use_cache=False re-runs the decoder over the whole prefix every step (the textbook loop).
    use_cache=True feeds only the newest token: each layer appends its self-attention K/V
    and projects the cross-attention K/V from memory once. The tokens are identical.
    stop_at_eos=False keeps generating to max_len (for timing long outputs).
    Decodes in eval mode (dropout off), then gives back the caller's mode.
    """
    model.eval()
    max_len = checked_max_len(model, src, max_len)
    memory, src_mask = model.encode(src)
    caches = [{} for _ in model.decoder.layers] if use_cache else None

    def next_logits(out: torch.Tensor, step: int) -> torch.Tensor:
        if not use_cache:
            return model.decode(out, memory, src_mask, need_weights=False)[0][:, -1]
        # one new query row; it may see every cached key that is not padding
        self_mask = make_padding_mask(out)  # [B, 1, 1, step + 1]
        h, _ = model.decoder(
            out[:, -1:], memory, self_mask, src_mask, need_weights=False, caches=caches,
            start_pos=step,
        )  # fmt: skip
        return model.out_proj(h[:, -1])

    return greedy_tokens(next_logits, src.size(0), max_len, stop_at_eos, src.device)


def greedy_tokens(next_logits, batch_size: int, max_len: int, stop_at_eos: bool, device):
    """The greedy loop of greedy_decode and greedy_decode_static (gpt.generate and beam_search
    keep their own): <bos>, then next_logits(out, step)
    [B, V] -> its argmax appended, <pad> after a row's <eos>, until max_len tokens or (with
    stop_at_eos) every row is done. Returns int64 [B, <= max_len]."""
    out = torch.full((batch_size, 1), BOS_ID, dtype=torch.long, device=device)
    finished = torch.zeros(batch_size, dtype=torch.bool, device=device)
    for step in range(max_len - 1):
        nxt = next_logits(out, step).argmax(-1).masked_fill(finished, PAD_ID)
        out = torch.cat([out, nxt[:, None]], dim=1)
        if stop_at_eos:
            finished |= nxt == EOS_ID
            if finished.all():
                break
    return out


@torch.no_grad()
def exact_match(
    model, src: torch.Tensor, tgt: torch.Tensor, use_cache: bool = True, batch_size: int = 1000
) -> float:
    """Fraction of sequences whose greedy decoding equals tgt up to and including <eos>.

    Built in chapter 11. For the reported number with its interval, see
    helpers.exact_match_with_interval (chapters 10-12).
    """
    if src.size(0) != tgt.size(0):
        raise ValueError(f"src and tgt hold {src.size(0)} and {tgt.size(0)} sequences")
    device = next(model.parameters()).device
    correct = 0
    for i in range(0, src.size(0), batch_size):
        s, t = src[i : i + batch_size].to(device), tgt[i : i + batch_size].to(device)
        pred = greedy_decode(model, s, use_cache=use_cache)
        correct += int(sequences_equal(pred, t).sum())
    return correct / max(src.size(0), 1)


def sequences_equal(pred: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """bool [B]: pred matches tgt at every position up to tgt's first <eos> (inclusive).

    Built in chapter 11."""
    L = tgt.size(1)
    if pred.size(1) < L:
        pred = torch.nn.functional.pad(pred, (0, L - pred.size(1)), value=PAD_ID)
    pred = pred[:, :L]
    # positions up to and including the first <eos> of the target
    is_eos = (tgt == EOS_ID).long()
    upto_eos = (is_eos.cumsum(1) - is_eos) == 0
    return ((pred == tgt) | ~upto_eos).all(dim=1)
