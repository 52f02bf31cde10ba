"""A memoising decorator written as a class: its instance wraps one function for the
module's lifetime (``__init__`` keeps the function, ``__call__`` calls it), and every call
keys its cache by the ids of the arguments it is given
(``tests/scan/fixtures/memo_decorators.py`` shows the shape).

An attribute of an instance keyed by objects passed to it is usually of low confidence
(the instance may live for one phase); here the instance is the decorated function, so the
cache lives as long as the module and the arguments come and go. So does the instance a
module makes once and keeps at its top level (``_manager = Manager()``):
:func:`module_level_instance`.
"""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.syntax import walk_same_scope


def wrapping_call(scope) -> Optional[str]:
    """``Class.__call__`` when ``scope`` is (inside) the ``__call__`` of a class whose
    ``__init__`` keeps a parameter that ``__call__`` calls, else None."""
    while scope is not None and not (scope.class_name and scope.name == "__call__"):
        scope = scope.parent
    if scope is None or scope.parent is None:
        return None
    methods = {node.name: node for node in scope.parent.node.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    init = methods.get("__init__")
    owner = scope.bound_param
    if init is None or owner is None:
        return None
    init_params = {arg.arg for arg in init.args.args[1:]}
    kept = set()
    for node in walk_same_scope(init):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in init_params:
            kept.update(t.attr for t in node.targets if isinstance(t, ast.Attribute))
    for node in walk_same_scope(scope.node):
        if (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in kept
            and isinstance(node.func.value, ast.Name) and node.func.value.id == owner
        ):
            return f"{scope.class_name}.__call__"
    return None


def module_level_instance(scope, index) -> Optional[str]:
    """``path: name = Class(...)`` when a scanned module binds an instance of the class
    that ``scope``'s method belongs to at its top level (a singleton, living for the whole
    process), else None."""
    class_name = scope.enclosing_class if scope is not None else None
    if not class_name or index is None:
        return None
    for site in index.calls_of(class_name) or []:
        statement = site.module.parents.get(site.call)
        if (
            site.scope is site.module.module_scope
            and isinstance(statement, (ast.Assign, ast.AnnAssign))
            and statement.value is site.call
            and isinstance(site.call.func, ast.Name)
        ):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            if names:
                return f"{site.module.path}: {names[0]} = {class_name}(...)"
    return None
