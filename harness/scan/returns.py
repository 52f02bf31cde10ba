"""Containers handed back to callers: a function that builds a new container on every call,
one whose result every caller in the scanned files uses at once, one cached by functools
(the same container for the whole process); and the lookups these need -- the function a
call calls, its callers, the class its return annotation names."""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.destinations import Goes, destinations, is_fresh
from harness.scan.environment import Place
from harness.scan.index import CallSite, callers
from harness.scan.scopes import Binding, Scope, ScopeKind
from harness.scan.syntax import render, walk_same_scope


class ReturnedContainers:
    """The part of :class:`~harness.scan.lifetime.LifetimeJudge` that judges containers a
    function returns (it calls back into the judge's ``container`` and ``escape``)."""

    def _builds_fresh(self, call: ast.Call, place: Place) -> bool:
        """Whether the function ``call`` calls (of this module) returns a new container every time."""
        function = _function_called(call, place)
        if function is None:
            return False
        if cached_function(call, place) is not None:
            return False
        returns = [n for n in walk_same_scope(function) if isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom))]
        if not returns or any(not isinstance(n, ast.Return) or n.value is None for n in returns):
            return False
        scope = place.module.scopes[function]
        for statement in returns:
            value = statement.value
            if isinstance(value, ast.Name) and value.id in scope.assigned:
                if not all(is_fresh(v) for v in scope.values.get(value.id, [])):
                    return False
            elif not is_fresh(value):
                return False
        return True

    def _returned_kept(self, scope: Scope, place: Place, depth: int) -> Optional[str]:
        """Why a container ``scope``'s function returns may be kept by a caller, or None when
        every caller in the scanned files uses it at once (within the expression, or in a
        local that does not escape)."""
        if _is_cached(scope, place):
            return f"kept by the functools cache of {scope.name}() and handed to every caller for the whole process"
        if not isinstance(scope.node, (ast.FunctionDef, ast.AsyncFunctionDef)) or depth > 2 or scope in self._returning:
            return "returned to the caller, who may keep it"
        self._returning.add(scope)
        try:
            return self._callers_keep(scope, place, depth)
        finally:
            self._returning.discard(scope)

    def _callers_keep(self, scope: Scope, place: Place, depth: int) -> Optional[str]:
        if scope.parent is not None and scope.parent.kind is ScopeKind.FUNCTION:
            found = _nested_calls(scope, place)      # a nested function: its callers are beside it
        else:
            found = callers(place.module.index, scope.node.name)
        if found is None:
            return f"returned to the callers of {scope.node.name}(), too many to judge, who may keep it"
        sites = [site for site in found if site.scope is not scope]
        if not sites:
            return "returned to callers outside the scanned files, who may keep it"
        for site in sites:
            caller_place = place.at(site.scope) if site.module is place.module else place_in(site, place)
            for destination in destinations(site.call, site.module.parents):
                line = f"{site.module.path}:{site.call.lineno}"
                if destination.kind is Goes.TEMPORARY:
                    continue
                if destination.kind is Goes.NAME:
                    binding, owner = site.scope.resolve(destination.name)
                    if binding is Binding.LOCAL and owner is site.scope:
                        escape = self.escape(destination.name, site.scope, caller_place)
                        if escape is None:
                            continue
                        return f"returned to {line}, where {destination.name} {escape}"
                    return f"returned to {line}, which binds it to {binding.value} name {destination.name}"
                if destination.kind is Goes.RETURNED and isinstance(destination.node, ast.Return):
                    kept = self._returned_kept(site.scope, caller_place, depth + 1)
                    if kept is None:
                        continue
                    return f"returned to {line}, which returns it on: {kept}"
                if destination.kind is Goes.STORED:
                    verdict = self.container(destination.target, caller_place, depth=1)
                    if verdict.safe:
                        continue
                    return f"returned to {line}, which stores it in {render(destination.target)}"
                return f"returned to {line}, which may keep it"
        return None


def annotated_class(call: ast.Call, place: Place) -> Optional[str]:
    """The one class of the scanned module that ``call``'s function (of this module) is
    annotated to return (``-> Mode | None``, ``-> Optional[Mode]``), or None."""
    function = _function_called(call, place)
    returns = getattr(function, "returns", None)
    if returns is None:
        return None
    if isinstance(returns, ast.Constant) and isinstance(returns.value, str):
        try:
            returns = ast.parse(returns.value, mode="eval")      # -> "Mode | None"
        except SyntaxError:
            return None
    names = {node.id for node in ast.walk(returns) if isinstance(node, ast.Name)}
    classes = [name for name in names if name in place.module.classes]
    return classes[0] if len(classes) == 1 else None


def cached_function(call: ast.Call, place: Place) -> Optional[str]:
    """The qualified name of the ``@functools.cache``/``lru_cache`` function of this module
    that ``call`` calls, or None."""
    qualified = place.module.callee_qualname(call, place.scope)
    return qualified if qualified in place.module.cached_functions else None


def _is_cached(scope: Scope, place: Place) -> bool:
    node = scope.node
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    qualified = f"{scope.class_name}.{node.name}" if scope.class_name else node.name
    return qualified in place.module.cached_functions


def _function_called(call: ast.Call, place: Place) -> Optional[ast.AST]:
    """The definition (in this module) of the function ``call`` calls: a nested function
    visible from ``place``, a module-level function, or ``self.method``."""
    func = call.func
    if isinstance(func, ast.Name):
        scope: Optional[Scope] = place.scope
        while scope is not None:
            for child in walk_same_scope(scope.node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and child.name == func.id:
                    return child
            scope = scope.parent
        return None
    qualified = place.module.callee_qualname(call, place.scope)
    return place.module.functions.get(qualified) if qualified else None


def _nested_calls(scope: Scope, place: Place) -> list:
    """The calls of the nested function ``scope`` within the function that defines it."""
    name = scope.node.name
    module = place.module
    return [
        CallSite(module, node, module.scope_of(node))
        for node in ast.walk(scope.parent.node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name
        and module.scope_of(node).resolve(name)[1] is scope.parent
    ]


def place_in(site, place: Place) -> Place:
    return Place(site.module, site.scope, type(place.flow)(), place.factories)
