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

from harness.scan.destinations import is_fresh
from harness.scan.syntax import dotted, root_of

_WALKS = {"gc.get_objects", "get_objects", "gc.get_referrers", "get_referrers"}


def walks_live_objects(scope, container: Optional[ast.expr]) -> Optional[str]:
    """``Class walks every live object (gc.get_objects(), line N)`` when the class whose
    method ``scope`` is (or is nested in) calls a function that hands out every live object
    and does not empty ``container`` (``self.x``) in a method that walks (an attribute reset at
    each walk holds the ids of that walk only)."""
    while scope is not None and not isinstance(scope.node, ast.ClassDef):
        scope = scope.parent
    if scope is None:
        return None
    methods = {n.name: n for n in scope.node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    walk = next((n for n in ast.walk(scope.node) if isinstance(n, ast.Call) and dotted(n.func) in _WALKS), None)
    if walk is None:
        return None
    attribute = _own_attribute(container)
    for name, method in methods.items():
        if name != "__init__" and attribute is not None and _resets(method, attribute) and _walks(method, methods):
            return None
    return f"{scope.node.name} walks every live object ({dotted(walk.func)}(), line {walk.lineno})"


def _own_attribute(container: Optional[ast.expr]) -> Optional[str]:
    root, parts = root_of(container) if container is not None else (None, [])
    return parts[0] if isinstance(root, ast.Name) and parts and parts[0] != "[]" else None


def _resets(method: ast.AST, attribute: str) -> bool:
    """``self.x.clear()`` or ``self.x = []`` / ``{}`` / ``set()`` in ``method``."""
    for node in ast.walk(method):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "clear":
            if isinstance(node.func.value, ast.Attribute) and node.func.value.attr == attribute:
                return True
        if isinstance(node, ast.Assign) and is_fresh(node.value):
            if any(isinstance(t, ast.Attribute) and t.attr == attribute for t in node.targets):
                return True
    return False


def _walks(method: ast.AST, methods: dict) -> bool:
    """The method calls the walk itself or through one method of its class (``self.collect()``)."""
    for node in ast.walk(method):
        if isinstance(node, ast.Call) and dotted(node.func) in _WALKS:
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in methods:
            callee = methods[node.func.attr]
            if callee is not method and any(isinstance(n, ast.Call) and dotted(n.func) in _WALKS for n in ast.walk(callee)):
                return True
    return False
