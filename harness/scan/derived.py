"""Which of a function's arguments a hashed value is built from.

``hash(x)`` keys by identity whenever ``x`` is, or holds, a plain instance, and a memoiser's
key is built from whatever its callers pass: the ``*args`` and ``**kwargs`` it hands on, or,
in a key factory, a parameter a caller may pass anything for. The value hashed is seldom the
argument itself. It is a tuple of the arguments, a local grown in a loop over them
(``for v in args: key += (v,)``), or what a helper makes of them
(``hash(_make_key(args, kwargs))``). :func:`arguments_in` follows such a value back to the
arguments within one function: through containers, operators, comprehensions, the locals
the function assigns and the calls it makes.

A call that turns objects into text or bytes (``json.dumps``, ``pickle.dumps``, ``str``,
``repr``, ``"~".join``, an f-string), or into a number or a flag by their size or type
(``len``, ``type``, ``isinstance``), ends the chain: the hash of a text is that of its
characters. (A plain object's ``repr`` carries its address, so such a key can still meet a
dead object's entry; the scan leaves that to the text it hashes, as the census does.) An attribute of an
argument (``arg.name``) is another object, mostly a string, and is not followed either.
"""

from __future__ import annotations

import ast
from typing import Callable, Optional

from harness.scan.scopes import Binding, Scope
from harness.scan.syntax import callee_name, walk_same_scope


# Calls whose result stands for the value, size or type of their arguments, not their identity.
_BY_VALUE = {
    "dumps", "dump", "len", "type", "isinstance", "issubclass", "bool", "int", "float", "callable",
    "hasattr", "getattr", "id", "sizeof", "getsizeof", "nbytes", "str", "repr", "format", "join",
}
# Methods that hand back the receiver's own items: ``kwargs.items()``, ``args.copy()``.
_ITEMS_OF_RECEIVER = {"items", "values", "copy"}
# How many locals and calls deep a value is followed.
MAX_DEPTH = 8

TakesAnything = Callable[[Scope, str], bool]


def arguments_in(node: Optional[ast.expr], scope: Scope, takes_anything: TakesAnything) -> tuple[ast.expr, ...]:
    """The argument names (as written in ``node`` or in the locals it reads) that ``node``
    is built from, where ``takes_anything(owner, name)`` says a parameter may be given any
    object; empty when it is built from none."""
    return _Follower(scope, takes_anything).arguments(node, 0)


class _Follower:
    def __init__(self, scope: Scope, takes_anything: TakesAnything):
        self.scope = scope
        self.takes_anything = takes_anything
        self.seen: set[str] = set()

    def arguments(self, node: Optional[ast.expr], depth: int) -> tuple[ast.expr, ...]:
        if node is None or depth > MAX_DEPTH:
            return ()
        if isinstance(node, ast.Name):
            return self._name(node, depth)
        if isinstance(node, ast.Call):
            return self._call(node, depth)
        if isinstance(node, ast.Attribute):
            return ()
        if isinstance(node, (ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp)):
            return self._many([generator.iter for generator in node.generators], depth)
        if isinstance(node, (ast.Lambda, ast.Constant, ast.Compare, ast.BoolOp, ast.JoinedStr)):
            return ()
        return self._many([child for child in ast.iter_child_nodes(node) if isinstance(child, ast.expr)], depth)

    def _many(self, nodes: list, depth: int) -> tuple[ast.expr, ...]:
        return tuple(found for child in nodes for found in self.arguments(child, depth + 1))

    def _name(self, node: ast.Name, depth: int) -> tuple[ast.expr, ...]:
        binding, owner = self.scope.resolve(node.id)
        if binding in (Binding.PARAM, Binding.CLOSURE) and node.id not in owner.assigned:
            return (node,) if self.takes_anything(owner, node.id) else ()
        if binding is not Binding.LOCAL or owner is not self.scope or node.id in self.seen:
            return ()
        self.seen.add(node.id)
        return self._many(list(_sources(owner.node, node.id)), depth)

    def _call(self, node: ast.Call, depth: int) -> tuple[ast.expr, ...]:
        if callee_name(node) in _BY_VALUE:
            return ()
        given = [a.value if isinstance(a, ast.Starred) else a for a in node.args]
        given += [keyword.value for keyword in node.keywords]
        if isinstance(node.func, ast.Attribute) and node.func.attr in _ITEMS_OF_RECEIVER:
            given.append(node.func.value)
        return self._many(given, depth)


def _sources(function: ast.AST, name: str):
    """Every expression the function's own body assigns ``name`` from: plain, annotated and
    augmented assignments, walrus targets and the iterables of ``for`` loops binding it."""
    for node in walk_same_scope(function):
        if isinstance(node, ast.Assign) and any(_binds(target, name) for target in node.targets):
            yield node.value
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and node.value is not None and _binds(node.target, name):
            yield node.value
        elif isinstance(node, (ast.For, ast.AsyncFor)) and _binds(node.target, name):
            yield node.iter


def _binds(target: ast.expr, name: str) -> bool:
    if isinstance(target, ast.Name):
        return target.id == name
    if isinstance(target, (ast.Tuple, ast.List)):
        return any(_binds(element, name) for element in target.elts)
    if isinstance(target, ast.Starred):
        return _binds(target.value, name)
    return False
