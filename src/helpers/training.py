"""Training the reversal model: one function, a progress bar, and a checkpoint cache."""

import dataclasses
import hashlib
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from .data import make_reversal_dataset
from .decoding import exact_match
from .model import Transformer, apply_default_init
from .schedule import noam_lambda
from .vocab import PAD_ID, VOCAB_SIZE

CHECKPOINT_FORMAT = 1  # bump when the training code changes what a config produces


@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines the trained weights. Same config -> same checkpoint."""

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
    lr_scale: float = 1.0  # multiplies the Noam factor
    label_smoothing: float = 0.0
    max_steps: int = 3130  # 10 epochs of 20000 / 64
    eval_every: int = 313
    eval_size: int = 1000  # validation sequences used by the periodic evaluation
    target_exact_match: float | None = None  # stop once validation exact match reaches it
    seq_len: int = 14  # max_len of the model = 12 digits + <bos>/<eos>

    def key(self) -> str:
        blob = json.dumps({"format": CHECKPOINT_FORMAT, **dataclasses.asdict(self)}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass
class TrainResult:
    model: Transformer
    config: TrainConfig
    history: dict = field(default_factory=dict)  # lists: step, loss, token_acc, lr; eval_step, exact_match
    seconds: float = 0.0
    from_cache: bool = False


def build_model(cfg: TrainConfig) -> Transformer:
    torch.manual_seed(cfg.seed)
    model = Transformer(VOCAB_SIZE, VOCAB_SIZE, d_model=cfg.d_model, num_heads=cfg.num_heads, dff=cfg.dff,
                        num_layers=cfg.num_layers, max_len=cfg.seq_len, dropout=cfg.dropout)
    if cfg.init == "default":
        apply_default_init(model)
    elif cfg.init != "fixed":
        raise ValueError(f"init must be 'fixed' or 'default', got {cfg.init!r}")
    return model


def train_reversal(cfg: TrainConfig = TrainConfig(), progress: bool = True) -> TrainResult:
    """Train a reversal model from scratch with teacher forcing, Adam and the Noam schedule."""
    from tqdm.auto import tqdm

    model = build_model(cfg)
    src_train, tgt_train = make_reversal_dataset(cfg.train_size, seed=cfg.data_seed)
    src_val, tgt_val = make_reversal_dataset(cfg.val_size, seed=cfg.val_seed)
    src_eval, tgt_eval = src_val[:cfg.eval_size], tgt_val[:cfg.eval_size]
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr_scale, betas=(0.9, 0.98), eps=1e-9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, noam_lambda(cfg.d_model, cfg.warmup))
    gen = torch.Generator().manual_seed(cfg.seed)
    hist = {k: [] for k in ("step", "loss", "token_acc", "lr", "eval_step", "exact_match", "seconds")}

    t0, step, order, pos = time.perf_counter(), 0, None, cfg.train_size
    bar = tqdm(total=cfg.max_steps, desc="training", disable=not progress, mininterval=0.5)
    while step < cfg.max_steps:
        if pos + cfg.batch_size > cfg.train_size:  # new epoch: reshuffle, drop the last partial batch
            order, pos = torch.randperm(cfg.train_size, generator=gen), 0
        idx = order[pos:pos + cfg.batch_size]
        pos += cfg.batch_size
        src, tgt = src_train[idx], tgt_train[idx]
        tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]  # teacher forcing: shift by one
        model.train()
        logits = model(src, tgt_in)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt_out.reshape(-1),
                               ignore_index=PAD_ID, label_smoothing=cfg.label_smoothing)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        step += 1
        with torch.no_grad():
            real = tgt_out != PAD_ID
            acc = ((logits.argmax(-1) == tgt_out) & real).sum().item() / real.sum().item()
        hist["step"].append(step)
        hist["loss"].append(loss.item())
        hist["token_acc"].append(acc)
        hist["lr"].append(sched.get_last_lr()[0])
        bar.update(1)
        if step % cfg.eval_every == 0 or step == cfg.max_steps:
            em = exact_match(model, src_eval, tgt_eval)
            hist["eval_step"].append(step)
            hist["exact_match"].append(em)
            hist["seconds"].append(time.perf_counter() - t0)
            bar.set_postfix(loss=f"{loss.item():.3f}", exact_match=f"{em:.3f}")
            if cfg.target_exact_match is not None and em >= cfg.target_exact_match:
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

    A crash mid-write leaves at most a stray temporary file, never a half-written
    checkpoint under the final name.
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
    """Load and validate; raises ValueError (or torch's error) on anything unexpected."""
    payload = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path} is not a format-{CHECKPOINT_FORMAT} checkpoint")
    if payload.get("config") != dataclasses.asdict(cfg):
        raise ValueError(f"{path} was trained with a different config")
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


# The recipe the book trains with (the training chapter derives and measures it).
BOOK_RECIPE = TrainConfig(d_model=64, dff=256, batch_size=128, warmup=200, lr_scale=2.0, max_steps=2000,
                          eval_every=100, target_exact_match=0.995)


def trained_reversal_model(progress: bool = True, verbose: bool = True) -> Transformer:
    """The book's trained reversal model (cached after the first call), in eval mode."""
    return load_or_train(BOOK_RECIPE, progress=progress, verbose=verbose).model


def default_init_recipe(recipe: TrainConfig = BOOK_RECIPE) -> TrainConfig:
    """The same recipe with PyTorch's default initialisation (the 'learns slowly' model)."""
    return dataclasses.replace(recipe, init="default")


def trained_default_init_model(progress: bool = True, verbose: bool = True) -> Transformer:
    """The badly initialised model trained on the same budget as the book's (cached)."""
    return load_or_train(default_init_recipe(), progress=progress, verbose=verbose).model
