"""Print, per chapter, the words of prose and the median sentence length.

    python -m tools.check.prose_stats [chapters/*.ipynb ...]

Prose is the markdown of a chapter outside code blocks, math and collapsed dropdowns
(`:::{dropdown}` ... `:::`); "main path" counts only what is not in a dropdown. Sentences end
at '.', '?' or '!' followed by a space or the end of a line. Issue 18 of the book asks for a
median sentence of at most 20 words and at most 2,500 main-path words per chapter;
tools/check/notebooks.py enforces both (in `make test`) and prints the same table.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

from tools.common import ROOT

FENCE = re.compile(r"```.*?```", re.S)
MATH = re.compile(r"\$\$.*?\$\$|\$[^$\n]+\$", re.S)
ROLE = re.compile(r"\{(cite|ref|numref|doc)\}`[^`]*`")
CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
SENTENCE_END = re.compile(r"(?<=[.?!])\s+(?=[A-Z(*`$\"'])")
WORD = re.compile(r"[A-Za-z0-9][\w'-]*")


def split_dropdowns(md: str) -> tuple[str, str]:
    """(main-path text, text inside ':::{dropdown}' blocks, also '::::{dropdown}' ones).

    A fence closes on a line of as many colons as opened it; fences of other directives
    inside a dropdown stay inside it.
    """
    main, deep, stack = [], [], []
    for line in md.splitlines():
        stripped = line.strip()
        opening = re.match(r"(:{3,})\{(\w+)\}", stripped)
        if opening:
            stack.append((opening.group(1), opening.group(2) == "dropdown"))
            if opening.group(2) == "dropdown":
                continue
        elif stack and stripped == stack[-1][0]:
            _, was_dropdown = stack.pop()
            if was_dropdown:
                continue
        (deep if any(d for _, d in stack) else main).append(line)
    return "\n".join(main), "\n".join(deep)


def clean(text: str) -> str:
    text = FENCE.sub(" ", text)
    text = MATH.sub(" x ", text)
    text = ROLE.sub(" ref ", text)
    text = CODE.sub(" code ", text)
    text = LINK.sub(r"\1", text)
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith(("|", "#", ":::"))]
    return "\n".join(lines)


def sentences(text: str) -> list[int]:
    """Word counts of the sentences in text (list items and paragraphs end a sentence)."""
    counts = []
    for block in re.split(r"\n\s*\n|\n\s*[-*] |\n\s*\d+\. ", text):
        for sentence in SENTENCE_END.split(" ".join(block.split())):
            n = len(WORD.findall(sentence))
            if n:
                counts.append(n)
    return counts


def stats(path: Path) -> dict:
    nb = json.loads(path.read_text(encoding="utf-8"))
    md = "\n\n".join("".join(c["source"]) for c in nb["cells"] if c.get("cell_type") == "markdown")
    main, deep = split_dropdowns(md)
    main, deep = clean(main), clean(deep)
    lengths = sentences(main + "\n\n" + deep)
    return {
        "chapter": path.stem[:2],
        "words": sum(lengths),
        "main_words": sum(sentences(main)),
        "median_sentence": statistics.median(lengths) if lengths else 0,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every chapter")
    paths = parser.parse_args(argv).notebooks
    paths = paths or sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))
    print(f"{'chapter':>7s} {'words':>6s} {'main path':>9s} {'median sentence':>15s}")
    rows = [stats(p) for p in paths]
    for r in rows:
        print(
            f"{r['chapter']:>7s} {r['words']:6,d} {r['main_words']:9,d} "
            f"{r['median_sentence']:15.1f}"
        )
    total = sum(r["words"] for r in rows)
    print(f"{'all':>7s} {total:6,d} {sum(r['main_words'] for r in rows):9,d}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
