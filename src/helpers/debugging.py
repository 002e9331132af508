"""check_model: a Transformer checked in the order one debugs it.

    shapes -> masks -> data -> loss at init -> gradients, and NaN/inf anywhere.

Every check looks at what the model *does* on one batch, never at its source code:
- the output shape of a forward pass;
- the masks the attention modules actually receive (caught with forward pre-hooks), and
  two behavioural probes: changing future target tokens must not change earlier logits
  (causality); removing the source's padding columns must not change any logit
  (padding invariance); two forward passes in eval mode must agree (nothing stuck in
  training mode);
- the batch itself: the decoder input starts with BOS, BOS is not PAD, ids are inside the
  vocabulary, the target is the decoder input shifted by one;
- the loss at initialisation against ln(V), and the scale of the embeddings entering the
  first LayerNorm of each stack;
- gradient norms per block, parameters that get no gradient, and tensors that take part
  in the forward pass with requires_grad=True but are not registered parameters (a layer
  kept in a plain Python list);
- NaN/inf in parameters, activations (naming the first module that produced one), the loss
  and the gradients.

The model is any nn.Module with forward(src, tgt_in) -> logits [B, Lt, V]; helpers.Transformer
is the reference. check_model leaves the model as it found it: same train/eval mode, no
.grad written (gradients come from torch.autograd.grad), and its probes draw their random tokens
from a private generator (a healthy model in eval mode consumes no global random state).
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from .vocab import BOS_ID, PAD_ID

STAGES = ("shapes", "masks", "data", "loss at init", "gradients", "nan/inf")


@dataclass(frozen=True)
class Finding:
    """One check: its stage, its name, 'ok' / 'FAIL' / 'skip', and what was seen."""

    stage: str
    check: str
    status: str
    message: str

    @property
    def ok(self) -> bool:
        return self.status != "FAIL"


@dataclass
class ModelReport:
    """The findings of check_model, in debugging order. report.ok is False if any check failed."""

    findings: list[Finding] = field(default_factory=list)
    grad_norms: dict[str, float] = field(default_factory=dict)  # block name -> gradient norm

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.findings)

    @property
    def failures(self) -> list[Finding]:
        return [f for f in self.findings if f.status == "FAIL"]

    @property
    def failed_checks(self) -> list[str]:
        return [f.check for f in self.failures]

    def __getitem__(self, check: str) -> Finding:
        for f in self.findings:
            if f.check == check:
                return f
        raise KeyError(
            f"no check named {check!r}; the checks are {[f.check for f in self.findings]}"
        )

    def flagged(self, check: str) -> bool:
        """True if the check named `check` failed."""
        return self[check].status == "FAIL"

    def add(self, stage: str, check: str, status: str, message: str) -> None:
        assert stage in STAGES and status in ("ok", "FAIL", "skip"), (stage, status)
        self.findings.append(Finding(stage, check, status, message))

    def __str__(self) -> str:
        n_fail = len(self.failures)
        head = f"check_model: {len(self.findings)} checks, " + (
            "all ok" if not n_fail else f"{n_fail} FAIL"
        )
        order = {s: i for i, s in enumerate(STAGES)}
        lines = [head]
        for f in sorted(self.findings, key=lambda f: order[f.stage]):  # stable: keeps check order
            lines.append(f"  {f.stage:<12} {f.status:<4}  {f.check:<22} {f.message}")
        return "\n".join(lines)

    __repr__ = __str__


def _g(x: float) -> str:
    """A number printed to 2 significant digits: stable across CPUs, enough to judge."""
    if x == 0:
        return "0"
    if not math.isfinite(x):
        return str(x)
    s = f"{x:.2g}"
    return s + ".0" if s.isdigit() and len(s) == 1 else s


def block_of(param_name: str) -> str:
    """'encoder.layers.0.mha.W_q.weight' -> 'encoder.layers.0'; 'out_proj.weight' -> 'out_proj'."""
    parts = param_name.split(".")[:-1] or [param_name]
    for i, p in enumerate(parts):
        if p.isdigit():
            return ".".join(parts[: i + 1])
    return ".".join(parts[:2])


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _tensors(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _tensors(o)


def _non_finite(t: torch.Tensor) -> bool:
    return t.is_floating_point() and not bool(torch.isfinite(t).all())


class _Recorder:
    """Forward hooks: masks given to attention modules, LayerNorm inputs, first non-finite output."""

    MASK_ARGS = ("attn_mask", "mask", "attention_mask")

    def __init__(self, model: nn.Module):
        self.masks = []  # (module name, query length or None, mask tensor)
        self.ln_inputs = []  # (module name, std of the input)
        self.first_non_finite = None  # (module name, class name)
        self.n_outputs = 0
        self.handles = []
        for name, mod in model.named_modules():
            params = self._forward_params(mod)
            mask_arg = next((a for a in self.MASK_ARGS if a in params), None)
            if mask_arg is not None:
                self.handles.append(
                    mod.register_forward_pre_hook(
                        self._mask_hook(name, mod, mask_arg), with_kwargs=True
                    )
                )
            if isinstance(mod, nn.LayerNorm):
                self.handles.append(mod.register_forward_pre_hook(self._ln_hook(name)))
            self.handles.append(mod.register_forward_hook(self._out_hook(name)))

    @staticmethod
    def _forward_params(mod):
        try:
            return inspect.signature(mod.forward).parameters
        except (TypeError, ValueError):
            return {}

    def _mask_hook(self, name, mod, mask_arg):
        sig = inspect.signature(mod.forward)

        def hook(module, args, kwargs):
            try:
                bound = sig.bind_partial(*args, **kwargs).arguments
            except TypeError:
                return
            mask = bound.get(mask_arg)
            first = next(iter(bound.values()), None)
            lq = first.size(1) if isinstance(first, torch.Tensor) and first.dim() == 3 else None
            if isinstance(mask, torch.Tensor):
                self.masks.append((name, lq, mask.detach()))

        return hook

    def _ln_hook(self, name):
        def hook(module, args):
            if args and isinstance(args[0], torch.Tensor) and args[0].is_floating_point():
                self.ln_inputs.append((name, float(args[0].detach().float().std())))

        return hook

    def _out_hook(self, name):
        def hook(module, args, output):
            self.n_outputs += 1
            if self.first_non_finite is None and any(_non_finite(t) for t in _tensors(output)):
                self.first_non_finite = (name or "(the model)", type(module).__name__)

        return hook

    def remove(self):
        for h in self.handles:
            h.remove()


def _autograd_leaves(root: torch.Tensor) -> list[torch.Tensor]:
    """Every leaf tensor with requires_grad that the autograd graph of `root` reaches."""
    seen, leaves, stack = set(), [], [root.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        var = getattr(fn, "variable", None)  # AccumulateGrad nodes hold the leaf
        if isinstance(var, torch.Tensor):
            leaves.append(var)
        stack.extend(next_fn for next_fn, _ in fn.next_functions)
    return leaves


def _hidden_modules(model: nn.Module) -> list[str]:
    """Attributes that hold modules inside a plain list/tuple/dict (invisible to nn.Module)."""
    found = []
    for name, mod in model.named_modules():
        for attr, value in vars(mod).items():
            values = (
                value.values()
                if isinstance(value, dict)
                else value
                if isinstance(value, (list, tuple))
                else ()
            )
            if not attr.startswith("_") and any(isinstance(v, nn.Module) for v in values):
                found.append(f"{name + '.' if name else ''}{attr} is a {type(value).__name__}")
    return found


def _vocab(model, attr):
    v = getattr(model, attr, None)
    return int(v) if isinstance(v, int) else None


def check_model(
    model: nn.Module,
    batch,
    *,
    pad_id: int = PAD_ID,
    bos_id: int = BOS_ID,
    seed: int = 0,
    max_probe_rows: int = 4,
    loss_ratio_limit: float = 2.0,
    entry_std_limit: float = 4.0,
    grad_norm_limit: float = 1e3,
    verbose: bool = True,
) -> ModelReport:
    """Check `model` on one batch in debugging order; print a short report and return it.

    batch: (src, tgt) with tgt = <bos> ... <eos> <pad>... (the decoder input and target are
    then tgt[:, :-1] and tgt[:, 1:]), or (src, tgt_in, tgt_out) to check a shift made elsewhere.
    Returns a ModelReport: .ok, .failures, report['causality probe'].status, .grad_norms.
    """
    if not isinstance(batch, (tuple, list)) or len(batch) not in (2, 3):
        raise ValueError("batch must be (src, tgt) or (src, tgt_in, tgt_out)")
    if len(batch) == 2:
        src, tgt = batch
        tgt_in, tgt_out, shift_given = tgt[:, :-1], tgt[:, 1:], False
    else:
        src, tgt_in, tgt_out = batch
        shift_given = True
    for name, t in (("src", src), ("tgt_in", tgt_in), ("tgt_out", tgt_out)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2:
            raise ValueError(
                f"{name} must be a [B, L] tensor of token ids, got {getattr(t, 'shape', type(t))}"
            )

    report = ModelReport()
    was_training = model.training
    gen = torch.Generator().manual_seed(seed)
    try:
        model.eval()
        _check(
            model,
            src,
            tgt_in,
            tgt_out,
            shift_given,
            pad_id,
            bos_id,
            gen,
            max_probe_rows,
            loss_ratio_limit,
            entry_std_limit,
            grad_norm_limit,
            report,
        )
    finally:
        model.train(was_training)
    if verbose:
        print(report)
    return report


def _check(
    model,
    src,
    tgt_in,
    tgt_out,
    shift_given,
    pad_id,
    bos_id,
    gen,
    max_probe_rows,
    loss_ratio_limit,
    entry_std_limit,
    grad_norm_limit,
    report,
):
    B, Ls = src.shape
    Lt = tgt_in.size(1)
    src_vocab, tgt_vocab = _vocab(model, "src_vocab"), _vocab(model, "tgt_vocab")

    # ------------------------------------------------------------------ shapes
    rec = _Recorder(model)
    try:
        with torch.no_grad():
            logits = model(src, tgt_in)
    except Exception as exc:  # the first thing to fix: report it and stop the model checks
        rec.remove()
        report.add(
            "shapes",
            "forward pass",
            "FAIL",
            f"model(src, tgt_in) raised {type(exc).__name__}: {exc}",
        )
        _data_checks(
            src, tgt_in, tgt_out, shift_given, pad_id, bos_id, src_vocab, tgt_vocab, report
        )
        return
    finally:
        rec.remove()
    V = tgt_vocab or logits.size(-1)
    expected = (B, Lt, V)
    if tuple(logits.shape) == expected:
        report.add("shapes", "logits shape", "ok", f"[B, Lt, V] = {list(expected)}")
    else:
        report.add(
            "shapes",
            "logits shape",
            "FAIL",
            f"got {list(logits.shape)}, expected [B, Lt, V] = {list(expected)}",
        )
        return  # every later check indexes logits as [B, Lt, V]
    if hasattr(model, "encode"):
        try:
            with torch.no_grad():
                out = model.encode(src)
            memory = out[0] if isinstance(out, (tuple, list)) else out
            ok = (
                isinstance(memory, torch.Tensor)
                and memory.dim() == 3
                and tuple(memory.shape[:2]) == (B, Ls)
            )
            report.add(
                "shapes",
                "encoder memory",
                "ok" if ok else "FAIL",
                f"{list(memory.shape)}, [B, Ls, d] expected with B={B}, Ls={Ls}",
            )
        except Exception as exc:
            report.add(
                "shapes",
                "encoder memory",
                "FAIL",
                f"model.encode(src) raised {type(exc).__name__}: {exc}",
            )

    with torch.no_grad():
        again = model(src, tgt_in)
    finite = not _non_finite(logits)
    diff = float((again - logits).abs().max()) if finite and not _non_finite(again) else 0.0
    deterministic = torch.equal(again.isnan(), logits.isnan()) and diff == 0
    if deterministic:
        report.add(
            "shapes", "eval determinism", "ok", "two forward passes in eval mode are identical"
        )
    else:
        report.add(
            "shapes",
            "eval determinism",
            "FAIL",
            f"two forward passes in eval mode differ by up to {_g(diff)}: something still runs in "
            "training mode (dropout in a module that model.eval() cannot reach?)",
        )

    # ------------------------------------------------------------------ masks
    _mask_checks(rec, report)
    why = (
        None
        if finite and deterministic
        else (
            "skipped: the logits hold NaN/inf (see nan/inf)"
            if not finite
            else "skipped: the forward pass is not deterministic (see eval determinism)"
        )
    )
    if why:
        report.add("masks", "causality probe", "skip", why)
        report.add("masks", "padding invariance", "skip", why)
    else:
        _causality_probe(model, src, tgt_in, logits, pad_id, V, gen, report)
        _padding_probe(model, src, tgt_in, logits, pad_id, max_probe_rows, report)

    # ------------------------------------------------------------------ data
    _data_checks(src, tgt_in, tgt_out, shift_given, pad_id, bos_id, src_vocab, tgt_vocab, report)

    # ------------------------------------------------------------------ loss at init
    with torch.enable_grad():
        logits_g = model(src, tgt_in)
        loss = F.cross_entropy(logits_g.reshape(-1, V), tgt_out.reshape(-1), ignore_index=pad_id)
    ln_v = math.log(V)
    pad_share = float((tgt_out == pad_id).float().mean())
    lv = float(loss.detach())
    msg = f"{lv:.2f} vs ln(V) = ln({V}) = {ln_v:.2f}, ratio {lv / ln_v:.2f} ({pad_share:.0%} PAD targets ignored)"
    if not math.isfinite(lv):
        report.add("loss at init", "initial loss", "FAIL", f"the loss is {lv}")
    elif lv > loss_ratio_limit * ln_v:
        report.add(
            "loss at init",
            "initial loss",
            "FAIL",
            msg + f": above {loss_ratio_limit:g} x ln(V), the untrained model is confidently wrong "
            "(initialisation or output scale)",
        )
    else:
        report.add(
            "loss at init",
            "initial loss",
            "ok",
            msg + (": far below ln(V), a trained model (or a leak)" if lv < 0.5 * ln_v else ""),
        )
    _embedding_scale(rec, entry_std_limit, report)

    # ------------------------------------------------------------------ gradients
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    registered = {id(p) for _, p in named}
    leaves = _autograd_leaves(loss) if loss.grad_fn is not None else []
    hidden = [t for t in leaves if id(t) not in registered]
    if hidden:
        where = _hidden_modules(model)
        report.add(
            "gradients",
            "unregistered tensors",
            "FAIL",
            f"{len(hidden)} tensors ({sum(t.numel() for t in hidden):,} values) require grad and shape the "
            "output but are not parameters of the model: the optimizer, state_dict, .to() and .eval() "
            "never see them" + (f" ({'; '.join(where)})" if where else ""),
        )
    else:
        report.add(
            "gradients",
            "unregistered tensors",
            "ok",
            f"every tensor that requires grad in the graph is one of the {len(named)} parameters",
        )
    if loss.grad_fn is None:
        report.add(
            "gradients", "parameters reached", "FAIL", "the loss does not depend on any parameter"
        )
        grads = [None] * len(named)
    else:
        grads = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True)
    unused = [n for (n, _), g in zip(named, grads) if g is None]
    if unused:
        report.add(
            "gradients",
            "parameters reached",
            "FAIL",
            f"{len(unused)} parameter tensor(s) get no gradient (never used by the forward pass), e.g. "
            + ", ".join(unused[:3]),
        )
    else:
        report.add(
            "gradients", "parameters reached", "ok", f"all {len(named)} parameters get a gradient"
        )
    sq: dict[str, float] = {}
    for (n, _), g in zip(named, grads):
        if g is not None:
            b = block_of(n)
            sq[b] = sq.get(b, 0.0) + float(g.double().pow(2).sum())
    report.grad_norms = {b: math.sqrt(v) for b, v in sq.items()}
    norms = report.grad_norms
    if norms:
        lo, hi = min(norms, key=norms.get), max(norms, key=norms.get)
        zero = [b for b, v in norms.items() if v == 0]
        nonfinite = [b for b, v in norms.items() if not math.isfinite(v)]
        huge = [b for b, v in norms.items() if math.isfinite(v) and v > grad_norm_limit]

        def some(blocks):
            return (
                ", ".join(blocks)
                if len(blocks) <= 3
                else f"{len(blocks)} blocks ({blocks[0]}, ...)"
            )

        problems = (
            ([f"zero in {some(zero)}"] if zero else [])
            + ([f"NaN/inf in {some(nonfinite)}"] if nonfinite else [])
            + ([f"above {grad_norm_limit:g} in {some(huge)}"] if huge else [])
        )
        if problems:
            report.add(
                "gradients",
                "gradient norms",
                "FAIL",
                f"{len(norms)} blocks: " + "; ".join(problems),
            )
        else:
            report.add(
                "gradients",
                "gradient norms",
                "ok",
                f"{len(norms)} blocks, from {_g(norms[lo])} ({lo}) to {_g(norms[hi])} ({hi})",
            )

    # ------------------------------------------------------------------ nan/inf anywhere
    bad_params = [n for n, p in model.named_parameters() if _non_finite(p.detach())]
    bad_params += [n for n, b in model.named_buffers() if _non_finite(b)]
    if bad_params:
        report.add(
            "nan/inf",
            "parameters finite",
            "FAIL",
            f"NaN/inf in {len(bad_params)} parameter/buffer tensor(s): {', '.join(bad_params[:3])}",
        )
    else:
        report.add("nan/inf", "parameters finite", "ok", "no NaN/inf in parameters or buffers")
    if rec.first_non_finite or _non_finite(logits):
        where = "{} ({})".format(*rec.first_non_finite) if rec.first_non_finite else "the logits"
        report.add("nan/inf", "activations finite", "FAIL", f"first non-finite output: {where}")
    else:
        report.add(
            "nan/inf", "activations finite", "ok", f"all {rec.n_outputs} module outputs are finite"
        )
    bad_grads = [n for (n, _), g in zip(named, grads) if g is not None and _non_finite(g)]
    if bad_grads or not math.isfinite(lv):
        report.add(
            "nan/inf",
            "loss and grads finite",
            "FAIL",
            f"loss {lv:.3g}; NaN/inf in the gradients of {len(bad_grads)} parameter tensor(s)"
            + (f", e.g. {bad_grads[0]}" if bad_grads else ""),
        )
    else:
        report.add(
            "nan/inf", "loss and grads finite", "ok", "the loss and every gradient are finite"
        )


def _mask_checks(rec: _Recorder, report: ModelReport) -> None:
    if not rec.masks:
        report.add("masks", "mask dtype", "skip", "no attention module received a mask")
        report.add("masks", "fully masked rows", "skip", "no attention module received a mask")
        return
    names = sorted({n for n, _, _ in rec.masks})
    not_bool = sorted({f"{n} ({m.dtype})" for n, _, m in rec.masks if m.dtype != torch.bool})
    if not_bool:
        report.add("masks", "mask dtype", "FAIL", "non-bool masks: " + ", ".join(not_bool[:3]))
    else:
        report.add(
            "masks",
            "mask dtype",
            "ok",
            f"{len(rec.masks)} masks seen by {len(names)} attention modules, all bool",
        )
    full = []
    for name, lq, m in rec.masks:
        if m.dtype != torch.bool or m.dim() < 2:
            continue
        rows = m.all(dim=-1)  # [B, 1 or h, Lq or 1]
        if lq is not None and rows.size(-1) == 1:
            rows = rows.expand(*rows.shape[:-1], lq)
        n = int(rows.any(dim=-2).sum()) if rows.dim() >= 3 else int(rows.sum())
        if n:
            idx = rows.nonzero()[0].tolist()
            full.append(f"{name}: {n} query rows (first: batch {idx[0]}, query {idx[-1]})")
    if full:
        report.add(
            "masks",
            "fully masked rows",
            "FAIL",
            "queries that may attend to no key at all (NaN with -inf masking): "
            + "; ".join(full[:2]),
        )
    else:
        report.add(
            "masks", "fully masked rows", "ok", "every query row may attend to at least one key"
        )


def _random_ids_like(t: torch.Tensor, vocab: int, pad_id: int, gen) -> torch.Tensor:
    r = torch.randint(0, vocab, t.shape, generator=gen).to(t.device)
    return torch.where(r == pad_id, (r + 1) % vocab, r)


def _causality_probe(model, src, tgt_in, logits, pad_id, V, gen, report) -> None:
    """Change every target token after position t; the logits at positions <= t must not move."""
    Lt = tgt_in.size(1)
    if Lt < 2:
        report.add("masks", "causality probe", "skip", "the decoder input has a single position")
        return
    scale = max(1.0, float(logits.abs().max()))
    worst, worst_t = 0.0, None
    for t in sorted({0, Lt // 2, Lt - 2}):
        changed = tgt_in.clone()
        changed[:, t + 1 :] = _random_ids_like(changed[:, t + 1 :], V, pad_id, gen)
        with torch.no_grad():
            out = model(src, changed)
        d = float((out[:, : t + 1] - logits[:, : t + 1]).abs().max())
        if not d <= worst:  # also catches NaN
            worst, worst_t = d, t
    if worst <= 1e-5 * scale:
        report.add(
            "masks",
            "causality probe",
            "ok",
            "changing later target tokens never changes earlier logits",
        )
    else:
        report.add(
            "masks",
            "causality probe",
            "FAIL",
            f"changing the tokens after position {worst_t} moved the logits at positions <= {worst_t} by "
            f"up to {_g(worst)}: the decoder sees the future",
        )


def _padding_probe(model, src, tgt_in, logits, pad_id, max_rows, report) -> None:
    """A padded row computed alone, with its padding columns cut off, must give the same logits."""
    real = src != pad_id
    lengths = real.long().cumsum(1).argmax(1) + 1  # last real position + 1
    rows = [
        i for i in range(src.size(0)) if lengths[i] < src.size(1) and real[i, : lengths[i]].any()
    ][:max_rows]
    if not rows:
        report.add(
            "masks",
            "padding invariance",
            "skip",
            "no source row in the batch has padding to remove",
        )
        return
    scale = max(1.0, float(logits.abs().max()))
    worst = 0.0
    for i in rows:
        with torch.no_grad():
            alone = model(src[i : i + 1, : lengths[i]], tgt_in[i : i + 1])
        d = float((alone[0] - logits[i]).abs().max())
        worst = d if not d <= worst else worst
    if worst <= 1e-4 * scale:
        report.add(
            "masks",
            "padding invariance",
            "ok",
            f"{len(rows)} padded rows give the same logits with their padding removed",
        )
    else:
        report.add(
            "masks",
            "padding invariance",
            "FAIL",
            f"removing the PAD columns of src moved the logits by up to {_g(worst)}: padding is attended to",
        )


def _data_checks(
    src, tgt_in, tgt_out, shift_given, pad_id, bos_id, src_vocab, tgt_vocab, report
) -> None:
    first = tgt_in[:, 0]
    if bos_id == pad_id:
        report.add(
            "data",
            "start symbol",
            "FAIL",
            f"BOS id == PAD id == {pad_id}: the decoder's first query sees one key, and it is masked as padding",
        )
    elif bool((first == pad_id).any()):
        n = int((first == pad_id).sum())
        report.add(
            "data",
            "start symbol",
            "FAIL",
            f"{n} of {len(first)} decoder inputs start with PAD ({pad_id}), not BOS ({bos_id}): "
            "their first query sees one key, and it is masked as padding",
        )
    elif not bool((first == bos_id).all()):
        n = int((first != bos_id).sum())
        report.add(
            "data",
            "start symbol",
            "FAIL",
            f"{n} of {len(first)} decoder inputs do not start with BOS ({bos_id})",
        )
    else:
        report.add(
            "data",
            "start symbol",
            "ok",
            f"every decoder input starts with BOS ({bos_id}), and BOS != PAD ({pad_id})",
        )

    problems = []
    for name, t, vocab in (
        ("src", src, src_vocab),
        ("tgt_in", tgt_in, tgt_vocab),
        ("tgt_out", tgt_out, tgt_vocab),
    ):
        if t.dtype.is_floating_point or t.dtype == torch.bool:
            problems.append(f"{name} has dtype {t.dtype}, not integer ids")
        elif t.numel() and (int(t.min()) < 0 or (vocab is not None and int(t.max()) >= vocab)):
            problems.append(
                f"{name} holds ids in [{int(t.min())}, {int(t.max())}], vocabulary is [0, {vocab})"
            )
    if problems:
        report.add("data", "ids in vocabulary", "FAIL", "; ".join(problems))
    else:
        report.add(
            "data",
            "ids in vocabulary",
            "ok",
            f"src ids < {src_vocab}, target ids < {tgt_vocab}"
            if src_vocab and tgt_vocab
            else "ids >= 0",
        )

    empty = int((src == pad_id).all(dim=1).sum())
    if empty:
        report.add(
            "data",
            "source rows",
            "FAIL",
            f"{empty} source rows are all PAD: their encoder queries see no key",
        )
    else:
        report.add("data", "source rows", "ok", "every source row has at least one real token")

    if not shift_given:
        report.add(
            "data",
            "teacher-forcing shift",
            "ok",
            "derived here: tgt_in = tgt[:, :-1], tgt_out = tgt[:, 1:]",
        )
    elif tgt_in.shape != tgt_out.shape:
        report.add(
            "data",
            "teacher-forcing shift",
            "FAIL",
            f"tgt_in {list(tgt_in.shape)} and tgt_out {list(tgt_out.shape)} differ in shape",
        )
    elif torch.equal(tgt_in, tgt_out):
        report.add(
            "data",
            "teacher-forcing shift",
            "FAIL",
            "tgt_out == tgt_in: every position is trained to output its own input (no shift: a label leak)",
        )
    else:
        bad = int((tgt_in[:, 1:] != tgt_out[:, :-1]).sum())
        if bad:
            report.add(
                "data",
                "teacher-forcing shift",
                "FAIL",
                f"tgt_out[:, t] != tgt_in[:, t + 1] at {bad} positions: the target is not the input shifted by one",
            )
        else:
            report.add(
                "data",
                "teacher-forcing shift",
                "ok",
                "tgt_out[:, t] == tgt_in[:, t + 1] everywhere",
            )


def _embedding_scale(rec: _Recorder, limit: float, report: ModelReport) -> None:
    """The std of what enters the first LayerNorm of each stack: the embeddings (plus positions)."""
    entry = {}
    for name, std in rec.ln_inputs:
        stack = name.split(".")[0]
        entry.setdefault(stack, std)
    if not entry:
        report.add("loss at init", "embedding scale", "skip", "no LayerNorm was called")
        return
    msg = ", ".join(f"{k} {_g(v)}" for k, v in entry.items())
    if max(entry.values()) > limit:
        report.add(
            "loss at init",
            "embedding scale",
            "FAIL",
            f"std entering the first LayerNorm: {msg} (> {limit:g}): token embeddings this large drown "
            "the positional signal (|pe| <= 1)",
        )
    else:
        report.add(
            "loss at init", "embedding scale", "ok", f"std entering the first LayerNorm: {msg}"
        )
