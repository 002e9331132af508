"""Re-execute chapter notebooks in a fresh kernel and store their outputs.

Usage:
    python -m tools.build.execute_notebooks                      # every chapters/*.ipynb
    python -m tools.build.execute_notebooks chapters/03_x.ipynb  # one notebook, from its cells
    python -m tools.build.execute_notebooks chapters/03_x.py     # from the .py twin: creates or
                                                                 # updates 03_x.ipynb, runs it

For each notebook this script
- takes the cells from the file named on the command line (for a ``.py`` twin, the
  notebook is rebuilt from it; cell ids of unchanged cells are kept);
- formats the code cells with ruff (pyproject.toml's settings), so the stored notebook
  passes `make lint`;
- runs every cell, top to bottom, in a fresh kernel of the book's own (``transformer-book``,
  installed into *this* Python's environment by `make venv`), whose environment pins the
  numerics (helpers/repro/pin.py), as nbval's does; execution counts come out 1, 2, 3, ...;
- records no timing metadata and drops any volatile cell metadata left by editors;
- sets the pairing metadata ``jupytext: {formats: "ipynb,py:percent"}`` and a standard
  kernelspec naming the book's kernel, then writes the notebook and its ``.py`` twin.

``--prose-only`` (for a ``.py`` twin) re-executes nothing: it takes the twin's markdown and cell
metadata and keeps the stored outputs, and refuses when any code cell's source (after ruff) or
the order of the code cells differs from the stored notebook's. It is for edits of prose,
which cannot change what a cell prints.

Nothing is written for a notebook whose execution fails: the script reports the failing
cell and moves on to the next notebook, and exits 1 at the end. Outputs are never to be
edited by hand: they are whatever this script stored, and nbval checks them.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jupytext
import nbformat
import zmq
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from jupytext.combine import combine_inputs_with_outputs
from jupytext.compare import compare_notebooks
from nbclient import NotebookClient

from tools.common import ROOT, pin, write_atomic

CHAPTERS = ROOT / "chapters"
PYPROJECT = ROOT / "pyproject.toml"
FORMATS = "ipynb,py:percent"
TWIN_FMT = "py:percent"
KERNEL_NAME = pin.KERNEL_NAME
CELL_TIMEOUT = 900  # seconds per cell
KERNELSPEC = {"display_name": pin.KERNEL_DISPLAY_NAME, "language": "python", "name": KERNEL_NAME}
# Cell metadata that changes on every run or only reflects an editor's state.
VOLATILE_CELL_METADATA = ("execution", "ExecuteTime", "papermill")


class BookKernelSpecs(KernelSpecManager):
    """Resolve the book's kernel (tools/build/install_kernel.py) in *this* Python's env only.

    A user-level kernelspec of the same name pointing at another interpreter (without torch,
    or without `helpers`) must not be picked up, and a missing one is an error, never a
    fallback to an unpinned kernel.
    """

    def get_kernel_spec(self, kernel_name):
        spec_dir = Path(sys.prefix) / "share" / "jupyter" / "kernels" / KERNEL_NAME
        if not (spec_dir / "kernel.json").exists():
            raise ExecutionFailed(f"no {KERNEL_NAME} kernel in {spec_dir}: run `make venv`")
        return self.kernel_spec_class.from_resource_dir(str(spec_dir))


class ExecutionFailed(Exception):
    pass


def rel(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def stable_cell_ids(nb, keep: set[str]) -> None:
    """Keep the ids in `keep`; give every other cell an id derived from its content.

    jupytext gives cells read from a .py file random ids, which would change the
    .ipynb on every run; content-derived ids keep re-execution reproducible.
    """
    nb.nbformat, nb.nbformat_minor = 4, max(nb.get("nbformat_minor", 0), 5)
    seen: set[str] = set()
    for cell in nb.cells:
        cid = cell.get("id")
        if cid not in keep or cid in seen:
            digest = hashlib.sha1(f"{cell.cell_type}\n{cell.source}".encode()).hexdigest()
            cid, n = digest[:8], 0
            while cid in seen or cid in keep:
                n += 1
                cid = f"{digest[:8]}-{n}"
        cell["id"] = cid
        seen.add(cid)


def load(path: Path):
    """Return (notebook to execute, its .ipynb path, its .py twin path)."""
    if path.suffix == ".py":
        twin, notebook = path, path.with_suffix(".ipynb")
        nb = jupytext.read(twin, fmt=TWIN_FMT)
        keep: set[str] = set()
        if notebook.exists():
            old = nbformat.read(notebook, as_version=4)
            keep = {c.get("id") for c in old.cells if c.get("id")}
            nb = combine_inputs_with_outputs(nb, old, fmt=TWIN_FMT)
        stable_cell_ids(nb, keep)
    elif path.suffix == ".ipynb":
        notebook, twin = path, path.with_suffix(".py")
        nb = nbformat.read(notebook, as_version=4)
        if twin.exists() and twin.stat().st_mtime > notebook.stat().st_mtime:
            try:
                compare_notebooks(jupytext.read(twin, fmt=TWIN_FMT), nb, fmt=TWIN_FMT)
            except Exception:
                raise ExecutionFailed(
                    f"{twin.name} is newer than {notebook.name} and differs from it: "
                    f"executing the notebook would overwrite the twin's edits. Run "
                    f"`python -m tools.build.execute_notebooks {rel(twin)}` to build the "
                    f"notebook from the twin (or touch the .ipynb to keep the notebook)."
                ) from None
        stable_cell_ids(nb, {c.get("id") for c in nb.cells if c.get("id")})
    else:
        raise ExecutionFailed(f"{rel(path)}: expected a .ipynb notebook or its .py twin")
    return nb, notebook, twin


def code_sources(nb) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "code"]


def check_code_unchanged(nb, notebook: Path) -> None:
    """For --prose-only: the code cells must be the stored notebook's, in the same order."""
    if not notebook.exists():
        raise ExecutionFailed(f"--prose-only: no {notebook.name} with outputs to keep")
    old, new = code_sources(nbformat.read(notebook, as_version=4)), code_sources(nb)
    if old != new:
        diff = [i + 1 for i, (a, b) in enumerate(zip(old, new)) if a != b]
        where = f"code cell(s) {diff[:5]}" if diff else f"{len(old)} -> {len(new)} code cells"
        raise ExecutionFailed(f"--prose-only: the code changed ({where}): execute instead")


