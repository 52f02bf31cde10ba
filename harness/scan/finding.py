"""One finding of the id-hazard scan and its severity."""

from __future__ import annotations

import dataclasses
import enum

from harness.scan.codes import Code


class Severity(enum.Enum):
    """How a finding counts towards the exit status.

    ``HAZARD`` and ``ERROR`` fail the scan (exit 1); ``SAFE`` findings are reported with the
    reason the object cannot die while its id is in use, and do not fail it.
    """

    HAZARD = "hazard"
    SAFE = "safe"
    ERROR = "error"

    @property
    def fails_scan(self) -> bool:
        return self is not Severity.SAFE


class Confidence(enum.Enum):
    """``HIGH``: both halves of the hazard are seen; shown by default. ``LOW``: one is not;
    shown with ``--all``. The names are what ``[tool.fp8-harness.scan] confidence`` takes."""

    HIGH = "high"
    LOW = "low"


@dataclasses.dataclass(frozen=True)
class Finding:
    """A place in a file where state is keyed by (or holds) the identity of an object.

    ``line`` is 1-based and ``col`` is 1-based as well (the column of the flagged expression,
    as flake8 and compilers print it). ``detail`` says what was found and why it got its
    severity; ``snippet`` is the stripped source line.
    """

    path: str
    line: int
    col: int
    code: Code
    severity: Severity
    detail: str
    snippet: str = ""
    registry: str = ""      # the state this use belongs to (uses are grouped by it)
    role: str = ""          # store, read, saved, cached (empty for IDK010/IDK011)
    subject: str = ""       # the whole expression flagged

    @property
    def message(self) -> str:
        return f"{self.code.title}: {self.detail} ({self.severity.value})"

    def sort_key(self) -> tuple:
        return (self.path, self.line, self.col, self.code.label)

    def as_dict(self) -> dict:
        """Plain data for ``--format json``."""
        return {
            "file": self.path,
            "line": self.line,
            "col": self.col,
            "code": self.code.label,
            "severity": self.severity.value,
            "message": self.message,
            "snippet": self.snippet,
        }


@dataclasses.dataclass(frozen=True)
class RegistryFinding:
    """One piece of id-keyed state and every place that uses it: what the report prints.

    ``uses`` are the per-line :class:`Finding` records (stores, reads, saved ids), sorted; the
    first is where the report points. ``why`` says what goes wrong (or, for a safe finding,
    why nothing can); ``fix`` is the advice for a hazard (empty when safe).
    """

    name: str
    severity: Severity
    why: str
    fix: str
    uses: tuple[Finding, ...]
    lifetime: str = ""      # how long the registry lives: module, class, instance, local...
    confidence: Confidence = Confidence.HIGH   # for a hazard: how sure the scan is (confidence.py)
    confidence_reason: str = ""

    @property
    def first(self) -> Finding:
        return self.uses[0]

    @property
    def code(self) -> Code:
        return self.first.code

    @property
    def lines(self) -> set[tuple[str, int]]:
        return {(use.path, use.line) for use in self.uses}

    def count(self, role: str) -> int:
        return sum(1 for use in self.uses if use.role == role)

    def headline(self) -> str:
        if not self.name:
            return f"{self.code.title}: {self.first.detail} ({self.severity.value})"
        roles = ", ".join(
            f"{n} {role}{'s' if n > 1 else ''}"
            for role in ("store", "read", "saved", "cached")
            if (n := self.count(role))
        )
        return f"{self.code.title}: {self.name} ({roles}) ({self.label})"

    @property
    def label(self) -> str:
        """``hazard, high confidence``, ``hazard, low confidence``, ``safe`` or ``error``."""
        if self.severity is Severity.HAZARD and self.name:
            return f"hazard, {self.confidence.value} confidence"
        return self.severity.value

    def sort_key(self) -> tuple:
        return self.first.sort_key()

    def as_dict(self) -> dict:
        """Plain data for ``--format json``: the registry, why, fix and every use."""
        first = self.first
        return {
            "file": first.path,
            "line": first.line,
            "col": first.col,
            "code": first.code.label,
            "severity": self.severity.value,
            "registry": self.name,
            "message": self.headline(),
            "confidence": self.confidence.value if self.severity is Severity.HAZARD else None,
            "confidence_reason": self.confidence_reason,
            "why": self.why,
            "fix": self.fix,
            "snippet": first.snippet,
            "uses": [dict(use.as_dict(), role=use.role) for use in self.uses],
        }
