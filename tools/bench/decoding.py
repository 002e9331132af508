"""Benchmark greedy decoding: naive (re-run the decoder over the whole prefix every step)
versus the KV cache (feed only the newest token), side by side in one run; the cache both
as it grows with torch.cat and preallocated (helpers.greedy_decode_static, chapter 13).

Usage:
    python -m tools.bench.decoding                  # lengths 16 64 256 512
    python -m tools.bench.decoding --lengths 16 64 256 --repeats 5 --threads 2

The model is an untrained encoder-decoder Transformer with the book's default shape
(d_model=128, 4 heads, dff=512, 2 layers) and max_len large enough for the longest output:
timing does not need a trained model, and stop_at_eos=False keeps an early <eos> from
ending the run. Each row decodes one source sequence (batch 1, the usual generation case)
for exactly N new tokens. Naive and cached runs alternate and the fastest of --repeats
runs is kept, which makes the ratio robust to other processes on a shared machine. One CPU
thread by default: the tensors are small, and several threads fighting other processes for
two cores make tiny operations wildly slower (the chapter uses one thread too).

Prints a table (new tokens, naive ms, cached ms, preallocated ms, speedup, identical) and,
last, the line
    speedup_at_256=<x> identical=<True|False>
where speedup is naive over the torch.cat cache, and identical is True only if the three
paths produced the same tokens at every length.
"""

from __future__ import annotations

import argparse
import time

import torch

from helpers import (
    VOCAB_SIZE,
    Transformer,
    greedy_decode,
    greedy_decode_static,
    make_reversal_dataset,
)


def time_decoding(model, src, new_tokens: int, use_cache):
    """(seconds, tokens) for one greedy decoding of exactly new_tokens tokens.
    use_cache: False (naive), True (the torch.cat cache) or "static" (preallocated)."""
    t0 = time.perf_counter()
    if use_cache == "static":
        out = greedy_decode_static(model, src, max_len=new_tokens + 1, stop_at_eos=False)
    else:
        out = greedy_decode(
            model, src, max_len=new_tokens + 1, use_cache=use_cache, stop_at_eos=False
        )
    return time.perf_counter() - t0, out


def bench(lengths, repeats: int = 3, batch: int = 1, seed: int = 0):
    """-> list of dicts: new_tokens, naive_ms, cached_ms, static_ms, speedup, identical."""
    src, _ = make_reversal_dataset(batch, seed=seed)
    torch.manual_seed(seed)
    model = Transformer(VOCAB_SIZE, VOCAB_SIZE, max_len=max(max(lengths) + 1, src.size(1))).eval()
    paths = (False, True, "static")
    for use_cache in paths:  # warm-up
        time_decoding(model, src, 4, use_cache)
    rows = []
    for n in lengths:
        best = {p: float("inf") for p in paths}
        outs = {}
        for _ in range(repeats):
            for use_cache in paths:
                sec, outs[use_cache] = time_decoding(model, src, n, use_cache)
                best[use_cache] = min(best[use_cache], sec)
        rows.append(
            dict(
                new_tokens=n,
                naive_ms=1e3 * best[False],
                cached_ms=1e3 * best[True],
                static_ms=1e3 * best["static"],
                speedup=best[False] / best[True],
                identical=all(torch.equal(outs[False], outs[p]) for p in paths[1:]),
            )
        )
    return rows


def final_line(rows) -> str:
    """'speedup_at_256=<x> identical=<True|False>'; identical covers every measured length."""
    at_256 = next(r for r in rows if r["new_tokens"] == 256)
    identical = all(r["identical"] for r in rows)
    return f"speedup_at_256={at_256['speedup']:.1f} identical={identical}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[16, 64, 256, 512])
    ap.add_argument(
        "--repeats", type=int, default=3, help="runs per path and length; the fastest is kept"
    )
    ap.add_argument("--batch", type=int, default=1, help="source sequences decoded together")
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch.set_num_threads; 1 (the default) is steady on a shared machine, "
        "0 = torch's choice",
    )
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    lengths = sorted(set(args.lengths) | {256})
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {args.batch}, "
        f"best of {args.repeats}"
    )
    rows = bench(lengths, repeats=args.repeats, batch=args.batch)
    print(
        f"{'new tokens':>10}  {'naive ms':>10}  {'cached ms':>10}  {'prealloc ms':>11}  "
        f"{'speedup':>8}  identical"
    )
    for r in rows:
        print(
            f"{r['new_tokens']:>10}  {r['naive_ms']:>10.1f}  {r['cached_ms']:>10.1f}  "
            f"{r['static_ms']:>11.1f}  {r['speedup']:>7.1f}x  {r['identical']}"
        )
    print(final_line(rows))


if __name__ == "__main__":
    main()
