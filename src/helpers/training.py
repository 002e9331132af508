"""Training the reversal model: one function, a progress bar, and a checkpoint cache.

train_reversal(cfg)   trains from scratch (teacher forcing, Adam, the Noam schedule) and
                      returns the model with its history;
load_or_train(cfg)    returns the cached checkpoint for cfg when a valid one exists, and
                      otherwise trains and writes one atomically;
BOOK_RECIPE           the fast CPU recipe the book trains with (chapter 10 measures it);
SEED_RECIPE           the reference chapter's recipe, for comparison.
"""

import dataclasses
import hashlib
import json
import os
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from .data import make_reversal_dataset
from .decoding import exact_match
from .model import Transformer, apply_default_init
from .schedule import noam_lambda
from .vocab import EOS_ID, PAD_ID, VOCAB_SIZE

CHECKPOINT_FORMAT = 2  # bump when the training code changes what a config produces


@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines the trained weights. Same config -> same checkpoint.

    The defaults are the reference chapter's recipe (SEED_RECIPE); BOOK_RECIPE is the fast one.
    """

    d_model: int = 128
    num_heads: int = 4
    dff: int = 512
    num_layers: int = 2
    dropout: float = 0.1
    init: str = "fixed"  # "fixed": scaled embeddings + Xavier; "default": PyTorch defaults
    train_size: int = 20000
    val_size: int = 1000
    data_seed: int = 0
    val_seed: int = 1
    seed: int = 0
    batch_size: int = 64
    warmup: int = 1000
    lr_scale: float = 1.0  # multiplies the Noam factor: peak lr = lr_scale * d^-0.5 * warmup^-0.5
    cooldown: int = 0  # the last `cooldown` steps before max_steps ramp the lr linearly down to 0
    label_smoothing: float = 0.0
    max_steps: int = 3120  # 10 epochs of 312 full batches of 64
    eval_every: int = 312  # steps between evaluations on the validation set (312 = one epoch)
    eval_gate: float = 0.0  # evaluate only when the training batch is at least this exactly right
    eval_size: int = 1000  # validation sequences used by the periodic evaluation
    target_exact_match: float | None = None  # stop once validation exact match reaches it
    seq_len: int = 14  # max_len of the model = 12 digits + <bos>/<eos>
    threads: int = 0  # torch threads while training; 0 leaves torch's default (thread count
    #                   changes the order of float sums, hence the low bits of the weights)
    bucket: int = 0  # 0: shuffled batches; n: sort every n batches' worth of sequences by length
    bf16: bool = False  # run the forward pass under torch.autocast("cpu", bfloat16)
    compile: bool = False  # torch.compile the model for the training steps

    def key(self) -> str:
        blob = json.dumps({"format": CHECKPOINT_FORMAT, **dataclasses.asdict(self)}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass
class TrainResult:
    model: Transformer
    config: TrainConfig
    # per step: step, loss, token_acc, lr; per evaluation: eval_step, exact_match, seconds
    history: dict = field(default_factory=dict)
    seconds: float = 0.0
    from_cache: bool = False


def build_model(cfg: TrainConfig) -> Transformer:
    """The untrained model for cfg (seeded: the same cfg gives the same initial weights)."""
    torch.manual_seed(cfg.seed)
    model = Transformer(VOCAB_SIZE, VOCAB_SIZE, d_model=cfg.d_model, num_heads=cfg.num_heads, dff=cfg.dff,
                        num_layers=cfg.num_layers, max_len=cfg.seq_len, dropout=cfg.dropout)
    if cfg.init == "default":
        apply_default_init(model)
    elif cfg.init != "fixed":
        raise ValueError(f"init must be 'fixed' or 'default', got {cfg.init!r}")
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


def sequence_correct(logits: torch.Tensor, tgt_out: torch.Tensor) -> torch.Tensor:
    """bool [B]: the argmax is right at every position up to and including the target's <eos>."""
    is_eos = (tgt_out == EOS_ID).long()
    upto_eos = (is_eos.cumsum(1) - is_eos) == 0
    return ((logits.argmax(-1) == tgt_out) | ~upto_eos).all(dim=1)


