"""The sequence-reversal data set: generating it, and turning ids into digits and text. Built in
chapter 09."""

import numpy as np
import torch

from helpers.core.vocab import BOS_ID, EOS_ID, NUM_OFFSET, PAD_ID, VOCAB_SIZE, token_name


def make_reversal_dataset(n: int, seed: int, min_len: int = 3, max_len: int = 12):
    """n random digit strings and their reversals, as (src, tgt) int64 [n, max_len + 2].

    src = digits, <eos>, <pad>...            e.g. 7 3 0 9 5 <eos>
    tgt = <bos>, reversed digits, <eos>, <pad>...  <bos> 5 9 0 3 7 <eos>
    Lengths are uniform in [min_len, max_len]; the same seed gives the same data. Built in
    chapter 09.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not 1 <= min_len <= max_len:
        raise ValueError(f"need 1 <= min_len <= max_len, got {min_len=}, {max_len=}")
    rng = np.random.default_rng(seed)
    width = max_len + 2  # room for <bos>/<eos>
    src = np.full((n, width), PAD_ID, dtype=np.int64)
    tgt = np.full((n, width), PAD_ID, dtype=np.int64)
    for i in range(n):
        L = int(rng.integers(min_len, max_len + 1))
        digits = rng.integers(0, 10, L) + NUM_OFFSET
        src[i, :L], src[i, L] = digits, EOS_ID
        tgt[i, 0], tgt[i, 1 : L + 1], tgt[i, L + 1] = BOS_ID, digits[::-1], EOS_ID
    return torch.from_numpy(src), torch.from_numpy(tgt)


def encode_digits(digits, width: int | None = None) -> torch.Tensor:
    """[7, 3, 0] or "730" -> src ids [1, width]: digits, <eos>, padding. Used in chapter 11."""
    if isinstance(digits, str):
        if not digits.isdigit():
            raise ValueError(f"expected only the digits 0-9, got {digits!r}")
        digits = [int(c) for c in digits]
    digits = list(digits)
    if not digits:
        raise ValueError("need at least one digit")
    if any(not (isinstance(d, (int, np.integer)) and 0 <= d <= 9) for d in digits):
        raise ValueError(f"every element must be a digit 0-9, got {digits}")
    width = len(digits) + 1 if width is None else width
    if len(digits) + 1 > width:
        raise ValueError(f"{len(digits)} digits plus <eos> do not fit in width {width}")
    ids = torch.full((1, width), PAD_ID, dtype=torch.long)
    ids[0, : len(digits)] = torch.tensor(digits) + NUM_OFFSET
    ids[0, len(digits)] = EOS_ID
    return ids


def decode_digits(ids) -> list[int]:
    """Token ids of one sequence -> the digits before the first <eos> (specials skipped).

    Built in chapter 09. An id outside the vocabulary [0, VOCAB_SIZE) before the first <eos>
    raises ValueError rather than turning into a digit that was never there (id 13 would
    otherwise read as the "digit" 10).
    """
    if isinstance(ids, torch.Tensor):
        if ids.dim() != 1:
            raise ValueError(f"ids must be one sequence [L], got shape {tuple(ids.shape)}")
        ids = ids.tolist()
    out = []
    for pos, t in enumerate(ids):
        if not 0 <= int(t) < VOCAB_SIZE:
            raise ValueError(
                f"token id {t} at position {pos} is outside the vocabulary [0, {VOCAB_SIZE})"
            )
        if t == EOS_ID:
            break
        if t >= NUM_OFFSET:
            out.append(int(t) - NUM_OFFSET)
    return out


def describe(ids) -> str:
    """Token ids -> readable text, e.g. '<bos> 5 9 0 <eos> <pad>'. Used from chapter 01 on."""
    return " ".join(token_name(t) for t in (ids.tolist() if isinstance(ids, torch.Tensor) else ids))
