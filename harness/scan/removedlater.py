"""Entries the same call removes once its work is done, outside a ``finally``:

    key_in_progress.add(key)
    result = func(*args)            # the call holds the objects the key names
    key_in_progress.remove(key)

The entry lives while the call that holds the keyed objects runs; one is left behind only
when the work between raises, and only then can an object born on a dead one's address
meet it. The scan gives such registries low confidence (a ``finally`` that removes the
entry makes it safe: :mod:`harness.scan.keepalive`).
"""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.keepalive import prunes
from harness.scan.syntax import walk_same_scope


def removed_by_the_same_call(writes: list) -> Optional[str]:
    """Why every store of this registry is undone later in the call that made it, or None."""
    lines = []
    for hit in writes:
        line = _removed_after(hit)
        if line is None:
            return None
        lines.append(line)
    return (
        f"the call that stores each entry removes it again (line {lines[0]}) once its work is done: an entry is "
        "left only when that work raises"
    ) if lines else None


def _removed_after(hit) -> Optional[int]:
    key = hit.key_node
    if key is None or hit.container is None or not isinstance(key, ast.Name):
        return None
    function = hit.module.scope_of(hit.node).node
    for node in walk_same_scope(function):
        if getattr(node, "lineno", 0) > hit.node.lineno and prunes(node, hit.container, key):
            return node.lineno
    return None
