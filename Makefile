# A Transformer from Scratch in PyTorch: build, test and run the book.
#
#   make book      install what is needed (once), then build the HTML book
#   make test      install what is needed (once), then run every check but the slow unit tests
#   make test-slow the unit tests marked slow or integration (.ci/run runs them after make test)
#   make check     the fast inner loop: lint, pairing, unit tests not marked slow/integration
#   make lab       open the chapters in JupyterLab
#   make execute   re-execute notebooks in a fresh kernel (NB=chapters/03_x.py for one)
#
# Everything runs in a local virtual environment, .venv, created from requirements.txt.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The book's Jupyter kernel (tools/build/install_kernel.py): this venv's Python with the pinned
# numerics of src/helpers/repro/pin.py in its environment. JupyterLab, nbval and
# tools/build/execute_notebooks.py all run the chapters in it.
KERNEL := $(VENV)/share/jupyter/kernels/transformer-book/kernel.json
SETUP  := $(STAMP) $(KERNEL)
# The same pin for make doctor, and the deliberately broken one of make test-portable. The
# unit tests run with PyTorch's defaults (faster); tests/test_numerics.py checks the pin in a
# process of its own. pin.py is plain data: no torch import.
PINNED := $(shell $(PYTHON) src/helpers/repro/pin.py pinned)
BROKEN := $(shell $(PYTHON) src/helpers/repro/pin.py broken)
# -W --keep-going: report every warning, then fail. --all: rebuild every page, so that
# warnings from unchanged pages are reported too (a full build takes seconds).
BOOK_BUILD := $(BIN)/jupyter-book build -q -W --keep-going --all .

# Kernels started by JupyterLab, nbval and tools/build/execute_notebooks.py all hash strings
# the same way, so outputs that depend on set order agree.
export PYTHONHASHSEED := 0

.DEFAULT_GOAL := help
.PHONY: help venv book test lint format test-unit test-pairing test-conventions test-notebooks \
        test-pytest test-book test-portable doctor lab execute clean distclean check-browser \
        record-gpu check test-fast test-slow

help:
	@echo "make book     build the book into _build/html/index.html (installs first if needed)"
	@echo "make test     lint, pairing, conventions, fast unit tests, nbval, book build with -W"
	@echo "make test-slow  the unit tests marked slow or integration (.ci/run runs them too)"
	@echo "make check    the fast inner loop: lint, pairing, unit tests not marked slow/integration"
	@echo "make lint     ruff (lint + format check) and codespell; make format applies ruff"
	@echo "make test-portable  the notebooks with the numerics pin broken: must pass anyway"
	@echo "make doctor   this machine's numerics, and whether it shows the book's exact digits"
	@echo "make lab      JupyterLab on the chapters"
	@echo "make execute  re-execute every chapter and appendix notebook (or NB=chapters/NN_slug.py)"
	@echo "make check-browser  the book, the heatmap chapter's widgets and the chapters' markup in headless Chromium"
	@echo "make record-gpu OUT=DIR  on a GPU machine: record the GPU results (tools/record/gpu.py)"
	@echo "make clean    remove build outputs; make distclean also removes .venv"

# ---------------------------------------------------------------------------- set-up
venv: $(SETUP)

# Re-run whenever requirements.txt or pyproject.toml changes. The `-e .` line of
# requirements.txt installs `helpers` in editable mode; its build normally fetches
# setuptools into an isolated environment. Where no package index has setuptools
# (offline), the second attempt builds with the venv's own setuptools instead.
# pip installs and byte-compiles on one core (about 110 s of wall time on the 2-core machine);
# uv does the same in parallel, from the same sources and at the same versions (26 s), so it
# goes first: tools/build/install_requirements.py hands it pip's configuration. If uv cannot
# be had or fails, pip installs as before. The byte-compiling is kept: where
# PYTHONDONTWRITEBYTECODE is set, every process would otherwise compile its imports again
# (24 s of CPU instead of 12 for torch, transformers, matplotlib, ipykernel and sphinx), and
# make test starts a kernel per notebook.
$(STAMP): requirements.txt pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m tools.build.install_requirements \
	  || $(BIN)/python -m pip install -r requirements.txt \
	  || $(BIN)/python -m pip install --no-build-isolation -r requirements.txt
	@touch $@
	@echo "installed: $(VENV) is ready"