def teacher_forced_exact_match(model, src: torch.Tensor, tgt: torch.Tensor, batch_size: int = 1000) -> float:
    """Fraction of sequences whose teacher-forced argmax is right at every position up to <eos>.

    This is the same number as greedy exact match (helpers.exact_match): while every argmax
    is right, greedy decoding feeds itself exactly the prefix that teacher forcing feeds, and
    at the first wrong argmax both go wrong. It costs one batched forward pass instead of
    one decoder pass per output token.
    """
    was_training = model.training
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, src.size(0), batch_size):
            s, t = src[i:i + batch_size], tgt[i:i + batch_size]
            correct += int(sequence_correct(model(s, t[:, :-1]), t[:, 1:]).sum())
    model.train(was_training)
    return correct / max(src.size(0), 1)


def epoch_batches(lengths: torch.Tensor, batch_size: int, bucket: int, gen: torch.Generator) -> list:
    """One epoch of index batches (full batches only).

    bucket=0: a random permutation cut into batches. bucket=n: the permutation is cut into
    runs of n * batch_size sequences, each run is sorted by length before it is cut into
    batches, and the batches are shuffled; a batch then holds sequences of about the same
    length, so trimming its padding columns saves work.
    """
    n = lengths.numel()
    perm = torch.randperm(n, generator=gen)
    if bucket <= 0:
        return [perm[i:i + batch_size] for i in range(0, n - batch_size + 1, batch_size)]
    batches = []
    for i in range(0, n, bucket * batch_size):
        run = perm[i:i + bucket * batch_size]
        run = run[torch.argsort(lengths[run], stable=True)]
        batches += [run[j:j + batch_size] for j in range(0, run.numel() - batch_size + 1, batch_size)]
    order = torch.randperm(len(batches), generator=gen).tolist()
    return [batches[k] for k in order]


def train_reversal(cfg: TrainConfig = TrainConfig(), progress: bool = True, confirm: bool = True) -> TrainResult:
    """Train a reversal model from scratch with teacher forcing, Adam and the Noam schedule.

    Every cfg.eval_every steps (when the training batch just scored is at least cfg.eval_gate
    exactly right) the model is scored on the first cfg.eval_size validation sequences with
    teacher_forced_exact_match, one forward pass. With a target, training stops at the first
    evaluation that reaches it, once greedy decoding (exact_match) has confirmed the score
    (confirm=True); the history then records the greedy score. The last step is always evaluated.

    history: per step "step", "loss", "token_acc" (teacher-forced, on the training batch),
    "batch_exact" (the batch's share of sequences right at every position), "lr"; per
    evaluation "eval_step", "exact_match", "seconds" (since the start).
    """
    from tqdm.auto import tqdm

    threads = torch.get_num_threads()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    try:
        return _train(cfg, progress, confirm, tqdm)
    finally:
        torch.set_num_threads(threads)


