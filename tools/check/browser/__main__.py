"""`python -m tools.check.browser`: see tools/check/browser/__init__.py."""

import sys

from tools.check.browser.cli import main

sys.exit(main(sys.argv[1:]))