def prepare(nb, keep_outputs: bool = False) -> None:
    """Pairing metadata, standard kernelspec, no stale outputs or volatile metadata."""
    jt = dict(nb.metadata.get("jupytext", {}))
    jt.pop("text_representation", None)
    if "formats" not in jt:
        # Read from a .py file without a jupytext header: drop the filters jupytext
        # assumes for such scripts ("-all" would strip cell tags from the twin).
        for key in ("notebook_metadata_filter", "cell_metadata_filter", "main_language"):
            jt.pop(key, None)
    jt["formats"] = FORMATS
    nb.metadata["jupytext"] = jt
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    for cell in nb.cells:
        for key in VOLATILE_CELL_METADATA:
            cell.metadata.pop(key, None)
        # A "Going deeper" code cell (tag hide-cell) is collapsed in the HTML book by
        # myst-nb; JupyterLab reads these flags instead.
        tags = cell.metadata.get("tags", [])
        jupyter = dict(cell.metadata.get("jupyter", {}))
        if "hide-cell" in tags or "hide-input" in tags:
            jupyter["source_hidden"] = True
        if "hide-cell" in tags or "hide-output" in tags:
            jupyter["outputs_hidden"] = True
        if cell.cell_type == "markdown":
            # a collapsed markdown cell shows its first source line raw in JupyterLab
            # (":::{dropdown} ..."); jupyterlab-myst collapses the dropdown itself
            jupyter.pop("source_hidden", None)
        if jupyter:
            cell.metadata["jupyter"] = jupyter
        else:
            cell.metadata.pop("jupyter", None)
        if cell.cell_type == "code" and not keep_outputs:
            cell.outputs = []
            cell.execution_count = None


def ruff_format(nb) -> None:
    """Format the code cells with ruff (the settings in pyproject.toml), as `make lint` checks.

    The notebook is written to a temporary .ipynb, formatted by ruff as a notebook (one cell
    at a time, trailing semicolons kept), and the formatted sources are copied back.
    """
    fd, tmp = tempfile.mkstemp(suffix=".ipynb")
    os.close(fd)
    try:
        nbformat.write(nb, tmp)
        cmd = [sys.executable, "-m", "ruff", "format", "--quiet", "--config", str(PYPROJECT), tmp]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise ExecutionFailed(f"ruff format failed:\n{result.stderr or result.stdout}")
        formatted = nbformat.read(tmp, as_version=4)
    finally:
        os.unlink(tmp)
    for cell, new in zip(nb.cells, formatted.cells):
        if cell.cell_type == "code":
            cell.source = new.source


