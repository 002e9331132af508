"""helpers.analysis.visualize: input validation, the attention matrix, plots and the explorer's
logic.

An untrained (seeded) model is enough here: these tests check shapes, labels and the
handling of bad input, not what a trained model learned (the chapter asserts that).
"""

import numpy as np
import pytest
import torch

from helpers import VOCAB_SIZE, Transformer
from helpers.analysis.visualize import (
    MEAN_OF_HEADS,
    AttentionExplorer,
    AttentionMap,
    attention_sharpness,
    cross_attention,
    max_digits,
    mirrored_columns,
    parse_digits,
    plot_attention,
    plot_attention_grid,
)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return Transformer(
        VOCAB_SIZE, VOCAB_SIZE, d_model=32, num_heads=4, dff=64, num_layers=2, max_len=14
    ).eval()


@pytest.mark.parametrize("text", ["7309", "7 3 0 9", "7,3,0,9", " 7, 3 0 9 "])
def test_parse_digits_accepts_common_spellings(text):
    assert parse_digits(text, 12) == [7, 3, 0, 9]


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("", "at least one digit"),
        ("   ", "at least one digit"),
        ("12a4", "only the digits 0-9"),
        ("-1", "only the digits 0-9"),
        ("1.5", "only the digits 0-9"),
        ("1234567890123", "too long"),
    ],
)
def test_parse_digits_rejects_bad_input_with_a_clear_message(text, fragment):
    with pytest.raises(ValueError, match=fragment):
        parse_digits(text, 12)


def test_parse_digits_rejects_non_strings():
    with pytest.raises(ValueError, match="string"):
        parse_digits(1234, 12)


def test_max_digits_leaves_room_for_bos_and_eos(model):
    assert max_digits(model) == model.max_len - 2 == 12


def test_mirrored_columns():
    assert mirrored_columns(3).tolist() == [2, 1, 0, 3]
    assert mirrored_columns(1).tolist() == [0, 1]


def test_cross_attention_matrix_shapes_labels_and_rows(model):
    digits = [7, 3, 0, 9, 5]
    amap = cross_attention(model, digits, layer=-1, head=MEAN_OF_HEADS)
    Lt, Ls = amap.weights.shape
    assert Ls == len(digits) + 1
    assert amap.col_labels == ["7", "3", "0", "9", "5", "<eos>"]
    assert amap.row_labels[0] == "<bos>" and len(amap.row_labels) == Lt
    np.testing.assert_allclose(amap.weights.sum(axis=1), 1.0, atol=1e-5)
    assert amap.layer == 1  # -1 is resolved to the last layer's index


def test_mean_of_heads_is_the_mean_of_the_single_heads(model):
    digits = [1, 2, 3, 4]
    heads = [cross_attention(model, digits, layer=0, head=h).weights for h in range(4)]
    mean = cross_attention(model, digits, layer=0, head=MEAN_OF_HEADS).weights
    np.testing.assert_allclose(np.mean(heads, axis=0), mean, atol=1e-6)


def test_cross_attention_matches_model_decode(model):
    from helpers import encode_digits, greedy_decode

    src = encode_digits([4, 4, 2])
    pred = greedy_decode(model, src)
    memory, mask = model.encode(src)
    _, cross = model.decode(pred[:, :-1], memory, mask)
    expected = cross[1][0, 2].detach().numpy()
    np.testing.assert_allclose(
        cross_attention(model, [4, 4, 2], layer=1, head=2).weights, expected, atol=1e-6
    )


@pytest.mark.parametrize("layer, head", [(2, 0), (-3, 0), (0, 4), (0, "all"), (0.5, 0)])
def test_cross_attention_rejects_bad_layer_or_head(model, layer, head):
    with pytest.raises(ValueError, match="layer|head"):
        cross_attention(model, [1, 2, 3], layer=layer, head=head)


def test_sharpness_of_a_perfect_and_a_uniform_map():
    n = 4
    perfect = np.zeros((n + 1, n + 1))
    perfect[np.arange(n + 1), mirrored_columns(n)] = 1.0
    labels = dict(
        row_labels=[""] * (n + 1),
        col_labels=[""] * (n + 1),
        digits=[1, 2, 3, 4],
        output=[4, 3, 2, 1],
        layer=0,
        head=MEAN_OF_HEADS,
    )
    s = attention_sharpness(AttentionMap(weights=perfect, **labels))
    assert s == {"on_mirror": 1.0, "argmax_hits": 1.0, "entropy_bits": 0.0}
    uniform = np.full((n + 1, n + 1), 1 / (n + 1))
    s = attention_sharpness(AttentionMap(weights=uniform, **labels))
    assert s["on_mirror"] == pytest.approx(1 / (n + 1))
    assert s["entropy_bits"] == pytest.approx(np.log2(n + 1))


