"""Every public class and function of helpers says which chapter builds or explains it."""

import inspect
import re

import pytest

import helpers

CHAPTER = re.compile(r"\b[Cc]hapters? \d+")
PUBLIC = sorted(
    name
    for name in helpers.__all__
    if inspect.isclass(getattr(helpers, name)) or inspect.isfunction(getattr(helpers, name))
)


@pytest.mark.parametrize("name", PUBLIC)
def test_docstring_names_its_chapter(name):
    doc = inspect.getdoc(getattr(helpers, name)) or ""
    assert CHAPTER.search(doc), f"helpers.{name}: the docstring should say 'Built in chapter N.'"


def test_all_lists_each_name_once():
    assert len(helpers.__all__) == len(set(helpers.__all__))
    missing = [n for n in helpers.__all__ if not hasattr(helpers, n)]
    assert not missing, missing
