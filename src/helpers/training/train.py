"""The training loop of the reversal model: teacher forcing, Adam, the Noam schedule with an
optional linear cooldown, a progress bar, and a cheap periodic evaluation. Built in chapter 10.
The loss, the update step, the evaluation gate, its confirmation and the history are those of
chapter 23's data-parallel loop too (helpers.training.loop).

train_reversal(cfg)   trains from scratch and returns the model with its history.
"""

import time
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch

from helpers.core.data import make_reversal_dataset
from helpers.core.model import Transformer, apply_default_init
from helpers.core.vocab import PAD_ID, VOCAB_SIZE
from helpers.decoding.greedy import exact_match, restores_mode, sequences_equal
from helpers.training.loop import (
    evaluate_and_confirm,
    evaluation_due,
    record,
    token_loss,
    update,
)
from helpers.training.recipes import TrainConfig
from helpers.training.schedule import noam_lambda


@dataclass
class TrainResult:
    """Built in chapter 10. A trained model, its config, what happened, and how long it took."""

    model: Transformer
    config: TrainConfig
    # per step: step, loss, token_acc, lr; per evaluation: eval_step, exact_match, seconds
    history: dict = field(default_factory=dict)
    seconds: float = 0.0
    from_cache: bool = False
    stopped: str | None = None  # why training ended early, when a deadline stopped it

    @property
    def steps(self) -> int:
        return self.history["step"][-1] if self.history.get("step") else 0

    @property
    def reached_target(self) -> bool:
        target, scores = self.config.target_exact_match, self.history.get("exact_match")
        return target is not None and bool(scores) and scores[-1] >= target


def build_model(cfg: TrainConfig) -> Transformer:
    """The untrained model for cfg (seeded: the same cfg gives the same initial weights).

    Built in chapter 10; chapter 12 compares its four inits (cfg.init).
    """
    torch.manual_seed(cfg.seed)
    model = Transformer(
        VOCAB_SIZE,
        VOCAB_SIZE,
        d_model=cfg.d_model,
        num_heads=cfg.num_heads,
        dff=cfg.dff,
        num_layers=cfg.num_layers,
        max_len=cfg.seq_len,
        dropout=cfg.dropout,
        # chapter 12's EmbeddingScaleConfig; every other recipe has neither field
        token_scale=getattr(cfg, "token_scale", None),
        position_scale=getattr(cfg, "position_scale", 1.0),
        # BlocksConfig's options of today's blocks; every other recipe builds the 2017 model
        **(cfg.model_options() if hasattr(cfg, "model_options") else {}),
    )
    if cfg.init == "default":
        apply_default_init(model)
    elif cfg.init in ("embedding_only", "xavier_only"):  # chapter 12's 2 x 2: one fix undone
        kind = torch.nn.Linear if cfg.init == "embedding_only" else torch.nn.Embedding
        for m in model.modules():
            if isinstance(m, kind):
                m.reset_parameters()  # PyTorch's default for this kind of layer only
    elif cfg.init != "fixed":
        raise ValueError(
            f"init must be 'fixed', 'default', 'embedding_only' or 'xavier_only', got {cfg.init!r}"
        )
    return model


def lr_factor(cfg: TrainConfig):
    """The learning-rate factor for LambdaLR (base lr = cfg.lr_scale): Noam, then a linear cooldown.

    noam_lambda rises for cfg.warmup steps and decays as 1/sqrt(step); with cfg.cooldown > 0 it
    is also multiplied by a ramp that falls linearly from 1 to 0 over the last cfg.cooldown
    steps before cfg.max_steps, so that the final steps are small and the last few wrong
    sequences get fixed instead of jittering.
    """
    noam = noam_lambda(cfg.d_model, cfg.warmup)
    if cfg.cooldown <= 0:
        return noam
    if cfg.cooldown > cfg.max_steps:
        raise ValueError(f"cooldown={cfg.cooldown} is longer than max_steps={cfg.max_steps}")

    def factor(step: int) -> float:
        return noam(step) * min(1.0, (cfg.max_steps - step) / cfg.cooldown)

    return factor


def make_optimizer(model, cfg: TrainConfig):
    """Adam with the betas and eps of Vaswani et al. (2017), and its LambdaLR schedule
    (lr_factor(cfg) times the base lr cfg.lr_scale). Both training loops build theirs here."""
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr_scale, betas=(0.9, 0.98), eps=1e-9)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lr_factor(cfg))


