"""The identity of a finding across commits, for SARIF ``partialFingerprints`` and baselines.

Made of what names the registry, not of where it sits: the code, the file (relative to the
scan's base), the registry's name and the stripped text of its first use. An edit above it
moves its lines and keeps its fingerprint; an edit of that line or a rename gives a new one.
Called by :mod:`harness.scan.sarif` and :mod:`harness.scan.baseline`.
"""

from __future__ import annotations

import hashlib
import os

from harness.scan.finding import RegistryFinding

# The partialFingerprints key: GitHub code scanning keeps keys it does not compute as given.
KEY = "idHazardRegistry/v1"


def relative_uri(path: str, base: str) -> str:
    """``path`` relative to ``base`` with ``/`` separators (absolute when outside ``base``)."""
    absolute = os.path.abspath(path)
    relative = os.path.relpath(absolute, base)
    if relative == ".." or relative.startswith(".." + os.sep):
        return absolute
    return relative.replace(os.sep, "/")


def fingerprint(finding: RegistryFinding, base: str) -> str:
    first = finding.first
    text = "\0".join((
        first.code.label,
        relative_uri(first.path, base),
        finding.name or first.detail.split(";")[0],
        " ".join(first.snippet.split()),
    ))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]
