"""Data-parallel training of the reversal model with torch.distributed. Built in chapter 23.

torchrun starts the same script on every process (`python -m torch.distributed.run --standalone
--nproc_per_node=2 tools/train_ddp.py`) and tells each one its RANK and the WORLD_SIZE through
environment variables. Every process then runs this module's code:

init_distributed()      joins the process group (gloo on the CPU, nccl on CUDA GPUs), with a
                        clear LaunchError for a bad launch (no torchrun, one process, a port in
                        use);
rank_batches()          the rank's batches of one epoch, sharded by DistributedSampler;
train_reversal_ddp()    DistributedDataParallel training to the target: every rank takes the
                        same optimizer step and stops at the same step; rank 0 prints the log
                        and writes the checkpoint;
one_step_ddp()          one step on a fixed global batch, split across the ranks (the proof that
                        DDP computes what one process computes on the whole batch);
torchrun_command()      the command line that starts a script on n processes.

Called without a process group (plain Python, no torchrun) the same training loop runs as one
process: that is the baseline chapter 23 compares against.
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import shlex
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data.distributed import DistributedSampler

from helpers.core.data import make_reversal_dataset
from helpers.core.vocab import PAD_ID
from helpers.decoding.greedy import greedy_decode, restores_mode, sequences_equal
from helpers.training.loop import (
    evaluate_and_confirm,
    evaluation_due,
    record,
    token_loss,
    update,
)
from helpers.training.recipes import TrainConfig
from helpers.training.train import build_model, make_optimizer, sequence_correct

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


class LaunchError(RuntimeError):
    """A process group that cannot start, with what to do about it. Used in chapter 23."""


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits: its rank, how many processes there are, its device. Chapter 23."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def torchrun_command(script: str, nproc: int = 2, *args: str, port: int | None = None) -> list:
    """The command that starts `script` on `nproc` processes of this machine. Chapter 23.

    sys.executable -m torch.distributed.run is torchrun of the running Python (the venv's
    torch). --standalone lets torchrun pick a free port; `port` fixes one instead.
    """
    if nproc < 1:
        raise ValueError(f"nproc must be >= 1, got {nproc}")
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}"]
    if port is None:
        cmd.insert(3, "--standalone")
    else:
        cmd[4:4] = ["--master_addr=127.0.0.1", f"--master_port={port}"]
    return cmd + [str(script), *map(str, args)]


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True if nothing listens on host:port (a process group's rank 0 must be able to bind it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def init_distributed(min_world_size: int = 2, timeout_s: float = 60.0) -> DistInfo:
    """Join the process group torchrun set up for this process. Built in chapter 23.

    Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; picks nccl and the GPU
    cuda:LOCAL_RANK when helpers.device() says cuda, else gloo on the CPU. Raises LaunchError,
    with the fix in its message, when the script was not started by torchrun, when fewer than
    min_world_size processes were started, or when MASTER_PORT is taken by another program.
    """
    from helpers.core.device import device as book_device

    missing = [k for k in TORCHRUN_VARS if k not in os.environ]
    if missing:
        raise LaunchError(
            f"{', '.join(missing)} not set: start this script with torchrun, e.g. "
            f"python -m torch.distributed.run --standalone --nproc_per_node=2 {sys.argv[0]}"
        )
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    if world < min_world_size:
        raise LaunchError(
            f"WORLD_SIZE={world}: data-parallel training needs at least {min_world_size} "
            f"processes; launch with --nproc_per_node={min_world_size} (or more)"
        )
    dev = book_device()
    if dev.type == "cuda":
        dev = torch.device("cuda", local_rank)  # one GPU per process on this machine
        torch.cuda.set_device(dev)
    elif dev.type != "cpu":
        raise LaunchError(f"DDP here runs on cpu (gloo) or cuda (nccl), not {dev.type}")
    backend = "nccl" if dev.type == "cuda" else "gloo"
    addr, port = os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]
    try:
        dist.init_process_group(backend, timeout=dt.timedelta(seconds=timeout_s))
    except RuntimeError as err:  # torch's DistNetworkError and DistStoreError are RuntimeErrors
        text = str(err)
        if "EADDRINUSE" in text or "address already in use" in text.lower():
            raise LaunchError(
                f"MASTER_PORT={port} on {addr} is already in use by another program: pick a "
                "free port (--master_port), or let torchrun pick one (--standalone)"
            ) from None
        raise LaunchError(
            f"rank {rank} could not join the process group at {addr}:{port} "
            f"({type(err).__name__}: {text.splitlines()[0] if text else ''})"
        ) from err
    return DistInfo(rank, world, local_rank, dev)


def current() -> DistInfo:
    """This process's DistInfo: from the process group if one is running, else one process."""
    if dist.is_available() and dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        dev = torch.device("cuda", local_rank) if dist.get_backend() == "nccl" else None
        return DistInfo(rank, world, local_rank, dev or torch.device("cpu"))
    return DistInfo(0, 1, 0, torch.device("cpu"))


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """Sum t over all ranks, in place; every rank gets the result. One process: t unchanged."""
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def rank_batches(
    n: int, batch_size: int, world_size: int, rank: int, seed: int, epoch: int
) -> list:
    """The index batches rank `rank` trains on in epoch `epoch`. Built in chapter 23.

    batch_size is the global batch; each rank gets batch_size // world_size of it.
    DistributedSampler shuffles 0..n-1 with the generator seeded seed + epoch (the same
    permutation on every rank: set_epoch changes it from one epoch to the next) and gives rank r
    the positions r, r + world_size, r + 2 world_size, ... of it. Global batch k is then the
    k-th run of batch_size positions of that permutation, whatever the world size.
    """
    if batch_size % world_size:
        raise ValueError(f"batch_size={batch_size} is not divisible by world_size={world_size}")
    sampler = DistributedSampler(
        range(n), num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=True
    )
    sampler.set_epoch(epoch)
    idx = torch.tensor(list(sampler))
    per_rank = batch_size // world_size
    return [idx[i : i + per_rank] for i in range(0, idx.numel() - per_rank + 1, per_rank)]


