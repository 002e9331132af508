"""What the book's pinned numerics cost: one training step of two of the book's models, timed
with the pin and with PyTorch's default kernels, each in a fresh one-thread process.

    .venv/bin/python -m tools.bench.pin_cost

Prints the median of 12 steps (after 3 warm-up steps) of the book's model (BOOK_RECIPE) and of
chapter 21's (SHARP_ATTENTION_RECIPE), on a batch of 128 sequences. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from helpers import BOOK_RECIPE, PAD_ID, SHARP_ATTENTION_RECIPE, VOCAB_SIZE, make_reversal_dataset
from helpers.training.train import build_model
from tools.common import pin_env, run_fresh


def step_seconds() -> dict[str, list[float]]:
    """Seconds of each of 15 training steps, less the 3 warm-up steps, per model (run_fresh runs
    it in a process of its own: the pin is read when torch loads)."""
    src, tgt = make_reversal_dataset(128, seed=0)
    out = {}
    for name, cfg in (("book", BOOK_RECIPE), ("sharp", SHARP_ATTENTION_RECIPE)):
        torch.manual_seed(0)
        model = build_model(cfg)
        opt = torch.optim.Adam(model.parameters(), 1e-4)
        times = []
        for _ in range(15):
            t = time.perf_counter()
            logits = model(src, tgt[:, :-1])
            loss = F.cross_entropy(
                logits.reshape(-1, VOCAB_SIZE), tgt[:, 1:].reshape(-1), ignore_index=PAD_ID
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
            times.append(time.perf_counter() - t)
        out[name] = times[3:]
    return out


def step_ms(mode: str) -> dict[str, float]:
    """The median step of each model in milliseconds, in a fresh one-thread process."""
    env = {**pin_env(mode), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    times = run_fresh(step_seconds, env=env)
    return {k: 1e3 * statistics.median(v) for k, v in times.items()}


def main() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    pinned, default = step_ms("pinned"), step_ms("default")
    for name in pinned:
        ratio = pinned[name] / default[name]
        print(
            f"{name:>6} model, one training step: pinned {pinned[name]:6.1f} ms, "
            f"PyTorch's defaults {default[name]:6.1f} ms ({ratio:.2f}x)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
