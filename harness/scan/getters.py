"""Keyed objects a module-level getter hands out: ``cache(id(get_group()))`` where
``get_group()`` returns the module global ``_GROUP``.

Such an object is the module's own: it dies only when the module replaces it (a ``global
_GROUP`` assignment: a re-initialisation), not when a caller drops it. The registry keyed by it
lives one phase per re-initialisation, which the scan cannot count, so the confidence is low.
The getter is followed in the scanned file that defines it, through a ``from mod import
get_group``.
"""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.scopes import Binding


def getter_global(obj: ast.expr, module) -> Optional[tuple[str, str]]:
    """``(getter, global)`` when ``obj`` is a call without arguments of a module-level function
    whose body (asserts aside) returns a module-level name; else None."""
    if not (isinstance(obj, ast.Call) and isinstance(obj.func, ast.Name) and not obj.args and not obj.keywords):
        return None
    name = obj.func.id
    owner, function = module_function(name, module)
    if not isinstance(function, ast.FunctionDef):
        return None
    body = [s for s in function.body if not isinstance(s, (ast.Assert, ast.Expr, ast.Global))]
    if len(body) != 1 or not isinstance(body[0], ast.Return) or not isinstance(body[0].value, ast.Name):
        return None
    returned = body[0].value
    if owner.scope_of(returned).resolve(returned.id)[0] is not Binding.MODULE:
        return None
    return name, returned.id


def module_function(name: str, module):
    """``(facts of the defining module, the function)`` for a module-level function named
    ``name`` in ``module`` or imported into it (re-exported through a package's
    ``__init__``: followed a few steps); ``(module, None)`` when it cannot be found."""
    owner, function, wanted = module, module.functions.get(name), name
    index = getattr(module, "index", None)
    for _ in range(3):
        if function is not None or index is None:
            break
        imported = owner.imports.get(wanted)
        if imported is None or imported.name is None:
            return module, None
        owner, wanted = index.facts(imported.path), imported.name
        function = owner.functions.get(wanted)
    return owner, function


def keyed_by_getters(writes: list) -> Optional[str]:
    """Why every keyed object of every write is a module global a getter hands out, or None."""
    found = []
    for hit in writes:
        if hit.key is None or not hit.key.objects:
            return None
        for obj in hit.key.objects:
            pair = getter_global(obj, hit.module)
            if pair is None:
                return None
            found.append(pair)
    getter, name = found[0]
    return (
        f"the keyed object is the module-level {name} that {getter}() hands out: it dies only when the module "
        "replaces it (a re-initialisation), not when a caller drops it"
    )
