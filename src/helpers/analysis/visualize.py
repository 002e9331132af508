"""Cross-attention heatmaps and the ipywidgets explorer of chapter 21.

The logic is in plain functions that the tests call directly:
- parse_digits(text, max_digits)   text from a text box -> digits, or a clear ValueError;
- cross_attention(model, digits, layer, head)  -> an AttentionMap (matrix + labels + output);
- plot_attention / plot_attention_grid           matplotlib figures with labelled axes;
- mirrored_columns, attention_sharpness          what "the model reads the source backwards"
                                                 means, as numbers, on one input;
- mirror_weight_batch, alignment_stats           the same over a teacher-forced batch.
AttentionExplorer wraps them in widgets (a Text box, a layer and a head Dropdown, an Output);
its render() method does everything except the widget plumbing and never raises on bad
input: it returns the message the widget shows instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from helpers.core.data import decode_digits, encode_digits
from helpers.core.vocab import EOS_ID, token_name
from helpers.decoding.greedy import greedy_decode

MEAN_OF_HEADS = "mean of heads"


@dataclass
class AttentionMap:
    """One cross-attention matrix, ready to plot. Built in chapter 21.

    weights: float numpy [Lt, Ls]; row i is the decoder input token at position i (the
    query), column j the source token j (the key). Every row sums to 1.
    """

    weights: np.ndarray
    row_labels: list[str]  # decoder input tokens: <bos>, then the tokens the model produced
    col_labels: list[str]  # source tokens: the digits, then <eos>
    digits: list[int]  # the input digits
    output: list[int]  # the digits the model decoded (greedy), before its <eos>
    layer: int  # 0-based index of the decoder layer
    head: int | str  # 0-based head index, or MEAN_OF_HEADS

    @property
    def correct(self) -> bool:
        return self.output == self.digits[::-1]

    @property
    def title(self) -> str:
        head = MEAN_OF_HEADS if self.head == MEAN_OF_HEADS else f"head {self.head}"
        return f"cross-attention, layer {self.layer}, {head}"


def max_digits(model) -> int:
    """The longest input the model can reverse: <bos> + n digits + <eos> fit in max_len.
    Used in chapter 21."""
    return model.max_len - 2


def parse_digits(text, limit: int) -> list[int]:
    """'7 3 0 9', '7309' or '7,3,0,9' -> [7, 3, 0, 9]; otherwise a ValueError that says what is
    wrong. Built in chapter 21 (the explorer's input box)."""
    if not isinstance(text, str):
        raise ValueError(f"expected a string of digits, got {type(text).__name__}")
    cleaned = text.replace(",", " ").split()
    joined = "".join(cleaned)
    if not joined:
        raise ValueError("type at least one digit (0-9)")
    bad = sorted({c for c in joined if c not in "0123456789"})
    if bad:
        raise ValueError(f"only the digits 0-9 are allowed; found {' '.join(repr(c) for c in bad)}")
    if len(joined) > limit:
        raise ValueError(
            f"{len(joined)} digits is too long: this model reverses at most {limit} "
            f"(its max_len leaves room for <bos> and <eos>)"
        )
    return [int(c) for c in joined]


def mirrored_columns(n_digits: int) -> np.ndarray:
    """For each decoder row, the source column a reversing model should read. Chapter 21.

    Row i (i < n) predicts output digit i, which is source digit n-1-i; the last row
    (input = the last digit produced) predicts <eos> and should look at the source's <eos>,
    column n. Example n=3: [2, 1, 0, 3].
    """
    return np.array([n_digits - 1 - i for i in range(n_digits)] + [n_digits])


def _check_layer_head(model, layer: int, head) -> None:
    n_layers = len(model.decoder.layers)
    n_heads = model.decoder.layers[0].cross_mha.h
    if not (isinstance(layer, (int, np.integer)) and -n_layers <= layer < n_layers):
        raise ValueError(f"layer must be an int in [0, {n_layers}), got {layer!r}")
    if head != MEAN_OF_HEADS and not (isinstance(head, (int, np.integer)) and 0 <= head < n_heads):
        raise ValueError(
            f"head must be an int in [0, {n_heads}) or {MEAN_OF_HEADS!r}, got {head!r}"
        )


@torch.no_grad()
def all_cross_attention(model, digits):
    """Greedy-decode digits and return (pred ids [Lp], weights [layers, heads, Lt, Ls]).
    Built in chapter 21.

    The decoder is re-run on its own output minus the final token (pred[:, :-1]): row i is
    the query made while predicting token i+1, exactly as during generation.
    """
    src = encode_digits(list(digits))  # [1, n + 1]: digits, <eos>, no padding
    model.eval()
    pred = greedy_decode(model, src)  # [1, Lp]: <bos>, digits..., <eos>
    memory, src_mask = model.encode(src)
    _, cross = model.decode(pred[:, :-1], memory, src_mask, need_weights=True)
    weights = torch.stack([w[0] for w in cross])  # [layers, heads, Lt, Ls]
    return pred[0], weights.float()


def cross_attention(model, digits, layer: int = -1, head=MEAN_OF_HEADS) -> AttentionMap:
    """The cross-attention matrix of one layer and one head (or the mean of the heads).
    Built in chapter 21."""
    _check_layer_head(model, layer, head)
    digits = list(digits)
    pred, weights = all_cross_attention(model, digits)
    return _attention_map(pred, weights, digits, layer, head)


def _attention_map(pred, weights, digits, layer, head) -> AttentionMap:
    layer_index = layer % weights.size(0)
    w = weights[layer_index]
    w = w.mean(dim=0) if head == MEAN_OF_HEADS else w[int(head)]
    return AttentionMap(
        weights=w.numpy(),
        row_labels=[token_name(t) for t in pred[:-1].tolist()],
        col_labels=[str(d) for d in digits] + [token_name(EOS_ID)],
        digits=list(digits),
        output=decode_digits(pred),
        layer=layer_index,
        head=head if head == MEAN_OF_HEADS else int(head),
    )


def attention_sharpness(amap: AttentionMap) -> dict:
    """How sharply the rows of one map read the mirrored source position. Chapter 21.

    on_mirror: mean weight on the mirrored column (1.0 = every row reads exactly it);
    argmax_hits: fraction of rows whose maximum is on the mirrored column;
    entropy_bits: mean row entropy (0 = one-hot rows; log2(Ls) = uniform rows).
    Rows beyond the expected n+1 (a model that failed to stop) are ignored.
    """
    n = len(amap.digits)
    w = amap.weights
    rows = min(w.shape[0], n + 1)
    cols = mirrored_columns(n)[:rows]
    on = w[np.arange(rows), cols]
    p = np.clip(w[:rows], 1e-12, 1.0)
    entropy = -(w[:rows] * np.log2(p)).sum(axis=1)
    return {
        "on_mirror": float(on.mean()),
        "argmax_hits": float((w[:rows].argmax(axis=1) == cols).mean()),
        "entropy_bits": float(entropy.mean()),
    }


@torch.no_grad()
def _teacher_forced_cross(model, src: torch.Tensor, tgt: torch.Tensor):
    """-> (weights [layers, B, h, Lt, Ls], target column [B, Lt], valid rows [B, Lt], n [B])."""
    from helpers.core.vocab import PAD_ID

    if src.dim() != 2 or tgt.dim() != 2 or src.size(0) != tgt.size(0):
        raise ValueError(
            f"src and tgt must be [B, L] with the same B, got {tuple(src.shape)} and "
            f"{tuple(tgt.shape)}"
        )
    model.eval()
    memory, src_mask = model.encode(src)
    tgt_in = tgt[:, :-1]
    _, cross = model.decode(tgt_in, memory, src_mask, need_weights=True)
    w = torch.stack(cross, dim=0)  # [layers, B, h, Lt, Ls]
    n = (src != PAD_ID).sum(dim=1) - 1  # digits per sequence (without <eos>)
    rows = torch.arange(tgt_in.size(1))[None, :]  # [1, Lt]
    target = torch.where(rows < n[:, None], n[:, None] - 1 - rows, n[:, None])  # [B, Lt]
    valid = rows <= n[:, None]  # <bos> + n digits = n + 1 real rows
    return w, target.clamp(max=src.size(1) - 1), valid, n


def mirror_weight_batch(model, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """Teacher-forced batch -> [layers, heads]: mean cross-attention weight on the mirrored
    source position. Used in chapter 21.

    src, tgt as from make_reversal_dataset. The decoder gets the correct prefix tgt[:, :-1];
    for every real (non-pad) decoder row of every sequence we read the weight on the source
    column that row should look at (mirrored_columns) and average over rows and sequences.
    The mean over heads is the same number for the mean-of-heads map.
    """
    w, target, valid, _ = _teacher_forced_cross(model, src, tgt)
    idx = target[None, :, None, :, None].expand(w.size(0), -1, w.size(2), -1, 1)
    on = w.gather(-1, idx).squeeze(-1)  # [layers, B, h, Lt]
    mask = valid[None, :, None, :].to(on.dtype)
    return (on * mask).sum(dim=(1, 3)) / mask.sum(dim=(1, 3))


def alignment_stats(model, src: torch.Tensor, tgt: torch.Tensor) -> dict:
    """How sharp the teacher-forced cross-attention is, per decoder layer (mean of heads).
    Used in chapter 21 and by tools/record/ch21_sharpness.py.

    mirror      float [layers]: mean weight on the mirrored position (mirror_weight_batch);
    eos_peak    float [layers]: share of sequences whose final row (the one that predicts
                <eos>) has its maximum on the source's <eos>;
    digit_peak  float [layers]: share of digit rows whose maximum is on the mirrored digit;
    neighbours  float [layers]: the weight on the two source columns next to the mirrored
                one, added up (real tokens only: the digits and <eos>), then averaged over
                the real rows of every sequence;
    mirror_heads float [layers, heads]: mirror per head;
    mirror_per_sequence float [layers, B]: each sequence's mean weight on the mirrored
                position over its n + 1 rows (mean of heads), for an interval over sequences.
    """
    w, target, valid, n = _teacher_forced_cross(model, src, tgt)
    mean = w.mean(dim=2)  # [layers, B, Lt, Ls]: the mean-of-heads maps
    peaks = mean.argmax(dim=-1)  # [layers, B, Lt]
    hit = peaks == target[None]
    b = torch.arange(n.numel())
    digit_rows = (valid & (torch.arange(valid.size(1))[None, :] < n[:, None]))[None]
    idx = target[None, :, None, :, None].expand(w.size(0), -1, w.size(2), -1, 1)
    on = w.gather(-1, idx).squeeze(-1)  # [layers, B, h, Lt]
    mask = valid[None, :, None, :].to(on.dtype)
    heads = (on * mask).sum(dim=(1, 3)) / mask.sum(dim=(1, 3))
    per_sequence = (on.mean(dim=2) * valid[None]).sum(dim=-1) / valid.sum(dim=-1)  # [layers, B]
    # the weight on target - 1 and target + 1, where those are real source tokens (0..n)
    near = torch.zeros_like(mean[..., 0])  # [layers, B, Lt]
    for step in (-1, 1):
        col = target + step
        ok = (col >= 0) & (col <= n[:, None])
        got = mean.gather(
            -1, col.clamp(0, mean.size(-1) - 1)[None, ..., None].expand(mean.size(0), -1, -1, 1)
        ).squeeze(-1)
        near = near + got * ok[None]
    rows = valid[None].to(near.dtype)
    return {
        "mirror": heads.mean(dim=1),
        "neighbours": (near * rows).sum(dim=(1, 2)) / rows.sum(dim=(1, 2)),
        "eos_peak": hit[:, b, n].float().mean(dim=1),
        "digit_peak": (hit & digit_rows).sum(dim=(1, 2)).float() / digit_rows.sum(),
        "mirror_heads": heads,
        "mirror_per_sequence": per_sequence,
    }


# ------------------------------------------------------------------ plotting


def plot_attention(amap: AttentionMap, ax=None, colorbar: bool = True, annotate: bool = False):
    """Draw amap as a heatmap on ax (a new Figure when None); returns the Axes. Chapter 21."""
    if ax is None:
        from matplotlib.figure import Figure  # not pyplot: no global state, no auto-display

        fig = Figure(figsize=(4.6, 3.8))
        ax = fig.add_subplot()
    im = ax.imshow(amap.weights, cmap="Blues", vmin=0.0, vmax=1.0)
    ax.set_xticks(range(len(amap.col_labels)), amap.col_labels)
    ax.set_yticks(range(len(amap.row_labels)), amap.row_labels)
    ax.set_xlabel("source token (key)")
    ax.set_ylabel("decoder input (query)")
    ax.set_title(amap.title, fontsize=10)
    if annotate:
        for i in range(amap.weights.shape[0]):
            for j in range(amap.weights.shape[1]):
                v = amap.weights[i, j]
                if v >= 0.05:
                    ax.text(
                        j,
                        i,
                        f"{v:.1f}",
                        ha="center",
                        va="center",
                        fontsize=7,
                        color="white" if v > 0.6 else "black",
                    )
    if colorbar:
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="attention weight")
    return ax


def plot_attention_grid(model, digits):
    """Every decoder layer (rows) x every head (columns) of cross-attention: a matplotlib
    Figure. Used in chapter 21."""
    from matplotlib.figure import Figure

    pred, weights = all_cross_attention(model, list(digits))
    n_layers, n_heads = weights.shape[:2]
    fig = Figure(figsize=(2.3 * n_heads, 2.3 * n_layers + 0.6), layout="constrained")
    axes = fig.subplots(n_layers, n_heads, squeeze=False)
    for li in range(n_layers):
        for hi in range(n_heads):
            amap = _attention_map(pred, weights, list(digits), li, hi)
            ax = axes[li, hi]
            plot_attention(amap, ax=ax, colorbar=False)
            ax.set_title(f"layer {li}, head {hi}", fontsize=9)
            ax.tick_params(labelsize=6)
            if li < n_layers - 1:
                ax.set_xlabel("")
            if hi > 0:
                ax.set_ylabel("")
    fig.suptitle(
        "cross-attention of every layer and head (rows: decoder input, columns: source)",
        fontsize=10,
    )
    return fig


# ------------------------------------------------------------------ the widget


class AttentionExplorer:
    """Type digits, pick a layer and a head: see the decoded output and the heatmap.
    Built in chapter 21.

    render(text, layer, head) -> (figure or None, message) holds the logic and never raises
    for bad input; the widgets only call it and show the result. Build the widgets with
    .widget() (ipywidgets is imported only then).
    """

    def __init__(self, model, digits: str = "7 3 0 9 5 1 8"):
        self.model = model
        self.n_layers = len(model.decoder.layers)
        self.n_heads = model.decoder.layers[0].cross_mha.h
        self.limit = max_digits(model)
        self.initial = digits
        self.last_figure = None  # a matplotlib Figure after a good render
        self.last_message = ""
        self._box = None

    @property
    def head_options(self) -> list:
        return [(MEAN_OF_HEADS, MEAN_OF_HEADS)] + [(f"head {h}", h) for h in range(self.n_heads)]

    @property
    def layer_options(self) -> list:
        return [(f"layer {i}", i) for i in range(self.n_layers)]

    def render(self, text, layer=None, head=MEAN_OF_HEADS):
        """-> (Figure, message) for good input; (None, 'error: ...') for bad input."""
        layer = self.n_layers - 1 if layer is None else layer
        try:
            digits = parse_digits(text, self.limit)
            amap = cross_attention(self.model, digits, layer=layer, head=head)
        except ValueError as err:
            self.last_figure, self.last_message = None, f"error: {err}"
            return None, self.last_message
        verdict = (
            "correct" if amap.correct else f"WRONG (expected {' '.join(map(str, digits[::-1]))})"
        )
        message = (
            f"input {' '.join(map(str, digits))} -> output "
            f"{' '.join(map(str, amap.output)) or '(nothing)'}: {verdict}"
        )
        ax = plot_attention(amap)
        fig = ax.figure
        fig.tight_layout()
        self.last_figure, self.last_message = fig, message
        return fig, message

    def widget(self):
        """The ipywidgets box: a Text, layer and head Dropdowns, a status line and the heatmap.

        The heatmap is an ipywidgets.Image holding PNG bytes: it is replaced in place on every
        change, whether or not the kernel's matplotlib backend displays figures.
        """
        import ipywidgets as W

        text = W.Text(
            value=self.initial,
            description="digits",
            placeholder=f"up to {self.limit} digits, e.g. 7 3 0 9",
        )
        layer = W.Dropdown(options=self.layer_options, value=self.n_layers - 1, description="layer")
        head = W.Dropdown(options=self.head_options, value=MEAN_OF_HEADS, description="head")
        status = W.HTML()
        image = W.Image(format="png")

        def update(_change=None):
            fig, message = self.render(text.value, layer.value, head.value)
            if fig is None:
                image.layout.display = "none"
            else:
                image.value = figure_png(fig)
                # at its own size: a VBox would otherwise stretch it to the cell's width
                image.layout.width = f"{round(fig.get_size_inches()[0] * 100)}px"
                image.layout.display = None
            color = "#b00020" if fig is None else "#1b5e20"  # the status last: it signals "done"
            status.value = (
                f'<span style="color:{color}" class="explorer-status">{_escape(message)}</span>'
            )

        for w in (text, layer, head):
            w.observe(update, names="value")
        update()
        self.controls = {
            "text": text,
            "layer": layer,
            "head": head,
            "status": status,
            "image": image,
        }
        self.update = update
        self._box = W.VBox([W.HBox([text, layer, head]), status, image])
        self._box.add_class("attention-explorer")
        return self._box


def figure_png(fig, dpi: int = 100) -> bytes:
    """A matplotlib Figure as PNG bytes (the explorer's image). Chapter 21."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def _escape(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
