"""Entries removed by a callback the code hands on:

    def patch(target, name, value):
        _saved[(id(target), name)] = getattr(target, name)

        def unpatch():                      # holds target until it runs
            setattr(target, name, _saved.pop((id(target), name)))

        _unpatchers.append(unpatch)         # run at the test's teardown

    task = ensure_future(work())
    _in_flight[key] = task
    task.add_done_callback(lambda t, k=key: _in_flight.pop(k, None))

A nested function or lambda that removes the registry's entries, and that is handed on
(appended, passed to a call, returned) rather than called where it is made, is an undo or a
done-callback: the entry goes when it runs, at a teardown or when a task ends, and the
closure often holds the keyed object until then. The entry is left only when the callback
never runs, which the scan cannot see; such registries get low confidence. Removal in the
storing function itself (an eviction) is not a callback and does not count.
"""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.keepalive import PRUNE_METHODS
from harness.scan.scopes import ScopeKind
from harness.scan.syntax import render, walk_same_scope


def removed_by_callback(writes: list) -> Optional[str]:
    """Why every store's entries are removed by a callback handed on, or None."""
    found = None
    for hit in writes:
        callback = _callback_removing(hit)
        if callback is None:
            return None
        found = found or callback
    if found is None:
        return None
    name, line = found
    return (
        f"{name} (line {line}), a callback the code hands on, removes the entries: each goes when it runs (an undo "
        "at teardown, a done-callback), and is left only if it never runs, which the scan cannot see"
    )


def _callback_removing(hit) -> Optional[tuple[str, int]]:
    if hit.container is None:
        return None
    module = hit.module
    container = render(hit.container)
    storing = module.scope_of(hit.node).node
    pruners = {
        scope.node.name for scope in module.function_scopes()
        if isinstance(scope.node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _prunes_here(scope.node, container, ())
    }
    for scope in module.function_scopes():
        node = scope.node
        if node is storing or scope.parent is None or scope.parent.kind is not ScopeKind.FUNCTION:
            continue
        if not _prunes_here(node, container, pruners):
            continue
        if _handed_on(node, scope.parent.node, module.parents):
            return (getattr(node, "name", "a lambda") + ("()" if hasattr(node, "name") else ""), node.lineno)
    return None


def _prunes_here(function: ast.AST, container: str, pruners) -> bool:
    """``container.pop(...)``, ``del container[...]`` (or a call of a function that does)
    in ``function``'s own body."""
    for node in walk_same_scope(function) if not isinstance(function, ast.Lambda) else ast.walk(function.body):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in PRUNE_METHODS:
            if node.args and render(node.func.value) == container:
                return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in pruners:
            return True
        if isinstance(node, ast.Delete) and any(
            isinstance(t, ast.Subscript) and render(t.value) == container for t in node.targets
        ):
            return True
    return False


def _handed_on(function: ast.AST, maker: ast.AST, parents: dict) -> bool:
    """A lambda given to a call, or a nested function named somewhere in its maker other
    than as the function of a call (``unpatchers.append(undo)``, ``return undo``)."""
    if isinstance(function, ast.Lambda):
        holder = parents.get(function)
        if isinstance(holder, ast.keyword):
            holder = parents.get(holder)
        return isinstance(holder, ast.Call) and holder.func is not function
    name = function.name
    for node in walk_same_scope(maker):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
            holder = parents.get(node)
            if not (isinstance(holder, ast.Call) and holder.func is node):
                return True
    return False
