"""The reversal task's vocabulary: three special tokens, then the ten digits."""

PAD_ID = 0  # padding; never attended to, never scored by the loss
BOS_ID = 1  # start of the decoder input (must differ from PAD: see the pitfalls chapter)
EOS_ID = 2  # end of sequence
NUM_OFFSET = 3  # digit d is token id d + NUM_OFFSET
VOCAB_SIZE = NUM_OFFSET + 10  # 13

SPECIAL_NAMES = {PAD_ID: "<pad>", BOS_ID: "<bos>", EOS_ID: "<eos>"}


def token_name(token_id: int) -> str:
    """Human-readable name of one token id: '<pad>', '<bos>', '<eos>' or the digit.

    Built in chapter 1."""
    token_id = int(token_id)
    if token_id in SPECIAL_NAMES:
        return SPECIAL_NAMES[token_id]
    if NUM_OFFSET <= token_id < VOCAB_SIZE:
        return str(token_id - NUM_OFFSET)
    raise ValueError(f"token id {token_id} is outside the vocabulary [0, {VOCAB_SIZE})")
