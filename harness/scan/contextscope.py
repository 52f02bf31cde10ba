"""A container that is a context variable's value, set for one scope and reset after it:

::

    _memo = ContextVar("memo", default=None)

    def evaluate(root):
        memo = _memo.get()
        if memo is None:
            token = _memo.set({})
            try:
                return evaluate(root)
            finally:
                _memo.reset(token)
        memo[id(root)] = ...

Every ``set`` of the variable in its module is undone by ``reset`` in a ``finally``, so each
container lives for one outermost call, while the objects it keys are those of that call.
"""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.syntax import dotted, render, root_of

_CONTEXT_VARS = {"ContextVar", "contextvars.ContextVar"}


def scoped_context_value(hit) -> Optional[str]:
    """Why ``hit``'s container is a context variable's value reset after each scope, or None."""
    if hit.container is None:
        return None
    root, _ = root_of(hit.container)
    if not isinstance(root, ast.Name):
        return None
    scope = hit.module.scope_of(hit.node)
    values = scope.values.get(root.id, [])
    if len(values) != 1 or not _get_of_variable(values[0]):
        return None
    variable = values[0].func.value.id
    if not _module_context_var(hit.module.tree, variable):
        return None
    sets = [n for n in ast.walk(hit.module.tree) if _method_of(n, variable, "set")]
    if not sets or not all(_reset_in_finally(call, variable, hit.module.parents) for call in sets):
        return None
    return (
        f"{render(hit.container)} is the value of the context variable {variable}, set for one scope and reset in a "
        f"finally (line {sets[0].lineno}): its entries end with the call that set it"
    )


def _get_of_variable(value) -> bool:
    return (
        isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "get"
        and isinstance(value.func.value, ast.Name) and not value.args
    )


def _method_of(node: ast.AST, variable: str, method: str) -> bool:
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == method
        and isinstance(node.func.value, ast.Name) and node.func.value.id == variable
    )


def _module_context_var(tree: ast.Module, name: str) -> bool:
    for statement in tree.body:
        if isinstance(statement, (ast.Assign, ast.AnnAssign)) and isinstance(statement.value, ast.Call):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return dotted(statement.value.func) in _CONTEXT_VARS
    return False


def _reset_in_finally(call: ast.Call, variable: str, parents: dict) -> bool:
    """``token = VAR.set(...)`` followed, in the same block, by a ``try`` whose ``finally``
    calls ``VAR.reset(token)``."""
    statement = parents.get(call)
    if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name)):
        return False
    token = statement.targets[0].id
    block = parents.get(statement)
    for field in ("body", "orelse", "finalbody"):
        body = getattr(block, field, None)
        if isinstance(body, list) and statement in body:
            following = body[body.index(statement) + 1:]
            return any(
                isinstance(s, ast.Try) and any(
                    _method_of(n, variable, "reset") and any(isinstance(a, ast.Name) and a.id == token for a in n.args)
                    for f in s.finalbody for n in ast.walk(f)
                )
                for s in following
            )
    return False
