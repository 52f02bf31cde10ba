"""An entry that keeps only a weak reference to its keyed object, and a hit that never checks it.

::

    class Mapping:
        def __init__(self, referent):
            self._referent = weakref.ref(referent)   # does not keep it alive
            self.value = None

    class Tracker:
        def track(self, obj):
            found = self._refs.get(id(obj))
            if found:
                return found                          # no look at found._referent()
            info = Mapping(obj)
            self._refs[id(obj)] = info
            return info

The entry looks as if it held the object, but a weak reference does not: the object dies, the
entry stays, and the next object born on its address is handed the dead one's entry, value and
all. The weak reference would tell the two apart if anything called it; a registry whose users
compare what they found with the object (:mod:`harness.scan.compared`) is not this.

:func:`holds_only_weakly` gives such a registry high confidence where it would otherwise be
low for not knowing how long its owner lives.
"""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.decorators import stored_value
from harness.scan.passthrough import param_given
from harness.scan.syntax import dotted, render


def holds_only_weakly(writes: list) -> Optional[str]:
    """Why every write stores, under the id of an object, an instance of a class of the
    module that keeps that object only through ``weakref.ref``, or None."""
    if not writes:
        return None
    reasons = []
    for hit in writes:
        objects = hit.key.objects if hit.key is not None else ()
        value = _stored_value(hit)
        if len(objects) != 1 or not isinstance(value, ast.Call) or not isinstance(value.func, ast.Name):
            return None
        cls = _class_named(hit.module.tree, value.func.id)
        param = _parameter_for(cls, value, objects[0]) if cls is not None else None
        if param is None or not _kept_weakly(cls, param, hit.module.parents):
            return None
        reasons.append(f"{value.func.id}({render(objects[0])}) keeps {render(objects[0])} only through weakref.ref")
    return (
        f"{reasons[0]}, and nothing calls the reference on a hit: the object dies while the entry lives, and a new "
        "object born on its address is handed the dead one's entry"
    )


def _stored_value(hit) -> Optional[ast.expr]:
    """The value the store puts in (:func:`~harness.scan.decorators.stored_value`), followed
    through a local bound once."""
    value = stored_value(hit)
    if isinstance(value, ast.Name):
        values = hit.module.scope_of(hit.node).values.get(value.id, [])
        value = values[0] if len(values) == 1 else None
    return value


def _class_named(tree: ast.Module, name: str) -> Optional[ast.ClassDef]:
    return next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)


def _parameter_for(cls: ast.ClassDef, call: ast.Call, obj: ast.expr) -> Optional[str]:
    """The parameter of the class's ``__init__`` that ``Cls(..., obj, ...)`` binds ``obj`` to."""
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    return param_given(call, obj, init, bound=True) if init is not None else None


def _kept_weakly(cls: ast.ClassDef, param: str, parents: dict) -> bool:
    """The class stores ``param`` in ``self`` only as ``weakref.ref(param)`` (at least once),
    never as itself, in a container, or handed to another call."""
    weak = False
    for node in ast.walk(cls):
        if not (isinstance(node, ast.Name) and node.id == param and isinstance(node.ctx, ast.Load)):
            continue
        parent = parents.get(node)
        if isinstance(parent, ast.Call) and (dotted(parent.func) or "") in ("weakref.ref", "ref") and parent.args[:1] == [node]:
            weak = True
        elif _stored_or_handed(node, parent):
            return False
    return weak


def _stored_or_handed(node: ast.Name, parent: Optional[ast.AST]) -> bool:
    """A use of the parameter that can keep it: a value assigned, an element, an argument."""
    if isinstance(parent, (ast.Compare, ast.BoolOp, ast.UnaryOp, ast.If, ast.IfExp, ast.FormattedValue)):
        return False
    return not (isinstance(parent, ast.Call) and parent.func is node)
