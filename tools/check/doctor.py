#!/usr/bin/env python3
"""`make doctor`: will this machine show the book's exact digits?

Prints what decides float32 bits here (CPU, ATen's kernels, BLAS and MKL's mode, threads,
torch, Python), hashes of a few seeded computations (helpers.repro.numerics.fingerprint, well
under a second) beside the book's recorded ones, what the pin costs (one matrix product timed
with and without it, each in a fresh process) and a plain verdict. `make doctor` runs it
in the environment of the book's Jupyter kernel; run it bare to see an unpinned process.

    python tools/check/doctor.py            # report
    python tools/check/doctor.py --record   # store this machine's fingerprint as the book's
                                      # (only when the book's outputs are re-made here)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from helpers.repro import numerics
from helpers.repro.pin import PIN, PIN_VARS


def verdict(problems: list[str], differing: list[str]) -> str:
    """The doctor's last line, from the pin's problems and the fingerprint's differences."""
    if not differing and not problems:
        return "You will see the book's exact digits: the pin holds and the fingerprint matches."
    if not differing:
        return (
            "The fingerprint matches the book's, but the pin does not hold here "
            f"({'; '.join(problems)}): most digits will match; the tests pass either way."
        )
    why = "; ".join(problems) if problems else "this CPU computes these kernels differently"
    return (
        f"Your last digits will differ from the book's ({', '.join(differing)} differ: {why}). "
        "Models you train will differ slightly too. Every check in the book still passes."
    )


MM_TIMING = """
import time, torch
torch.set_num_threads(1)
a = torch.randn(512, 512)
a @ a
best = min((lambda t: (a @ a, time.perf_counter() - t)[1])(time.perf_counter()) for _ in range(20))
print(1e3 * best)
"""


def mm_ms(env: dict) -> float:
    """Best of 20 one-thread 512 x 512 float32 matrix products, in a fresh process with env."""
    out = subprocess.run(
        [sys.executable, "-c", MM_TIMING], env=env, capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="record this fingerprint")
    args = parser.parse_args()

    info = numerics.describe_machine()
    problems = numerics.pin_problems(info)
    start = time.perf_counter()
    mine = numerics.fingerprint()
    seconds = time.perf_counter() - start
    if args.record:
        if problems:
            print("refusing to record: the pin does not hold here:", "; ".join(problems))
            return 1
        record = {
            "what": "helpers.repro.numerics.fingerprint() under the pin",
            **numerics.provenance(),
        }
        record["fingerprint"] = mine
        numerics.FINGERPRINT_FILE.write_text(json.dumps(record, indent=1) + "\n")
        print(f"recorded {numerics.FINGERPRINT_FILE}")
        return 0

    book = numerics.book_fingerprint()
    differing = numerics.compare_fingerprint(mine, book)
    width = max(map(len, info))
    print("This machine")
    for key, value in info.items():
        print(f"  {key:<{width}}  {value}")
    print(f"\nFingerprint ({seconds:.2f} s)          here              book")
    for name in book:
        mark = "same" if mine.get(name) == book[name] else "DIFFERENT"
        print(f"  {name:<12} {mine.get(name, '-'):>16}  {book[name]:>16}  {mark}")
    recorded = numerics._recorded()
    print(
        f"  (the book's: {recorded.get('cpu')}, {recorded.get('aten_capability')} kernels, "
        f"MKL_CBWR={recorded.get('mkl_cbwr')}, torch {recorded.get('torch')})"
    )
    pinned_env = {**os.environ, **PIN}
    default_env = {k: v for k, v in os.environ.items() if k not in PIN_VARS}
    here, default = mm_ms(pinned_env), mm_ms(default_env)
    print(
        f"\nThe pin's cost: a 512 x 512 matrix product on one thread takes {here:.2f} ms "
        f"pinned, {default:.2f} ms with PyTorch's default kernels ({here / default:.1f}x)."
    )
    print("\n" + verdict(problems, differing))
    return 0


if __name__ == "__main__":
    sys.exit(main())
