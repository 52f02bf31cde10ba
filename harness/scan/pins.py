"""Keys pinned by a process-wide holder: a safe store that keeps its object in a container
living for the whole process, keyed through a key factory (or made by the factory itself,
as ``get_code_id(code)`` keeping ``codeobjects[id(code)] = code``). Every key that factory
makes names an object that cannot die while that container holds it, so registries keyed
through it elsewhere are of low confidence.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Iterable, Optional

from harness.scan.hits import Use
from harness.scan.verdict import Lifetime
from harness.scan.syntax import render

_PROCESS_WIDE = {Lifetime.MODULE, Lifetime.CLASS, Lifetime.GLOBAL_OBJECT, Lifetime.CLOSURE}


@dataclasses.dataclass(frozen=True)
class Pin:
    """A store that holds its object in a process-wide container, keyed through ``factory``
    (the key factory its key comes from): every key that factory (or one built on it) makes
    names an object that cannot die while that container holds it."""

    factory: str
    where: str


def pinned_by_factory(hit, pins: dict[str, Pin], factory_bases: dict[str, set[str]]) -> Optional[str]:
    factory = factory_of(hit)
    if factory is None:
        return None
    for base in factory_bases.get(factory, {factory}):
        pin = pins.get(base)
        if pin is not None:
            return (
                f"the keys come from {factory}(), built on {base}(); {pin.where} keeps each such object in a "
                "process-wide entry, so its address cannot be reused while these entries exist"
            )
    return None


def factory_of(hit) -> Optional[str]:
    """The last name of the key factory a hit's key was made by (``get_key`` for
    ``cls.get_key(a, b)``), or None when the key is not a factory call."""
    if hit.key is None:
        return None
    text = hit.key.text
    head = text.split("(", 1)[0]
    if "(" not in text or not head.replace(".", "").replace("_", "").isalnum() or head in ("id", "hash", "str", "hex", "format", "tuple", "frozenset", "list", "set"):
        return None
    return head.rsplit(".", 1)[-1]


def find_pins(judged: Iterable) -> dict[str, Pin]:
    """Safe stores into process-wide containers whose entries hold the keyed object, by the
    key factory their keys come from."""
    pins: dict[str, Pin] = {}
    for item in judged:
        hit = item.hit
        if hit.use is not Use.STORE or hit.kept_alive is None or hit.verdict.lifetime not in _PROCESS_WIDE:
            continue
        line = getattr(hit.node, "lineno", 1)
        factory = factory_of(hit) or _pinning_factory(hit)
        if factory is not None:
            pins.setdefault(factory, Pin(factory, f"{render(hit.container)} ({hit.module.path}:{line})"))
    return pins


def _pinning_factory(hit) -> Optional[str]:
    """The function whose own store this is, when it keeps its parameter under that
    parameter's id (``codeobjects[id(code)] = code`` in ``get_code_id(code)``): each key
    the function returns names an object pinned for the process."""
    scope = hit.module.scope_of(hit.node)
    objects = hit.key.objects if hit.key is not None else ()
    if not objects or not all(isinstance(obj, ast.Name) and obj.id in scope.params for obj in objects):
        return None
    return getattr(scope.node, "name", None)
