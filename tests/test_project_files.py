"""The files around the book agree with each other and with the tree: one version number, a
manifest of chapters/data, pre-commit at requirements.txt's versions, one kernel name, the
slow-test table naming tests that exist, and the README's commands and paths."""

import importlib.util
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "chapters" / "data"
MANIFEST = DATA / "README.md"
PYPROJECT = ROOT / "pyproject.toml"
ORDINALS = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth"]


def latest_edition(changelog: str) -> tuple[str, str, str]:
    """(ordinal, version, date) of the first `## ` heading that is not "Unreleased"."""
    for line in changelog.splitlines():
        if line.startswith("## ") and "unreleased" not in line.lower():
            m = re.match(r"## (\w+) edition, (\d+\.\d+\.\d+) \((\d{4}-\d\d-\d\d)\)", line)
            assert m, f"CHANGELOG.md: an edition heading without its version and date: {line!r}"
            return m.group(1).lower(), m.group(2), m.group(3)
    raise AssertionError("CHANGELOG.md has no released edition")


def test_one_version_everywhere():
    # the [project] table's version line (tomllib is Python 3.11+; the book supports 3.10)
    project = re.search(
        r'^\[project\]$.*?^version = "([^"]+)"$', PYPROJECT.read_text(), re.M | re.S
    )
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    ordinal, version, date = latest_edition((ROOT / "CHANGELOG.md").read_text())
    assert project and project.group(1) == version, ("pyproject.toml", version)
    assert str(citation["version"]) == version, ("CITATION.cff", citation["version"], version)
    assert str(citation["date-released"]) == date, ("CITATION.cff", citation["date-released"])
    # the version is the edition: N.0.0 for the Nth
    assert version == f"{ORDINALS.index(ordinal) + 1}.0.0", (ordinal, version)


def test_latest_edition_reads_the_first_released_heading():
    text = "# Changelog\n\n## Unreleased\n\n- x\n\n## Second edition, 2.0.0 (2026-11-30): y\n"
    assert latest_edition(text) == ("second", "2.0.0", "2026-11-30")
    with pytest.raises(AssertionError, match="without its version"):
        latest_edition("## Third edition (2026-12-01)\n")


def manifest_entries(text: str) -> list[str]:
    return re.findall(r"^## `([^`]+)`$", text, flags=re.M)


def test_every_data_file_is_in_the_manifest_and_every_entry_exists():
    files = sorted(
        p.relative_to(DATA).as_posix() for p in DATA.rglob("*") if p.is_file() and p != MANIFEST
    )
    entries = manifest_entries(MANIFEST.read_text())
    assert len(entries) == len(set(entries)), "chapters/data/README.md lists a file twice"
    missing = sorted(set(files) - set(entries))
    stale = sorted(set(entries) - set(files))
    assert not missing, f"chapters/data/README.md does not list {missing}"
    assert not stale, f"chapters/data/README.md lists files that are not there: {stale}"


# A repository path in backticks or a link: tools/x.py, tests/x.py, appendix/x.md, ...
PATH = re.compile(r"(?<![\w/.-])((?:tools|tests|appendix|chapters|src)/[\w./-]+\.(?:py|md|ipynb))")


def named_paths(text: str) -> set[str]:
    """The repository paths a document names, less placeholders (NN, <slug>, chNN, ...)."""
    return {p for p in PATH.findall(text) if not re.search(r"NN|_x\.|<|\.\.\.|\*", p)}


@pytest.mark.parametrize(
    "doc",
    ["README.md", "CONTRIBUTING.md", "chapters/data/README.md", "CHANGELOG.md"],
)
def test_every_path_a_document_names_exists(doc):
    text = (ROOT / doc).read_text()
    base = (ROOT / doc).parent
    missing = sorted(p for p in named_paths(text) if not (ROOT / p).exists())
    # relative links (../../appendix/...) resolve from the document's folder
    prose = re.sub(r"```.*?```|`[^`]*`", "", text, flags=re.S)  # code is not a link
    links = re.findall(r"\]\(([^)#]+)\)", prose)
    missing += sorted(
        link for link in links if "://" not in link and not (base / link).resolve().exists()
    )
    assert not missing, f"{doc} names files that do not exist: {missing}"


