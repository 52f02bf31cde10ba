"""The keyed object is also put, by the function that stores its id, in a module-level
container that keeps it:

::

    def register(fn):
        _IDS.add(id(fn))
        _HANDLERS[fn] = wrap(fn)          # the object itself, as a key or a value

    def __init__(self, queue):
        if id(queue) not in _QUEUE_IDS:
            _QUEUE_IDS.add(id(queue))
            _QUEUES.append(queue)         # appended to a module-level list
            keep_for_exit(queue)          # or handed to a function of the module that appends it

While that container holds the object, its id cannot be handed to another object.
"""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.delegated import passed
from harness.scan.holders import module_keeper
from harness.scan.syntax import render, walk_same_scope

_KEEPING_METHODS = {"append", "add", "appendleft", "insert"}


def held_beside(hit) -> Optional[str]:
    """Why every object of ``hit``'s key is also kept by a module-level container the same
    function fills, or None."""
    if hit.key is None or not hit.key.objects:
        return None
    scope = hit.module.scope_of(hit.node)
    function = scope.node
    found = None
    for obj in hit.key.objects:
        found = _stored_beside(hit, function, scope, obj) or _handed_to_keeper(hit, function, obj)
        if found is None:
            return None
    return found


def _stored_beside(hit, function: ast.AST, scope, obj: ast.expr) -> Optional[str]:
    found = None
    for node in ast.walk(function):
        if _inside(hit.node, node):
            continue
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Subscript) and module_keeper(target.value, scope) and (
                    _mentions(target.slice, obj) or _mentions(node.value, obj)
                ):
                    found = f"{render(obj)} is also held by {render(target.value)} (line {node.lineno}), a module-level container"
        elif _keeping_call(node, obj) and module_keeper(node.func.value, scope):
            found = f"{render(obj)} is also held by {render(node.func.value)} (line {node.lineno}), a module-level container"
    return found


def _handed_to_keeper(hit, function: ast.AST, obj: ast.expr) -> Optional[str]:
    """``keep_for_exit(queue)`` where that function of the module appends its parameter to a
    module-level container."""
    module = hit.module
    for node in walk_same_scope(function):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            continue
        callee = module.functions.get(node.func.id)
        if callee is None or callee is function:
            continue
        callee_scope = module.scopes[callee]
        for param, argument in passed(node, list(callee_scope.params)):
            if render(argument) != render(obj):
                continue
            for inner in walk_same_scope(callee):
                if _keeping_call(inner, ast.Name(id=param)) and module_keeper(inner.func.value, callee_scope):
                    return (
                        f"{render(obj)} is handed to {node.func.id}() (line {node.lineno}), which keeps it in "
                        f"{render(inner.func.value)} (line {inner.lineno}), a module-level container"
                    )
    return None


def _keeping_call(node: ast.AST, obj: ast.expr) -> bool:
    """``container.append(obj)``, ``container.add(obj)``: the object itself kept."""
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _KEEPING_METHODS
        and any(_mentions(argument, obj) for argument in node.args)
    )


def _inside(node: ast.AST, statement: ast.AST) -> bool:
    return any(inner is node for inner in ast.walk(statement))


def _mentions(expr: ast.expr, obj: ast.expr) -> bool:
    """``expr`` is the object itself, or a tuple or list that has it as an element."""
    shown = render(obj)
    if isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
        return any(render(element) == shown for element in expr.elts)
    return render(expr) == shown
