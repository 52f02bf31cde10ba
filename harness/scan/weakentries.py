"""Entries that are a weak reference to their own keyed object, called where they are read:

    _tracked[id(arr)] = weakref.ref(arr)
    ...
    ref = _tracked.get(id(arr))
    if ref is None or ref() is None:      # a dead array: treated as untracked

The entry outlives its object, but the reference it holds dies with it: a reader that calls
the reference tells a dead object from a new one born on its address (the dead one's
reference answers None, or another object). Such registries are the hand-made form of a
weak-valued dictionary that checks identity, and get low confidence. A registry whose weak
references are never called on a read is not this (:mod:`harness.scan.weakvalue`).
"""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.syntax import dotted, render, same_expr, walk_same_scope

_WEAK_REFERENCES = {"ref", "WeakMethod", "proxy"}


def weak_reference_entries(writes: list) -> Optional[str]:
    """Why every store keeps only a weak reference to its keyed object, which some read
    calls, or None."""
    if not writes:
        return None
    for hit in writes:
        if not _weak_to_key(hit) or not _reference_called(hit):
            return None
    return (
        f"each entry of {render(writes[0].container)} is a weak reference to the keyed object, and the reads call it: "
        "a dead object's entry answers None, so a new object on its address is not taken for it"
    )


def _weak_to_key(hit) -> bool:
    statement = hit.module.parents.get(hit.node)
    if hit.key is None or not hit.key.objects or not isinstance(statement, ast.Assign):
        return False
    value = statement.value
    if not (isinstance(value, ast.Call) and value.args):
        return False
    name = (dotted(value.func) or "").split(".")[-1]
    return name in _WEAK_REFERENCES and any(same_expr(value.args[0], obj) for obj in hit.key.objects)


def _reference_called(hit) -> bool:
    """``container[k]()``, or ``r = container.get(k)`` / ``r = container[k]`` / ``for k, r
    in container.items()`` and then ``r()``, somewhere in the module."""
    container = render(hit.container)
    for scope in hit.module.function_scopes():
        bound: set[str] = set()
        nodes = list(walk_same_scope(scope.node)) if not isinstance(scope.node, ast.Lambda) else []
        for node in nodes:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                if _entry_of(node.value, container):
                    bound.add(node.targets[0].id)
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)) and _entries_of(node.iter, container):
                bound.update(n.id for n in ast.walk(node.target) if isinstance(n, ast.Name))
        for node in nodes:
            if isinstance(node, ast.Call) and not node.args:
                if _entry_of(node.func, container) or (isinstance(node.func, ast.Name) and node.func.id in bound):
                    return True
    return False


def _entries_of(node: ast.expr, container: str) -> bool:
    """``container.values()``, ``container.items()``, also inside ``list(...)``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("list", "tuple") and node.args:
        node = node.args[0]
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("values", "items")
        and render(node.func.value) == container
    )


def _entry_of(node: ast.expr, container: str) -> bool:
    if isinstance(node, ast.Subscript):
        return render(node.value) == container
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
        and render(node.func.value) == container
    )
