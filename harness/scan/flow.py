"""What the current function has bound to id-derived values so far (simple data flow)."""

from __future__ import annotations

import ast
import dataclasses
from typing import Optional

from harness.scan.keys import CollectionFacts, KeyFacts, KeyReader


@dataclasses.dataclass
class FlowState:
    """Names the current function bound to id-derived values, in source order.

    Flow-insensitive beyond order: the last assignment before a use wins, whatever branch it
    sat in. ``holders`` are names bound to literals or calls (``entry = (obj, meta)``, ``desc =
    Descriptor(obj)``), and ``attached`` what was set on their attributes (``prog.owner =
    obj``), so that ``d[id(obj)] = entry`` is seen to hold ``obj``.
    """

    keys: dict[str, KeyFacts] = dataclasses.field(default_factory=dict)
    collections: dict[str, CollectionFacts] = dataclasses.field(default_factory=dict)
    holders: dict[str, ast.expr] = dataclasses.field(default_factory=dict)
    # what was set on a name's attributes since it was bound (``prog.owner = obj``)
    attached: dict[str, list[ast.expr]] = dataclasses.field(default_factory=dict)

    def bind(self, name: str, value: Optional[ast.expr], reader: KeyReader) -> None:
        self.forget(name)
        if value is None:
            return
        facts = reader.key(value)
        if facts is not None:
            self.keys[name] = facts
            return
        collection = reader.collection(value)
        if collection is None and isinstance(value, ast.Name):
            collection = self.collections.get(value.id)
        if collection is not None:
            self.collections[name] = collection
            return
        if isinstance(value, (ast.Tuple, ast.List, ast.Dict, ast.Set, ast.Call, ast.Subscript)):
            self.holders[name] = value   # a call: holders.holds() asks whether it constructs; an item: where it came from

    def bind_key(self, name: str, facts: KeyFacts) -> None:
        self.forget(name)
        self.keys[name] = facts

    def attach(self, name: str, value: ast.expr) -> None:
        """``name.attr = value``: the object bound to ``name`` now holds ``value``."""
        self.attached.setdefault(name, []).append(value)

    def forget(self, name: str) -> None:
        self.keys.pop(name, None)
        self.collections.pop(name, None)
        self.holders.pop(name, None)
        self.attached.pop(name, None)
