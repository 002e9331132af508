"""Check the book in a real browser: headless Chromium driven over the DevTools protocol.

Usage (from the repository root; `make check-browser` runs the first):
    python -m tools.check.browser                 # every check
    python -m tools.check.browser --book-only     # (a) only
    python -m tools.check.browser --lab-only      # (b) and (c) only
    python -m tools.check.browser --markup-only   # (c) only
    python -m tools.check.browser --screenshots DIR   # keep screenshots of (b) in DIR

(a) book_pages.py: the HTML book (_build/html; built first when missing) is opened twice:
    served from 127.0.0.1, and from disk (file://, as a reader who opens
    _build/html/index.html does). Each time every page is opened. For each page: every math
    element (.math) holds MathJax output (an mjx-container), every <img> has loaded
    (naturalWidth > 0), every network request went to the local server, or stayed on disk
    under file:// (or is a data:/blob: URL), and nothing was logged as a JavaScript error
    (console.error, an uncaught exception, a failed load).
    live_explorer.py: on chapter 21's page the live explorer (book_assets/attention_explorer.js,
    running book_model.js on the weights of tools/build/export_live_models.py) must start with
    labelled controls and draw; Step and Back must move through decoding and grow the KV
    cache; a focused cell's tooltip must show its weight, its fill be matplotlib's Blues, and
    ArrowRight move the focus. In one call the page decodes, with each of the three models,
    every input of 1 and 2 digits and 200 of each length 3 to 12 (the task's lengths): the
    tokens must equal helpers.greedy_decode's and the logits of every step of 36 inputs must
    be within 1e-4 of PyTorch's (the max is printed), the reference built from the weights
    files the page loads; its erf must match math.erf. Invalid inputs must get a message.
(b) lab_chapter.py: JupyterLab is started on 127.0.0.1 (free port, no token, temporary
    settings, runtime and root folders) on a COPY of chapters/21_cross_attention_heatmaps.ipynb.
    The check runs all cells (command `runmenu:run-all`), waits for the kernel, requires no
    error output, finds the explorer widget, switches its layer control and requires that the
    heatmap image changes, then types an invalid input and requires the widget's error
    message (and no traceback).
(c) lab_markup.py: JupyterLab renders the book's MyST markup (jupyterlab-myst): every chapter
    notebook is opened (all cells attached: windowing off) and, once its markdown has
    rendered, no markdown cell may show raw markup: `{cite}`, `{ref}`, `{numref}`, `:::` or
    "```{"; every `:::{dropdown}` of the source must be a collapsed <details> element, and
    every image in the prose (the opening picture) must have loaded.

The modules: devtools.py, the DevTools client (Chromium, the CDP session, page events), which
knows nothing about the book; book.py, where the book is; servers.py, the static HTTP server
and JupyterLab; one module per check; the JavaScript they run in the page in .js files
(book_page.js, live_explorer.js, jupyterlab.js); cli.py, the command line and report.py, the
verdicts.

Chromium is Debian's (`apt-get install chromium`; `make check-browser` installs it when
missing). The driver is websocket-client (a dependency of jupyter_server) speaking the
Chrome DevTools Protocol: no browser download, no Node. Prints PASS/FAIL per check and
exits 1 on any failure.
"""
