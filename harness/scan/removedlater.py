"""Entries the same call removes once its work is done, outside a ``finally``:

    key_in_progress.add(key)
    result = func(*args)            # the call holds the objects the key names
    key_in_progress.remove(key)

The entry lives while the call that holds the keyed objects runs; one is left behind only
when the work between raises, and only then can an object born on a dead one's address
meet it. The scan gives such registries low confidence (a ``finally`` that removes the
entry makes it safe: :mod:`harness.scan.keepalive`).
"""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.keepalive import PRUNE_METHODS
from harness.scan.syntax import same_expr, walk_same_scope


def removed_by_the_same_call(writes: list) -> Optional[str]:
    """Why every store of this registry is undone later in the call that made it, or None."""
    lines = []
    for hit in writes:
        line = _removed_after(hit)
        if line is None:
            return None
        lines.append(line)
    return (
        f"the call that stores each entry removes it again (line {lines[0]}) once its work is done: an entry is "
        "left only when that work raises"
    ) if lines else None


def _key_node(hit) -> Optional[ast.expr]:
    node = hit.node
    if isinstance(node, ast.Subscript):
        return node.slice
    if isinstance(node, ast.Call) and node.args:
        return node.args[0]
    return None


def _removed_after(hit) -> Optional[int]:
    key = _key_node(hit)
    if key is None or hit.container is None or not isinstance(key, ast.Name):
        return None
    function = hit.module.scope_of(hit.node).node
    for node in walk_same_scope(function):
        if getattr(node, "lineno", 0) <= hit.node.lineno:
            continue
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in PRUNE_METHODS:
            if node.args and same_expr(node.func.value, hit.container) and same_expr(node.args[0], key):
                return node.lineno
        if isinstance(node, ast.Delete):
            for target in node.targets:
                if isinstance(target, ast.Subscript) and same_expr(target.value, hit.container) and same_expr(target.slice, key):
                    return node.lineno
    return None
