"""Ids of the code's own object kept in a container of another object:

    lm = enabled_local_tensor_mode()      # a process-wide mode, handed out by a getter
    lm._coordinate_cache[id(self)] = ...  # keyed by the code's own object

When the code's object is dropped, the other object keeps the entry. Whether that matters
depends on how long the other object lives. When it comes from a getter (a call that hands out
an existing object: ``current_mode()``, ``Manager.get_instance()``), it is shared state that
outlives the code's objects: high confidence. When it is an attribute the code's object was
given or built (``self._program._fleet_opt``, ``self._scaler.states``), it mostly lives as long
as the code's object does: low.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Callable, Optional

from harness.scan.finding import Confidence
from harness.scan.scopes import Binding
from harness.scan.syntax import callee_name, render, root_of


@dataclasses.dataclass(frozen=True)
class Owned:
    confidence: Confidence
    reason: str


def owned_keys_elsewhere(hits: list, all_own: Callable, bound_param: Callable) -> Optional[Owned]:
    """How sure the scan is of a registry whose keys are ids of the method's own objects and
    whose container belongs to another object (``lm.cache[id(self)]``,
    ``self.env.cache[(id(src), s)]`` with ``src`` from ``self.sources``), or None when the
    registry is not of that shape. ``all_own(hit)`` tells whether a hit's key objects are the
    method's own; ``bound_param(scope)`` names a method's ``self``."""
    getters = []
    for hit in hits:
        if hit.container is None or not all_own(hit):
            return None
        root, parts = root_of(hit.container)
        if not isinstance(root, ast.Name):
            return None
        scope = hit.module.scope_of(hit.node)
        binding, _ = scope.resolve(root.id)
        attributes = parts[: parts.index("[]")] if "[]" in parts else parts
        if root.id == bound_param(scope):
            if len(attributes) < 2:
                return None      # self.cache: the owner's own container dies with it
            getters.append(_attribute_from_getter(scope, root.id, attributes[0]))
        elif binding is Binding.PARAM:
            return None          # a container the caller brings for the call
        else:
            getters.append(_local_from_getter(scope, root.id))
    shown = ", ".join(dict.fromkeys(render(obj) for hit in hits for obj in hit.key.objects))
    if all(getters):
        return Owned(Confidence.HIGH, (
            f"the keys are ids of {shown}, which the code's own object holds, while the container belongs to "
            f"an object handed out by {getters[0]}(), shared state that outlives them"
        ))
    return Owned(Confidence.LOW, (
        f"the keys are ids of {shown}, which the code's own object holds, while the container belongs to another "
        "object: they die with the code's object, and whether that other object outlives them the scan cannot tell"
    ))


def _getter(value: Optional[ast.expr]) -> Optional[str]:
    """The name of a call that hands out an existing object: a function or method whose name
    is not a class's (``current_mode()``, ``Manager.get_instance()``; not ``GradScaler()``)."""
    if not isinstance(value, ast.Call):
        return None
    name = callee_name(value)
    if not name or name[0].isupper():
        return None
    return name


def _local_from_getter(scope, name: str) -> Optional[str]:
    values = scope.values.get(name, [])
    return _getter(values[0]) if len(values) == 1 else None


def _attribute_from_getter(scope, owner: str, attribute: str) -> Optional[str]:
    """``self.mng = Manager.get_instance()`` somewhere in the class of ``scope``."""
    scope = scope.enclosing_method
    if scope is None or scope.parent is None:
        return None
    for node in ast.walk(scope.parent.node):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Attribute) and t.attr == attribute and isinstance(t.value, ast.Name) and t.value.id == owner
            for t in node.targets
        ):
            return _getter(node.value)
    return None
