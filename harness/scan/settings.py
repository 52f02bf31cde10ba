"""Settings of the scan from the ``pyproject.toml`` nearest above the scanned paths.

``[tool.fp8-harness.scan]`` takes ``exclude`` (a list of glob patterns, matched against
paths relative to the directory of that ``pyproject.toml``, ``*`` spanning ``/``) and
``confidence`` (``"high"``, the default: hazards the scan is sure of; ``"low"``: every hazard,
as ``--all`` without the safe findings). The command line's ``--all`` and ``--exclude``
win over the file. Called once by :func:`harness.scan.cli.main` before the scan.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
from typing import Iterable, Optional

from harness.errors import UsageError
from harness.scan.finding import Confidence

SECTION = "tool.fp8-harness.scan"
_KNOWN = {"exclude", "confidence"}


@dataclasses.dataclass(frozen=True)
class ScanSettings:
    exclude: tuple[str, ...] = ()
    confidence: Confidence = Confidence.HIGH
    root: str = ""           # the directory the patterns are relative to
    source: str = ""         # the pyproject.toml they came from, or "" for the defaults

    def __post_init__(self):
        for pattern in self.exclude:
            if not isinstance(pattern, str) or not pattern:
                raise UsageError(f"{self.source}: [{SECTION}] exclude must be a list of non-empty strings, got {pattern!r}")

    def excluded(self, path: str) -> bool:
        """Whether ``path`` matches a pattern (or lies under a directory that does)."""
        if not self.exclude:
            return False
        relative = os.path.relpath(os.path.abspath(path), self.root or os.getcwd()).replace(os.sep, "/")
        parts = relative.split("/")
        candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        return any(fnmatch.fnmatchcase(candidate, pattern.rstrip("/")) for pattern in self.exclude for candidate in candidates)


def nearest_pyproject(paths: Iterable[str]) -> Optional[str]:
    """The ``pyproject.toml`` in the deepest directory that holds every scanned path (or
    above it), or None."""
    absolute = [os.path.abspath(p) for p in paths if p]
    if not absolute:
        return None
    start = os.path.commonpath(absolute)
    if os.path.isfile(start):
        start = os.path.dirname(start)
    current = start
    while True:
        candidate = os.path.join(current, "pyproject.toml")
        if os.path.isfile(candidate):
            return candidate
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def load(paths: Iterable[str]) -> ScanSettings:
    """The settings for a scan of ``paths``; the defaults when no ``pyproject.toml`` above
    them has the section. UsageError (exit 2) names a file that cannot be read or a bad value."""
    path = nearest_pyproject(paths)
    if path is None:
        return ScanSettings()
    try:
        import tomllib
    except ModuleNotFoundError:          # Python 3.10
        try:
            import tomli as tomllib      # type: ignore[no-redef]
        except ModuleNotFoundError:
            raise UsageError(f"{path} cannot be read: Python 3.10 needs the tomli package for it (or use Python 3.11+)") from None
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise UsageError(f"{path} cannot be read: {error}") from None
    section = data.get("tool", {}).get("fp8-harness", {}).get("scan")
    if section is None:
        return ScanSettings(root=os.path.dirname(path))
    if not isinstance(section, dict):
        raise UsageError(f"{path}: [{SECTION}] must be a table")
    unknown = sorted(set(section) - _KNOWN)
    if unknown:
        raise UsageError(f"{path}: [{SECTION}] has unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(_KNOWN))}")
    exclude = section.get("exclude", [])
    if not isinstance(exclude, list):
        raise UsageError(f"{path}: [{SECTION}] exclude must be a list of glob patterns, got {exclude!r}")
    try:
        confidence = Confidence(section.get("confidence", "high"))
    except ValueError:
        raise UsageError(
            f"{path}: [{SECTION}] confidence must be one of {', '.join(c.value for c in Confidence)}, got {section.get('confidence')!r}"
        ) from None
    return ScanSettings(tuple(exclude), confidence, os.path.dirname(path), path)
