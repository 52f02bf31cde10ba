"""Small helpers over Python's ``ast`` that every part of the scan shares."""

from __future__ import annotations

import ast
from typing import Iterator, Optional

def render(node: ast.AST) -> str:
    """Source text of ``node`` on one line, whole: a message names the expression a reader
    can search for, so it is never cut."""
    try:
        text = ast.unparse(node)
    except Exception:  # unparse gaps on odd nodes must not stop a scan
        text = type(node).__name__
    return " ".join(text.split())


def finally_blocks(tree: ast.AST) -> Iterator[list]:
    """The ``finally`` block of every ``try`` in ``tree``, in ``ast.walk`` order."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and node.finalbody:
            yield node.finalbody


def walk_block(block: list) -> Iterator[ast.AST]:
    """Every node of a block's statements, statement by statement."""
    for statement in block:
        yield from ast.walk(statement)


def same_expr(a: ast.AST, b: ast.AST) -> bool:
    """Whether two expressions are spelled the same (positions ignored)."""
    return ast.dump(a) == ast.dump(b)


_ITEM_ACCESSORS = {"setdefault", "get", "__getitem__"}
# Views of a container: ``k in d.keys()`` tests ``d`` itself.
_VIEWS = {"keys", "values", "items"}


def named_attribute(node: ast.expr) -> bool:
    """``getattr(obj, name)`` or ``getattr(obj, name, default)``."""
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
        and len(node.args) in (2, 3) and not node.keywords and not any(isinstance(a, ast.Starred) for a in node.args)
    )


def root_of(expr: ast.expr) -> tuple[ast.expr, list[str]]:
    """Strip attribute and subscript access: ``self.a[k].b`` gives ``(self, ["a", "[]", "b"])``.

    The lifetime of a container reached through attributes and items is, for this scan, the
    lifetime of its root object.
    """
    parts: list[str] = []
    node = expr
    while True:
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Subscript):
            parts.append("[]")
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _ITEM_ACCESSORS:
            # d.setdefault(k, set()) and d.get(k) reach into d just like d[k]
            parts.append("[]")
            node = node.func.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _VIEWS and not node.args:
            node = node.func.value
        elif named_attribute(node):
            # getattr(self, name, {}): an attribute of self, named at run time
            named = node.args[1]
            parts.append(named.value if isinstance(named, ast.Constant) and isinstance(named.value, str) else "?")
            node = node.args[0]
        else:
            break
    parts.reverse()
    return node, parts


def name_root(expr: ast.expr) -> Optional[ast.Name]:
    """``x`` for ``x``, ``x.a`` or ``x[0].b`` (attributes and items only, unlike
    :func:`root_of`, which also reads through ``d.get(k)``); None when that root is no name."""
    while isinstance(expr, (ast.Attribute, ast.Subscript)):
        expr = expr.value
    return expr if isinstance(expr, ast.Name) else None


def callee_name(call: ast.Call) -> Optional[str]:
    """The last name of the called thing: ``f`` for ``f(...)``, ``m`` for ``a.b.m(...)``."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def dotted(expr: ast.expr) -> Optional[str]:
    """``a.b.c`` for a chain of names and attributes, else None."""
    names: list[str] = []
    node = expr
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    names.append(node.id)
    return ".".join(reversed(names))


def parent_map(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    """Every node's parent, for walking from an expression out to the statement using it."""
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    return parents


def statement_of(node: ast.AST, parents: dict) -> ast.AST:
    """The statement ``node`` is part of (``node`` itself when it is one; the outermost node
    reached when none encloses it)."""
    while not isinstance(node, ast.stmt) and node in parents:
        node = parents[node]
    return node


def block_of(statement: ast.AST, parents: dict) -> Optional[tuple[ast.AST, str]]:
    """The statement list holding ``statement``, as (its owner, the field: ``body``,
    ``orelse`` or ``finalbody``), or None."""
    parent = parents.get(statement)
    if parent is None:
        return None
    for field in ("body", "orelse", "finalbody"):
        block = getattr(parent, field, None)
        if isinstance(block, list) and any(item is statement for item in block):
            return (parent, field)
    return None


def assigned_to(node: ast.AST, parents: dict) -> Optional[ast.expr]:
    """The one target of ``target = node`` (``seen = {id(x) for x in xs}``: ``seen``), or None."""
    statement = parents.get(node)
    if isinstance(statement, ast.Assign) and statement.value is node and len(statement.targets) == 1:
        return statement.targets[0]
    return None


SCOPE_NODES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def names_passed(call: ast.Call) -> list[str]:
    """Every name read in what ``call`` passes, positionally or by keyword."""
    given = [*call.args, *(k.value for k in call.keywords)]
    return [n.id for argument in given for n in ast.walk(argument) if isinstance(n, ast.Name)]


def walk_same_scope(node: ast.AST) -> Iterator[ast.AST]:
    """Every node under ``node`` that belongs to its scope: nested defs, lambdas and classes
    are yielded themselves but not entered."""
    stack = list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        yield child
        if not isinstance(child, SCOPE_NODES):
            stack.extend(ast.iter_child_nodes(child))


def constructs(call: ast.Call) -> bool:
    """A call of a class by its name (``Entry(...)``, ``mod.Entry(...)``), not of a weak reference."""
    name = (callee_name(call) or "").lstrip("_")   # _Private(...) is a class call too
    if isinstance(call.func, ast.Name) and call.func.id == "cls":
        return True   # cls(...) in a classmethod makes an instance of its class
    if name.endswith(("_class", "_cls")) or name in ("klass", "class_"):
        return True   # optimizer_class(config): a class looked up at run time, named for what it is
    return name[:1].isupper() and not name[1:2].isupper() and "weak" not in name.lower() and "Ref" not in name
