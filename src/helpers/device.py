"""Which device the chapters that train or benchmark run on. Introduced in chapter 1.

The book's stored outputs are made on the CPU, so cpu is the default. A reader with a GPU
or Apple silicon opts in with an environment variable:

    TRANSFORMER_BOOK_DEVICE=cuda make lab     # or mps, or cuda:1

Asking for a device that is not there is an error that says so, never a silent fallback.
"""

import os

import torch

ENV_VAR = "TRANSFORMER_BOOK_DEVICE"


def device(name: str | None = None) -> torch.device:
    """Built in chapter 1. The device named by `name`, else by $TRANSFORMER_BOOK_DEVICE, else cpu.

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