def trimmed(src: torch.Tensor, tgt: torch.Tensor):
    """Cut the columns that are padding in every row (padding is trailing)."""
    src_len, tgt_len = (src != PAD_ID).sum(1), (tgt != PAD_ID).sum(1)
    return src[:, : int(src_len.max())], tgt[:, : int(tgt_len.max())]


def summed_loss(model, src: torch.Tensor, tgt: torch.Tensor, label_smoothing: float = 0.0):
    """(cross-entropy summed over the real target tokens, logits, tgt_out) of one batch."""
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
    logits = model(src, tgt_in)
    return token_loss(logits, tgt_out, label_smoothing, reduction="sum"), logits, tgt_out


def dropout_seed(seed: int, rank: int) -> int:
    """The seed of rank `rank`'s own random stream (dropout masks) after the shared init.

    Rank 0 keeps the stream build_model left it (None: not reseeded), so one process draws
    exactly what helpers.train_reversal draws; rank r > 0 gets a seed of its own, so no two
    ranks apply the same dropout masks to their different rows."""
    return None if rank == 0 else 1_000_003 * rank + seed


def seed_rank_stream(cfg: TrainConfig, rank: int) -> int:
    """Reseed torch's global generator for this rank's dropout masks; returns its seed
    (torch.initial_seed()). Call it after the model is built from cfg.seed: the weights are
    the same on every rank, the masks are not."""
    seed = dropout_seed(cfg.seed, rank)
    if seed is not None:
        torch.manual_seed(seed)
    return torch.initial_seed()


def wrap(model, info: DistInfo, bucket_cap_mb: float | None = None):
    """The model as this process trains it: DistributedDataParallel when there are several
    processes (it broadcasts rank 0's weights, then all-reduces the gradients in buckets during
    backward), the model itself when there is one."""
    model = model.to(info.device)
    if info.world_size == 1:
        return model
    kwargs = {} if bucket_cap_mb is None else {"bucket_cap_mb": bucket_cap_mb}
    device_ids = [info.device.index] if info.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids, **kwargs)


def step_keeping_grads(model, opt, sched, loss) -> dict:
    """update(loss, opt, sched); returns a copy, by parameter name, of the gradients its
    optimizer step used (under DDP: after backward's all-reduce), taken just before that step
    (a fused Adam under a GradScaler rewrites the gradients in place)."""
    kept = {}

    def keep(optimizer, args, kwargs):
        kept.update({k: p.grad.detach().clone() for k, p in model.named_parameters()})

    handle = opt.register_step_pre_hook(keep)
    try:
        update(loss, opt, sched)
    finally:
        handle.remove()
    return kept


