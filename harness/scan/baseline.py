"""``--baseline FILE``: findings already known stay quiet, new ones fail the scan.

The file is JSON written by ``--write-baseline FILE``: a version and one record per finding
(its fingerprint, from :mod:`harness.scan.fingerprint`, and for people the file, code and
registry). :func:`load` is called by the CLI before it reports; a missing or malformed file
is bad input (exit 2), never an empty baseline.
"""

from __future__ import annotations

import json
import os

from harness.errors import UsageError
from harness.scan.finding import RegistryFinding
from harness.scan.fingerprint import fingerprint, relative_uri

VERSION = 1


def dumps(findings: list[RegistryFinding], base: str) -> str:
    records = [
        {
            "fingerprint": fingerprint(f, base),
            "file": relative_uri(f.first.path, base),
            "code": f.code.label,
            "registry": f.name,
        }
        for f in findings
    ]
    return json.dumps({"version": VERSION, "findings": records}, indent=2) + "\n"


def load(path: str) -> set[str]:
    """The fingerprints a baseline file holds."""
    if not os.path.isfile(path):
        raise UsageError(f"baseline {path} does not exist (write one with --write-baseline {path})")
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError) as error:
        raise UsageError(f"baseline {path} cannot be read: {error}") from None
    if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("findings"), list):
        raise UsageError(f"baseline {path} is not a version-{VERSION} baseline (write one with --write-baseline)")
    try:
        return {record["fingerprint"] for record in data["findings"]}
    except (TypeError, KeyError):
        raise UsageError(f"baseline {path}: every record needs a fingerprint") from None
