"""From scan findings to the registries ``pytest -p harness.sentinel`` watches.

``python -m harness scan --sentinel-registries PATH...`` calls :func:`sentinel_registries`
and prints one ``--sentinel-registry=MODULE:ATTR`` line per hazardous registry that can be
named that way, so a project runs its own tests under the sentinel with::

    pytest -p harness.sentinel $(python -m harness scan --sentinel-registries src/pkg)

Only state reachable from a module can be watched: a module global (``MODULE:name``), a
class attribute (``MODULE:Class.attr``) or an attribute of a module-level object. A registry
on ``self``, in a closure or a local is named on stderr with the reason it is left out.

The module name of a file is found by walking up its directories while they are packages
(hold ``__init__.py``), or lie inside a directory named on the command line (namespace
packages such as ``megatron/``), or are that directory itself when it was named by name
(``scan megatron``, not ``scan .``).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

from harness.scan.finding import RegistryFinding, Severity

_NAMEABLE = {"module", "class", "global object"}
_HOLDERS = {
    "local": "a local of a function",
    "closure": "a closure",
    "instance": "an instance",
    "parameter": "a container the caller passes",
    "returned": "a container a function returns",
    "temporary": "a temporary",
}


@dataclasses.dataclass(frozen=True)
class SentinelRegistries:
    specs: list[str]        # MODULE:ATTR, in finding order, without repeats
    left_out: list[str]     # "registry (file:line): why", for stderr


def module_name(path: str, roots: list[str]) -> Optional[str]:
    """The dotted module name of the file ``path`` (see the module docstring), or None."""
    absolute = os.path.abspath(path)
    directory, file_name = os.path.split(absolute)
    stem = os.path.splitext(file_name)[0]
    parts = [] if stem == "__init__" else [stem]
    named = {os.path.abspath(root): os.path.basename(os.path.normpath(root)) not in (".", "..") for root in roots}
    while True:
        inside = any(directory.startswith(root + os.sep) for root in named)
        is_named_root = named.get(directory, False)
        if not (os.path.isfile(os.path.join(directory, "__init__.py")) or inside or is_named_root):
            break
        name = os.path.basename(directory)
        if not name.isidentifier():
            break
        parts.append(name)
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        directory = parent
    dotted = ".".join(reversed(parts))
    return dotted if dotted and all(p.isidentifier() for p in parts) else None


def sentinel_registries(findings: list[RegistryFinding], class_files: dict[str, str], roots: list[str]) -> SentinelRegistries:
    """The ``MODULE:ATTR`` of every hazard finding's registry that a module can reach."""
    specs: list[str] = []
    left_out: list[str] = []
    for finding in findings:
        if finding.severity is not Severity.HAZARD or not finding.name:
            continue
        first = finding.first
        where = f"{finding.name} ({first.path}:{first.line})"
        if finding.lifetime not in _NAMEABLE:
            holder = _HOLDERS.get(finding.lifetime, "an object the scan cannot name")
            left_out.append(f"{where}: lives in {holder}, which no module attribute reaches")
            continue
        spec = _spec(finding, class_files, roots)
        if spec is None:
            left_out.append(f"{where}: no module name for its file (is it inside a package?)")
        elif spec not in specs:
            specs.append(spec)
    return SentinelRegistries(specs, left_out)


def _spec(finding: RegistryFinding, class_files: dict[str, str], roots: list[str]) -> Optional[str]:
    key = finding.first.registry
    if "::" in key:                      # path::name, a module global
        path, _, name = key.partition("::")
        module = module_name(path, roots)
        return f"{module}:{name}" if module and name.isidentifier() else None
    owner = key.split(".")[0]            # Class.attr or Object.attr
    path = class_files.get(owner) or finding.first.path
    module = module_name(path, roots)
    return f"{module}:{key}" if module else None
