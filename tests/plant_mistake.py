"""A pytest plugin that plants one catalogued mistake into `helpers`, to see whether the
library's own unit tests notice it (mutation testing with the exercises' mistake catalogues).

    M=helpers.core.attention:scaled_dot_product_attention
    BOOK_MISTAKE="$M=tests/mistakes_ch03.py:no_scale" \
        PYTHONPATH=tests .venv/bin/python -m pytest -p plant_mistake tests/test_attention.py -x -q

The left side names the library object (module:attribute, or module:Class.method); the
right side a file and the
function that replaces it. Every loaded `helpers` module that holds the original object under
any name gets the replacement too (`from .attention import f` copies the reference), so the
mistake is planted wherever the library calls it. Nothing on disk changes. A run that fails
means the unit tests kill the mistake; a run that passes means it survives them.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load_function(spec: str):
    path, name = spec.rsplit(":", 1)
    file = (ROOT / path).resolve()
    module_spec = importlib.util.spec_from_file_location(f"_planted_{file.stem}", file)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return getattr(module, name)


def plant(target: str, replacement) -> int:
    """Replace the object `module:attr` everywhere in the loaded helpers modules; returns how
    many references were replaced."""
    module_name, attr = target.split(":")
    owner = importlib.import_module(module_name)
    if "." in attr:  # a method or class attribute: patch it on its class, seen by every user
        *path, attr = attr.split(".")
        for part in path:
            owner = getattr(owner, part)
        getattr(owner, attr)  # fail loudly on a misspelt name
        setattr(owner, attr, replacement)
        return 1
    original = getattr(owner, attr)
    importlib.import_module("helpers")  # load the package, so that every re-export is found
    replaced = 0
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "helpers" or name.startswith("helpers.")):
            continue
        for key, value in list(vars(module).items()):
            if value is original:
                setattr(module, key, replacement)
                replaced += 1
    if replaced == 0:
        raise RuntimeError(f"{target} was not found in any loaded helpers module")
    return replaced


def pytest_configure(config):
    spec = os.environ.get("BOOK_MISTAKE")
    if not spec:
        return
    target, source = spec.split("=", 1)
    n = plant(target, _load_function(source))
    print(f"plant_mistake: {source} planted as {target} ({n} references)", file=sys.stderr)
