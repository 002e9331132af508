"""Chapter 7's checkers accept the book's masks and explain wrong ones."""

import pytest
import torch
from mistakes_ch07 import EXERCISE_MISTAKES, HF_MISTAKES, PAIR_MISTAKES, decoder_masks

from helpers.exercises import (
    ExerciseError,
    check_decoder_masks,
    check_decoder_self_mask,
    check_hf_to_sdpa,
)

PAD = 0


def self_mask(tgt_in, mistake=None):
    L = tgt_in.size(1)
    causal = torch.ones(L, L, dtype=torch.bool).triu(0 if mistake == "diagonal" else 1)
    pad = (tgt_in == PAD)[:, None, None, :]
    if mistake == "queries":
        pad = pad.transpose(-1, -2)
    mask = causal & pad if mistake == "and" else causal | pad
    if mistake == "polarity":
        mask = ~mask
    if mistake == "int":
        mask = mask.long()
    return mask


def test_self_mask_accepts_the_solution(capsys):
    check_decoder_self_mask(self_mask)
    assert "check_decoder_self_mask: all" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, hint",
    [
        ("polarity", "polarity is reversed"),
        ("diagonal", "diagonal=1"),
        ("and", "combine with \\|, not &"),
        ("queries", "padding blocks keys"),
        ("int", "return a bool tensor"),
    ],
)
def test_self_mask_rejects_plausible_mistakes(mistake, hint):
    with pytest.raises(ExerciseError, match=hint):
        check_decoder_self_mask(lambda t: self_mask(t, mistake))


@pytest.mark.parametrize("name", sorted(EXERCISE_MISTAKES))
def test_self_mask_catalogue_each_mistake_named(name):
    """Every catalogued mistake (tests/mistakes_ch07.py) gets its own message."""
    wrong, fragment = EXERCISE_MISTAKES[name]
    with pytest.raises(ExerciseError, match=fragment):
        check_decoder_self_mask(wrong)


def test_self_mask_catalogue_messages_are_distinct():
    # the same slip written another way, the same hint: causal_4d_padding_flat is
    # padding_not_unsqueezed; with right padding padding_rows_and_keys is padding_on_queries
    variants = {"causal_4d_padding_flat", "padding_rows_and_keys"}
    messages = set()
    for name, (wrong, _) in EXERCISE_MISTAKES.items():
        if name in variants:
            continue
        with pytest.raises(ExerciseError) as err:
            check_decoder_self_mask(wrong)
        messages.add(str(err.value).split("Hint: ")[-1])
    assert len(messages) == len(EXERCISE_MISTAKES) - len(variants)


def test_self_mask_rejects_a_missing_part():
    with pytest.raises(ExerciseError, match="padding part is missing"):
        check_decoder_self_mask(
            lambda t: torch.ones(t.size(1), t.size(1)).bool().triu(1)[None, None]
        )


def hf_to_sdpa(attention_mask):
    return (attention_mask == 1)[:, None, None, :]


def test_hf_to_sdpa_accepts_the_solution(capsys):
    check_hf_to_sdpa(hf_to_sdpa)
    assert "check_hf_to_sdpa: all" in capsys.readouterr().out


def test_hf_to_sdpa_rejects_our_polarity():
    with pytest.raises(ExerciseError, match="the mask is reversed"):
        check_hf_to_sdpa(lambda m: (m == 0)[:, None, None, :])


def test_hf_to_sdpa_rejects_a_float_mask():
    with pytest.raises(ExerciseError, match="SDPA adds a float mask"):
        check_hf_to_sdpa(lambda m: m.float()[:, None, None, :])


def test_hf_to_sdpa_rejects_a_flat_mask():
    with pytest.raises(ExerciseError, match="add the two singleton dims"):
        check_hf_to_sdpa(lambda m: m == 1)


@pytest.mark.parametrize("name", sorted(HF_MISTAKES))
def test_hf_to_sdpa_catalogue_each_mistake_named(name):
    wrong, fragment = HF_MISTAKES[name]
    with pytest.raises(ExerciseError, match=fragment):
        check_hf_to_sdpa(wrong)


def test_hf_to_sdpa_accepts_bool_of_a_0_1_mask(capsys):
    """attention_mask.bool() is right for a 0/1 mask: 1 -> True = may attend."""
    check_hf_to_sdpa(lambda m: m.bool()[:, None, None, :])
    assert "check_hf_to_sdpa: all" in capsys.readouterr().out


def test_decoder_masks_accepts_the_solution(capsys):
    check_decoder_masks(decoder_masks)
    assert "check_decoder_masks: all" in capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(PAIR_MISTAKES))
def test_decoder_masks_catalogue_each_mistake_named(name):
    wrong, fragment = PAIR_MISTAKES[name]
    with pytest.raises(ExerciseError, match=fragment):
        check_decoder_masks(wrong)


def test_decoder_masks_accepts_a_list_pair(capsys):
    check_decoder_masks(lambda src, tgt_in: list(decoder_masks(src, tgt_in)))
    assert "check_decoder_masks: all" in capsys.readouterr().out


def test_decoder_masks_names_the_lengths_when_no_mistake_is_known():
    """A raise between L_t and L_s that matches no catalogued slip still says which lengths met."""
    from mistakes_ch07 import _future, _pad_keys

    def odd(src, tgt_in):
        return _future(tgt_in.size(1)) | _pad_keys(tgt_in), _pad_keys(src) | _future(5)

    with pytest.raises(ExerciseError, match=r"L_t = 5\) met one of the source's length \(L_s = 7"):
        check_decoder_masks(odd)


def test_self_mask_checker_does_not_crash_on_a_flat_causal_mask():
    with pytest.raises(ExerciseError, match=r"expected rank 4"):
        check_decoder_self_mask(lambda t: torch.ones(t.size(1), t.size(1)).bool().triu(1))


def test_decoder_masks_names_the_silent_slip_when_lengths_agree():
    """With L_s = L_t the source padding in the self mask raises nothing: it is still named."""
    from mistakes_ch07 import self_mask_source_padding

    def only_when_equal(src, tgt_in):
        f = self_mask_source_padding if src.size(1) == tgt_in.size(1) else decoder_masks
        return f(src, tgt_in)

    with pytest.raises(ExerciseError, match=r"(?s)L_s = L_t.*uses the source's padding"):
        check_decoder_masks(only_when_equal)
