"""`make doctor`: will this machine show the book's exact digits?

Prints what decides float32 bits here (CPU, ATen's kernels, BLAS and MKL's mode, threads,
torch, Python), hashes of a few seeded computations (helpers.repro.numerics.fingerprint, well
under a second) beside the book's recorded ones, what the pin costs (one matrix product timed
with and without it, each in a fresh process) and a plain verdict. `make doctor` runs it
in the environment of the book's Jupyter kernel; run it bare to see an unpinned process.

    python -m tools.check.doctor            # report
    python -m tools.check.doctor --record   # store this machine's fingerprint as the book's
                                            # (only when the book's outputs are re-made here)
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from helpers.repro import numerics
from tools.common import pin_env, run_fresh, write_record


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


def matmul_ms() -> float:
    """Best of 20 one-thread 512 x 512 float32 matrix products, in milliseconds (run_fresh runs
    it in a process of its own: the pin is read when torch loads)."""
    torch.set_num_threads(1)
    a = torch.randn(512, 512)
    a @ a
    best = float("inf")
    for _ in range(20):
        start = time.perf_counter()
        a @ a
        best = min(best, time.perf_counter() - start)
    return 1e3 * best


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
            "fingerprint": mine,
        }
        write_record(numerics.FINGERPRINT_FILE, record)
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
    here = run_fresh(matmul_ms, env=pin_env("pinned"))
    default = run_fresh(matmul_ms, env=pin_env("default"))
    print(
        f"\nThe pin's cost: a 512 x 512 matrix product on one thread takes {here:.2f} ms "
        f"pinned, {default:.2f} ms with PyTorch's default kernels ({here / default:.1f}x)."
    )
    print("\n" + verdict(problems, differing))
    return 0


if __name__ == "__main__":
    sys.exit(main())
