"""What the checks print: progress lines as they go, and the verdicts at the end."""

from __future__ import annotations


def log(msg: str) -> None:
    print(msg, flush=True)


def summary(results: dict[str, list[str]], seconds: float) -> int:
    """Print PASS or FAIL for each check (with its first 20 failures) and the total; return
    the exit status: 1 when a check failed or none ran."""
    log("")
    failed = 0
    for name, failures in results.items():
        log(f"{'PASS' if not failures else 'FAIL'}  {name}")
        for f in failures[:20]:
            log(f"      - {f}")
        failed += bool(failures)
    log(
        f"check-browser: {'PASS' if not failed else 'FAIL'} "
        f"({len(results) - failed} passed, {failed} failed) "
        f"in {seconds:.0f} s"
    )
    return 1 if failed or not results else 0
