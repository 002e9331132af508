"""Which device the book trains on. Described in the appendix "How the book checks itself".

`load_or_train` (chapter 10 on) and `gpt.train_gpt` (chapter 14) train on it when no device
is passed, `init_distributed` (chapter 23) picks a GPU or the CPU with it, and chapter 10's
bfloat16 example reads it.
The book's stored outputs are made on the CPU, so cpu is the default. A reader with a GPU
or Apple silicon opts in with an environment variable:

    TRANSFORMER_BOOK_DEVICE=cuda make lab     # or mps, or cuda:1

Asking for a device that is not there is an error that says so, never a silent fallback.
"""

import os

import torch

ENV_VAR = "TRANSFORMER_BOOK_DEVICE"


def device(name: str | None = None) -> torch.device:
    """Used from chapter 10 on. The device named by `name`, else by $TRANSFORMER_BOOK_DEVICE,
    else cpu.

    Raises ValueError for an unknown name and RuntimeError for a device this machine lacks.
    """
    name = (name or os.environ.get(ENV_VAR) or "cpu").strip().lower()
    try:
        dev = torch.device(name)
    except RuntimeError as err:
        raise ValueError(
            f"{ENV_VAR}={name!r} is not a device name: use cpu, cuda, cuda:N or mps"
        ) from err
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"{ENV_VAR} asks for {name!r}, but this PyTorch sees no CUDA GPU")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise RuntimeError(f"{name!r} does not exist: {torch.cuda.device_count()} CUDA device(s)")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise RuntimeError(f"{ENV_VAR} asks for 'mps', but Apple's Metal backend is not available")
    if dev.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"{ENV_VAR}={name!r}: the book supports cpu, cuda and mps")
    return dev
