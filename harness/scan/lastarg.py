"""An id of the last argument, kept on a long-lived object and compared on the next call.

::

    if self._batch_id == id(batch):      # or: backend.rebuilt_id == id(batch)
        return self._meta
    self._meta = build(batch)
    self._batch_id = id(batch)           # or: self._table = {id(batch): meta}

The object the id is kept on (the method's own object, or one handed in: a backend, a
captured graph) lives across calls, while the argument is one call's: a batch, a mask, a
request. When the argument dies and the next one is born on its address, the comparison
passes and the work of the dead argument is reused. That is the shape of every "same as last
time" shortcut keyed by ``id()``, so :func:`remembers_last_argument` gives it high
confidence, unless the same attribute is cleared in another method (a per-step reset, which
bounds the saved id by that step).
"""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.scopes import Binding
from harness.scan.syntax import render, root_of


def remembers_last_argument(writes: list, own) -> Optional[str]:
    """Why every write of a registry keeps the id of the current call's argument on an
    object that outlives the call and compares it on the next one, or None. ``own(obj, hit)``
    tells whether ``obj`` is the method's own object or something it holds."""
    if not writes:
        return None
    for hit in writes:
        if not _keeps_argument(hit, own):
            return None
    hit = writes[0]
    shown = ", ".join(dict.fromkeys(render(obj) for obj in hit.key.objects))
    kept_on = hit.container if hit.sink == "saved" else _one_entry_rebound(hit)
    return (
        f"{render(kept_on)} keeps the id of {shown}, an argument of one call, and the next call compares "
        "it: an argument born on a dead one's address passes for it"
    )


def _keeps_argument(hit, own) -> bool:
    container = hit.container if hit.sink == "saved" else _one_entry_rebound(hit)
    if not isinstance(container, ast.Attribute) or hit.key is None or not hit.key.objects:
        return False
    scope = hit.module.scope_of(hit.node)
    function = scope.node
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) or function.name == "__init__":
        return False
    holder, _ = root_of(container)
    if not isinstance(holder, ast.Name):
        return False
    if holder.id != scope.bound_param and scope.resolve(holder.id)[0] is not Binding.PARAM:
        return False
    for obj in hit.key.objects:
        root, _ = root_of(obj)
        if not isinstance(root, ast.Name) or root.id == holder.id or own(obj, hit):
            return False
        if scope.resolve(root.id)[0] is not Binding.PARAM:
            return False
    text = render(container)
    return _compared(function, text) and not _cleared_elsewhere(hit.module.tree, container.attr, function)


def _one_entry_rebound(hit) -> Optional[ast.expr]:
    """``self._table = {id(batch): meta}``: the attribute rebound to a one-entry dict (or
    set), which keeps only the last argument's id; None for any other store."""
    statement = hit.module.parents.get(hit.node)
    if not (
        isinstance(hit.node, (ast.Dict, ast.Set))
        and isinstance(statement, ast.Assign)
        and statement.value is hit.node
        and len(statement.targets) == 1
        and len(hit.node.keys if isinstance(hit.node, ast.Dict) else hit.node.elts) == 1
    ):
        return None
    return statement.targets[0]


def _compared(function: ast.AST, text: str) -> bool:
    """The function compares the kept id (``==``, ``!=``, ``in``) or looks it up (``.get``)."""
    for node in ast.walk(function):
        if isinstance(node, ast.Compare) and any(render(side) == text for side in (node.left, *node.comparators)):
            return True
        if (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
            and render(node.func.value) == text
        ):
            return True
    return False


def _cleared_elsewhere(tree: ast.Module, attribute: str, function: ast.AST) -> bool:
    """Another function than ``__init__`` and the one keeping the id sets the same attribute
    to ``None`` (or an empty literal): a reset that bounds the kept id by a step."""
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node is function or node.name == "__init__":
            continue
        for inner in ast.walk(node):
            if not isinstance(inner, ast.Assign) or not empty_value(inner.value):
                continue
            if any(isinstance(t, ast.Attribute) and t.attr == attribute for t in inner.targets):
                return True
    return False


def empty_value(value: ast.expr) -> bool:
    """``None`` or an empty literal (``{}``, ``[]``, ``()``): a value holding no entry."""
    if isinstance(value, ast.Constant):
        return value.value is None
    if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.Tuple)):
        return not (value.keys if isinstance(value, ast.Dict) else value.elts)
    return False
