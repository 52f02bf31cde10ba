"""``--sentinel-scan PKG``: find an installed package's source without importing it, scan it, and
name the registries the scan's default output lists, with what could not be watched and why.

A package that is not installed, has no Python source on disk (built in, frozen, an extension
module, inside a zip) or whose folder has no Python file is a usage error: one line, and the
session does not start, so nothing is watched half-way.
"""

from __future__ import annotations

import dataclasses
import importlib.machinery
import importlib.util
import os
import time

import pytest

from harness.errors import UsageError
from harness.sentinel import scan_cache

MAX_LEFT_OUT_SHOWN = 10


@dataclasses.dataclass(frozen=True)
class ScannedPackage:
    name: str
    locations: list[str]
    specs: list[str]
    left_out: list[str]
    unreadable: list[str]
    files: int
    seconds: float
    cached: bool = False

    def header(self) -> list[str]:
        where = ", ".join(self.locations)
        found = f"{len(self.specs)} registr{'y' if len(self.specs) == 1 else 'ies'} to watch" if self.specs else \
            "nothing to watch: the scan found no id()-keyed registry a module reaches, at the configured confidence"
        lines = [f"sentinel: scanned {self.name} ({where}, {self.files} files, {self.seconds:.1f} s{', cached' if self.cached else ''}): {found}"]
        shown = self.left_out[:MAX_LEFT_OUT_SHOWN]
        lines += [f"sentinel:   not watchable: {line}" for line in shown]
        if len(self.left_out) > len(shown):
            lines.append(f"sentinel:   ... and {len(self.left_out) - len(shown)} more not watchable "
                         f"(python -m harness scan --sentinel-registries {where})")
        lines += [f"sentinel:   not checked by the scan: {line}" for line in self.unreadable[:MAX_LEFT_OUT_SHOWN]]
        return lines


def _fail(name: str, why: str) -> pytest.UsageError:
    return pytest.UsageError(f"--sentinel-scan {name}: {why}; nothing is watched")


def locate(name: str) -> list[str]:
    """The folders of package ``name`` (or the file of module ``name``), found without importing it
    (its parent packages are not imported either). UsageError says why there is none."""
    parts = name.split(".")
    if not all(part.isidentifier() for part in parts):
        raise _fail(name, "not a dotted module name")
    try:
        spec = importlib.util.find_spec(parts[0])
        for part in parts[1:]:
            if spec is None or spec.submodule_search_locations is None:
                spec = None
                break
            spec = importlib.machinery.PathFinder.find_spec(part, list(spec.submodule_search_locations))
    except (ImportError, ValueError) as error:
        raise _fail(name, f"cannot be looked up: {type(error).__name__}: {error}") from None
    if spec is None:
        raise _fail(name, "no installed package or module of that name (check the name and the environment)")
    if spec.submodule_search_locations is not None:
        folders = [p for p in spec.submodule_search_locations if os.path.isdir(p)]
        if folders:
            return folders
        raise _fail(name, f"its package has no folder on disk to scan ({list(spec.submodule_search_locations)})")
    origin = spec.origin or ""
    if origin in ("built-in", "frozen") or not origin:
        raise _fail(name, f"a {origin or 'source-less'} module, with no Python source to scan")
    if origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
        raise _fail(name, f"an extension module ({origin}), with no Python source to scan")
    if not os.path.isfile(origin):
        raise _fail(name, f"its source {origin} is not a file on disk (inside an archive?); the scan reads files")
    return [origin]


def scan(name: str) -> ScannedPackage:
    """Locate and scan package ``name``; UsageError (one line) when it cannot be scanned."""
    from harness.scan.watchable import package_registries   # only when asked: the scan is big

    from harness.scan.watchable import PackageRegistries

    locations = locate(name)
    start = time.perf_counter()
    cache_key = scan_cache.key(name, locations)
    found = scan_cache.load(cache_key, PackageRegistries)
    cached = found is not None
    if found is None:
        try:
            found = package_registries(locations, name)
        except UsageError as error:
            raise _fail(name, f"the scan cannot read it: {error}") from None
        if found.files_scanned == 0:
            raise _fail(name, f"no Python file under {', '.join(locations)}")
        scan_cache.store(cache_key, found)
    return ScannedPackage(name, locations, found.specs, found.left_out, found.unreadable,
                          found.files_scanned, time.perf_counter() - start, cached)
