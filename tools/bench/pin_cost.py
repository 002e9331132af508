#!/usr/bin/env python3
"""What the book's pinned numerics cost: one training step of two of the book's models, timed
with the pin and with PyTorch's default kernels, each in a fresh one-thread process.

    .venv/bin/python tools/bench/pin_cost.py

Prints the median of 12 steps (after 3 warm-up steps) of the book's model (BOOK_RECIPE) and of
chapter 18's (SHARP_ATTENTION_RECIPE), on a batch of 128 sequences. Run it on an idle machine.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src" / "helpers" / "repro"))
from pin import PIN, PIN_VARS  # noqa: E402

STEP = """
import json, time, torch, torch.nn.functional as F
from helpers import BOOK_RECIPE, SHARP_ATTENTION_RECIPE, PAD_ID, VOCAB_SIZE, make_reversal_dataset
from helpers.training.train import build_model
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
print(json.dumps(out))
"""


def step_ms(env: dict) -> dict:
    env = {**env, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [sys.executable, "-c", STEP], env=env, capture_output=True, text=True, check=True
    )
    times = json.loads(proc.stdout.strip().splitlines()[-1])
    return {k: 1e3 * statistics.median(v) for k, v in times.items()}


def main() -> int:
    pinned = step_ms({**os.environ, **PIN})
    default = step_ms({k: v for k, v in os.environ.items() if k not in PIN_VARS})
    for name in pinned:
        ratio = pinned[name] / default[name]
        print(
            f"{name:>6} model, one training step: pinned {pinned[name]:6.1f} ms, "
            f"PyTorch's defaults {default[name]:6.1f} ms ({ratio:.2f}x)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
