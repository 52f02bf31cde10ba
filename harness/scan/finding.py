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