def one_step_ddp(cfg: TrainConfig, src: torch.Tensor, tgt: torch.Tensor):
    """One training step on the global batch (src, tgt), each rank taking its equal share of
    rows. Built in chapter 23.

    The loss of each rank is its summed token loss divided by the global number of real tokens
    (all-reduced) and multiplied by the world size: DDP averages the gradients over the ranks,
    so the gradient is then exactly that of the mean token loss over the whole batch, what one
    process computes with F.cross_entropy on all rows. Returns (model, the gradients after the
    all-reduce as a dict, the global mean loss).
    """
    info = current()
    n = src.size(0)
    if n % info.world_size:
        raise ValueError(f"the batch has {n} rows, not divisible by {info.world_size} ranks")
    per = n // info.world_size
    rows = slice(info.rank * per, (info.rank + 1) * per)
    s, t = (x.to(info.device) for x in trimmed(src[rows], tgt[rows]))
    model = build_model(cfg)
    net = wrap(model, info)
    opt, sched = make_optimizer(model, cfg)
    loss_sum, _, tgt_out = summed_loss(net, s, t, cfg.label_smoothing)
    counts = all_reduce_sum(torch.stack([(tgt_out != PAD_ID).sum().double(), loss_sum.detach()]))
    loss = loss_sum * (info.world_size / float(counts[0]))
    grads = step_keeping_grads(model, opt, sched, loss)
    return model, grads, float(counts[1] / counts[0])


def one_step_single(cfg: TrainConfig, src: torch.Tensor, tgt: torch.Tensor):
    """One training step of one process on the whole batch, written as helpers.train_reversal
    writes it (mean token cross-entropy). Returns (model, gradients, loss). Chapter 23 compares
    it with one_step_ddp."""
    s, t = trimmed(src, tgt)
    model = build_model(cfg)
    opt, sched = make_optimizer(model, cfg)
    loss = token_loss(model(s, t[:, :-1]), t[:, 1:], cfg.label_smoothing)
    grads = step_keeping_grads(model, opt, sched, loss)
    return model, grads, float(loss.detach())


def record_timeline(net, model, timeline: list) -> None:
    """Append (kind, what, time) to timeline during backward: ("grad", name, t) when a
    parameter's gradient is complete, ("bucket", [names], t) when DDP hands a bucket of
    gradients to the all-reduce (a communication hook that then does DDP's usual averaging)."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    names = {id(p): n for n, p in model.named_parameters()}
    for n, p in model.named_parameters():
        p.register_post_accumulate_grad_hook(
            lambda _, n=n: timeline.append(("grad", n, time.perf_counter()))
        )
    if isinstance(net, DistributedDataParallel):

        def hook(state, bucket):
            params = [names[id(q)] for q in bucket.parameters()]
            timeline.append(("bucket", params, time.perf_counter()))
            return allreduce_hook(state, bucket)

        net.register_comm_hook(None, hook)


def bucket_demo(cfg: TrainConfig, src, tgt, bucket_cap_mb: float, iterations: int = 2) -> list:
    """Forward and backward passes (no optimizer step) of the DDP model with buckets of at most
    bucket_cap_mb MiB; for each pass, the buckets in the order their all-reduce started
    (bucket_timeline). Built in chapter 23: in torch 2.13, DDP puts every gradient in one bucket
    for the first pass and rebuilds the buckets, in the order the gradients arrived, after it."""
    info = current()
    per = src.size(0) // info.world_size
    rows = slice(info.rank * per, (info.rank + 1) * per)
    s, t = (x.to(info.device) for x in trimmed(src[rows], tgt[rows]))
    model = build_model(cfg)
    net = wrap(model, info, bucket_cap_mb)
    timeline, out = [], []
    record_timeline(net, model, timeline)
    for _ in range(iterations):
        timeline.clear()
        loss_sum, _, tgt_out = summed_loss(net, s, t)
        loss = loss_sum / (tgt_out != PAD_ID).sum()
        model.zero_grad(set_to_none=True)
        timeline.append(("backward", None, time.perf_counter()))
        loss.backward()
        out.append(bucket_timeline(timeline))
    return out


def bucket_timeline(timeline: list) -> list:
    """The buckets of a record_timeline run in launch order: for each, its parameters, the
    milliseconds since backward began, and how many gradients were still to come then."""
    start = next(t for kind, _, t in timeline if kind == "backward")
    grads = [t for kind, _, t in timeline if kind == "grad"]
    out = []
    for kind, what, t in timeline:
        if kind == "bucket":
            out.append(
                {
                    "params": what,
                    "ms": round(1000 * (t - start), 2),
                    "grads_still_to_come": sum(g > t for g in grads),
                }
            )
    return out


@restores_mode
def sharded_exact_match(model, src, tgt, info: DistInfo, greedy: bool = False) -> float:
    """Exact match on (src, tgt), each rank scoring every world_size-th sequence; the counts are
    summed over the ranks, so every rank gets the same number. greedy=False: teacher-forced
    (the same number as greedy, in one forward pass; see helpers.teacher_forced_exact_match).
    Scores in eval mode, then gives back the caller's mode."""
    s, t = src[info.rank :: info.world_size], tgt[info.rank :: info.world_size]
    s, t = s.to(info.device), t.to(info.device)
    model.eval()
    with torch.no_grad():
        if greedy:
            correct = sequences_equal(greedy_decode(model, s), t).sum()
        else:
            s, t = trimmed(s, t)
            correct = sequence_correct(model(s, t[:, :-1]), t[:, 1:]).sum()
    counts = torch.tensor([float(correct), float(s.size(0))], dtype=torch.float64)
    counts = all_reduce_sum(counts.to(info.device))
    return float(counts[0] / counts[1])


