"""Registries whose every entry is the same value, one that never dies:

    if id(engine) not in session_classes:
        session_classes[id(engine)] = orm.Session     # the one value any key ever gets

A stale entry hands an object born on a dead one's address exactly what a new entry would: the
lookup cannot answer wrongly. Only a value that is the same object for every store counts: a
constant, or a name or imported attribute that lives for the whole process (a class, a module's
function); a value made per store (``Session()``) or read from the call does not. And only when
the entry's presence decides nothing: every read is ``registry[key]`` or a membership test
whose ``if`` does nothing but fill the entry (``installed[id(loop)] = True`` beside ``if
id(loop) in installed: return`` is a flag, whose stale presence skips work for a new object).
"""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.decorators import stored_value
from harness.scan.environment import Place
from harness.scan.flow import FlowState
from harness.scan.holders import immortal
from harness.scan.syntax import render, same_expr


def same_value_everywhere(hits: list, writes: list) -> Optional[str]:
    """Why every entry of the registry is one value that never dies, or None."""
    reads = [hit for hit in hits if hit not in writes]
    if not reads or not all(_reads_the_value(hit) for hit in reads):
        return None   # with no read in view, what the entry's presence decides cannot be seen
    values = [stored_value(hit) for hit in writes]
    if not values or any(value is None for value in values):
        return None
    first = values[0]
    if not all(same_expr(value, first) for value in values[1:]):
        return None
    for hit, value in zip(writes, values):
        if isinstance(value, ast.Constant):
            continue
        place = Place(hit.module, hit.module.scope_of(hit.node), FlowState(), {})
        if immortal(value, place) is None:
            return None
    return (
        f"every store puts the same value, {render(first)}, which lives for the whole process: a stale entry "
        "hands a new object what a new entry would"
    )


def _reads_the_value(hit) -> bool:
    """``registry[key]`` loaded, or ``key in registry`` testing an ``if`` whose body only stores
    into the registry."""
    parents = hit.module.parents
    node = hit.node
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        return True
    if not isinstance(node, ast.Compare):
        return False
    statement = parents.get(node)
    if not isinstance(statement, ast.If) or statement.test is not node or statement.orelse:
        return False
    container = node.comparators[0]
    return all(
        isinstance(inner, ast.Assign) and all(
            isinstance(target, ast.Subscript) and same_expr(target.value, container) for target in inner.targets
        )
        for inner in statement.body
    )
