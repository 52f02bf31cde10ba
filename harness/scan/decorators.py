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

from harness.scan.delegated import setter_value
from harness.scan.syntax import name_root, names_passed, walk_same_scope


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


def descriptor_read(hit, scope, objects) -> Optional[str]:
    """``Class.__get__`` when ``scope`` is the ``__get__`` of a descriptor, every keyed
    object is the instance it is read on (``id(instance)``) and the entry is not made from
    that instance, else None: a descriptor is a class attribute, kept as long as its class,
    while the instances it is read on come and go (a cached property keyed by the instance's
    id). An entry made from the instance (``Group(instance)``) holds it, or a weak reference
    to it, as its maker chooses."""
    node = scope.node if scope is not None else None
    if not (scope.class_name and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "__get__"):
        return None
    params = [arg.arg for arg in node.args.posonlyargs + node.args.args]
    if len(params) < 2 or not objects:
        return None
    roots = [name_root(obj) for obj in objects]
    if not all(root is not None and root.id == params[1] for root in roots):
        return None
    if _made_from(stored_value(hit), params[1]):
        return None
    return f"{scope.class_name}.__get__"


def stored_value(hit) -> Optional[ast.expr]:
    """The value a store puts in: ``d[k] = value``, ``d.setdefault(k, value)``."""
    if isinstance(hit.node, ast.Call):
        return setter_value(hit.node)
    statement = hit.module.parents.get(hit.node)
    return statement.value if isinstance(statement, (ast.Assign, ast.AnnAssign)) else None


def _made_from(value: Optional[ast.expr], name: str) -> bool:
    """``value`` calls something with ``name``, or a part of it, as an argument."""
    nodes = ast.walk(value) if value is not None else ()
    return any(isinstance(node, ast.Call) and name in names_passed(node) for node in nodes)


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
