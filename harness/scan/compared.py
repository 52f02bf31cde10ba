"""A registry whose every user compares what it found with the object itself:

    entry = reg[id(obj)]
    if entry.obj is not obj:
        ...

An entry left by a dead object is told apart from the new object's, so a reused address
gives no wrong answer (:func:`harness.scan.confidence.assess` makes such a hazard low).
"""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.syntax import render


def checked_by_identity(hits: list) -> Optional[str]:
    """``entry = reg[id(obj)]; if entry.obj is not obj: ...``: every function that uses the
    registry compares what it found with the object itself, so a stale entry is told apart."""
    lines = []
    for hit in hits:
        if hit.key is None or not hit.key.objects:
            return None
        shown = {render(obj) for obj in hit.key.objects}
        found = None
        for node in ast.walk(hit.module.scope_of(hit.node).node):
            if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
                sides = [node.left, *node.comparators]
                if any(render(side) in shown for side in sides) and not any(
                    isinstance(side, ast.Constant) for side in sides
                ):
                    found = node.lineno
        if found is None:
            return None
        lines.append(found)
    return (
        f"the code compares the entry it finds with the object itself ('is', line {lines[0]}), "
        "so an entry left by a dead object is told apart"
    )


def saved_only_in_text(hits: list) -> Optional[str]:
    """``self._tag = str(id(self.target))`` read back only inside f-strings (``f"{self._tag}_arg"``):
    a saved id that names something and is never compared with another object's id. Judged only
    for a private attribute, read in the class that saves it."""
    lines = []
    for hit in hits:
        container = hit.container
        if not isinstance(container, ast.Attribute) or not container.attr.startswith("_"):
            return None
        parents = hit.module.parents
        method = hit.module.scope_of(hit.node).enclosing_method
        owner = method.parent.node if method is not None and method.parent is not None else None
        reads = [
            node for node in ast.walk(owner or hit.module.tree)
            if isinstance(node, ast.Attribute) and node.attr == container.attr and isinstance(node.ctx, ast.Load)
        ]
        if not reads:
            return None
        for node in reads:
            up = parents.get(node)
            while up is not None and not isinstance(up, (ast.JoinedStr, ast.stmt)):
                up = parents.get(up)
            if not isinstance(up, ast.JoinedStr):
                return None
            lines.append(node.lineno)
    return (
        f"the saved id is read back only into text (line {lines[0]}), never compared with another object's id"
    ) if lines else None
