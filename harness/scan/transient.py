"""Functions handed out only for the time a call runs: a hook registered and removed in a
``finally``, a callback given to a ``with`` block, a function installed on an attribute
that a ``finally`` restores.

A nested function passed on as a value can outlive the call that defines it, and with it
what it captures (:meth:`~harness.scan.nested.NestedFunctions._definition_escapes`). These
shapes take it back before that call returns, so it dies with the call's frame::

    handle = model.register_forward_hook(hook)
    try:
        model(x)
    finally:
        handle.remove()

    with saved_tensors_hooks(pack, unpack):
        ...
"""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.syntax import render

# Methods of a handle that undo the registration that returned it.
_RELEASES = {"remove", "unregister", "close", "detach", "__exit__", "cancel"}


def released_with_frame(use: ast.Name, function: ast.AST, parents: dict) -> Optional[str]:
    """Why the function named by ``use`` (a value, not a call) is taken back before
    ``function`` returns, or None when nothing shows it."""
    parent = parents.get(use)
    call = parents.get(parent) if isinstance(parent, ast.keyword) else parent
    if isinstance(call, ast.Call) and call.func is not use:
        holder = parents.get(call)
        if isinstance(holder, ast.withitem) and holder.context_expr is call:
            return f"it is given to {render(call.func)}() for one with block (line {call.lineno})"
        handle = _bound_handle(call, parents)
        if handle is not None and _released_in_finally(handle, function):
            return f"the handle {render(call.func)}() returns is released in a finally block"
        if handle is not None and _released_in_finally(handle, function, blocks=_body_of(function)):
            return f"the handle {render(call.func)}() returns is released before the function returns"
        return None
    if isinstance(parent, ast.Assign) and parent.value is use:
        targets = [t for t in parent.targets if isinstance(t, (ast.Attribute, ast.Subscript))]
        if targets and all(_restored_in_finally(t, function) for t in targets):
            return f"a finally block restores {render(targets[0])}"
    return None


def _bound_handle(call: ast.Call, parents: dict) -> Optional[ast.expr]:
    """The name or list the registration's handle goes to: ``h = reg(f)``, ``hs.append(reg(f))``."""
    parent = parents.get(call)
    if isinstance(parent, ast.Assign) and parent.value is call and len(parent.targets) == 1:
        return parent.targets[0]
    if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Attribute) and parent.func.attr == "append":
        return parent.func.value
    return None


def _same(a: ast.AST, b: ast.AST) -> bool:
    """Spelled the same, whether stored or loaded (``h = ...`` and ``h.remove()``)."""
    return render(a) == render(b)


def _finally_blocks(function: ast.AST):
    for node in ast.walk(function):
        if isinstance(node, ast.Try) and node.finalbody:
            yield node.finalbody


def _body_of(function: ast.AST):
    """The function's own body, as the one block to search (a release written after the
    registration, on the path every normal return takes)."""
    body = getattr(function, "body", None)
    return [body] if isinstance(body, list) else []


def _released_in_finally(handle: ast.expr, function: ast.AST, blocks=None) -> bool:
    """``finally: handle.remove()``, or ``for h in handles: h.remove()`` in a finally (or in
    the ``blocks`` given)."""
    for block in (_finally_blocks(function) if blocks is None else blocks):
        for statement in block:
            for node in ast.walk(statement):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _RELEASES):
                    continue
                if _same(node.func.value, handle):
                    return True
                loop = _loop_over(node.func.value, statement)
                if loop is not None and _same(loop, handle):
                    return True
    return False


def _loop_over(name: ast.expr, statement: ast.stmt) -> Optional[ast.expr]:
    if not isinstance(name, ast.Name):
        return None
    for node in ast.walk(statement):
        if isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Name) and node.target.id == name.id:
            return node.iter
    return None


def _restored_in_finally(target: ast.expr, function: ast.AST) -> bool:
    for block in _finally_blocks(function):
        for statement in block:
            for node in ast.walk(statement):
                if isinstance(node, ast.Assign) and any(_same(t, target) for t in node.targets):
                    return True
                if isinstance(node, ast.Delete) and any(_same(t, target) for t in node.targets):
                    return True
    return False