@dataclass
class DDPResult:
    """What train_reversal_ddp returns on every rank. Used in chapter 23."""

    model: torch.nn.Module
    config: TrainConfig
    rank: int
    world_size: int
    # per step: "step", "loss" (mean over the global batch), "rank_loss" (one list per rank);
    # per evaluation: "eval_step", "exact_match"
    history: dict = field(default_factory=dict)
    seconds: float = 0.0
    step_seconds: float = 0.0  # mean wall time of one training step (evaluations excluded)
    checkpoint: str | None = None
    stream_seed: int = 0  # the seed of this rank's dropout stream (seed_rank_stream)


def train_reversal_ddp(
    cfg: TrainConfig,
    checkpoint: str | Path | None = None,
    log_every: int = 0,
    confirm: bool = True,
    log=print,
) -> DDPResult:
    """Train the reversal model data-parallel on every process of the group. Chapter 23.

    Every rank builds the same model from cfg.seed (DDP would broadcast rank 0's weights
    anyway); every rank but rank 0 then reseeds its own stream for dropout masks
    (seed_rank_stream). Each draws its share of each global batch of cfg.batch_size sequences
    from rank_batches, and takes the same Adam step with the all-reduced gradient. Per step, one
    small all-reduce also sums the token count, the summed loss, each rank's own mean loss and
    the exactly-right sequences, so that every rank normalises the loss by the global token
    count and decides the evaluation gate the same way. Evaluations are sharded
    (sharded_exact_match) and every rank stops at the same step. Only rank 0 logs (every
    log_every steps) and writes the checkpoint. Without a process group it is one process.
    """
    info = current()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    t0 = time.perf_counter()
    model = build_model(cfg)
    net = wrap(model, info)
    stream_seed = seed_rank_stream(cfg, info.rank)
    src_train, tgt_train = make_reversal_dataset(cfg.train_size, seed=cfg.data_seed)
    src_val, tgt_val = make_reversal_dataset(cfg.val_size, seed=cfg.val_seed)
    src_eval, tgt_eval = src_val[: cfg.eval_size], tgt_val[: cfg.eval_size]
    score = functools.partial(sharded_exact_match, model, src_eval, tgt_eval, info)
    opt, sched = make_optimizer(model, cfg)
    W = info.world_size
    hist = {"step": [], "loss": [], "rank_loss": [], "batch_exact": [], "lr": []}
    hist.update(eval_step=[], exact_match=[])
    step, epoch, batches = 0, 0, []
    train_s = 0.0
    net.train()
    while step < cfg.max_steps:
        if not batches:  # a new epoch: set_epoch reshuffles, the same way on every rank
            batches = rank_batches(cfg.train_size, cfg.batch_size, W, info.rank, cfg.seed, epoch)
            epoch += 1
        t_step = time.perf_counter()
        idx = batches.pop(0)
        s, t = trimmed(src_train[idx], tgt_train[idx])
        s, t = s.to(info.device), t.to(info.device)
        loss_sum, logits, tgt_out = summed_loss(net, s, t, cfg.label_smoothing)
        n_tok = (tgt_out != PAD_ID).sum()
        with torch.no_grad():
            stats = torch.zeros(3 + W, dtype=torch.float64, device=info.device)
            stats[0], stats[1] = n_tok, loss_sum.detach()
            stats[2] = sequence_correct(logits, tgt_out).sum()
            stats[3 + info.rank] = loss_sum.detach() / n_tok
        stats = all_reduce_sum(stats)
        loss = loss_sum * (W / float(stats[0]))
        update(loss, opt, sched)  # its backward all-reduces the gradients, bucket by bucket
        step += 1
        train_s += time.perf_counter() - t_step
        batch_exact = float(stats[2]) / cfg.batch_size
        record(
            hist,
            step=step,
            loss=float(stats[1] / stats[0]),
            rank_loss=[round(float(x), 5) for x in stats[3:]],
            batch_exact=batch_exact,
            lr=sched.get_last_lr()[0],
        )
        if info.is_main and log_every and step % log_every == 0:
            ranks = ", ".join(f"rank {r} {x:.3f}" for r, x in enumerate(hist["rank_loss"][-1]))
            log(f"step {step:4d}  loss {hist['loss'][-1]:.3f}  ({ranks})")
        if evaluation_due(cfg, step, batch_exact, cfg.max_steps):
            em, done = evaluate_and_confirm(cfg, score, confirm)  # sharded over the ranks
            record(hist, eval_step=step, exact_match=em)
            if done:
                break
    model.eval()
    path = None
    if checkpoint is not None:
        path = save_on_rank0(
            model, cfg, checkpoint, info, history=hist, seconds=time.perf_counter() - t0
        )
    return DDPResult(
        model,
        cfg,
        info.rank,
        W,
        hist,
        time.perf_counter() - t0,
        train_s / max(step, 1),
        path,
        stream_seed,
    )


