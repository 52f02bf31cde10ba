"""Containers reached through modules: state of another scanned file reached through an import
(one registry with the file that defines it, :mod:`harness.scan.imports`), and state on an
object the scanned code replaces (``V.graph.reg`` where some file sets ``x.graph = ...``),
which lives as long as that object, not the process."""

from __future__ import annotations

from typing import Optional

from harness.scan.environment import Place
from harness.scan.imports import follow
from harness.scan.verdict import Lifetime, Verdict


def imported_container(name: str, path: str, shown: str, place: Place) -> Optional[Verdict]:
    """The verdict for a container reached through a module-level import of a scanned file,
    named as the file that defines it names it (see :mod:`harness.scan.imports`)."""
    imported = place.module.imports.get(name)
    if imported is None:
        return None
    paths = place.module.index.module_paths
    where, rest = follow(imported, path.split(".") if path else [], paths)
    if not rest:
        return None
    head, tail = rest[0], ".".join(rest[1:])
    defining = place.module.index.facts(where)
    if tail and head in defining.classes:
        return Verdict(Lifetime.CLASS, False, f"class attribute {head}.{tail} (of {where}) lives as long as the class", f"{head}.{tail}")
    if tail:
        return Verdict(Lifetime.GLOBAL_OBJECT, False, f"{shown} belongs to {head}, module-level in {where}, which lives for the whole process", f"{head}.{tail}")
    return Verdict(Lifetime.MODULE, False, f"{shown} is module-level {head} of {where}, which lives for the whole process", f"{where}::{head}")


def replaced_holder(names: list[str], place: Place) -> Optional[str]:
    """The first of the objects on a container's path (``V``, ``V.graph`` of ``V.graph.reg``)
    that some scanned file replaces, or None (see :meth:`~harness.scan.index.ScanIndex.replaced`)."""
    index = place.module.index
    return index.replaced(names) if index is not None else None
