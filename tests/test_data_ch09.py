"""helpers.data (chapter 09): the generator's invariants and decode_digits on bad ids."""

import pytest
import torch

from helpers import EOS_ID, NUM_OFFSET, PAD_ID, VOCAB_SIZE, decode_digits, make_reversal_dataset


def test_decode_digits_reads_digits_up_to_eos():
    ids = [NUM_OFFSET + 7, NUM_OFFSET + 3, EOS_ID, NUM_OFFSET + 5, PAD_ID]
    assert decode_digits(ids) == [7, 3]
    assert decode_digits(torch.tensor(ids)) == [7, 3]


@pytest.mark.parametrize("bad", [VOCAB_SIZE, VOCAB_SIZE + 4, -1])
def test_decode_digits_rejects_ids_outside_the_vocabulary(bad):
    with pytest.raises(ValueError, match=rf"token id {bad} at position 1 is outside"):
        decode_digits([NUM_OFFSET + 1, bad, EOS_ID])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        decode_digits(torch.tensor([NUM_OFFSET + 1, bad, EOS_ID]))


def test_decode_digits_wants_one_sequence():
    with pytest.raises(ValueError, match="one sequence"):
        decode_digits(torch.tensor([[NUM_OFFSET, EOS_ID]]))


def test_targets_reverse_the_sources():
    src, tgt = make_reversal_dataset(200, seed=3)
    for s, t in zip(src, tgt):
        assert decode_digits(t) == decode_digits(s)[::-1]
        assert (s == EOS_ID).sum() == 1 and (t == EOS_ID).sum() == 1