$(KERNEL): $(STAMP) src/helpers/repro/pin.py tools/build/install_kernel.py
	$(BIN)/python -m tools.build.install_kernel

# ---------------------------------------------------------------------------- book
book: $(SETUP)
	$(BOOK_BUILD)
	@echo "book: open _build/html/index.html"

# ---------------------------------------------------------------------------- tests
# pytest exits 5 when it collects no test: fine while tests/ or chapters/ hold no test
# yet. Any other failure still fails.
PYTEST_ALLOW_EMPTY = rc=$$?; if [ $$rc -eq 5 ]; then echo "(no tests collected: nothing to check yet)"; rc=0; fi; exit $$rc

test: lint test-pairing test-conventions test-pytest test-book
	@echo "make test: all checks passed (lint, pairing, conventions, fast unit tests and notebook outputs, book)"
	@echo "(the unit tests marked slow or integration: make test-slow)"

# ruff (lint + format check, settings in pyproject.toml) over the package, tests, tools and
# the chapter notebooks (their .py twins are generated from them); codespell over code and prose.
LINT_PATHS := src tests tools chapters/*.ipynb appendix/*.ipynb conftest.py
lint: $(SETUP)
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/codespell src tests tools chapters/*.py chapters/*.md appendix/*.py appendix/*.md \
	  chapters/data/README.md README.md CONTRIBUTING.md CHANGELOG.md _config.yml _toc.yml

# Apply ruff's formatting and safe fixes to the package, tests and tools. Chapters are
# formatted by tools/build/execute_notebooks.py when they are executed.
format: $(SETUP)
	$(BIN)/ruff format src tests tools conftest.py
	$(BIN)/ruff check --fix src tests tools conftest.py

test-unit: $(SETUP)
	@if [ -d tests ]; then \
	  echo "$(BIN)/python -m pytest tests/ -q"; $(BIN)/python -m pytest tests/ -q; $(PYTEST_ALLOW_EMPTY); \
	else echo "no tests/ folder yet: no unit tests to run"; fi

# The inner loop while editing (CONTRIBUTING.md): what `make test` checks first, less the
# notebooks. Neither runs the tests marked slow or integration (tests/conftest.py's MARKED
# table, the markers registered in pytest.ini): `make test-slow` runs those, and .ci/run runs
# it after `make test`.
FAST_TESTS := -m "not slow and not integration"
SLOW_TESTS := -m "slow or integration"
check: lint test-pairing test-fast
	@echo "make check: lint, pairing and the fast unit tests passed (make test runs the notebooks too)"

test-fast: $(SETUP)
	$(BIN)/python -m pytest tests/ -q $(FAST_TESTS) -n 2

test-slow: $(SETUP)
	$(BIN)/python -m pytest tests/ -q $(SLOW_TESTS) -n 2

test-pairing: $(SETUP)
	$(BIN)/python -m tools.check.pairing

# What nbval cannot see: unexecuted cells, addresses in outputs, checks printed as True,
# long lines, titles, Summary/Exercises/solutions, a figure per chapter.
test-conventions: $(SETUP)
	$(BIN)/python -m tools.check.notebooks

# Two workers, one notebook each at a time (--dist loadfile keeps a notebook's cells in
# order in one kernel). A model that two notebooks need is trained once: the checkpoint
# cache holds a lock while it trains.
NBVAL_WORKERS ?= 2
XDIST := -n $(NBVAL_WORKERS) --dist loadfile --no-loadscope-reorder
test-notebooks: $(SETUP)
	@echo "$(BIN)/python -m pytest --nbval chapters/ appendix/ -q $(XDIST)"; \
	$(BIN)/python -m pytest --nbval chapters/ appendix/ -q $(XDIST); \
	$(PYTEST_ALLOW_EMPTY)

# What `make test` runs: the fast unit tests and the notebooks in one pytest session on the
# same two workers, longest files first (conftest.py's LONGEST_FIRST), so that neither core
# idles while the other finishes a long chapter (measured on a fresh clone of the pinned book,
# cold checkpoint cache, 2-core AMD EPYC: the session 431 s). The tests marked slow or
# integration are left to `make test-slow`: 75 tests, 202 s of CPU time when measured alone
# (2026-12-03, loaded 2-core machine), so about 100 s less wall time on two idle cores.
test-pytest: $(SETUP)
	$(BIN)/python -m pytest tests/ --nbval chapters/ appendix/ -q $(XDIST) $(FAST_TESTS)

# The notebooks with the pin deliberately broken (src/helpers/repro/pin.py BROKEN_PIN: ATen's
# scalar kernels, so every seeded random tensor differs in its last bits, and MKL's default
# path, so every matmul does), as on a reader's ARM or unusual CPU, in kernels of this
# Python that inherit that environment. Every model is retrained from a cold cache of its
# own. Every check must still pass. .ci/run runs it after make test.
PORTABLE_CACHE := $(CURDIR)/.cache/portable-checkpoints
test-portable: $(SETUP)
	rm -rf $(PORTABLE_CACHE)
	env $(BROKEN) TRANSFORMER_BOOK_CACHE=$(PORTABLE_CACHE) \
	  $(BIN)/python -m pytest --nbval chapters/ appendix/ --nbval-current-env -q $(XDIST)

# This machine's numerics (CPU, kernels, BLAS mode, threads, versions), a fingerprint of a
# few seeded computations compared with the book's, and a plain verdict; run in the book
# kernel's environment.
doctor: $(SETUP)
	@env $(PINNED) $(BIN)/python -m tools.check.doctor

# The book must work offline and without JavaScript errors: no page may load a script,
# stylesheet, image or frame from another host, and the sphinx-thebe inline script
# (which throws "Identifier 'THEBE_JS_URL' has already been declared" when a page
# holds it twice) must not come back.
test-book: $(SETUP)
	$(BOOK_BUILD)
	@test -f _build/html/index.html
	@remote=$$(grep -rlE '<(script|link|img|iframe)[^>]*(src|href)="(https?:)?//' \
	    --include='*.html' _build/html || true); \
	if [ -n "$$remote" ]; then echo "pages loading remote resources:"; echo "$$remote"; exit 1; fi; \
	thebe=$$(grep -rl THEBE_JS_URL --include='*.html' _build/html || true); \
	if [ -n "$$thebe" ]; then echo "pages with sphinx-thebe's inline script:"; echo "$$thebe"; exit 1; fi; \
	echo "book: _build/html/index.html built; no remote resources, no thebe script"

# ---------------------------------------------------------------------------- browser
# tools/check/browser/ in Debian's headless Chromium: (a) every page of the built book
# (math rendered, images loaded, no request off localhost, no JavaScript error); (b) the
# heatmap chapter run in JupyterLab, its layer control switched, the heatmap redrawn; (c) every
# chapter opened in JupyterLab: no raw MyST markup, dropdowns collapsed, images loaded.
# Chromium is installed from Debian's packages when missing (as root, or through sudo).
SUDO := $(if $(filter 0,$(shell id -u 2>/dev/null)),,sudo)
check-browser: $(SETUP)
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium (apt-get)"; \
	  $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }
	@test -f _build/html/index.html || $(BOOK_BUILD)
	$(BIN)/python -m tools.check.browser

# ---------------------------------------------------------------------------- GPU
# The one command to run on a machine with an NVIDIA GPU (it needs only python3 with torch,
# numpy and pytest: no virtual environment). It writes one JSON file per part into OUT;
# copy them into chapters/data/, list them in chapters/data/README.md and show them on an
# Experiments page (no chapter reads them yet).
OUT ?= gpu_results
record-gpu:
	PYTHONPATH=src python3 -m tools.record.gpu --device cuda --out $(OUT)

# ---------------------------------------------------------------------------- authoring
# The server runs at the repository root (so jupytext.toml applies and src/ is at hand)
# and opens on chapters/. JupyterLab refuses to run as root unless told to.
LAB_ROOT_FLAG := $(if $(filter 0,$(shell id -u 2>/dev/null)),--allow-root)
lab: $(SETUP)
	$(BIN)/jupyter lab $(LAB_ROOT_FLAG) --ServerApp.root_dir="$(CURDIR)" \
	  --LabApp.default_url=/lab/tree/chapters

NB ?=
execute: $(SETUP)
	$(BIN)/python -m tools.build.execute_notebooks $(NB)

# ---------------------------------------------------------------------------- cleaning
clean:
	rm -rf _build .pytest_cache
	find . -path ./$(VENV) -prune -o \( -name __pycache__ -o -name .ipynb_checkpoints \) -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
