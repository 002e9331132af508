"""Chapter 19's checkers accept the book's answers and name each mistake of
tests/mistakes_ch19.py."""

import pytest
import torch
from mistakes_ch19 import NAME_MISTAKES, PERMUTATION_MISTAKES

from helpers.core.modern import rope_permutation
from helpers.exercises import ExerciseError, check_llama_names, check_rope_permutation
from helpers.llama import hf_llama_name


def book_permute(w, head_dim):
    heads = w.size(0) // head_dim
    return w.view(heads, head_dim, -1)[:, rope_permutation(head_dim)].reshape_as(w)


def test_the_books_names_pass(capsys):
    check_llama_names(hf_llama_name)
    assert "check_llama_names: all 21 checks passed" in capsys.readouterr().out


@pytest.mark.parametrize("mistake", sorted(NAME_MISTAKES))
def test_each_name_mistake_is_rejected_with_its_hint(mistake):
    wrong, message = NAME_MISTAKES[mistake]
    with pytest.raises(ExerciseError, match=message):
        check_llama_names(wrong)


def test_a_name_function_that_raises_or_returns_no_str_is_rejected():
    with pytest.raises(ExerciseError, match="raised KeyError"):
        check_llama_names(lambda name: {}[name])
    with pytest.raises(ExerciseError, match="expected a str"):
        check_llama_names(lambda name: None)


def test_the_books_permutation_passes(capsys):
    check_rope_permutation(book_permute)
    assert "check_rope_permutation: all 4 checks passed" in capsys.readouterr().out


@pytest.mark.parametrize("mistake", sorted(PERMUTATION_MISTAKES))
def test_each_permutation_mistake_is_rejected_with_its_hint(mistake):
    wrong, message = PERMUTATION_MISTAKES[mistake]
    with pytest.raises(ExerciseError, match=message):
        check_rope_permutation(wrong)


def test_a_permutation_of_the_wrong_shape_is_rejected():
    with pytest.raises(ExerciseError, match="has shape"):
        check_rope_permutation(lambda w, hd: book_permute(w, hd)[:-1])


def test_the_books_permutation_ports_an_interleaved_model_to_the_half_layout():
    """What the exercise is for: the permuted rows make a half-layout model compute the
    interleaved model's logits."""
    from helpers.llama import TinyLlama

    torch.manual_seed(0)
    inter = TinyLlama(60, rope_layout="interleaved").eval()
    with torch.no_grad():
        for p in inter.parameters():
            p.mul_(10 if p.dim() == 2 else 1)
    half = TinyLlama(60, rope_layout="half").eval()
    state = {
        k: book_permute(v, 16) if k.endswith(("W_q.weight", "W_k.weight")) else v
        for k, v in inter.state_dict().items()
    }
    half.load_state_dict(state)
    x = torch.randint(1, 60, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (half(x) - inter(x)).abs().max() < 1e-4
        unpermuted = TinyLlama(60, rope_layout="half").eval()
        unpermuted.load_state_dict(inter.state_dict())
        assert (unpermuted(x) - inter(x)).abs().max() > 1e-2
