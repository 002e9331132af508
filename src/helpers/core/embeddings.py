"""Token embedding plus sinusoidal positions."""

import math

import torch
import torch.nn as nn

from helpers.core.checks import check_token_ids, inputs_checked
from helpers.core.vocab import PAD_ID


def sinusoidal_position_encoding(max_len: int, d_model: int) -> torch.Tensor:
    """Built in chapter 2. float32 [max_len, d_model]: sin on even dims, cos on odd dims
    (Vaswani et al., 3.5)."""
    if max_len < 1 or d_model < 2 or d_model % 2:
        raise ValueError(f"need max_len >= 1 and an even d_model >= 2, got {max_len=}, {d_model=}")
    pos = torch.arange(max_len, dtype=torch.float32)[:, None]  # [L, 1]
    # 1 / 10000^(2i/d) computed in log space for accuracy
    inv_freq = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model)
    )
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(pos * inv_freq)
    pe[:, 1::2] = torch.cos(pos * inv_freq)
    return pe


class TokenAndPosition(nn.Module):
    """Built in chapter 2. ids [B, L] -> embedding * sqrt(d_model) + position [B, L, d_model].

    A sequence longer than max_len is a ValueError that names max_len.
    token_scale (None: sqrt(d_model), the paper's) multiplies the token embeddings and
    position_scale (1.0) the position codes; chapter 12 changes them to take the loudness of the
    input apart. The defaults compute what every other chapter shows.

    positions: "sinusoidal" (the default, the buffer pe above); "learned", a trained
    table `pos` = nn.Embedding(max_len, d_model) at nn.Embedding's N(0, 1) (chapter 2's
    exercise 2.2: as loud as the scaled tokens); "rope" or "alibi", nothing added here (the
    self-attentions carry the positions) and no max_len limit.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        max_len: int,
        dropout: float = 0.1,
        token_scale: float | None = None,
        position_scale: float = 1.0,
        positions: str = "sinusoidal",
    ):
        super().__init__()
        if positions not in ("sinusoidal", "learned", "rope", "alibi"):
            raise ValueError(
                f"positions must be 'sinusoidal', 'learned', 'rope' or 'alibi', got {positions!r}"
            )
        self.positions = positions
        self.vocab_size, self.d_model, self.max_len = vocab_size, d_model, max_len
        self.token_scale = math.sqrt(d_model) if token_scale is None else float(token_scale)
        self.position_scale = float(position_scale)
        self.emb = nn.Embedding(vocab_size, d_model, padding_idx=PAD_ID)
        # nn.Embedding starts at N(0, 1); times sqrt(d) that is std ~11 and drowns the
        # positions (amplitude <= 1). N(0, d^-1/2) makes the scaled tokens std ~1.
        nn.init.normal_(self.emb.weight, mean=0.0, std=d_model**-0.5)
        with torch.no_grad():
            self.emb.weight[PAD_ID].zero_()
        if positions == "sinusoidal":
            # a buffer follows .to(device) but is not trained; not persistent: it is recomputable
            pe = sinusoidal_position_encoding(max_len, d_model)
            self.register_buffer("pe", pe, persistent=False)
        elif positions == "learned":
            self.pos = nn.Embedding(max_len, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, ids: torch.Tensor, start_pos: int = 0) -> torch.Tensor:
        """start_pos > 0 embeds ids that continue a sequence (used by the KV cache)."""
        if not inputs_checked():  # the model checked them where they entered
            check_token_ids("ids", ids, self.vocab_size)
        end = start_pos + ids.size(1)
        if self.positions in ("rope", "alibi"):  # the attention adds the positions
            return self.drop(self.emb(ids) * self.token_scale)
        if end > self.max_len:
            raise ValueError(
                f"ids reach position {end - 1} but max_len={self.max_len}: "
                f"sequences longer than {self.max_len} tokens need a model built with a "
                "larger max_len"
            )
        if self.positions == "learned":
            pe = self.pos(torch.arange(start_pos, end, device=ids.device))
        else:
            pe = self.pe[start_pos:end]
        if self.position_scale != 1.0:  # the default adds the codes as they are
            pe = pe * self.position_scale
        x = self.emb(ids) * self.token_scale + pe
        return self.drop(x)
