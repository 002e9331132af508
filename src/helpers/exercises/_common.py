"""What every exercise checker shares: the error it raises and the comparisons it makes.

A checker calls these instead of `assert`, so that a wrong answer is explained in plain words:

    expect_shape("weights", got, (2, 4, 5, 5), hint="...")
    expect_close("output", got, expected, atol=1e-5, where="input 2 (a padded batch)", hint="...")
    passed("check_scaled_dot_product_attention", 4)
"""

from __future__ import annotations

from contextlib import contextmanager

import torch


@contextmanager
def one_thread_isolated():
    """Run a check on one torch thread, leaving the caller's random state as it was.

    Checkers that build small models from seeds and decode one token at a time use it: two
    threads on a busy machine spend most of their time waiting for each other, and the seeds
    must not move the reader's random stream (fork_rng)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng():
            yield
    finally:
        torch.set_num_threads(threads)


class ExerciseError(Exception):
    """A reader's answer differs from the book's. The message says where and how, with a hint."""


def fail(what: str, where: str = "", hint: str = "") -> None:
    """Raise ExerciseError: `what` went wrong, on `where` (an input), with a `hint`."""
    msg = what if not where else f"on {where}: {what}"
    if hint:
        msg += f"\nHint: {hint}"
    raise ExerciseError(msg)


def call(fn, *args, where: str = "", **kwargs):
    """Run the reader's fn; an exception it raises becomes an ExerciseError naming the input."""
    try:
        return fn(*args, **kwargs)
    except ExerciseError:
        raise
    except Exception as err:
        fail(f"your code raised {type(err).__name__}: {err}", where)


def expect_tensor(name: str, got, where: str = "") -> torch.Tensor:
    if not isinstance(got, torch.Tensor):
        fail(f"{name} should be a torch.Tensor, got {type(got).__name__}", where)
    return got


def expect_shape(name: str, got, shape, where: str = "", hint: str = "") -> None:
    got = expect_tensor(name, got, where)
    if tuple(got.shape) != tuple(shape):
        fail(f"{name} has shape {tuple(got.shape)}, expected {tuple(shape)}", where, hint)


def expect_dtype(name: str, got, dtype, where: str = "", hint: str = "") -> None:
    got = expect_tensor(name, got, where)
    if got.dtype != dtype:
        fail(f"{name} has dtype {got.dtype}, expected {dtype}", where, hint)


def expect_close(
    name: str,
    got,
    expected: torch.Tensor,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    where: str = "",
    hint: str = "",
) -> None:
    """Same shape and values within atol + rtol * |expected|; names the first value that differs."""
    expect_shape(name, got, expected.shape, where, hint)
    got = got.detach().to(expected.dtype)
    bad = ~torch.isclose(got, expected, atol=atol, rtol=rtol, equal_nan=False)
    if bad.any():
        idx = tuple(int(i) for i in bad.nonzero()[0])
        diff = (got - expected).abs().max().item()
        fail(
            f"{name}{list(idx)} is {got[idx].item():.6g}, expected {expected[idx].item():.6g} "
            f"({int(bad.sum())} of {bad.numel()} values differ; largest difference {diff:.3g})",
            where,
            hint,
        )


def expect_equal(name: str, got, expected, where: str = "", hint: str = "") -> None:
    """Exact equality for tensors (same shape, every element) or plain Python values."""
    if isinstance(expected, torch.Tensor):
        expect_shape(name, got, expected.shape, where, hint)
        bad = got != expected
        if bad.any():
            idx = tuple(int(i) for i in bad.nonzero()[0])
            fail(
                f"{name}{list(idx)} is {got[idx].item()}, expected {expected[idx].item()} "
                f"({int(bad.sum())} of {bad.numel()} elements differ)",
                where,
                hint,
            )
    elif got != expected:
        fail(f"{name} is {got!r}, expected {expected!r}", where, hint)


def passed(checker: str, n_checks: int, detail: str = "") -> None:
    """Print the success line every checker ends with."""
    print(f"{checker}: all {n_checks} checks passed" + (f" ({detail})" if detail else ""))
