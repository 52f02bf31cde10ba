"""Registries held in a ``contextvars.ContextVar`` that is set for one block and reset in a
``finally``:

    token = FROZEN.set(FROZEN.get() | ids_of(ctx))
    try:
        yield ctx
    finally:
        FROZEN.reset(token)

    if id(self) in FROZEN.get(): ...

or read through a local, ``memo = MEMO.get()``, then ``memo[id(node)] = ...``.

The ids live exactly as long as the block, in which the code that set them holds the objects
(the context it yields); a variable set and never reset keeps its value for the whole context
instead, which this rule does not cover.

The same holds for an attribute of a shared object (a ``threading.local`` context, a
module-level state object) that the module sets to ``None`` or a new empty container, or
clears, in a ``finally``: the ids of one ``repr`` or one walk, dropped when it ends::

    CONTEXT.seen = set()
    try:
        ...
    finally:
        CONTEXT.seen = None
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from harness.scan.lastarg import empty_value
from harness.scan.syntax import finally_blocks, render, walk_block


def reset_per_block(hits: list) -> Optional[str]:
    """Why every hit's container is a context variable's value reset in a ``finally``, or None."""
    attribute = _reset_attribute(hits)
    if attribute is not None:
        return attribute
    names = {_variable(_read_through(hit)) for hit in hits}
    if len(names) != 1 or None in names:
        return None
    name = names.pop()
    index = getattr(hits[0].module, "index", None)
    if index is None:
        return None
    pattern = re.compile(rb"\b" + re.escape(name.encode()) + rb"\s*\.\s*reset\s*\(")
    for path in index.files_matching(pattern):
        module = index.facts(path)
        for block in finally_blocks(module.tree):
            if _resets(block, name):
                return (
                    f"the container is the value of the context variable {name}, set for one block and reset in a "
                    f"finally ({path}:{block[0].lineno}): its entries last only while that block runs"
                )
    return None


def _read_through(hit) -> Optional[ast.expr]:
    """The container as written, or what the local it is (``memo = MEMO.get()``) is bound to
    when that local is bound once."""
    container = hit.container
    if isinstance(container, ast.Name):
        values = hit.module.scope_of(hit.node).values.get(container.id, [])
        if len(values) == 1 and isinstance(values[0], ast.Call):
            return values[0]
    return container


def _variable(container: Optional[ast.expr]) -> Optional[str]:
    """``NAME`` for a container read as ``NAME.get()`` or ``mod.NAME.get()``."""
    if not (isinstance(container, ast.Call) and isinstance(container.func, ast.Attribute)):
        return None
    if container.func.attr != "get" or container.args or container.keywords:
        return None
    shown = render(container.func.value)
    return shown.rsplit(".", 1)[-1] if shown else None


def _resets(block: list, name: str) -> bool:
    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "reset"
        and render(node.func.value).rsplit(".", 1)[-1] == name
        for node in walk_block(block)
    )


def _reset_attribute(hits: list) -> Optional[str]:
    """Why every hit's container, an attribute (``CONTEXT.seen``), is emptied in a ``finally``
    of its module, or None."""
    # the registry's other uses reach it through locals bound to it (stats = node_stats)
    shown = {render(hit.container) for hit in hits if isinstance(hit.container, ast.Attribute)}
    modules = {id(hit.module): hit.module for hit in hits}
    if len(shown) != 1 or len(modules) != 1:
        return None
    name = shown.pop()
    module = modules.popitem()[1]
    for block in finally_blocks(module.tree):
        if _empties(block, name):
            return (
                f"{name} is emptied in a finally ({module.path}:{block[0].lineno}): its entries last only "
                "while the block that fills it runs, which holds the objects"
            )
    return None


def _empties(block: list, name: str) -> bool:
    for node in walk_block(block):
        if isinstance(node, ast.Assign) and any(render(t) == name for t in node.targets) and _empty(node.value):
            return True
        if (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "clear"
            and render(node.func.value) == name
        ):
            return True
    return False


def _empty(value: ast.expr) -> bool:
    """``None``, ``{}``, ``[]``, ``set()``, ``dict()``: a value holding no entry."""
    if empty_value(value):
        return True
    return isinstance(value, ast.Call) and not value.args and not value.keywords and render(value.func) in ("set", "dict", "list")
