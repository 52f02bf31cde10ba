"""Lifetimes bounded by code elsewhere: an entry removed by a "free" call, a registry
cleared when a ``with`` block exits.

The analyzer records every removal of one entry (:class:`Prune`: ``del reg[id(buf)]``,
``reg.pop(key)``); :func:`exit_clears` finds the registries a class's
``__exit__`` (or a ``@contextmanager`` after its ``yield``) empties. The whole-scan judgement
(:func:`~harness.scan.analyzer.judge_hits`) then treats a store as bounded when

* the storing function makes the object itself (an allocator handing out buffers) and
  another function removes single entries of the same registry: an
  allocate/free pair, where the entry lives until the caller hands the object back, or
* the registry is emptied when the context it is filled in exits.

A registry emptied only by a ``reset()`` that someone else must remember to call is *not*
bounded: that is how the FP8 weight maps of TE 1.12 lived on between models.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Optional

from harness.scan.destinations import is_fresh
from harness.scan.syntax import dotted, root_of, walk_same_scope

_EXIT_METHODS = ("__exit__", "__aexit__")
_CLEARING_METHODS = {"clear"}


@dataclasses.dataclass(frozen=True)
class Prune:
    """``del reg[key]`` or ``reg.pop(key)`` (one entry, not a clear), in function ``where``."""

    identity: str
    where: str
    path: str
    line: int


@dataclasses.dataclass(frozen=True)
class Clear:
    """A registry emptied when a context exits."""

    identity: str
    where: str
    path: str
    line: int


def exit_clears(module) -> list[Clear]:
    """The registries ``module`` empties on context exit: ``self.attr`` in a class's
    ``__exit__``, module globals after the ``yield`` of a ``@contextmanager`` function."""
    found = []
    for qualified, function in module.functions.items():
        owner, _, name = qualified.rpartition(".")
        if owner and name in _EXIT_METHODS:
            self_name = function.args.args[0].arg if function.args.args else "self"
            for target, line in _emptied(function.body):
                root, parts = root_of(target)
                if isinstance(root, ast.Name) and root.id == self_name and parts:
                    found.append(Clear(f"{owner}.{'.'.join(parts)}", qualified, module.path, line))
        elif not owner and _is_context_manager(function):
            after = _after_yield(function)
            for target, line in _emptied(after):
                if isinstance(target, ast.Name):
                    found.append(Clear(f"{module.path}::{target.id}", qualified, module.path, line))
    return found


def _is_context_manager(function: ast.AST) -> bool:
    return any((dotted(d) or "").split(".")[-1] in ("contextmanager", "asynccontextmanager") for d in function.decorator_list)


def _after_yield(function: ast.AST) -> list[ast.stmt]:
    """The statements that run once the ``with`` body is done: a ``finally:`` around the
    yield, or the statements after a top-level ``yield``."""
    statements: list[ast.stmt] = []
    for index, statement in enumerate(function.body):
        if isinstance(statement, ast.Try) and any(isinstance(n, ast.Yield) for s in statement.body for n in ast.walk(s)):
            statements.extend(statement.finalbody)
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Yield):
            statements.extend(function.body[index + 1:])
    return statements


def _emptied(statements: list[ast.stmt]):
    """``(container, line)`` for every ``x.clear()``, ``x = <new container>`` and ``del x``."""
    for statement in statements:
        for node in [statement, *walk_same_scope(statement)]:
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _CLEARING_METHODS and not node.args:
                yield node.func.value, node.lineno
            elif isinstance(node, ast.Assign) and is_fresh(node.value):
                for target in node.targets:
                    yield target, node.lineno
            elif isinstance(node, ast.Delete):
                for target in node.targets:
                    if not isinstance(target, ast.Subscript):
                        yield target, node.lineno


def bounding(identity: Optional[str], where: str, prunes: dict, clears: dict, allocated: bool) -> Optional[str]:
    """Why entries of registry ``identity``, stored in function ``where``, do not outlive
    their objects' use, or None. ``allocated``: the store's objects are made in ``where``
    (handed out by it, as an allocator does), which is what makes a removal elsewhere the
    "free" of a pair; a registry of objects callers bring is not bounded by an unregister
    they may forget."""
    if not identity:
        return None
    for clear in clears.get(identity, []):
        return f"{clear.where}() empties it when the context exits ({clear.path}:{clear.line}), so entries live only inside the with block"
    for prune in prunes.get(identity, []) if allocated else []:
        if prune.where != where:
            return (
                f"{prune.where}() removes its entries ({prune.path}:{prune.line}): an allocate/free pair, "
                "where the entry lives until the caller hands the object back"
            )
    return None
