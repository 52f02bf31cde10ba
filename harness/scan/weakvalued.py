"""Registries made as ``weakref.WeakValueDictionary``: an entry lives only as long as its
value, and whether the value outlives the keyed object (a semaphore held by the runs of one
workflow, a bound-method proxy whose callbacks remove it) is a question of the values' own
lifetimes, which the scan does not follow. Such registries are of low confidence.
"""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.syntax import dotted, root_of

_WEAK_VALUED = ("WeakValueDictionary",)


def weak_valued(hit) -> Optional[str]:
    """Why ``hit``'s container is a weak-valued dictionary, or None."""
    if hit.container is None:
        return None
    root, parts = root_of(hit.container)
    if not isinstance(root, ast.Name) or "[]" in parts:
        return None
    module = hit.module
    if not parts:
        values = module.module_scope.values.get(root.id, [])
        line = _made_weak(values)
        return None if line is None else _reason(root.id, line)
    scope = module.scope_of(hit.node).enclosing_method
    if scope is None or len(parts) != 1 or root.id != scope.bound_param or scope.parent is None:
        return None
    for node in ast.walk(scope.parent.node):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(_names_attribute(t, root.id, parts[0], node in scope.parent.node.body) for t in targets):
            line = _made_weak([node.value])
            if line is not None:
                return _reason(f"{root.id}.{parts[0]}", line)
    return None


def _names_attribute(target: ast.expr, owner: str, attribute: str, in_class_body: bool) -> bool:
    """``self.attr`` in a method, or ``attr`` in the class body."""
    if in_class_body:
        return isinstance(target, ast.Name) and target.id == attribute
    return isinstance(target, ast.Attribute) and target.attr == attribute and isinstance(target.value, ast.Name) and target.value.id == owner


def _made_weak(values: list) -> Optional[int]:
    for value in values:
        if isinstance(value, ast.Call) and (dotted(value.func) or "").split(".")[-1] in _WEAK_VALUED:
            return value.lineno
    return None


def _reason(name: str, line: int) -> str:
    return (
        f"{name} is a WeakValueDictionary (line {line}): an entry lives only as long as its value, and whether "
        "the value outlives the keyed object is a question the scan does not follow"
    )
