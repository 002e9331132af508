"""What check_model returns: one Finding per check, gathered in a ModelReport.

Used in chapter 17.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

STAGES = ("shapes", "masks", "data", "loss at init", "gradients", "nan/inf", "overfit")


@dataclass(frozen=True)
class Finding:
    """One check: its stage, its name, 'ok' / 'FAIL' / 'skip', and what was seen.

    Built in chapter 17.
    """

    stage: str
    check: str
    status: str
    message: str

    @property
    def ok(self) -> bool:
        return self.status != "FAIL"


@dataclass
class ModelReport:
    """The findings of check_model, in debugging order. report.ok is False if any check failed.

    Built in chapter 17.
    """

    findings: list[Finding] = field(default_factory=list)
    grad_norms: dict[str, float] = field(default_factory=dict)  # block name -> gradient norm

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.findings)

    @property
    def failures(self) -> list[Finding]:
        return [f for f in self.findings if f.status == "FAIL"]

    @property
    def failed_checks(self) -> list[str]:
        return [f.check for f in self.failures]

    def __getitem__(self, check: str) -> Finding:
        for f in self.findings:
            if f.check == check:
                return f
        raise KeyError(
            f"no check named {check!r}; the checks are {[f.check for f in self.findings]}"
        )

    def flagged(self, check: str) -> bool:
        """True if the check named `check` failed."""
        return self[check].status == "FAIL"

    def add(self, stage: str, check: str, status: str, message: str) -> None:
        if stage not in STAGES or status not in ("ok", "FAIL", "skip"):
            raise ValueError(
                f"stage must be one of {STAGES} and status one of ok/FAIL/skip, "
                f"got {stage!r} and {status!r}"
            )
        self.findings.append(Finding(stage, check, status, message))

    def __str__(self) -> str:
        counts = {s: sum(f.status == s for f in self.findings) for s in ("ok", "skip", "FAIL")}
        head = (
            f"check_model: {len(self.findings)} checks: {counts['ok']} ok, "
            f"{counts['skip']} skipped, {counts['FAIL']} FAIL"
        )
        order = {s: i for i, s in enumerate(STAGES)}
        lines = [head]
        for f in sorted(self.findings, key=lambda f: order[f.stage]):  # stable: keeps check order
            lines.append(f"  {f.stage:<12} {f.status:<4}  {f.check:<22} {f.message}")
        return "\n".join(lines)

    __repr__ = __str__


def short(x: float) -> str:
    """A number printed to 2 significant digits: stable across CPUs, enough to judge.

    Used in chapter 17.
    """
    if x == 0:
        return "0"
    if not math.isfinite(x):
        return str(x)
    s = f"{x:.2g}"
    return s + ".0" if s.isdigit() and len(s) == 1 else s
