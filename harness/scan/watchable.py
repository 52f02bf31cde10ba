"""The registries the scan's default output names for one installed package, as data.

``python -m harness scan --sentinel-registries DIR`` prints them; :func:`package_registries`
returns them to a caller that knows the package's dotted name (the sentinel's
``--sentinel-scan PKG``), so module names come from that name and not from the folders around
the package (``megatron.core`` lives in a namespace folder ``megatron/`` with no
``__init__.py``). What is watched is what the command line would print for the same folder: the
``pyproject.toml`` settings above it, hazards at the configured confidence.
"""

from __future__ import annotations

import dataclasses
import os

from harness.scan import settings
from harness.scan.cli import reported
from harness.scan.finding import Severity
from harness.scan.scanner import scan_paths
from harness.scan.sentinel_spec import sentinel_registries


@dataclasses.dataclass(frozen=True)
class PackageRegistries:
    specs: list[str]        # MODULE:ATTR, in finding order, without repeats
    left_out: list[str]     # "registry (file:line): why it cannot be watched"
    unreadable: list[str]   # "file:line: why", files the scan could not check
    files_scanned: int


def package_registries(locations: list[str], package: str) -> PackageRegistries:
    """Scan ``locations`` (the folders of package ``package``, or the file of a module) and name
    its hazardous registries. Raises :class:`harness.errors.UsageError` when there is nothing to scan."""
    config = settings.load(locations)
    result = scan_paths(locations, skip=config.excluded if config.exclude else None)
    shown = reported(result.registries, config.confidence, show_safe=False)
    hazards = [f for f in shown if f.severity is Severity.HAZARD]
    # The folder of the top-level package is the root module names start from.
    depth = package.count(".")
    roots = []
    for location in locations:
        top = os.path.abspath(location if os.path.isdir(location) else os.path.dirname(location))
        for _ in range(depth if os.path.isdir(location) else max(depth - 1, 0)):
            top = os.path.dirname(top)
        roots.append(top)
    top_name = package.split(".")[0]
    found = sentinel_registries(hazards, result.class_files, roots if depth or os.path.isdir(locations[0]) else [])
    specs, left_out = [], list(found.left_out)
    for spec in found.specs:
        module = spec.partition(":")[0]
        if module == top_name or module.startswith(top_name + "."):
            specs.append(spec)
        else:
            left_out.append(f"{spec}: its module name is outside {package} (files beside the package?)")
    unreadable = [f"{f.first.path}:{f.first.line}: {f.first.detail}" for f in shown if f.severity is Severity.ERROR]
    return PackageRegistries(specs, left_out, unreadable, result.files_scanned)
