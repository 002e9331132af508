"""The text of a chapter's or an Experiments page's py:percent twin, as the prose-versus-record
tests read it: comment marks removed, lines joined, white space folded to single spaces."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def prose(source: str | Path, markdown_only: bool = False) -> str:
    """source: a twin's Path, its path relative to the repository ('chapters/10_training.py'),
    or its text. markdown_only: keep only the markdown cells (else code lines stay in too)."""
    if isinstance(source, Path):
        text = source.read_text()
    elif "\n" not in source and source.endswith(".py"):
        text = (ROOT / source).read_text()
    else:
        text = source
    kept, in_markdown = [], not markdown_only
    for line in text.splitlines():
        if markdown_only and line.startswith("# %%"):
            in_markdown = "[markdown]" in line
            continue
        if in_markdown:
            kept.append(line[2:] if line.startswith("# ") else line.lstrip("#"))
    return re.sub(r"\s+", " ", " ".join(kept)).strip()