def sequence_correct(logits: torch.Tensor, tgt_out: torch.Tensor) -> torch.Tensor:
    """bool [B]: the argmax is right at every position up to and including the target's <eos>
    (teacher forcing's exact match: `sequences_equal` on the argmax tokens)."""
    return sequences_equal(logits.argmax(-1), tgt_out)


@restores_mode
def teacher_forced_exact_match(
    model, src: torch.Tensor, tgt: torch.Tensor, batch_size: int = 1000
) -> float:
    """Built in chapter 10. Fraction of sequences whose teacher-forced argmax is right at every
    position up to <eos>.

    This is the same number as greedy exact match (helpers.exact_match): while every argmax
    is right, greedy decoding feeds itself exactly the prefix that teacher forcing feeds, and
    at the first wrong argmax both go wrong. It costs one batched forward pass instead of
    one decoder pass per output token. Scores in eval mode, then gives back the caller's mode.
    """
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, src.size(0), batch_size):
            s, t = src[i : i + batch_size], tgt[i : i + batch_size]
            correct += int(sequence_correct(model(s, t[:, :-1]), t[:, 1:]).sum())
    return correct / max(src.size(0), 1)


def epoch_batches(
    lengths: torch.Tensor, batch_size: int, bucket: int, gen: torch.Generator
) -> list:
    """One epoch of index batches (full batches only).

    bucket=0: a random permutation cut into batches. bucket=n: the permutation is cut into
    runs of n * batch_size sequences, each run is sorted by length before it is cut into
    batches, and the batches are shuffled; a batch then holds sequences of about the same
    length, so trimming its padding columns saves work.
    """
    n = lengths.numel()
    perm = torch.randperm(n, generator=gen)
    if bucket <= 0:
        return [perm[i : i + batch_size] for i in range(0, n - batch_size + 1, batch_size)]
    batches = []
    for i in range(0, n, bucket * batch_size):
        run = perm[i : i + bucket * batch_size]
        run = run[torch.argsort(lengths[run], stable=True)]
        batches += [
            run[j : j + batch_size] for j in range(0, run.numel() - batch_size + 1, batch_size)
        ]
    order = torch.randperm(len(batches), generator=gen).tolist()
    return [batches[k] for k in order]


def train_reversal(
    cfg: TrainConfig = TrainConfig(),
    progress: bool = True,
    confirm: bool = True,
    device: torch.device | str | None = None,
    deadline: float | None = None,
    on_step=None,
    stop_after: int | None = None,
) -> TrainResult:
    """Built in chapter 10. Train a reversal model from scratch with teacher forcing, Adam and
    the Noam schedule.

    At every step that is a multiple of cfg.eval_every, and only if the training batch of that
    step (scored before its update) is at least cfg.eval_gate exactly right, the model is
    scored on the first cfg.eval_size validation sequences with teacher_forced_exact_match, one
    forward pass. The gate is tested again at every such step, also after earlier evaluations,
    so a step whose batch falls below it is not evaluated, even if the model would have reached
    the target there. With a target, training stops at the first evaluation that takes place and
    reaches it, once greedy decoding (exact_match) has confirmed the score (confirm=True); the
    history then records the greedy score. The last step is always evaluated.

    device: where to train (default: the CPU); the model stays there. The data is drawn on
    the CPU and moved, and the batches are drawn by a CPU generator, so every device sees
    the same batches in the same order. deadline: a time.monotonic() value; past it, training
    stops before the next step and result.stopped says so (tools/record/gpu.py caps its
    parts with it). on_step(step, model, loss): called after every optimizer step, e.g. to
    measure something every k steps (tools/record/ch21_sharpness.py); the model is put back in
    training mode after it. stop_after: end after this many steps (at most cfg.max_steps) with
    the schedule of the full cfg.max_steps, cooldown included (the first steps of a longer
    run, bit for bit). The last step taken is always evaluated. Chapter 10 writes this loop by
    hand and compares it with train_reversal(cfg, confirm=False), bit for bit.

    history: per step "step", "loss", "token_acc" (teacher-forced, on the training batch),
    "batch_exact" (the batch's share of sequences right at every position), "lr"; per
    evaluation "eval_step", "exact_match", "seconds" (since the start).
    """
    if stop_after is not None and stop_after < 1:
        raise ValueError(f"stop_after must be at least 1, got {stop_after}")
    threads = torch.get_num_threads()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    try:
        device = torch.device(device or "cpu")
        return _train(cfg, progress, confirm, device, deadline, on_step, stop_after)
    finally:
        torch.set_num_threads(threads)


