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
import weakref
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
    pruning = _pruning(module)
    direct = pruning.get(container, [])
    pruners = {
        scope.node.name for scope in direct if isinstance(scope.node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    candidates = list(direct)
    if pruners:
        candidates += [scope for scope in _nested(module) if _calls_any(scope.node, pruners)]
    for scope in candidates:
        node = scope.node
        if node is storing or scope.parent is None or scope.parent.kind is not ScopeKind.FUNCTION:
            continue
        if _handed_on(node, scope.parent.node, module.parents):
            return (getattr(node, "name", "a lambda") + ("()" if hasattr(node, "name") else ""), node.lineno)
    return None


# Per module, read once: which functions remove entries of which container (by its text).
_PRUNING: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _pruning(module) -> dict[str, list]:
    found = _PRUNING.get(module)
    if found is None:
        found = {}
        for scope in module.function_scopes():
            for container in _pruned_here(scope.node):
                found.setdefault(container, []).append(scope)
        _PRUNING[module] = found
    return found


def _nested(module) -> list:
    return [scope for scope in module.function_scopes() if scope.parent is not None and scope.parent.kind is ScopeKind.FUNCTION]


def _own_nodes(function: ast.AST):
    return ast.walk(function.body) if isinstance(function, ast.Lambda) else walk_same_scope(function)


def _pruned_here(function: ast.AST) -> set[str]:
    """The containers ``function``'s own body removes entries from: ``c.pop(...)``, ``del
    c[...]``."""
    found = set()
    for node in _own_nodes(function):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in PRUNE_METHODS and node.args:
            found.add(render(node.func.value))
        elif isinstance(node, ast.Delete):
            found.update(render(t.value) for t in node.targets if isinstance(t, ast.Subscript))
    return found


def _calls_any(function: ast.AST, names: set[str]) -> bool:
    return any(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names
        for node in _own_nodes(function)
    )


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
