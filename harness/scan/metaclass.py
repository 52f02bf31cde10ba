"""A metaclass that keeps one instance per set of arguments:

::

    class _PerArguments(type):
        _instances = {}

        def __call__(cls, *args, **kwargs):
            key = hash((cls, freeze(args)))
            if key not in cls._instances:
                cls._instances[key] = super().__call__(*args, **kwargs)
            return cls._instances[key]

The store is an attribute of a class (the metaclass's instance), and classes live for the
whole process, while the arguments the key hashes come and go: an argument that dies leaves
its instance for a new argument on its address, a memo of the constructor.
"""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.decorators import stored_value
from harness.scan.syntax import render, root_of

# Bases that make a class a metaclass: ``type`` itself and the metaclasses of the standard
# library; any base whose name ends in ``Meta`` or ``Type`` is taken for one too.
_METACLASS_BASES = {"type", "ABCMeta", "abc.ABCMeta", "EnumMeta", "enum.EnumMeta", "EnumType", "enum.EnumType"}


def instances_per_arguments(writes: list) -> Optional[str]:
    """Why every store is a metaclass ``__call__`` keeping the instance it makes from its own
    arguments under their key, in an attribute of the class, or None."""
    found = [_made_instance(hit) for hit in writes]
    if not found or not all(found):
        return None
    return (
        f"{found[0]}.__call__ makes the instance from its arguments and keeps it under their key in an attribute "
        "of the class, and classes live for the whole process, while the arguments can die after the call"
    )


def _made_instance(hit) -> Optional[str]:
    """The metaclass's name when ``hit`` stores, in ``cls.<attr>``, what ``super().__call__``
    made from the arguments of the metaclass's ``__call__``."""
    scope = hit.module.scope_of(hit.node)
    function = scope.node
    if not isinstance(function, ast.FunctionDef) or function.name != "__call__" or not scope.bound_param:
        return None
    owner = scope.parent.node if scope.class_name and scope.parent is not None else None
    if not isinstance(owner, ast.ClassDef) or not any(_metaclass_base(base) for base in owner.bases):
        return None
    root, parts = root_of(hit.container) if hit.container is not None else (None, [])
    if not isinstance(root, ast.Name) or root.id != scope.bound_param or not parts:
        return None
    if not _constructed(stored_value(hit), function):
        return None
    return owner.name


def _metaclass_base(base: ast.expr) -> bool:
    shown = render(base)
    return shown in _METACLASS_BASES or shown.split(".")[-1].endswith(("Meta", "Type"))


def _constructed(value: Optional[ast.expr], function: ast.FunctionDef) -> bool:
    """``super().__call__(*args, **kwargs)``, ``type.__call__(cls, *args)`` or
    ``super(Meta, cls).__call__(...)``, given the function's own variadic arguments."""
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "__call__"):
        return False
    receiver = value.func.value
    if not (isinstance(receiver, ast.Call) and render(receiver.func) == "super") and render(receiver) != "type":
        return False
    own = {a.arg for a in (function.args.vararg, function.args.kwarg) if a is not None}
    given = [a.value for a in value.args if isinstance(a, ast.Starred)] + [k.value for k in value.keywords if k.arg is None]
    return any(isinstance(g, ast.Name) and g.id in own for g in given)