class _NoBar:
    """What the loop needs of a tqdm bar, doing nothing (no tqdm import without a bar: the GPU
    recording script runs where only torch, numpy and pytest are installed)."""

    def update(self, n):
        pass

    def set_postfix(self, **kwargs):
        pass

    def close(self):
        pass


def _train(cfg, progress, confirm, device, deadline, on_step, stop_after) -> TrainResult:
    last = cfg.max_steps if stop_after is None else min(stop_after, cfg.max_steps)
    t0 = time.perf_counter()
    model = build_model(cfg).to(device)
    src_train, tgt_train = make_reversal_dataset(cfg.train_size, seed=cfg.data_seed)
    src_val, tgt_val = make_reversal_dataset(cfg.val_size, seed=cfg.val_seed)
    src_eval, tgt_eval = src_val[: cfg.eval_size].to(device), tgt_val[: cfg.eval_size].to(device)
    # lengths and batch indices stay on the CPU, where the sampler's generator is
    src_len, tgt_len = (src_train != PAD_ID).sum(1), (tgt_train != PAD_ID).sum(1)
    src_train, tgt_train = src_train.to(device), tgt_train.to(device)
    opt, sched = make_optimizer(model, cfg)
    gen = torch.Generator().manual_seed(cfg.seed)
    keys = ("step", "loss", "token_acc", "batch_exact", "lr", "eval_step", "exact_match")
    hist = {k: [] for k in (*keys, "seconds")}
    forward = torch.compile(model) if cfg.compile else model
    if cfg.bf16:

        def autocast():
            return torch.autocast(device.type, dtype=torch.bfloat16)
    else:
        autocast = nullcontext
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=last, desc="training", mininterval=0.5)
    else:
        bar = _NoBar()

    def score(greedy: bool) -> float:  # one teacher-forced pass; greedy decoding to confirm
        metric = exact_match if greedy else teacher_forced_exact_match
        return metric(model, src_eval, tgt_eval)

    step, batches, stopped = 0, [], None
    model.train()
    while step < last:
        if deadline is not None and time.monotonic() > deadline:
            stopped = f"deadline reached before step {step + 1}"
            break
        if not batches:  # a new epoch
            batches = epoch_batches(src_len, cfg.batch_size, cfg.bucket, gen)
        idx = batches.pop()
        # padding is trailing: cut the columns that are padding in every row of the batch
        rows = idx.to(device)
        src = src_train[rows, : int(src_len[idx].max())]
        tgt = tgt_train[rows, : int(tgt_len[idx].max())]
        tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]  # teacher forcing: shift by one
        with autocast():
            logits = forward(src, tgt_in)
        loss = token_loss(logits, tgt_out, cfg.label_smoothing)
        update(loss, opt, sched)
        step += 1
        with torch.no_grad():  # free statistics of the batch just seen (before this update)
            real = tgt_out != PAD_ID
            acc = ((logits.argmax(-1) == tgt_out) & real).sum().item() / real.sum().item()
            batch_exact = sequence_correct(logits, tgt_out).float().mean().item()
        lr = sched.get_last_lr()[0]
        record(hist, step=step, loss=loss.item(), token_acc=acc, batch_exact=batch_exact, lr=lr)
        bar.update(1)
        if on_step is not None:
            on_step(step, model, hist["loss"][-1])
            model.train()
        if evaluation_due(cfg, step, batch_exact, last):
            em, done = evaluate_and_confirm(cfg, score, confirm)
            record(hist, eval_step=step, exact_match=em, seconds=time.perf_counter() - t0)
            bar.set_postfix(loss=f"{loss.item():.3f}", exact_match=f"{em:.3f}")
            if done:
                break
    bar.close()
    model.eval()
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # the clock stops when the GPU's work is done
    return TrainResult(model, cfg, hist, time.perf_counter() - t0, stopped=stopped)
