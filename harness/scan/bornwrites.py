"""Entries an object writes for itself when it is made:

    _BOOKS: dict[int, Book] = {}

    class BookView:
        def __init__(self, book):
            _BOOKS[id(self)] = book        # every instance, unconditionally, at birth
        def best(self):
            return _BOOKS[id(self)].best()

A dead view's entry stays behind, but an object born on its address is a new view, whose
``__init__`` writes its own entry over the stale one before any method can read it. The stale
entry is found only by walking the registry (``_BOOKS.values()``, ``len(_BOOKS)``, the
registry handed elsewhere), so every use of the module's registry must be a lookup by key.
The store must be a statement of ``__init__``'s own body, run whenever the object is made,
keyed by ``id(self)`` alone (a key with other parts leaves stale entries a new object does
not overwrite), with nothing before it that could read the stale entry first.
"""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.syntax import same_expr, statement_of

# What a key made of id(self) alone may be spelled with: id(self), hex(id(self)), f"{id(self)}".
_KEY_FUNCTIONS = {"id", "hex", "str"}
# Uses of a registry that look up one key; anything else (iteration, .values(), len(), the
# registry handed to a call) can reach a stale entry.
_KEYED_METHODS = {"get", "pop", "setdefault", "__getitem__", "__contains__"}


def written_at_birth(sink: ast.AST, obj: ast.expr, key_node: Optional[ast.expr], container: ast.expr, place) -> Optional[str]:
    """Why the entry keyed by ``id(obj)`` is overwritten by any object born on a dead one's
    address before it can be read, or None (see the module's docstring)."""
    function = place.scope.node
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) or function.name != "__init__":
        return None
    positional = [*function.args.posonlyargs, *function.args.args]
    if not positional or not isinstance(obj, ast.Name) or obj.id != positional[0].arg:
        return None
    if not isinstance(container, ast.Name) or container.id not in place.module.module_scope.assigned:
        return None
    if key_node is None or not _of_self_alone(key_node, obj.id):
        return None
    parents = place.module.parents
    statement = statement_of(sink, parents)
    if parents.get(statement) is not function or statement not in function.body:
        return None
    before = function.body[:function.body.index(statement)]
    if any(same_expr(inner, container) for earlier in before for inner in ast.walk(earlier)):
        return None
    if not _looked_up_only(container.id, place.module.tree, parents):
        return None
    return (
        f"each object writes its own entry in __init__ (line {statement.lineno}) when it is made, and "
        f"{container.id} is only ever looked up by key: an object born on a dead one's address "
        "overwrites the dead one's entry before anything can read it"
    )


def _of_self_alone(key: ast.expr, name: str) -> bool:
    names = {n.id for n in ast.walk(key) if isinstance(n, ast.Name)}
    return name in names and names <= _KEY_FUNCTIONS | {name} and not any(isinstance(n, ast.Attribute) for n in ast.walk(key))


def _looked_up_only(name: str, tree: ast.AST, parents: dict) -> bool:
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Name) and node.id == name) or isinstance(node.ctx, ast.Store):
            continue
        parent = parents.get(node)
        if isinstance(parent, ast.Subscript) and parent.value is node:
            continue
        if isinstance(parent, ast.Attribute) and parent.attr in _KEYED_METHODS:
            continue
        if isinstance(parent, ast.Compare) and node in parent.comparators and all(isinstance(op, (ast.In, ast.NotIn)) for op in parent.ops):
            continue
        return False
    return True