def execute(nb, folder: Path) -> None:
    # The kernel inherits this process's environment: fix string hashing (set iteration
    # order), one torch thread as under `make test` (see conftest.py), and let ipykernel
    # choose its inline matplotlib backend.
    os.environ["PYTHONHASHSEED"] = "0"
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ.pop("MPLBACKEND", None)
    current = {"index": None}

    def on_cell_start(cell, cell_index, **kwargs):
        current["index"] = cell_index

    km = KernelManager(
        kernel_name=KERNEL_NAME,
        kernel_spec_manager=BookKernelSpecs(),
        # CurveZMQ keys for the local kernel (and no "running over TCP without
        # encryption" warning from ipykernel); "auto" falls back to plain TCP.
        transport_encryption="auto" if zmq.has("curve") else "disabled",
    )
    client = NotebookClient(
        nb,
        km=km,
        kernel_name=KERNEL_NAME,
        timeout=CELL_TIMEOUT,
        record_timing=False,
        allow_errors=False,
        resources={"metadata": {"path": str(folder)}},  # the kernel's working folder
        on_cell_start=on_cell_start,
        shutdown_kernel="immediate",
    )
    try:
        client.execute(cleanup_kc=True)  # shut our kernel down, even after an error
    except Exception as err:
        index = current["index"]
        if index is None:
            raise ExecutionFailed(f"the kernel did not start: {err}") from None
        cell = nb.cells[index]
        number = sum(1 for c in nb.cells[: index + 1] if c.cell_type == "code")
        first_line = next((ln for ln in cell.source.splitlines() if ln.strip()), "")
        if hasattr(err, "ename"):  # nbclient's CellExecutionError
            summary = f"{err.ename}: {err.evalue}"
        else:  # e.g. CellTimeoutError, DeadKernelError
            summary = f"{type(err).__name__}: {err}"
        raise ExecutionFailed(
            f"In [{number}] (code cell {number}; nbval calls it Cell {number - 1}), "
            f"`{first_line}`, failed with {summary}\n"
            + "\n".join("    " + ln for ln in str(err).splitlines())
        ) from None


def save(nb, notebook: Path, twin: Path) -> None:
    for cell in nb.cells:  # in case a kernel or extension added them
        for key in VOLATILE_CELL_METADATA:
            cell.metadata.pop(key, None)
    nbformat.validate(nb)
    text = nbformat.writes(nb, version=4)
    write_atomic(notebook, text if text.endswith("\n") else text + "\n")
    # The twin is written last, so it is never older than the notebook (JupyterLab's
    # jupytext refuses to open a pair whose notebook is newer and differs).
    write_atomic(twin, jupytext.writes(nb, fmt=TWIN_FMT))
    try:
        compare_notebooks(jupytext.read(twin, fmt=TWIN_FMT), nb, fmt=TWIN_FMT)
    except Exception as err:
        raise ExecutionFailed(f"{twin.name} does not round-trip to the notebook: {err}") from err


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description="Re-execute chapter notebooks in a fresh kernel, in place, and sync "
        "their .py twins.",
    )
    parser.add_argument(
        "paths",
        nargs="*",
        type=Path,
        help="notebooks (.ipynb) or their twins (.py); default: chapters/*.ipynb and "
        "appendix/*.ipynb",
    )
    parser.add_argument(
        "--prose-only",
        action="store_true",
        help="for .py twins whose code is unchanged: take their markdown, keep the stored "
        "outputs, execute nothing",
    )
    args = parser.parse_args(argv)
    paths = [p.resolve() for p in args.paths] or sorted(CHAPTERS.glob("*.ipynb")) + sorted(
        (ROOT / "appendix").glob("*.ipynb")
    )
    if not paths:
        print("execute_notebooks: no notebooks in chapters/")
        return 0

    failures = []
    for path in paths:
        start = time.perf_counter()
        print(f"{rel(path)}: executing ...", flush=True)
        try:
            if not path.exists():
                raise ExecutionFailed("no such file")
            nb, notebook, twin = load(path)
            if args.prose_only and path.suffix != ".py":
                raise ExecutionFailed("--prose-only takes the .py twin")
            prepare(nb, keep_outputs=args.prose_only)
            ruff_format(nb)
            if args.prose_only:
                check_code_unchanged(nb, notebook)
            else:
                execute(nb, notebook.parent)
            save(nb, notebook, twin)
        except ExecutionFailed as err:
            failures.append(path)
            print(f"FAILED {rel(path)} after {time.perf_counter() - start:.1f} s: {err}")
            print("  (nothing was written for this notebook)")
            continue
        n_code = sum(1 for c in nb.cells if c.cell_type == "code")
        print(
            f"ok {rel(notebook)} + {twin.name}: {n_code} code cells in "
            f"{time.perf_counter() - start:.1f} s",
            flush=True,
        )

    if failures:
        print(
            f"execute_notebooks: {len(failures)} of {len(paths)} notebook(s) failed: "
            + ", ".join(rel(p) for p in failures)
        )
        return 1
    print(f"execute_notebooks: {len(paths)} notebook(s) executed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
