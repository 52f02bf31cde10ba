"""Functions nested in a function, and whether they run only within the call that defines
them: a nested function that is only called (or given to a call that only calls it, or handed
out only while the call runs: :mod:`harness.scan.transient`) cannot keep what it captures
past that call; one that is returned, stored, decorated or passed on can. The lifetime judge
asks this of every container a nested function captures."""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.destinations import Goes, destinations
from harness.scan.environment import Place
from harness.scan.scopes import Scope, ScopeKind
from harness.scan.syntax import dotted, render, walk_same_scope
from harness.scan.transient import HANDED_FOR_THE_CALL, handed_for_the_call, released_with_frame
from harness.scan.verdict import Lifetime, Verdict
from harness.scan.callees import calls_and_drops, in_local_table, only_calls

# Decorators that run the function when it is called and keep nothing of it.
_HARMLESS_DECORATORS = {"no_grad", "inference_mode", "enable_grad", "wraps", "staticmethod", "contextmanager"}


class NestedFunctions:
    """The part of :class:`~harness.scan.lifetime.LifetimeJudge` that judges nested
    functions (it calls back into the judge's ``escape``)."""

    def _nested_escape(self, inner: Scope, owner: Scope, place: Place, handed: Optional[list] = None) -> Optional[str]:
        """How a function nested in ``owner`` (``inner`` or one of its parents) can run after
        ``owner`` returns -- returned, stored, passed on, decorated -- or None when it is only
        ever called (its results used at once) while ``owner`` runs. Given a list as
        ``handed``, a function passed to a call whose result the owner does not keep
        (:func:`handed_for_the_call`) is not taken to escape, and that call goes in the list."""
        scope = inner
        while scope is not None and scope is not owner:
            reason = self._definition_escapes(scope, place, handed)
            if reason is not None:
                return reason
            scope = scope.parent
        return None if scope is owner else "is defined elsewhere"

    def _definition_escapes(self, scope: Scope, place: Place, handed: Optional[list] = None) -> Optional[str]:
        node = scope.node
        if isinstance(node, ast.Lambda):
            call = place.module.parents.get(node)
            if isinstance(call, ast.keyword):
                call = place.module.parents.get(call)
            if calls_and_drops(call, node) or only_calls(call, node, place.module):
                return None   # sorted(xs, key=lambda x: idx[id(x)]): called during the call, not kept
            if handed is not None and self._handed(call, node, scope.parent, place, handed):
                return None
            return f"is a lambda passed on at line {node.lineno}, which can be kept"
        if isinstance(node, ast.ClassDef):
            return _class_escapes(scope, node, place)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return "is a class body, which can be kept"
        if isinstance(node, ast.AsyncFunctionDef):
            return "is a coroutine function, which can run later"
        for decorator in node.decorator_list:
            if (dotted(decorator.func if isinstance(decorator, ast.Call) else decorator) or "").split(".")[-1] not in _HARMLESS_DECORATORS:
                return f"is decorated with {render(decorator)}, which may keep it"
        parent = scope.parent
        parents = place.module.parents
        generator = _is_generator(node)
        for use in ast.walk(parent.node):
            if not (isinstance(use, ast.Name) and use.id == node.name and isinstance(use.ctx, ast.Load)):
                continue
            if place.module.scope_of(use).resolve(node.name)[1] is not parent:
                continue
            call = parents.get(use)
            if isinstance(call, ast.keyword):
                call = parents.get(call)
            if calls_and_drops(call, use) or only_calls(call, use, place.module):
                continue   # map(f, xs), sorted(xs, key=f), tree_map(f, tree): called, not kept
            user = place.module.scope_of(use)
            if in_local_table(use, user, parents, lambda name: self.escape(name, user, place.at(user))):
                continue   # d = {"LOAD_ATTR": f, ...}; d.get(op)(...): a dispatch table of the call
            if not (isinstance(call, ast.Call) and call.func is use):
                if released_with_frame(use, parent.node, parents) is not None:
                    continue   # handed out only while the call runs, taken back before it returns
                if handed is not None and self._handed(call, use, parent, place, handed):
                    continue
                return f"{_kept_as(use, parents)} at line {use.lineno}"
            if not generator:
                continue   # calling a function keeps nothing of it; only a generator lives on in its result
            if _consumed(call, parents):
                continue   # list(gen()), for x in gen(), f(gen()): the generator is used up here
            for destination in destinations(call, parents):
                if destination.kind is Goes.TEMPORARY:
                    continue
                if destination.kind is Goes.NAME and destination.name in parent.assigned:
                    if self.escape(destination.name, parent, place.at(parent)) is None:
                        continue
                return f"has its result kept at line {call.lineno}"
        return None

    def _closure_verdict(self, inner: Scope, owner: Scope, place: Place, shown: str, identity: str) -> Verdict:
        """A variable of ``owner`` captured by ``inner``, a function that can outlive the call."""
        handed = self._only_handed(inner, owner, place) if owner.kind is ScopeKind.FUNCTION else None
        lives = f"which {handed}: it lives as long as that function object, which that call may or may not keep"
        return Verdict(
            Lifetime.CLOSURE, False,
            f"{shown} is a variable of {owner.name}() captured by {inner.name}(), "
            + (lives if handed else "so it lives as long as that function object"),
            identity,
        )

    def _only_handed(self, inner: Scope, owner: Scope, place: Place) -> Optional[str]:
        """``owner() only hands, keeping no result, to walk() (line N)``: the nested function
        escapes ``owner`` only through calls whose results ``owner`` does not keep; else None."""
        handed: list = []
        if self._nested_escape(inner, owner, place, handed) is not None or not handed:
            return None
        return f"{owner.name}() {HANDED_FOR_THE_CALL} {render(handed[0].func)}() (line {handed[0].lineno})"

    def _handed(self, call, use: ast.AST, owner: Scope, place: Place, handed: list) -> bool:
        if handed_for_the_call(call, use, place.module, lambda name: self.escape(name, owner, place.at(owner))):
            handed.append(call)
            return True
        return False


