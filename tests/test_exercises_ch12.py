"""The checker of chapter 12's coding exercise accepts the book's answer and rejects the
likely mistakes with a message that names them."""

import pytest
import torch
import torch.nn as nn

from helpers import PAD_ID
from helpers.exercises import ExerciseError, check_book_init


def book_init(
    model,
    emb_std=None,
    zero_pad=True,
    linear="xavier_uniform",
    zero_bias=True,
    embeddings=True,
    norms=False,
):
    """The book's answer (exercise 12.3), with switches for the mistakes the tests make."""
    d = model.config.d_model
    for m in model.modules():
        if isinstance(m, nn.Embedding) and embeddings:
            nn.init.normal_(m.weight, mean=0.0, std=d**-0.5 if emb_std is None else emb_std)
            if zero_pad:
                with torch.no_grad():
                    m.weight[PAD_ID].zero_()
        elif isinstance(m, nn.Linear):
            if linear == "xavier_uniform":
                nn.init.xavier_uniform_(m.weight)
            elif linear == "xavier_normal":
                nn.init.xavier_normal_(m.weight)
            if zero_bias:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm) and norms:
            nn.init.normal_(m.weight)


def test_the_books_answer_passes(capsys):
    check_book_init(book_init)
    assert "check_book_init: all" in capsys.readouterr().out


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(embeddings=False), r"still PyTorch's N\(0, 1\): the embedding fix is missing"),
        (dict(emb_std=1 / 64), r"std 1/d_model = 0.0156 is too small"),
        (dict(emb_std=64**-0.25), "not the variance"),
        (dict(zero_pad=False), "the <pad> row .* is not zero"),
        (dict(linear="none", zero_bias=True), "PyTorch's nn.Linear default"),
        (dict(linear="xavier_normal"), "not xavier_normal_"),
        (dict(zero_bias=False), "the bias is not zero"),
        (dict(norms=True), "LayerNorm weights stay 1"),
    ],
)
def test_mistakes_are_named(kwargs, words):
    with pytest.raises(ExerciseError, match=words):
        check_book_init(lambda model: book_init(model, **kwargs))


def test_an_exception_names_the_input():
    def broken(model):
        raise KeyError("emb")

    with pytest.raises(ExerciseError, match="default-initialised Transformer.*KeyError"):
        check_book_init(broken)
