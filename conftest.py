"""Top-level pytest configuration for the unit tests and the notebook checks.

`pytest --nbval chapters/` (from the repository root or any folder below it):
- collects only the chapter notebooks: never their .py twins, executed copies under
  _build/, or .ipynb_checkpoints/ (see also norecursedirs in pytest.ini);
- sanitizes outputs with chapters/sanitize.cfg (an absolute path, so the working
  folder does not matter) unless --nbval-sanitize-with is given;
- runs each notebook in the book's own kernel (helpers.repro.pin.KERNEL_NAME, installed by
  `make venv`), whose environment pins the numerics as tools/build/execute_notebooks.py's does,
  unless --nbval-kernel-name or --nbval-current-env is given (`make test-portable` runs
  kernels of the current Python with the pin broken);
- starts kernels with PYTHONHASHSEED=0 and OMP_NUM_THREADS=1 in any case, so that
  outputs which depend on string hashing or on the thread count (the order of float
  sums) match the stored ones.
"""

import os
from pathlib import Path

import pytest

from tools.common import pin

ROOT = Path(__file__).resolve().parent


# The kernel's name from helpers.repro.pin, read as plain data (tools.common imports no torch).
KERNEL_NAME = pin.KERNEL_NAME
SANITIZE_FILE = ROOT / "chapters" / "sanitize.cfg"

# Relative to this file. The twins are plain scripts: importing one as a test module
# would run the whole chapter (and one named test_*.py would be collected).
collect_ignore_glob = [
    "chapters/*.py",
    "chapters/**/*.py",
    "appendix/*.py",
    "_build/*",
    "**/.ipynb_checkpoints/*",
]


def pytest_configure(config):
    option = config.option
    if not (getattr(option, "nbval", False) or getattr(option, "nbval_lax", False)):
        return
    if not option.nbval_sanitize_with and not getattr(option, "sanitize_with", None):
        option.nbval_sanitize_with = str(SANITIZE_FILE)
    if not option.nbval_kernel_name and not option.nbval_current_env:
        import sys

        spec = Path(sys.prefix) / "share" / "jupyter" / "kernels" / KERNEL_NAME / "kernel.json"
        if not spec.exists():
            raise pytest.UsageError(f"the book's kernel is not installed ({spec}): run `make venv`")
        option.nbval_kernel_name = KERNEL_NAME
    # Inherited by the kernels nbval starts.
    os.environ["PYTHONHASHSEED"] = "0"
    # One torch thread per kernel: `make test` runs two notebooks at a time on two cores, and
    # the stored outputs were made with one thread (tools/build/execute_notebooks.py sets the same).
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ.pop("MPLBACKEND", None)  # let ipykernel use its inline backend


# `make test` runs the unit tests and the notebooks in one pytest-xdist session on two
# workers (--dist loadfile --no-loadscope-reorder: one file per worker at a time, taken in
# collection order). Starting the longest files first keeps both cores busy to the end
# instead of leaving one worker alone with a long chapter (measured in the pinned kernel from a
# cold checkpoint cache, 2 cores: chapters 14 and 21 about 140 s, 23 about 100 s, 12 about 85 s,
# most files under 10 s).
# Chapter 21 goes first also because it trains the book's model (BOOK_RECIPE) early, before
# the files that load it start.
LONGEST_FIRST = [
    "chapters/21_cross_attention_heatmaps.ipynb",
    "chapters/14_mini_gpt.ipynb",
    "chapters/23_distributed_data_parallel.ipynb",
    "chapters/12_when_correct_code_learns_slowly.ipynb",
    "chapters/13_kv_cache.ipynb",
    "chapters/20_beam_search.ipynb",
    "chapters/18_todays_blocks.ipynb",
    "chapters/22_attention_benchmark.ipynb",
    "chapters/10_training.ipynb",
    "tests/test_record_gpu.py",
]


def pytest_collection_modifyitems(session, config, items):
    missing = [p for p in LONGEST_FIRST if not (ROOT / p).exists()]
    if missing:  # a renamed chapter must not silently fall back to the slow order
        raise pytest.UsageError(f"conftest.LONGEST_FIRST names missing files: {missing}")
    rank = {p: i for i, p in enumerate(LONGEST_FIRST)}

    def key(item):
        path = Path(str(item.fspath)).resolve()
        rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
        return rank.get(rel, len(rank))

    items.sort(key=key)  # stable: the order inside a file and among the rest is kept
