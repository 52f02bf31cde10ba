"""Where a value goes once its expression is evaluated: used at once, returned, stored in a
container or attribute, or bound to a name (:func:`destinations`); and which expressions build
a new container (:func:`is_fresh`). The lifetime judge follows a container through these to
decide whether it escapes the function that fills it."""

from __future__ import annotations

import ast
import dataclasses
import enum
from typing import Optional

from harness.scan.syntax import callee_name


# Calls that build a new container, so a local bound to one starts out private.
FRESH_CONSTRUCTORS = {
    "dict", "set", "list", "frozenset", "tuple", "defaultdict", "OrderedDict", "Counter",
    "deque", "WeakValueDictionary", "WeakKeyDictionary", "WeakSet", "ChainMap", "copy", "deepcopy",
}
# Class names that say "a new container" (OrderedSet, IdentityDict, WeakIdKeyDictionary).
_CONTAINER_SUFFIXES = ("Set", "Dict", "Dictionary", "List", "Map", "Deque")
# Builtins a value flows through unchanged in membership (set(ids) still holds the ids).
_PASS_THROUGH_CALLS = {"set", "frozenset", "list", "tuple", "dict", "sorted", "reversed", "iter", "enumerate", "zip", "filter", "chain"}
# Methods of the receiver that return (part of) the receiver's content.
_FLOWING_METHODS = {"copy", "union", "intersection", "difference", "symmetric_difference", "keys", "values", "items"}
# Methods that store their argument in the receiver.
MUTATORS = {"add", "append", "appendleft", "extend", "extendleft", "insert", "update", "setdefault", "__setitem__", "put", "push"}


class Goes(enum.Enum):
    """Where a value goes once its expression is evaluated."""

    TEMPORARY = "used within the expression (or passed to a call)"
    RETURNED = "returned or yielded"
    STORED = "stored in a container or attribute"
    NAME = "bound to a name"


@dataclasses.dataclass(frozen=True)
class Destination:
    """Where a value goes, and the statement or call that sends it there."""

    kind: Goes
    node: ast.AST
    target: Optional[ast.expr] = None
    name: str = ""


def is_fresh(value: Optional[ast.expr]) -> bool:
    """Whether ``value`` builds a new container (or is None, a placeholder for one)."""
    if value is None:
        return False
    if isinstance(value, ast.Constant) and value.value is None:
        return True
    if isinstance(value, (ast.Dict, ast.Set, ast.List, ast.Tuple, ast.DictComp, ast.SetComp, ast.ListComp, ast.GeneratorExp)):
        return True
    if isinstance(value, ast.Call):
        name = callee_name(value)
        if isinstance(value.func, ast.Attribute) and name == "copy":
            return True
        # OrderedSet(), IdentityDict(), WeakIdKeyDictionary(): a container class, by its name
        return name in FRESH_CONSTRUCTORS or (name is not None and name[:1].isupper() and name.endswith(_CONTAINER_SUFFIXES))
    if isinstance(value, ast.BinOp):
        return True  # set and dict operators build a new container
    if isinstance(value, ast.IfExp):
        return is_fresh(value.body) and is_fresh(value.orelse)
    if isinstance(value, ast.BoolOp):
        return all(is_fresh(v) for v in value.values)
    return False


def destinations(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> list[Destination]:
    """Follow ``node``'s value outwards through the expressions that pass it on."""
    current = node
    while True:
        parent = parents.get(current)
        if parent is None:
            return [Destination(Goes.TEMPORARY, current)]
        if isinstance(parent, (ast.BinOp, ast.BoolOp, ast.Starred, ast.Await, ast.Tuple, ast.List, ast.Set, ast.Dict)):
            current = parent
            continue
        if isinstance(parent, ast.IfExp) and current is not parent.test:
            current = parent
            continue
        if isinstance(parent, ast.keyword):
            current = parent
            parent = parents.get(parent)
        if isinstance(parent, ast.Call) and current is not parent.func:
            name = callee_name(parent)
            if isinstance(parent.func, ast.Name) and name in _PASS_THROUGH_CALLS:
                current = parent
                continue
            if isinstance(parent.func, ast.Attribute):
                if name in _FLOWING_METHODS:
                    current = parent
                    continue
                if name in MUTATORS:
                    return [Destination(Goes.STORED, parent, target=parent.func.value)]
            # Passed to a call: the callee uses it for the call; a callee that keeps it is
            # judged where it stores it, if the callee is scanned too.
            return [Destination(Goes.TEMPORARY, parent)]
        if isinstance(parent, ast.Attribute) and parent.value is current:
            call = parents.get(parent)
            if parent.attr in _FLOWING_METHODS and isinstance(call, ast.Call) and call.func is parent:
                current = call
                continue
            return [Destination(Goes.TEMPORARY, parent)]
        if isinstance(parent, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and current is parent.value:
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            return [_destination_of_target(target, parent) for target in targets]
        if isinstance(parent, (ast.Return, ast.Yield, ast.YieldFrom)):
            return [Destination(Goes.RETURNED, parent)]
        if isinstance(parent, ast.Lambda):
            return [Destination(Goes.RETURNED, parent)]
        if isinstance(parent, (ast.ListComp, ast.SetComp, ast.GeneratorExp)) and current is parent.elt:
            current = parent
            continue
        if isinstance(parent, ast.DictComp) and current in (parent.key, parent.value):
            current = parent
            continue
        return [Destination(Goes.TEMPORARY, parent)]


def _destination_of_target(target: ast.expr, statement: ast.AST) -> Destination:
    if isinstance(target, ast.Name):
        return Destination(Goes.NAME, statement, target=target, name=target.id)
    if isinstance(target, ast.Subscript):
        return Destination(Goes.STORED, statement, target=target.value)
    if isinstance(target, ast.Attribute):
        return Destination(Goes.STORED, statement, target=target)
    return Destination(Goes.TEMPORARY, statement)
