"""Stores made on a caller's behalf: ``self._put(id(obj), value)`` where ``_put`` does
``self._seen[key] = value``.

The key is id-derived at the call, not in the callee (there it is a plain parameter), so
the store is found by following the call: :func:`param_stores` lists where a function of
the scanned module stores one of its parameters as a key, and the analyzer records each
as a store at the call, judged by the callee's container.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Optional

from harness.scan.syntax import walk_same_scope

_KEYED_STORES = {"setdefault", "__setitem__"}
_ELEMENT_STORES = {"add", "append", "appendleft"}


@dataclasses.dataclass(frozen=True)
class ParamStore:
    """``container[param] = value`` (or ``container.add(param)``) in the callee."""

    node: ast.AST
    container: ast.expr
    value: Optional[ast.expr]
    sink: str          # "mapping" or "element"


def param_stores(function: ast.AST, param: str) -> list[ParamStore]:
    """Where ``function`` stores its parameter ``param`` (never rebound in it) as a key."""
    nodes = list(walk_same_scope(function))
    if any(isinstance(n, ast.Name) and n.id == param and not isinstance(n.ctx, ast.Load) for n in nodes):
        return []
    found = []
    for node in nodes:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Subscript) and _is(target.slice, param):
                    found.append(ParamStore(node, target.value, node.value, "mapping"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args and _is(node.args[0], param):
            if node.func.attr in _KEYED_STORES:
                found.append(ParamStore(node, node.func.value, node.args[1] if len(node.args) > 1 else None, "mapping"))
            elif node.func.attr in _ELEMENT_STORES:
                found.append(ParamStore(node, node.func.value, None, "element"))
    return found


def _is(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def passed(call: ast.Call, params: list[str]) -> list[tuple[str, ast.expr]]:
    """``(parameter, argument)`` for every argument ``call`` passes to a function taking
    ``params`` (the bound ``self`` left out); positions after a ``*args`` are not matched."""
    pairs = []
    for index, argument in enumerate(call.args):
        if isinstance(argument, ast.Starred) or index >= len(params):
            break
        pairs.append((params[index], argument))
    pairs += [(k.arg, k.value) for k in call.keywords if k.arg in params]
    return pairs