# A tool run as a module: `python -m tools.check.pairing` (a placeholder such as
# tools.record.<name> names its package).
TOOL_MODULE = re.compile(r"-m (tools(?:\.\w+)+)")
DOCS_WITH_COMMANDS = [
    "README.md",
    "CONTRIBUTING.md",
    "chapters/data/README.md",
    "Makefile",
    ".pre-commit-config.yaml",
    *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "appendix").glob("experiment_*.py")),
]


@pytest.mark.parametrize("doc", DOCS_WITH_COMMANDS)
def test_every_tool_module_a_document_runs_exists(doc):
    named = set(TOOL_MODULE.findall((ROOT / doc).read_text()))
    missing = sorted(m for m in named if importlib.util.find_spec(m) is None)
    assert not missing, f"{doc} runs tools that do not exist: {missing}"


def test_named_paths_skips_placeholders():
    text = "`tools/check/pairing.py`, `chapters/NN_slug.py`, `appendix/experiment_<slug>.py`"
    assert named_paths(text + ", `tools/record_....py`") == {"tools/check/pairing.py"}


MAKE_TARGET = re.compile(r"`make ([a-z][\w-]*)")


@pytest.mark.parametrize("doc", ["README.md", "CONTRIBUTING.md"])
def test_every_make_target_a_document_names_exists(doc):
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][\w-]*):", makefile, flags=re.M))
    named = set(MAKE_TARGET.findall((ROOT / doc).read_text()))
    assert named, doc
    assert named <= targets, f"{doc} names make targets that do not exist: {named - targets}"


def test_the_readme_stays_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 150


def requirement_pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        m = re.match(r"([A-Za-z0-9_.-]+)==([^\s#;]+)", line)
        if m:
            pins[m.group(1).lower()] = m.group(2)
    return pins


def test_pre_commit_hooks_pin_requirements_versions():
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    hooks = {hook["id"]: hook for repo in config["repos"] for hook in repo["hooks"]}
    assert {"ruff", "ruff-format", "codespell", "check-pairing"} <= set(hooks)
    pins = requirement_pins()
    for hook in hooks.values():
        for dep in hook.get("additional_dependencies", []):
            m = re.match(r"([A-Za-z0-9_.-]+)==(\S+)$", dep)
            if m:
                assert pins.get(m.group(1).lower()) == m.group(2), (hook["id"], dep, pins)
    assert hooks["ruff"]["additional_dependencies"] == ["ruff==" + pins["ruff"]]
    assert hooks["codespell"]["additional_dependencies"][0] == "codespell==" + pins["codespell"]
    python, flag, module = hooks["check-pairing"]["entry"].split()
    assert (ROOT / python).name == "python" and flag == "-m", hooks["check-pairing"]["entry"]
    assert importlib.util.find_spec(module), module


def load(path: Path, name: str):
    """A module loaded from its file (both conftest.py files are called `conftest`)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_conftest_reads_the_one_kernel_name():
    from tools.common import pin

    assert pin.KERNEL_NAME not in (ROOT / "conftest.py").read_text(), "a copy in conftest.py"
    assert load(ROOT / "conftest.py", "_root_conftest").KERNEL_NAME == pin.KERNEL_NAME


def test_the_marked_tests_exist():
    """Every name in tests/conftest.py's MARKED table is a test or fixture of its file."""
    MARKED = load(ROOT / "tests" / "conftest.py", "_tests_conftest").MARKED

    for marker, files in MARKED.items():
        for filename, names in files.items():
            paths = sorted((ROOT / "tests").glob("*.py")) if filename == "*" else None
            paths = paths or [ROOT / "tests" / filename]
            text = "\n".join(p.read_text() for p in paths if p.exists())
            for name in names:
                assert re.search(rf"^def {name}\(", text, flags=re.M), (marker, filename, name)


def test_marker_for_reads_names_and_fixtures():
    marker_for = load(ROOT / "tests" / "conftest.py", "_tests_conftest").marker_for

    assert marker_for("test_distributed.py", "test_x", ["one_step"]) == ["integration"]
    assert marker_for("test_any.py", "test_x", ["partly_trained_model"]) == ["slow"]
    assert marker_for("test_any.py", "test_one_process_is_refused", []) == []