def _class_escapes(scope: Scope, node: ast.ClassDef, place: Place) -> Optional[str]:
    """A class defined in a function lives past the call when it is decorated, or when its
    name is used otherwise than handed out only while the call runs (a ``with`` block that
    patches it in): an instance made of it keeps it, and so does anything it is given to."""
    if node.decorator_list or scope.parent is None:
        return "is a class body, which can be kept"
    parents = place.module.parents
    for use in ast.walk(scope.parent.node):
        if not (isinstance(use, ast.Name) and use.id == node.name and isinstance(use.ctx, ast.Load)):
            continue
        if released_with_frame(use, scope.parent.node, parents) is None:
            return "is a class body, which can be kept"
    return None


def _kept_as(use: ast.Name, parents: dict) -> str:
    """How a nested function's name, used as a value, is kept: ``is installed as
    Block.__call__``, ``is returned``, ``is passed to register()``, or ``is passed on as a
    value``. The wording says where the function (and what it captures) goes on living."""
    parent = parents.get(use)
    if isinstance(parent, ast.Assign) and parent.value is use:
        targets = ", ".join(render(t) for t in parent.targets)
        if any(isinstance(t, (ast.Attribute, ast.Subscript)) for t in parent.targets):
            return f"is installed as {targets}"
        return f"is bound to {targets}"
    if isinstance(parent, (ast.Return, ast.Yield)):
        return "is returned (and passed on as a value)"
    call = parents.get(parent) if isinstance(parent, ast.keyword) else parent
    if isinstance(call, ast.Call) and call.func is not use:
        return f"is passed to {render(call.func)}() (and passed on as a value)"
    return "is passed on as a value"


def _is_generator(function: ast.AST) -> bool:
    return any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in walk_same_scope(function))


def _consumed(call: ast.Call, parents: dict) -> bool:
    """Whether the generator ``call`` makes is iterated where it is made: an argument of a
    call, the operand of ``yield from``, the iterable of a ``for`` or a comprehension."""
    parent = parents.get(call)
    if isinstance(parent, ast.keyword):
        parent = parents.get(parent)
    if isinstance(parent, ast.Call) and call is not parent.func:
        return True
    if isinstance(parent, ast.YieldFrom):
        return True   # yield from gen(): run to its end in the frame of the generator that defines it
    if isinstance(parent, (ast.For, ast.AsyncFor)) and parent.iter is call:
        return True
    return isinstance(parent, ast.comprehension) and parent.iter is call