def test_plots_have_labels(model):
    amap = cross_attention(model, [5, 6, 7])
    ax = plot_attention(amap, annotate=True)
    assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    assert [t.get_text() for t in ax.get_xticklabels()] == amap.col_labels
    fig = plot_attention_grid(model, [5, 6, 7])
    assert len(fig.axes) == 2 * 4


def test_explorer_render_good_and_bad_input(model):
    ex = AttentionExplorer(model)
    fig, msg = ex.render("7 3 0", layer=0, head=1)
    assert fig is not None and msg.startswith("input 7 3 0 -> output")
    for bad, fragment in [
        ("", "at least one digit"),
        ("12x", "only the digits"),
        ("1" * 13, "too long"),
    ]:
        fig, msg = ex.render(bad, layer=0, head=MEAN_OF_HEADS)
        assert fig is None and msg.startswith("error: ") and fragment in msg
        assert ex.last_figure is None


def test_explorer_widget_updates_on_control_changes(model):
    pytest.importorskip("ipywidgets")
    ex = AttentionExplorer(model, digits="1 2 3")
    box = ex.widget()
    assert box is not None and ex.last_figure is not None
    first = ex.last_figure.axes[0].images[0].get_array().copy()
    ex.controls["layer"].value = 0
    second = ex.last_figure.axes[0].images[0].get_array()
    assert not np.allclose(first, second)
    png = ex.controls["image"].value
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    ex.controls["head"].value = 3
    assert ex.controls["image"].value != png  # the picture shown was replaced
    ex.controls["text"].value = "abc"
    assert ex.last_figure is None and "only the digits" in ex.controls["status"].value
    assert ex.controls["image"].layout.display == "none"
    ex.controls["text"].value = "3 2 1"
    assert ex.last_figure is not None and ex.controls["image"].layout.display is None


def test_mirror_weight_batch_matches_the_single_sequence_measure(model):
    from helpers import make_reversal_dataset
    from helpers.analysis.visualize import mirror_weight_batch

    src, tgt = make_reversal_dataset(6, seed=3)
    batch = mirror_weight_batch(model, src, tgt)
    assert batch.shape == (2, 4)
    # the same number by hand for sequence 0, last layer, head 1, teacher-forced
    n = int((src[0] != 0).sum()) - 1
    memory, mask = model.encode(src[:1, : n + 1])
    _, cross = model.decode(tgt[:1, : n + 1], memory, mask)
    w = cross[-1][0, 1].detach().numpy()
    one = w[np.arange(n + 1), mirrored_columns(n)].mean()
    single = mirror_weight_batch(model, src[:1], tgt[:1])[-1, 1].item()
    assert single == pytest.approx(one, abs=1e-5)
    assert ((batch > 0) & (batch < 1)).all()


def test_alignment_stats_per_layer_by_hand(model):
    from helpers import make_reversal_dataset
    from helpers.analysis.visualize import alignment_stats, mirror_weight_batch

    src, tgt = make_reversal_dataset(8, seed=5)
    stats = alignment_stats(model, src, tgt)
    torch.testing.assert_close(stats["mirror_heads"], mirror_weight_batch(model, src, tgt))
    torch.testing.assert_close(stats["mirror"], stats["mirror_heads"].mean(dim=1))
    # eos_peak and digit_peak by hand, one sequence at a time, from the mean-of-heads map
    eos, digit_hits, digit_rows = torch.zeros(2), torch.zeros(2), 0
    near, all_rows, per_sequence = torch.zeros(2), 0, torch.zeros(2, 8)
    for b in range(8):
        n = int((src[b] != 0).sum()) - 1
        memory, mask = model.encode(src[b : b + 1, : n + 1])
        _, cross = model.decode(tgt[b : b + 1, : n + 1], memory, mask)
        for layer, w in enumerate(cross):
            peaks = w[0].mean(dim=0).argmax(dim=-1).numpy()  # [n + 1]
            eos[layer] += float(peaks[n] == n) / 8
            digit_hits[layer] += float((peaks[:n] == mirrored_columns(n)[:n]).sum())
            mean = w[0].detach().mean(dim=0)
            for i, t in enumerate(mirrored_columns(n)):
                near[layer] += sum(float(mean[i, c]) for c in (t - 1, t + 1) if 0 <= c <= n)
            per_sequence[layer, b] = mean[torch.arange(n + 1), mirrored_columns(n)].mean()
        digit_rows += n
        all_rows += n + 1
    torch.testing.assert_close(stats["eos_peak"], eos)
    torch.testing.assert_close(stats["digit_peak"], digit_hits / digit_rows)
    torch.testing.assert_close(stats["neighbours"], near / all_rows)
    torch.testing.assert_close(stats["mirror_per_sequence"], per_sequence)


def test_alignment_stats_rejects_mismatched_batches(model):
    from helpers import make_reversal_dataset
    from helpers.analysis.visualize import alignment_stats

    src, tgt = make_reversal_dataset(4, seed=5)
    with pytest.raises(ValueError, match="same B"):
        alignment_stats(model, src, tgt[:3])
