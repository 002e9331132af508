"""The checker of chapter 13's coding exercise accepts the book's answer and rejects the
likely mistakes with a message that names them."""

import mistakes_ch13
import pytest
import torch

from helpers import make_padding_mask
from helpers.exercises import ExerciseError, check_decode_step


def decode_step(
    model,
    tokens,
    memory,
    src_mask,
    caches,
    cat_dim=2,
    position=None,
    fresh_cross=False,
    whole_prefix=False,
    pad_mask=True,
):
    """The book's answer (exercise 13.3), with switches for the mistakes the tests make."""
    dec = model.decoder
    step = tokens.size(1) - 1
    new = tokens if whole_prefix else tokens[:, -1:]
    x = dec.embed(new, start_pos=step if position is None else position)
    self_mask = make_padding_mask(tokens) if pad_mask else None
    for layer, cache in zip(dec.layers, caches):
        h = layer.ln1(x)
        k, v = layer.self_mha.project_kv(h, h)  # [B, h, 1, d_k]
        if "self_k" in cache:
            k = torch.cat([cache["self_k"], k], dim=cat_dim)
            v = torch.cat([cache["self_v"], v], dim=cat_dim)
        cache["self_k"], cache["self_v"] = k, v
        a, _ = layer.self_mha.attend(h, k, v, attn_mask=self_mask, need_weights=False)
        x = x + a
        h = layer.ln2(x)
        if fresh_cross or "cross_k" not in cache:
            cache["cross_k"], cache["cross_v"] = layer.cross_mha.project_kv(memory, memory)
        a, _ = layer.cross_mha.attend(
            h, cache["cross_k"], cache["cross_v"], attn_mask=src_mask, need_weights=False
        )
        x = x + a
        x = x + layer.ffn(layer.ln3(x))
    return model.out_proj(dec.ln_final(x)[:, -1])


def test_the_books_answer_passes(capsys):
    check_decode_step(decode_step)
    assert "check_decode_step: all" in capsys.readouterr().out


def test_the_library_decoder_passes():
    def library_step(model, tokens, memory, src_mask, caches):
        h, _ = model.decoder(
            tokens[:, -1:],
            memory,
            make_padding_mask(tokens),
            src_mask,
            need_weights=False,
            caches=caches,
            start_pos=tokens.size(1) - 1,
        )
        return model.out_proj(h[:, -1])

    check_decode_step(library_step)


@pytest.mark.parametrize(
    "dim, words",
    [
        (1, "along the heads dimension"),
        (0, "along the batch dimension"),
        (3, "along the last dimension"),
        (-1, "along the last dimension"),
    ],
)
def test_cache_appended_on_the_wrong_dim(dim, words):
    with pytest.raises(ExerciseError, match=words):
        check_decode_step(lambda *a: decode_step(*a, cat_dim=dim))


def test_new_token_at_position_0():
    with pytest.raises(ExerciseError, match=r"start_pos = tokens.size\(1\) - 1"):
        check_decode_step(lambda *a: decode_step(*a, position=0))


def test_padding_keys_not_blocked():
    with pytest.raises(ExerciseError, match=r"the <pad> keys are not blocked"):
        check_decode_step(lambda *a: decode_step(*a, pad_mask=False))


def test_cross_kv_recomputed_every_step():
    with pytest.raises(
        ExerciseError, match="project it to cross-attention keys and values on the first step only"
    ):
        check_decode_step(lambda *a: decode_step(*a, fresh_cross=True))


def test_whole_prefix_fed():
    with pytest.raises(
        ExerciseError,
        match=r"holds 3 positions after step 1.*feed the decoder only the newest token",
    ):
        check_decode_step(lambda *a: decode_step(*a, whole_prefix=True))


def test_no_cache_kept():
    def forgetful(model, tokens, memory, src_mask, caches):
        return decode_step(model, tokens, memory, src_mask, [{} for _ in caches])

    with pytest.raises(ExerciseError, match="has no 'self_k'"):
        check_decode_step(forgetful)


def test_wrong_logits_shape():
    with pytest.raises(ExerciseError, match=r"logits has shape \(6, 1, 13\), expected \(6, 13\)"):
        check_decode_step(lambda *a: decode_step(*a)[:, None])


def test_the_books_answer_with_its_reset_passes(capsys):
    """... on one thread, leaving the caller's thread count and random state as they were."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        torch.manual_seed(7)
        want = torch.rand(3)
        torch.manual_seed(7)
        check_decode_step(mistakes_ch13.step, mistakes_ch13.reset)
        assert torch.get_num_threads() == 2
        assert torch.equal(torch.rand(3), want)
    finally:
        torch.set_num_threads(threads)
    assert "a second batch through the same caches after reset" in capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(mistakes_ch13.EXERCISE_MISTAKES))
def test_catalogue_each_mistake_named(name):
    """Every catalogued mistake (tests/mistakes_ch13.py) gets its own message."""
    step, reset, fragment = mistakes_ch13.EXERCISE_MISTAKES[name]
    with pytest.raises(ExerciseError, match=fragment):
        check_decode_step(step, reset)


def test_catalogue_messages_are_distinct():
    hints = set()
    for step, reset, _ in mistakes_ch13.EXERCISE_MISTAKES.values():
        with pytest.raises(ExerciseError) as err:
            check_decode_step(step, reset)
        hints.add(str(err.value).split("Hint: ")[-1])
    assert len(hints) == len(mistakes_ch13.EXERCISE_MISTAKES)