def _train(cfg: TrainConfig, progress: bool, confirm: bool, tqdm) -> TrainResult:
    t0 = time.perf_counter()
    model = build_model(cfg)
    src_train, tgt_train = make_reversal_dataset(cfg.train_size, seed=cfg.data_seed)
    src_val, tgt_val = make_reversal_dataset(cfg.val_size, seed=cfg.val_seed)
    src_eval, tgt_eval = src_val[:cfg.eval_size], tgt_val[:cfg.eval_size]
    src_len, tgt_len = (src_train != PAD_ID).sum(1), (tgt_train != PAD_ID).sum(1)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr_scale, betas=(0.9, 0.98), eps=1e-9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor(cfg))
    gen = torch.Generator().manual_seed(cfg.seed)
    hist = {k: [] for k in ("step", "loss", "token_acc", "batch_exact", "lr", "eval_step", "exact_match",
                            "seconds")}
    forward = torch.compile(model) if cfg.compile else model
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if cfg.bf16 else nullcontext

    step, batches = 0, []
    bar = tqdm(total=cfg.max_steps, desc="training", disable=not progress, mininterval=0.5)
    model.train()
    while step < cfg.max_steps:
        if not batches:  # a new epoch
            batches = epoch_batches(src_len, cfg.batch_size, cfg.bucket, gen)
        idx = batches.pop()
        # padding is trailing: cut the columns that are padding in every row of the batch
        src = src_train[idx, :int(src_len[idx].max())]
        tgt = tgt_train[idx, :int(tgt_len[idx].max())]
        tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]  # teacher forcing: shift by one
        with autocast():
            logits = forward(src, tgt_in)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), tgt_out.reshape(-1),
                               ignore_index=PAD_ID, label_smoothing=cfg.label_smoothing)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        step += 1
        with torch.no_grad():  # free statistics of the batch just seen (before this update)
            real = tgt_out != PAD_ID
            acc = ((logits.argmax(-1) == tgt_out) & real).sum().item() / real.sum().item()
            batch_exact = sequence_correct(logits, tgt_out).float().mean().item()
        hist["step"].append(step)
        hist["loss"].append(loss.item())
        hist["token_acc"].append(acc)
        hist["batch_exact"].append(batch_exact)
        hist["lr"].append(sched.get_last_lr()[0])
        bar.update(1)
        due = step % cfg.eval_every == 0 and batch_exact >= cfg.eval_gate
        if due or step == cfg.max_steps:
            em = teacher_forced_exact_match(model, src_eval, tgt_eval)
            done = cfg.target_exact_match is not None and em >= cfg.target_exact_match
            if done and confirm:
                em = exact_match(model, src_eval, tgt_eval)  # greedy decoding with the KV cache
                done = em >= cfg.target_exact_match
                model.train()
            hist["eval_step"].append(step)
            hist["exact_match"].append(em)
            hist["seconds"].append(time.perf_counter() - t0)
            bar.set_postfix(loss=f"{loss.item():.3f}", exact_match=f"{em:.3f}")
            if done:
                break
    bar.close()
    model.eval()
    return TrainResult(model, cfg, hist, time.perf_counter() - t0)


# ---------------------------------------------------------------- checkpoint cache

def default_cache_dir() -> Path:
    """$TRANSFORMER_BOOK_CACHE, else .cache/checkpoints at the repository root."""
    env = os.environ.get("TRANSFORMER_BOOK_CACHE")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / ".cache" / "checkpoints"


def checkpoint_path(cfg: TrainConfig, cache_dir: Path | None = None) -> Path:
    return Path(cache_dir or default_cache_dir()) / f"reversal-{cfg.key()}.pt"


