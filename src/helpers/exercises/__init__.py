"""Checkers for the exercises at the end of each chapter.

Each chapter's checkers live in their own module, `chNN.py` (chapter NN), and every public
`check_<name>` function of those modules is importable from here:

    from helpers.exercises import check_scaled_dot_product_attention
    check_scaled_dot_product_attention(my_attention)  # prints what passed, or raises ExerciseError

A checker runs the reader's function or module on fixed inputs against the book's own
implementation and, when something differs, raises ExerciseError with a message in plain
words: which input, which shape or value, and a hint. It never raises a bare AssertionError.
"""

import importlib
import pkgutil

from ._common import ExerciseError

__all__ = ["ExerciseError", "CHECKERS"]
CHECKERS: dict = {}  # name -> checker function, over every chapter module

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    if not (_info.name.startswith("ch") and _info.name[2:4].isdigit()):
        continue
    _module = importlib.import_module(f"{__name__}.{_info.name}")
    for _name in getattr(_module, "__all__", []):
        if _name in CHECKERS:
            raise ImportError(f"two exercise modules define {_name}")
        CHECKERS[_name] = globals()[_name] = getattr(_module, _name)
        __all__.append(_name)
