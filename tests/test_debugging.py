"""check_model flags each break through behaviour, and finds nothing wrong with a healthy model."""

import pytest
import torch
import torch.nn as nn

from helpers import (
    BOS_ID,
    PAD_ID,
    VOCAB_SIZE,
    Transformer,
    apply_default_init,
    make_padding_mask,
    make_reversal_dataset,
)
from helpers.debugging import ModelReport, block_of, check_model

CFG = dict(d_model=32, num_heads=2, dff=64, num_layers=2, max_len=14)


def small(cls=Transformer, seed=0, **kw):
    torch.manual_seed(seed)
    return cls(VOCAB_SIZE, VOCAB_SIZE, **{**CFG, **kw})


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models: one thread is enough, and it keeps these tests fast on a busy machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def batch():
    return make_reversal_dataset(8, seed=3)


class SelfMaskTransformer(Transformer):
    """The decoder's self-attention mask comes from `self_mask_fn(L)`, not make_causal_mask."""

    self_mask_fn = None

    def decode(self, tgt_in, memory, src_mask, need_weights=True):
        causal = type(self).self_mask_fn(tgt_in.size(1))
        h, w = self.decoder(
            tgt_in, memory, causal | make_padding_mask(tgt_in), src_mask, need_weights=need_weights
        )
        return self.out_proj(h), w


def with_self_mask(fn):
    return type("Broken", (SelfMaskTransformer,), {"self_mask_fn": staticmethod(fn)})


def ones(L):
    return torch.ones(L, L, dtype=torch.bool)


class PaddingIgnored(Transformer):
    def encode(self, src):
        no_mask = torch.zeros_like(make_padding_mask(src))
        return self.encoder(src, no_mask), no_mask


def failed(report: ModelReport) -> set:
    return set(report.failed_checks)


def test_healthy_model_is_clean(batch):
    model = small().train()
    grads_before = [p.grad for p in model.parameters()]
    rng = torch.get_rng_state()
    report = check_model(model, batch, verbose=False)
    assert report.ok, str(report)
    assert not report.failures
    skipped = [f.check for f in report.findings if f.status != "ok"]
    assert skipped == ["teacher-forcing shift"], str(report)  # (src, tgt): nothing to test
    assert model.training, "check_model must restore train mode"
    assert all(p.grad is None for p in model.parameters()) and all(g is None for g in grads_before)
    assert torch.equal(torch.get_rng_state(), rng), "check_model must not consume the global RNG"
    assert set(report.grad_norms) == {
        "encoder.embed",
        "encoder.layers.0",
        "encoder.layers.1",
        "encoder.ln_final",
        "decoder.embed",
        "decoder.layers.0",
        "decoder.layers.1",
        "decoder.ln_final",
        "out_proj",
    }
    assert all(0 < v < 1e3 for v in report.grad_norms.values())


def test_eval_mode_is_restored(batch):
    model = small().eval()
    check_model(model, batch, verbose=False)
    assert not model.training


def test_report_prints_and_indexes(batch, capsys):
    report = check_model(small(), batch)
    out = capsys.readouterr().out
    assert out.startswith("check_model: ") and "causality probe" in out and " 0 FAIL" in out
    assert report["causality probe"].status == "ok" and not report.flagged("initial loss")
    with pytest.raises(KeyError):
        report["no such check"]


@pytest.mark.parametrize("fn", [lambda L: torch.triu(ones(L), diagonal=0)[None, None]])
def test_causal_mask_with_diagonal_zero_leaves_rows_fully_masked(batch, fn):
    report = check_model(small(with_self_mask(fn)), batch, verbose=False)
    assert "fully masked rows" in failed(report)
    assert not report.flagged("causality probe")  # too strict, not leaky: the other probe finds it


@pytest.mark.parametrize(
    "name, fn",
    [
        ("no mask at all", lambda L: torch.zeros(1, 1, L, L, dtype=torch.bool)),
        ("tril instead of triu", lambda L: torch.tril(ones(L), diagonal=-1)[None, None]),
        ("the keep-mask passed as blocked", lambda L: torch.tril(ones(L))[None, None]),
        ("mask transposed", lambda L: torch.triu(ones(L), diagonal=1).T[None, None]),
    ],
)
def test_leaky_causal_masks_fail_the_causality_probe(batch, name, fn):
    report = check_model(small(with_self_mask(fn)), batch, verbose=False)
    assert report.flagged("causality probe"), name
    assert not report.ok


