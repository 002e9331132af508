"""The checker of chapter 1's exercise accepts the book's answer and explains wrong ones."""

import pytest

from helpers.exercises import ExerciseError, check_parameter_count


def count(src_vocab, tgt_vocab, d, h, dff, n, *, final_ln=True, cross=True, ln=2, bias=True):
    b = 1 if bias else 0
    attention = 4 * (d * d + b * d)
    ffn = 2 * d * dff + b * (dff + d)
    norm = ln * d
    encoder = n * (attention + ffn + 2 * norm) + (norm if final_ln else 0)
    decoder = n * ((2 if cross else 1) * attention + ffn + 3 * norm) + (norm if final_ln else 0)
    return (src_vocab + tgt_vocab) * d + encoder + decoder + d * tgt_vocab + b * tgt_vocab


def test_accepts_the_formula(capsys):
    check_parameter_count(count)
    assert "all 4 checks passed" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (dict(final_ln=False), "final LayerNorm"),
        (dict(cross=False), "two attentions"),
        (dict(ln=1), "a scale and a shift"),
        (dict(bias=False), "has a bias"),
    ],
)
def test_rejects_a_count_that_misses_a_component(wrong, hint):
    with pytest.raises(ExerciseError, match=hint):
        check_parameter_count(lambda *cfg: count(*cfg, **wrong))


def test_rejects_positions_counted_as_parameters():
    with pytest.raises(ExerciseError, match="buffer, not a parameter"):
        check_parameter_count(lambda *cfg: count(*cfg) + 2 * 64 * cfg[2])


def test_rejects_a_count_that_depends_on_heads():
    with pytest.raises(ExerciseError, match="add no parameters"):
        check_parameter_count(lambda *cfg: count(*cfg) + (cfg[3] == 8))


def test_rejects_a_float():
    with pytest.raises(ExerciseError, match="should be an int"):
        check_parameter_count(lambda *cfg: float(count(*cfg)))


def test_names_the_decoder_layernorm_not_the_final_ones():
    # at num_layers=2 both mistakes miss 4d parameters; the other configurations tell them apart
    def two_norms_per_decoder_layer(src_vocab, tgt_vocab, d, h, dff, n):
        return count(src_vocab, tgt_vocab, d, h, dff, n) - n * 2 * d

    with pytest.raises(ExerciseError, match="three LayerNorms"):
        check_parameter_count(two_norms_per_decoder_layer)
    with pytest.raises(ExerciseError, match="you left both out"):
        check_parameter_count(lambda *cfg: count(*cfg, final_ln=False))
