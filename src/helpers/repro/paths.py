"""The one place in the library that knows where the book keeps its files.

Two kinds of files:
- package data, shipped inside `helpers` (the corpus, the numerics fingerprint): always next to
  this package, wherever it is installed;
- the book's own folders (the recorded experiments in chapters/data, the checkpoint cache): found
  from the repository root: the folder named by TRANSFORMER_BOOK_ROOT, else, in a clone, the
  folder that holds src/ (this file is src/helpers/repro/paths.py).

Every other module asks here instead of walking up from its own `__file__`.
"""

import os
from pathlib import Path

PACKAGE_DATA = Path(__file__).resolve().parents[1] / "data"


def book_root() -> Path:
    """The repository the book runs from: $TRANSFORMER_BOOK_ROOT, else this clone's root."""
    env = os.environ.get("TRANSFORMER_BOOK_ROOT")
    return Path(env) if env else Path(__file__).resolve().parents[3]


def records_dir() -> Path:
    """chapters/data: the recorded experiments and measurements the pages read."""
    return book_root() / "chapters" / "data"


def cache_dir() -> Path:
    """Where checkpoints are kept: $TRANSFORMER_BOOK_CACHE, else <root>/.cache/checkpoints."""
    env = os.environ.get("TRANSFORMER_BOOK_CACHE")
    return Path(env) if env else book_root() / ".cache" / "checkpoints"
