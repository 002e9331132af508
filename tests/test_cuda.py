"""The CUDA paths (chapter 22, run by tools/record/gpu.py on a GPU): both attention paths agree,
the KV cache decodes the same tokens, and a model moved with .to carries its buffers and masks.

Every test takes a `device`. By default it runs on the CPU and on CUDA (skipped without a GPU),
so the test code itself is exercised by `make test` here. With TRANSFORMER_BOOK_TEST_DEVICE set
(record_gpu.py sets it to the device it records on) only that device runs, and a missing
device fails instead of being skipped.

Tolerances, against the same computation in float64:
- float32: 1e-5 absolute (outputs are of order 1; float32 keeps about 7 significant digits,
  and the CPU here shows differences below 1e-6);
- bfloat16: 2^-4 of the largest output value (bfloat16 keeps 8 significant bits, a relative
  step of 2^-8; the CPU here shows differences of about 2^-8, so this leaves a factor 16).
"""

import os

import pytest
import torch

from helpers import (
    VOCAB_SIZE,
    MiniGPT,
    MultiHeadAttention,
    Transformer,
    greedy_decode,
    make_causal_mask,
    make_padding_mask,
    make_reversal_dataset,
)

ENV = "TRANSFORMER_BOOK_TEST_DEVICE"
FORCED = os.environ.get(ENV)
NO_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
DEVICES = [FORCED] if FORCED else ["cpu", pytest.param("cuda", marks=NO_CUDA)]
TOLERANCE = {torch.float32: ("abs", 1e-5), torch.bfloat16: ("rel", 2.0**-4)}


@pytest.fixture(params=DEVICES)
def device(request):
    name = request.param
    if torch.device(name).type == "cuda" and not torch.cuda.is_available():
        pytest.fail(f"{ENV}={name} but this torch sees no CUDA device")
    return torch.device(name)


def allowed_error(dtype, reference: torch.Tensor) -> float:
    kind, tol = TOLERANCE[dtype]
    return tol if kind == "abs" else tol * reference.abs().max().item()


