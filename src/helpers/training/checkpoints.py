"""The checkpoint cache: one file per training config, written atomically, reused when valid,
retrained when missing, stale or corrupt; and the book's trained models, served from it.
Explained in the appendix "The checkpoint cache".

load_or_train(cfg)   the cached checkpoint for cfg when a valid one exists; otherwise train,
                     write one atomically, and return it. Concurrent callers for the same
                     config (two notebooks run in parallel) wait for one another through a
                     lock file instead of training twice.
"""

import dataclasses
import os
from contextlib import contextmanager
from pathlib import Path

import torch

from helpers.core.device import device as device_from_env
from helpers.core.model import Transformer
from helpers.repro.numerics import pin_problems
from helpers.repro.paths import cache_dir
from helpers.training.recipes import (
    BOOK_RECIPE,
    CHECKPOINT_FORMAT,
    TrainConfig,
    default_init_recipe,
    fixed_budget_recipe,
)
from helpers.training.train import TrainResult, build_model, train_reversal


def default_cache_dir() -> Path:
    """$TRANSFORMER_BOOK_CACHE, else .cache/checkpoints at the repository root."""
    return cache_dir()


def checkpoint_path(cfg: TrainConfig, cache_dir: Path | None = None, device=None) -> Path:
    """reversal-<key>.pt; a model trained on another device than the CPU gets its own file
    (reversal-<key>-cuda.pt), and so does one trained on the CPU without the book's pinned
    numerics (reversal-<key>-unpinned.pt, helpers.repro.numerics): their weights differ in the last
    bits, and the book's printed outputs come from the pinned CPU's."""
    kind = torch.device(device or "cpu").type
    suffix = "" if kind == "cpu" else f"-{kind}"
    if kind == "cpu" and pin_problems():  # other bits than the pinned kernel's: another model
        suffix = "-unpinned"
    return Path(cache_dir or default_cache_dir()) / f"reversal-{cfg.key()}{suffix}.pt"


def save_checkpoint(result: TrainResult, path: Path) -> None:
    """Write atomically: a temporary file in the same folder, fsync, then os.replace.

    os.replace is atomic on POSIX and Windows when both names are in the same folder, so a
    reader sees the old file or the complete new one, never a mixture. A crash mid-write
    leaves at most a stray temporary file, never a half-written checkpoint under the final name.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "format": CHECKPOINT_FORMAT,
        "config": dataclasses.asdict(result.config),
        "state_dict": result.model.state_dict(),
        "history": result.history,
        "seconds": result.seconds,
    }
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


@contextmanager
def _training_lock(path: Path):
    """Hold an exclusive lock on `path`.lock while a checkpoint is looked up or trained.

    Two notebooks run in parallel (pytest -n 2) may ask for the same model at once: the
    second waits for the first to finish writing, then loads its file. Where fcntl does not
    exist (Windows), there is no lock and both would train: correct, only slower.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def load_or_train(
    cfg: TrainConfig = TrainConfig(),
    cache_dir: Path | None = None,
    progress: bool = True,
    verbose: bool = True,
    device=None,
) -> TrainResult:
    """Reuse the checkpoint for cfg when a valid one exists; otherwise train and save it.

    Used from chapter 10 on; the appendix "The checkpoint cache" explains it. device: where
    to train when training is needed; by default helpers.device() (the CPU unless
    $TRANSFORMER_BOOK_DEVICE asks for cuda or mps). The model comes back on the CPU either
    way, where the chapters' tensors are.
    """
    device = device_from_env() if device is None else torch.device(device)
    path = checkpoint_path(cfg, cache_dir, device)
    with _training_lock(path):
        if path.exists():
            try:
                result = load_checkpoint(path, cfg)
                if verbose:
                    print(f"loaded cached checkpoint {path.name}")
                return result
            except Exception as exc:  # corrupt, truncated, or stale: retrain
                if verbose:
                    reason = f"{type(exc).__name__}: {exc}"
                    print(f"checkpoint {path.name} is unusable ({reason}); retraining")
        result = train_reversal(cfg, progress=progress, device=device)
        result.model.cpu()
        save_checkpoint(result, path)
    if verbose:
        print(f"trained in {result.seconds:.1f} s, saved {path.name}")
    return result


def trained_reversal_model(progress: bool = True, verbose: bool = True) -> Transformer:
    """The book's trained reversal model (cached after the first call), in eval mode.

    Trained in chapter 10 (BOOK_RECIPE); used in chapters 11, 13 and 21.
    """
    return load_or_train(BOOK_RECIPE, progress=progress, verbose=verbose).model


def trained_default_init_model(progress: bool = True, verbose: bool = True) -> Transformer:
    """The badly initialised model, trained for COMPARISON_STEPS steps (cached), in eval mode.

    Built in chapter 12.
    """
    return load_or_train(default_init_recipe(), progress=progress, verbose=verbose).model


def trained_fixed_budget_model(progress: bool = True, verbose: bool = True) -> Transformer:
    """Its well initialised twin: same data, seed, schedule and budget, only the init differs.

    Built in chapter 12.
    """
    return load_or_train(fixed_budget_recipe(), progress=progress, verbose=verbose).model