def save_checkpoint(result: TrainResult, path: Path) -> None:
    """Write atomically: a temporary file in the same folder, fsync, then os.replace.

    os.replace is atomic on POSIX and Windows when both names are in the same folder, so a
    reader sees the old file or the complete new one, never a mixture. A crash mid-write
    leaves at most a stray temporary file, never a half-written checkpoint under the final name.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"format": CHECKPOINT_FORMAT, "config": dataclasses.asdict(result.config),
               "state_dict": result.model.state_dict(), "history": result.history,
               "seconds": result.seconds}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def load_checkpoint(path: Path, cfg: TrainConfig) -> TrainResult:
    """Load and validate; raises ValueError (or torch's own error) on anything unexpected.

    weights_only=True: the unpickler accepts tensors and plain containers only, so a file
    from elsewhere cannot run code. A truncated file fails inside torch.load (its zip
    directory is at the end); a file for another config fails the config comparison.
    """
    payload = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{Path(path).name} is not a format-{CHECKPOINT_FORMAT} checkpoint")
    if payload.get("config") != dataclasses.asdict(cfg):
        raise ValueError(f"{Path(path).name} was trained with a different config")
    model = build_model(cfg)
    model.load_state_dict(payload["state_dict"])  # strict: every key, every shape
    model.eval()
    return TrainResult(model, cfg, payload["history"], payload["seconds"], from_cache=True)


def load_or_train(cfg: TrainConfig = TrainConfig(), cache_dir: Path | None = None,
                  progress: bool = True, verbose: bool = True) -> TrainResult:
    """Reuse the checkpoint for cfg when a valid one exists; otherwise train and save it."""
    path = checkpoint_path(cfg, cache_dir)
    if path.exists():
        try:
            result = load_checkpoint(path, cfg)
            if verbose:
                print(f"loaded cached checkpoint {path.name}")
            return result
        except Exception as exc:  # corrupt, truncated, or stale: retrain
            if verbose:
                print(f"checkpoint {path.name} is unusable ({type(exc).__name__}: {exc}); retraining")
    result = train_reversal(cfg, progress=progress)
    save_checkpoint(result, path)
    if verbose:
        print(f"trained in {result.seconds:.1f} s, saved {path.name}")
    return result


# ---------------------------------------------------------------- recipes

# The reference chapter's recipe: d_model 128, batch 64, warmup 1000, dropout 0.1, 10 epochs,
# one evaluation per epoch.
SEED_RECIPE = TrainConfig()

# The recipe the book trains with. Chapter 10 measures each change against SEED_RECIPE
# (tools/bench_training.py): a 60,781-parameter model (d_model 32), no dropout, batch 128, a
# short warmup and a linear cooldown to 0 at step 500, one thread, and a cheap evaluation every
# 10 steps once the training batch is at least 98 % exactly right. It stops at 99.5 %.
BOOK_RECIPE = TrainConfig(d_model=32, num_heads=4, dff=128, num_layers=2, dropout=0.0, batch_size=128,
                          warmup=100, lr_scale=1.0, cooldown=400, max_steps=500, eval_every=10,
                          eval_gate=0.98, target_exact_match=0.995, threads=1)

# Chapter 12 compares initialisations on one fixed budget, with no early stop for either model.
COMPARISON_STEPS = 300


def trained_reversal_model(progress: bool = True, verbose: bool = True) -> Transformer:
    """The book's trained reversal model (cached after the first call), in eval mode."""
    return load_or_train(BOOK_RECIPE, progress=progress, verbose=verbose).model


def fixed_budget_recipe(recipe: TrainConfig = BOOK_RECIPE, init: str = "fixed",
                        steps: int = COMPARISON_STEPS) -> TrainConfig:
    """recipe trained for exactly `steps` steps with the given init: no early stop, an
    evaluation every 20 steps, and (if recipe has a cooldown) the cooldown rescaled so that it
    still starts where the warmup ends."""
    cooldown = steps - recipe.warmup if recipe.cooldown else 0
    return dataclasses.replace(recipe, init=init, max_steps=steps, cooldown=cooldown, target_exact_match=None,
                               eval_every=20, eval_gate=0.0)


def default_init_recipe(recipe: TrainConfig = BOOK_RECIPE) -> TrainConfig:
    """PyTorch's default initialisation, otherwise the book's recipe on the comparison budget."""
    return fixed_budget_recipe(recipe, init="default")


def trained_default_init_model(progress: bool = True, verbose: bool = True) -> Transformer:
    """The badly initialised model, trained for COMPARISON_STEPS steps (cached), in eval mode."""
    return load_or_train(default_init_recipe(), progress=progress, verbose=verbose).model


def trained_fixed_budget_model(progress: bool = True, verbose: bool = True) -> Transformer:
    """Its well initialised twin: same data, seed, schedule and budget, only the init differs."""
    return load_or_train(fixed_budget_recipe(), progress=progress, verbose=verbose).model