def attention_inputs(device, L=37, d_model=64, B=3, seed=0):
    """x [B, L, d] and four masks: padding, causal | padding, and the cross-attention case."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, L, d_model, generator=g)
    ids = torch.randint(3, VOCAB_SIZE, (B, L), generator=g)
    ids[1, L // 2 :] = 0
    ids[2, 3:] = 0
    pad = make_padding_mask(ids)
    masks = {"padding": pad, "causal|padding": make_causal_mask(L) | pad, "none": None}
    return x.to(device), {k: None if m is None else m.to(device) for k, m in masks.items()}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("d_model,heads", [(64, 4), (512, 8)])
def test_attention_paths_agree(device, dtype, d_model, heads):
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model, heads, dropout=0.0).eval()
    x, masks = attention_inputs(device, d_model=d_model)
    ref_mha = MultiHeadAttention(d_model, heads, dropout=0.0).eval()
    ref_mha.load_state_dict(mha.state_dict())
    ref_mha = ref_mha.double()
    mha = mha.to(device=device, dtype=dtype)
    xd = x.to(device=device, dtype=dtype)
    tgt = xd[:, :11]  # cross-attention: 11 queries against the 37 positions of x
    with torch.no_grad():
        for name, mask in masks.items():
            for q in (xd, tgt):
                m = mask
                if q is tgt and m is not None and m.size(-2) > 1:
                    m = m[..., :11, :]  # the causal rows of the 11 queries
                ref, _ = ref_mha(
                    q.cpu().double(), xd.cpu().double(), xd.cpu().double(),
                    attn_mask=None if m is None else m.cpu(),
                )  # fmt: skip
                by_hand, w = mha(q, xd, xd, attn_mask=m, need_weights=True)
                sdpa, none = mha(q, xd, xd, attn_mask=m, need_weights=False)
                assert none is None and w.device == q.device and sdpa.dtype == dtype
                tol = allowed_error(dtype, ref)
                where = f"{name}, {'cross' if q is tgt else 'self'}, {dtype}, {device}"
                for path, out in (("handwritten", by_hand), ("SDPA", sdpa)):
                    err = (out.cpu().double() - ref).abs().max().item()
                    assert err <= tol, f"{path} vs float64: {err:.3g} > {tol:.3g} ({where})"
                err = (by_hand.double() - sdpa.double()).abs().max().item()
                assert err <= tol, f"handwritten vs SDPA: {err:.3g} > {tol:.3g} ({where})"


def test_fully_masked_row_gives_zero_attention_on_both_paths(device):
    torch.manual_seed(0)
    mha = MultiHeadAttention(64, 4, dropout=0.0).to(device).eval()
    x = torch.randn(2, 7, 64, device=device)
    mask = torch.zeros(2, 1, 7, 7, dtype=torch.bool, device=device)
    mask[0, 0, 2, :] = True  # query 2 of sequence 0 may see no key
    with torch.no_grad():
        by_hand, w = mha(x, x, x, attn_mask=mask)
        sdpa, _ = mha(x, x, x, attn_mask=mask, need_weights=False)
    assert (w[0, :, 2] == 0).all()
    bias = mha.W_o.bias.detach()
    assert torch.isfinite(sdpa).all(), "SDPA returned NaN or inf on a fully masked row"
    torch.testing.assert_close(by_hand[0, 2], bias)
    torch.testing.assert_close(sdpa[0, 2], bias, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(sdpa, by_hand, atol=1e-5, rtol=1e-5)


def random_model(device, max_len=40, seed=0):
    torch.manual_seed(seed)
    model = Transformer(
        VOCAB_SIZE, VOCAB_SIZE, d_model=64, num_heads=4, dff=128, num_layers=2, max_len=max_len
    )
    return model.to(device).eval()


def test_kv_cache_decodes_identical_tokens(device):
    model = random_model(device)
    src, _ = make_reversal_dataset(32, seed=3)
    src = src.to(device)
    for max_len in (14, 40):
        naive = greedy_decode(model, src, max_len=max_len, stop_at_eos=False)
        cached = greedy_decode(model, src, max_len=max_len, use_cache=True, stop_at_eos=False)
        assert naive.device == src.device and naive.shape == (32, max_len)
        assert torch.equal(naive, cached), f"first difference at {(naive != cached).nonzero()[0]}"


def test_model_moved_with_to_carries_buffers_and_masks(device):
    cpu_model = random_model("cpu")
    model = random_model("cpu").to(device)
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        assert t.device.type == device.type, f"{name} stayed on {t.device}"
    pe = [name for name, _ in model.named_buffers() if name.endswith("pe")]
    assert pe, "the positional table should be a buffer, so that .to() moves it"
    src, tgt = make_reversal_dataset(8, seed=5)
    with torch.no_grad():
        expected = cpu_model(src, tgt[:, :-1])
        got = model(src.to(device), tgt[:, :-1].to(device))  # masks are built on src's device
        memory, src_mask = model.encode(src.to(device))
    assert got.device.type == device.type and src_mask.device.type == device.type
    assert memory.device.type == device.type
    torch.testing.assert_close(got.cpu(), expected, atol=1e-4, rtol=1e-4)
    back = random_model("cpu", seed=1)  # different weights ...
    back.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})  # ... replaced
    with torch.no_grad():
        torch.testing.assert_close(back(src, tgt[:, :-1]), expected)
    gpt = MiniGPT(VOCAB_SIZE, d_model=32, num_heads=4, dff=64, num_layers=2, max_len=16)
    gpt = gpt.to(device).eval()
    with torch.no_grad():
        logits = gpt(src[:, :10].to(device))
    assert logits.device.type == device.type and logits.shape == (8, 10, VOCAB_SIZE)
