"""Owners that walk every live object of the process: ``for obj in gc.get_objects(): ...
self.names[id(obj)] = ...``.

A memory reporter or tensor detector kept across a training loop records the ids of objects
it finds but does not own and holds none of them (holding them would change what it
measures); its registry outlives them by construction, and each later walk meets new objects
born on their addresses. An object of one phase (a pickler, a builder) is given its objects
by a caller instead, so the walk is what tells the two apart.
"""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.syntax import dotted

_WALKS = {"gc.get_objects", "get_objects", "gc.get_referrers", "get_referrers"}


def walks_live_objects(scope) -> Optional[str]:
    """``Class.method() calls gc.get_objects() (line N)`` when the class whose method
    ``scope`` is (or is nested in) calls a function that hands out every live object."""
    while scope is not None and not isinstance(scope.node, ast.ClassDef):
        scope = scope.parent
    if scope is None:
        return None
    for node in ast.walk(scope.node):
        if isinstance(node, ast.Call) and dotted(node.func) in _WALKS:
            return f"{scope.node.name} walks every live object ({dotted(node.func)}(), line {node.lineno})"
    return None