def test_ignored_padding_mask_fails_padding_invariance(batch):
    report = check_model(small(PaddingIgnored), batch, verbose=False)
    assert failed(report) == {"padding invariance"}


def test_layers_in_a_plain_list_are_flagged(batch):
    model = small()
    layers = list(model.decoder.layers)
    del model.decoder.layers
    model.decoder.layers = layers  # a Python list: not registered
    report = check_model(model, batch, verbose=False)
    assert report.flagged("unregistered tensors")
    assert "decoder.layers is a list" in report["unregistered tensors"].message
    assert report.flagged("eval determinism")  # eval() cannot reach them: dropout stays on


def test_parameters_that_get_no_gradient_are_flagged(batch):
    model = small()
    model.unused = nn.Linear(4, 4)
    report = check_model(model, batch, verbose=False)
    assert failed(report) == {"parameters reached"}
    assert "unused.weight" in report["parameters reached"].message


def test_default_init_is_flagged_by_the_embedding_scale(batch):
    model = apply_default_init(small(d_model=128, num_heads=4, dff=256))
    report = check_model(model, batch, verbose=False)
    assert failed(report) == {"embedding scale"}


def test_over_confident_output_fails_the_initial_loss(batch):
    model = small()
    with torch.no_grad():
        model.out_proj.weight.mul_(100)
    report = check_model(model, batch, verbose=False)
    assert report.flagged("initial loss")


def test_injected_nan_is_traced_to_its_module(batch):
    model = small()
    with torch.no_grad():
        model.decoder.layers[1].ffn.net[0].weight[0, 0] = float("nan")
    report = check_model(model, batch, verbose=False)
    assert {
        "parameters finite",
        "activations finite",
        "loss and grads finite",
        "initial loss",
    } <= failed(report)
    assert "decoder.layers.1.ffn.net.0" in report["activations finite"].message
    assert report["causality probe"].status == "skip"


def test_start_symbol_equal_to_pad_is_flagged(batch):
    src, tgt = batch
    tgt = tgt.clone()
    tgt[:, 0] = PAD_ID
    report = check_model(small(), (src, tgt), verbose=False)
    assert {"start symbol", "fully masked rows"} <= failed(report)
    report = check_model(small(), batch, bos_id=PAD_ID, verbose=False)
    assert report.flagged("start symbol")


def test_missing_shift_is_flagged(batch):
    src, tgt = batch
    model = small()
    assert not check_model(model, (src, tgt[:, :-1], tgt[:, 1:]), verbose=False).flagged(
        "teacher-forcing shift"
    )
    report = check_model(model, (src, tgt[:, :-1], tgt[:, :-1]), verbose=False)
    assert failed(report) == {"teacher-forcing shift"}


def test_a_shift_made_by_check_model_is_skipped_not_passed(batch):
    """Given (src, tgt), check_model makes the shift itself: it has tested nothing, so the
    check says skip, and the report's head does not count it as ok."""
    report = check_model(small(), batch, verbose=False)
    assert report["teacher-forcing shift"].status == "skip"
    skipped = sum(f.status == "skip" for f in report.findings)
    ok = sum(f.status == "ok" for f in report.findings)
    assert str(report).splitlines()[0].endswith(f"{ok} ok, {skipped} skipped, 0 FAIL")


def test_ids_outside_the_vocabulary(batch):
    src, tgt = batch
    src = src.clone()
    src[0, 0] = VOCAB_SIZE
    report = check_model(small(), (src, tgt), verbose=False)
    assert {"forward pass", "ids in vocabulary"} <= failed(report)


def test_bad_batch_is_a_clear_error():
    with pytest.raises(ValueError, match="batch must be"):
        check_model(small(), torch.zeros(2, 3, dtype=torch.long), verbose=False)


def test_block_of():
    assert block_of("encoder.layers.0.mha.W_q.weight") == "encoder.layers.0"
    assert block_of("encoder.embed.emb.weight") == "encoder.embed"
    assert block_of("out_proj.weight") == "out_proj"
    assert BOS_ID != PAD_ID


def test_report_rejects_an_unknown_stage_or_status():
    report = ModelReport()
    with pytest.raises(ValueError, match="stage must be one of"):
        report.add("training", "x", "ok", "")
    with pytest.raises(ValueError, match="got 'shapes' and 'PASS'"):
        report.add("shapes", "x", "PASS", "")