def save_on_rank0(
    model,
    cfg: TrainConfig,
    path: str | Path,
    info: DistInfo | None = None,
    history: dict | None = None,
    seconds: float = 0.0,
):
    """Rank 0 writes the model's weights as a checkpoint that `load_checkpoint(path, cfg)`
    reads (the format of chapter 10's cache, written atomically); the other ranks wait at a
    barrier until the file is complete. Returns the path on rank 0 and None elsewhere. A
    DistributedDataParallel wrapper is taken off first. Built in chapter 23.

    Every replica holds the same weights, so one copy is enough; several ranks writing one file
    at once could interleave their bytes.
    """
    from helpers.training.checkpoints import save_checkpoint
    from helpers.training.train import TrainResult

    info = info or current()
    written = None
    if info.is_main:
        inner = getattr(model, "module", model)
        cpu = build_model(cfg)
        cpu.load_state_dict({k: v.detach().cpu() for k, v in inner.state_dict().items()})
        save_checkpoint(TrainResult(cpu, cfg, dict(history or {}), float(seconds)), Path(path))
        written = str(path)
    if info.world_size > 1 and dist.is_initialized():
        dist.barrier()
    return written


def shell(cmd: list) -> str:
    """A command list as one line to paste into a terminal."""
    return " ".join(shlex.quote(c) for c in cmd)


def replicas_max_diff(model) -> float:
    """The largest |difference| between this rank's parameters and rank 0's (0.0 when every
    replica holds the same weights). Every rank must call it. Used in chapter 23."""
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    if current().world_size == 1:
        return 0.0
    ref = flat.clone()
    dist.broadcast(ref, src=0)
    diff = (flat - ref).abs().max().reshape(1)
    dist.all_reduce(diff, op=dist.ReduceOp.MAX)
    return float(diff)
