"""What ``--sentinel-scan`` found for a package, kept between sessions while nothing it read changed.

The key is a digest of every Python file under the package's folders (path, size, modification
time), of the scan's own files (a changed rule means a new scan) and of the ``pyproject.toml``
settings above the package; the value is what :func:`harness.scan.watchable.package_registries`
returned. Kept as one JSON file per key under ``$HARNESS_SENTINEL_CACHE`` (default
``$XDG_CACHE_HOME/fp8-harness/sentinel-scan``, ``~/.cache/...``); ``HARNESS_SENTINEL_CACHE=off``
turns it off. A cache that cannot be read or written is ignored: the scan runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Optional

from harness.files import write_atomic

OFF = "off"


def folder() -> Optional[str]:
    chosen = os.environ.get("HARNESS_SENTINEL_CACHE")
    if chosen == OFF:
        return None
    if chosen:
        return chosen
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "fp8-harness", "sentinel-scan")


def _stat_lines(top: str) -> list[str]:
    if os.path.isfile(top):
        stat = os.stat(top)
        return [f"{top} {stat.st_size} {stat.st_mtime_ns}"]
    lines = []
    for directory, subdirectories, files in os.walk(top):
        subdirectories.sort()
        for name in sorted(files):
            if name.endswith((".py", "pyproject.toml")):
                path = os.path.join(directory, name)
                stat = os.stat(path)
                lines.append(f"{path} {stat.st_size} {stat.st_mtime_ns}")
    return lines


def key(package: str, locations: list[str]) -> str:
    import harness.scan
    from harness.scan import settings

    digest = hashlib.sha256(package.encode())
    scan_code = os.path.dirname(os.path.abspath(harness.scan.__file__))
    pyproject = settings.nearest_pyproject(locations)
    for top in [*locations, scan_code, *([pyproject] if pyproject else [])]:
        for line in _stat_lines(top):
            digest.update(line.encode() + b"\n")
    return digest.hexdigest()[:32]


def load(cache_key: str, kind):
    """The cached value as a ``kind`` dataclass, or None."""
    place = folder()
    if place is None:
        return None
    try:
        with open(os.path.join(place, cache_key + ".json"), encoding="utf-8") as handle:
            return kind(**json.load(handle))
    except (OSError, ValueError, TypeError):
        return None


def store(cache_key: str, value) -> None:
    place = folder()
    if place is None:
        return
    try:
        os.makedirs(place, exist_ok=True)
        write_atomic(os.path.join(place, cache_key + ".json"), json.dumps(dataclasses.asdict(value)))
    except OSError:
        pass
