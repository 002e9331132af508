"""Every exercise checker is shown failing: each check_<name> in helpers.exercises is called
by some test in tests/test_exercises_chNN.py that expects ExerciseError (a wrong answer
rejected), and every checker's chapter calls it in a solution cell."""

import ast
import json
from pathlib import Path

import pytest

from helpers.exercises import CHECKERS, ExerciseError

TESTS = Path(__file__).resolve().parent
CHAPTERS = TESTS.parent / "chapters"


def rejecting_tests() -> dict[str, list[str]]:
    """checker name -> the test functions that call it inside `pytest.raises(ExerciseError...)`."""
    found: dict[str, list[str]] = {}
    for path in sorted(TESTS.glob("test_exercises_ch*.py")):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef) or not fn.name.startswith("test"):
                continue
            for node in ast.walk(fn):
                if not isinstance(node, ast.With):
                    continue
                expects_error = any(
                    isinstance(item.context_expr, ast.Call)
                    and ast.unparse(item.context_expr.func).endswith("raises")
                    and "ExerciseError" in ast.unparse(item.context_expr)
                    for item in node.items
                )
                if not expects_error:
                    continue
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Name) and inner.id in CHECKERS:
                        found.setdefault(inner.id, []).append(f"{path.name}::{fn.name}")
    return found


def test_there_are_checkers():
    assert len(CHECKERS) >= 19, f"only {len(CHECKERS)} checkers: {sorted(CHECKERS)}"


def test_every_checker_rejects_a_wrong_answer_in_a_test():
    found = rejecting_tests()
    missing = sorted(set(CHECKERS) - set(found))
    assert not missing, f"no test shows these checkers rejecting a wrong answer: {missing}"


def test_every_checker_is_used_by_a_solution():
    sources = ""
    for nb_path in sorted(CHAPTERS.glob("[0-9][0-9]_*.ipynb")):
        for cell in json.loads(nb_path.read_text())["cells"]:
            src = "".join(cell["source"])
            if cell["cell_type"] == "code" and src.startswith("# Solution to exercise"):
                sources += src
    unused = sorted(name for name in CHECKERS if f"{name}(" not in sources)
    assert not unused, f"checkers no solution cell calls: {unused}"


@pytest.mark.parametrize("name", sorted(CHECKERS))
def test_checker_has_a_docstring_naming_its_exercise(name):
    doc = CHECKERS[name].__doc__ or ""
    assert "xercise" in doc, f"{name}'s docstring should say which exercise it checks"


def test_error_is_not_an_assertion_error():
    assert not issubclass(ExerciseError, AssertionError)
