"""What every tool shares: the repository root (more to come: the pin environment, the
fresh-process runner, the provenance writer). Tools run as modules from the root:
`python -m tools.check.notebooks`."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
