"""Ids taken once, at import, of objects the module's own globals or an imported module hold:
``_BUILTIN_IDS = frozenset(id(v) for v in builtins.__dict__.values())``,
``type_ids = [id(t) for t in all_types]``, ``handler_id = id(app)``.

Every store of such a registry runs in the module body (or a comprehension there), and every
keyed object is a module-level name, an attribute reached from one, or an element of an
iterable built only from those: the objects live as long as the module that binds them, so
an id in the registry cannot come back for another object while the module is loaded. A
store in any function, or an iterable made by a call (which may make objects that die at
once), keeps the registry out of this rule.
"""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.scopes import Binding, ScopeKind

_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
# Calls an iterable may go through and still hold only what it is called on.
_VIEWS = {"values", "items", "keys", "vars", "list", "tuple", "sorted", "set", "frozenset"}


def taken_at_import(writes: list) -> Optional[str]:
    """Why every id stored in the registry is of an object its module holds for good, or None."""
    for hit in writes:
        scope = hit.module.scope_of(hit.node)
        if scope.kind is not ScopeKind.MODULE or hit.key is None or not hit.key.objects:
            return None
        if not all(_held_by_module(obj, hit, scope) for obj in hit.key.objects):
            return None
    return (
        f"every id is taken once, in the module body (line {writes[0].node.lineno}), of objects the module's "
        "globals or an imported module hold: they live as long as the module"
    )


def _held_by_module(obj: ast.expr, hit, scope) -> bool:
    root = obj
    while isinstance(root, ast.Attribute):
        root = root.value
    if not isinstance(root, ast.Name):
        return False
    source = _comprehension_source(root, hit.module.parents)
    if source is not None:
        return _built_from_globals(source, scope)
    return scope.resolve(root.id)[0] is Binding.MODULE


def _comprehension_source(name: ast.Name, parents: dict) -> Optional[ast.expr]:
    """The iterable a comprehension around ``name`` binds it from, or None."""
    node = parents.get(name)
    while node is not None:
        if isinstance(node, _COMPREHENSIONS):
            for generator in node.generators:
                if any(isinstance(t, ast.Name) and t.id == name.id for t in ast.walk(generator.target)):
                    return generator.iter
        node = parents.get(node)
    return None


def _built_from_globals(iterable: ast.expr, scope) -> bool:
    for node in ast.walk(iterable):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name not in _VIEWS:
                return False
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if scope.resolve(node.id)[0] is not Binding.MODULE:
                return False
        elif isinstance(node, _COMPREHENSIONS + (ast.Lambda, ast.NamedExpr)):
            return False
    return True
