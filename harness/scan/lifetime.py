"""How long a container lives, compared with the objects whose ids it holds.

A container keyed by ``id(obj)`` is a hazard when it can outlive ``obj``: the address is
then handed to a new object and the stale entry answers for it. This module decides, from
the source alone, whether a container dies no later than the function that fills it (a local
that never escapes, a temporary, a copy-protocol memo) or may live on (a module global, a
class attribute, an attribute of ``self``, a closure variable, anything passed in or
returned). The analyzer turns the :class:`Verdict` into a finding's severity and reason.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Optional

from harness.scan.destinations import Destination, Goes, destinations, is_fresh
from harness.scan.environment import Place
from harness.scan.index import callers
from harness.scan.moduleattrs import imported_container, replaced_holder
from harness.scan.nested import NestedFunctions
from harness.scan.returns import ReturnedContainers, annotated_class, cached_function, place_in
from harness.scan.scopes import UNTRACKED, Binding, Scope, ScopeKind
from harness.scan.threadlocal import thread_local
from harness.scan.syntax import render, root_of
from harness.scan.verdict import Lifetime, Verdict

# Parameter names and functions of the copy protocol: the memo lives for one copy call.
_MEMO_PARAMS = {"memo", "_memo", "memodict", "memo_dict"}
_COPY_PROTOCOL = {"__deepcopy__", "__copy__", "deepcopy", "_deepcopy", "__reduce_ex__"}


class LifetimeJudge(ReturnedContainers, NestedFunctions):
    """Judges containers and destinations within one module."""

    def __init__(self):
        self._current_escape: Optional[tuple[Scope, str]] = None
        self._escapes: dict[tuple[Scope, str], Optional[str]] = {}
        self._returning: set[Scope] = set()   # functions whose callers are being judged
        # (scope, local) -> the verdict of the long-lived container the local is stored in
        self._stored_in: dict[tuple[Scope, str], Verdict] = {}

    def container(self, expr: ast.expr, place: Place, depth: int = 0) -> Verdict:
        """How long the container ``expr`` (as written at ``place``) lives."""
        root, parts = root_of(expr)
        shown = render(expr)
        if not isinstance(root, ast.Name):
            if is_fresh(root):
                return Verdict(Lifetime.TEMPORARY, True, f"{shown} is a temporary built in place")
            if isinstance(root, ast.IfExp) and depth < 4:
                # stream_ids = self._rs_ids if rs else self._ag_ids: as long-lived as either branch
                branches = [self.container(branch, place, depth + 1) for branch in (root.body, root.orelse)]
                unsafe = [verdict for verdict in branches if not verdict.safe]
                return unsafe[0] if unsafe else branches[0]
            cached = cached_function(root, place) if isinstance(root, ast.Call) else None
            if cached is not None:
                # @functools.cache / lru_cache: every call hands back the one container the
                # cache keeps, so it is a process-wide registry, not a new container per call.
                return Verdict(
                    Lifetime.MODULE, False,
                    f"{cached}() is cached by functools, so every call returns the same container, which lives for the whole process",
                    f"{place.module.path}::{cached}:<cached>" + (f".{'.'.join(parts)}" if parts and "[]" not in parts else ""),
                )
            returned_class = annotated_class(root, place) if isinstance(root, ast.Call) else None
            if returned_class is not None:
                # lm = enabled_local_tensor_mode() -> LocalTensorMode | None: the container is
                # an attribute of that class's instance, named like one reached through self.
                callee = render(root.func)
                return Verdict(
                    Lifetime.INSTANCE, False,
                    f"{callee}() returns a {returned_class} (its return annotation), an object that lives apart from the keyed one",
                    returned_class + (f".{'.'.join(parts)}" if parts and "[]" not in parts else ""),
                )
            if isinstance(root, ast.Call) and self._builds_fresh(root, place):
                return Verdict(
                    Lifetime.TEMPORARY, True,
                    f"{shown}: {render(root.func)}() builds a new container on every call, used here within the expression",
                )
            origin = "a call" if isinstance(root, ast.Call) else "an expression"
            if render(root) != shown:
                origin = render(root)
            return Verdict(Lifetime.UNKNOWN, False, f"{shown} comes from {origin}, whose lifetime cannot be seen here")
        name = root.id
        scope = place.scope
        if _comprehension_target(expr, name, place.module.parents, scope.node):
            return Verdict(Lifetime.UNKNOWN, False, f"{shown} belongs to {name}, an element of an iterable, whose lifetime cannot be seen here")
        binding, owner = scope.resolve(name)
        # The attribute path up to the first subscript names the container across files:
        # cls.registry[k] and Manager.registry[k] are both "Manager.registry".
        path = ".".join(parts[: parts.index("[]")] if "[]" in parts else parts)
        if owner.bound_param == name and binding in (Binding.PARAM, Binding.CLOSURE):
            holder = owner.class_name
            identity = f"{holder}.{path}" if path else None
            if owner.binds_class:
                return Verdict(Lifetime.CLASS, False, f"class attribute {holder}.{path} lives as long as the class", identity)
            return Verdict(Lifetime.INSTANCE, False, f"{shown} lives as long as the {holder} instance, which can outlive the object", identity)
        if binding is Binding.MODULE:
            elsewhere = imported_container(name, path, shown, place)
            if elsewhere is not None:
                return elsewhere
            if path and name in place.module.classes:
                return Verdict(Lifetime.CLASS, False, f"class attribute {name}.{path} lives as long as the class", f"{name}.{path}")
            if path:
                replaced = replaced_holder([name, *path.split(".")[:-1]], place)
                if replaced is not None:
                    return Verdict(Lifetime.INSTANCE, False, (
                        f"{shown} belongs to {replaced}, which the scanned code replaces (a new object each time, "
                        "one compile or one phase): it lives as long as that object, not the process"
                    ), f"{name}.{path}")
                return Verdict(Lifetime.GLOBAL_OBJECT, False, f"{shown} belongs to module-level {name}, which lives for the whole process", f"{name}.{path}")
            kind = "module-level" if name in place.module.module_scope.assigned else "global"
            return Verdict(Lifetime.MODULE, False, f"{kind} {shown} lives for the whole process", f"{place.module.path}::{name}")
        if binding is Binding.CLASS_BODY:
            identity = f"{scope.name}.{name}" + (f".{path}" if path else "")
            return Verdict(Lifetime.CLASS, False, f"class attribute {scope.name}.{name} lives as long as the class", identity)
        if binding is Binding.CLOSURE:
            if (aliased := _self_alias(name, owner, shown, path)) is not None:
                return aliased
            identity = f"{place.module.path}::{owner.qualname}:{name}" + (f".{path}" if path else "")
            if owner.kind is ScopeKind.FUNCTION and self._nested_escape(scope, owner, place) is None:
                # Captured only by nested functions that run within the owner's call: as
                # long-lived as the owner's own local or parameter.
                if name in owner.params:
                    verdict = self._parameter(name, owner, place.at(owner), shown, depth)
                else:
                    verdict = self._local(name, owner, place.at(owner), shown, depth, path)
                return dataclasses.replace(verdict, identity=verdict.identity or identity)
            return self._closure_verdict(scope, owner, place, shown, identity)
        if binding is Binding.PARAM:
            return _thread_local(expr, place, shown, path, self._parameter(name, owner, place, shown, depth))
        return self._local(name, owner, place, shown, depth, path)

    def _parameter(self, name: str, scope: Scope, place: Place, shown: str, depth: int) -> Verdict:
        if name in _MEMO_PARAMS or scope.name in _COPY_PROTOCOL:
            return Verdict(Lifetime.PARAM, True, f"{shown} is a copy-protocol memo, which lives for one copy call")
        callers = place.module.call_sites.get(self._qualified(scope), [])
        # Recursive calls alone prove nothing: some caller outside the function must start it.
        if any(caller_scope is not scope for _, caller_scope in callers) and depth < 3:
            judged = [self._caller_argument(call, caller_scope, scope, name, place, depth) for call, caller_scope in callers]
            if all(verdict is not None and verdict.safe for verdict in judged):
                lines = ", ".join(str(call.lineno) for call, _ in callers)
                return Verdict(Lifetime.PARAM, True, f"parameter {name}: every caller in this file passes a container that dies with it (line {lines})")
        memo = self._fresh_memo(name, scope, place, depth)
        if memo is not None:
            return Verdict(Lifetime.PARAM, True, memo)
        part = f"{shown} belongs to parameter {name}" if shown != name else f"parameter {name}"
        identity = f"{place.module.path}::{scope.qualname}:{name}" if shown == name else None
        return Verdict(Lifetime.PARAM, False, f"{part}, the caller's container, so its lifetime cannot be seen here", identity)

    def _fresh_memo(self, name: str, scope: Scope, place: Place, depth: int) -> Optional[str]:
        """``def walk(x, seen=None): if seen is None: seen = set()``: a memo that starts fresh on
        each outermost call and is passed only down the recursion. None unless every caller in
        the scanned files that passes it passes a container that dies with the call."""
        if depth >= 3 or not _defaults_to_none(scope, name) or not scope.values.get(name):
            return None
        if not all(is_fresh(value) for value in scope.values[name]):
            return None
        if self.escape(name, scope, place) is not None:
            return None
        if isinstance(scope.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            sites = callers(place.module.index, scope.node.name)
            if sites is None:
                return None
            for site in sites:
                if site.scope is scope:
                    continue
                argument = _passed(site.call, scope, name)
                if argument is None:
                    continue
                caller_place = place.at(site.scope) if site.module is place.module else place_in(site, place)
                if not self.container(argument, caller_place, depth=depth + 1).safe:
                    return None
        line = scope.values[name][0].lineno
        return f"parameter {name} defaults to None and starts as a new container (line {line}) on each outermost call; it is passed only down the calls it makes"

    @staticmethod
    def _qualified(scope: Scope) -> str:
        return f"{scope.class_name}.{scope.name}" if scope.class_name else scope.name

    def _caller_argument(self, call: ast.Call, caller_scope: Scope, callee: Scope, param: str, place: Place, depth: int) -> Optional[Verdict]:
        params = [p for p in callee.params if p != callee.bound_param]
        argument = None
        for keyword in call.keywords:
            if keyword.arg == param:
                argument = keyword.value
        if argument is None and param in params:
            index = params.index(param)
            if index < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[: index + 1]):
                argument = call.args[index]
        if argument is None:
            return Verdict(Lifetime.TEMPORARY, True, "default")
        if caller_scope is callee and isinstance(argument, ast.Name) and argument.id == param:
            return Verdict(Lifetime.PARAM, True, "recursion")
        return self.container(argument, place.at(caller_scope), depth + 1)

    def _local(self, name: str, scope: Scope, place: Place, shown: str, depth: int, path: str) -> Verdict:
        for value in scope.values.get(name, []):
            if value is UNTRACKED:
                return Verdict(Lifetime.UNKNOWN, False, f"{shown}: local {name} is bound by a loop, with or import, so what it refers to cannot be seen here")
            if is_fresh(value):
                continue
            if depth >= 4:
                return Verdict(Lifetime.UNKNOWN, False, f"{shown}: local {name} refers to {render(value)}")
            aliased = self.container(value, place.at(scope), depth + 1)
            if aliased.lifetime in (Lifetime.TEMPORARY, Lifetime.LOCAL) and aliased.safe:
                continue
            identity = aliased.identity + (f".{path}" if path else "") if aliased.identity else None
            return Verdict(
                aliased.lifetime,
                aliased.safe,
                f"local {name} refers to {render(value)} (line {value.lineno}): {aliased.reason}",
                identity,
            )
        escape = self.escape(name, scope, place)
        if escape is not None:
            return self.escaped(name, scope, place, escape)
        return Verdict(Lifetime.LOCAL, True, f"local {name} dies when {scope.name}() returns", f"{place.module.path}::{scope.qualname}:{name}")

    def escape(self, name: str, scope: Scope, place: Place, seen: Optional[set] = None) -> Optional[str]:
        """How the local ``name`` of ``scope`` escapes it, or None when it provably does not."""
        cache_key = (scope, name)
        if cache_key in self._escapes:
            return self._escapes[cache_key]
        seen = seen if seen is not None else set()
        if cache_key in seen:
            return None
        seen.add(cache_key)
        outer, self._current_escape = self._current_escape, cache_key
        try:
            reason = self._find_escape(name, scope, place, seen)
        finally:
            self._current_escape = outer
        self._escapes[cache_key] = reason
        return reason

    def escaped(self, name: str, scope: Scope, place: Place, escape: str) -> Verdict:
        """The verdict for local ``name`` that escapes as ``escape`` says: when it is stored in
        a long-lived container, that container's lifetime and identity (the registry it joins)."""
        target = self._stored_in.get((scope, name))
        reason = f"local {name} escapes {scope.name}(): {escape}"
        if target is not None:
            return Verdict(target.lifetime, False, reason, target.identity)
        return Verdict(Lifetime.LOCAL, False, reason, f"{place.module.path}::{scope.qualname}:{name}")

    def _find_escape(self, name: str, scope: Scope, place: Place, seen: set) -> Optional[str]:
        parents = place.module.parents
        handed_over = None   # captured by a function only handed to calls that keep no result: said last
        for node in ast.walk(scope.node):
            if not (isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)):
                continue
            if node is scope.node:
                continue
            user_scope = place.module.scope_of(node)
            if user_scope is not scope:
                if not (user_scope.kind is ScopeKind.FUNCTION and user_scope.resolve(name)[1] is scope):
                    continue
                nested = self._nested_escape(user_scope, scope, place)
                handed = self._only_handed(user_scope, scope, place) if nested is not None else None
                if handed is not None:
                    handed_over = handed_over or f"captured by {user_scope.name}() at line {node.lineno}, which {handed}"
                    continue
                if nested is not None:
                    return f"captured by {user_scope.name}() at line {node.lineno}, which {nested}"
                # Captured by a function that only runs within this call: what it does with
                # the container is judged in its own scope (returning it hands it back here).
                for destination in destinations(node, parents):
                    if destination.kind is Goes.RETURNED:
                        return f"returned by {user_scope.name}() at line {destination.node.lineno}"
                    reason = self._destination_escapes(destination, user_scope, place, seen)
                    if reason is not None:
                        return reason
                continue
            for destination in destinations(node, parents):
                reason = self._destination_escapes(destination, scope, place, seen)
                if reason is not None:
                    return reason
        return handed_over

    def _destination_escapes(self, destination: Destination, scope: Scope, place: Place, seen: set) -> Optional[str]:
        line = getattr(destination.node, "lineno", "?")
        if destination.kind is Goes.RETURNED:
            if isinstance(destination.node, ast.Return):
                kept = self._returned_kept(scope, place, 0)
                return None if kept is None else f"returned at line {line}: {kept}"
            return f"returned at line {line}"
        if destination.kind is Goes.STORED:
            verdict = self.container(destination.target, place.at(scope), depth=1)
            if verdict.safe:
                return None
            if verdict.identity:
                self._stored_in.setdefault(self._current_escape, verdict)
            return f"stored in {render(destination.target)} at line {line} ({verdict.reason})"
        if destination.kind is Goes.NAME:
            binding, owner = scope.resolve(destination.name)
            if binding in (Binding.LOCAL, Binding.PARAM) and owner is scope:
                inner = self.escape(destination.name, scope, place, seen)
                return None if inner is None else f"through {destination.name} (line {line}): {inner}"
            return f"bound to {binding.value} name {destination.name} at line {line}"
        return None

    def destination(self, node: ast.AST, place: Place) -> Verdict:
        """How long the value that ``node`` builds lives, judged by where it goes."""
        verdicts = [self._judge_destination(d, place) for d in destinations(node, place.module.parents)]
        unsafe = [v for v in verdicts if not v.safe]
        return unsafe[0] if unsafe else verdicts[0]

    def _judge_destination(self, destination: Destination, place: Place) -> Verdict:
        line = getattr(destination.node, "lineno", "?")
        if destination.kind is Goes.RETURNED:
            if isinstance(destination.node, ast.Return):
                kept = self._returned_kept(place.scope, place, 0)
                if kept is None:
                    return Verdict(Lifetime.RETURNED, True, f"it is returned at line {line} to callers that each use it at once and drop it")
                return Verdict(Lifetime.RETURNED, False, f"it is {kept} (line {line})", f"{place.module.path}::{place.scope.qualname}:<returned>")
            return Verdict(Lifetime.RETURNED, False, f"it is returned to the caller at line {line}, who may keep it")
        if destination.kind is Goes.STORED:
            verdict = self.container(destination.target, place)
            prefix = f"it is stored in {render(destination.target)} (line {line})"
            return dataclasses.replace(verdict, reason=f"{prefix}: {verdict.reason}")
        if destination.kind is Goes.NAME:
            binding, owner = place.scope.resolve(destination.name)
            if binding is Binding.LOCAL and owner is place.scope and owner.kind is ScopeKind.FUNCTION:
                # A new container bound to a local: what matters is where that local goes, not
                # what else the name is bound to elsewhere in the function (a loop target, say).
                name = destination.name
                identity = f"{place.module.path}::{owner.qualname}:{name}"
                escape = self.escape(name, owner, place)
                if escape is not None:
                    return self.escaped(name, owner, place, escape)
                return Verdict(Lifetime.LOCAL, True, f"local {name} dies when {owner.name}() returns", identity)
            return self.container(destination.target, place)
        return Verdict(Lifetime.TEMPORARY, True, "it is a temporary used only within the expression")


def _self_alias(name: str, owner: Scope, shown: str, path: str) -> Optional[Verdict]:
    """``graph = self`` in a method, ``graph.nodes[id(m)]`` in a hook nested in it: the
    container is an attribute of the method's own object, not the closure's own."""
    values = owner.values.get(name, [])
    if not (path and owner.bound_param and owner.class_name and not owner.binds_class and len(values) == 1):
        return None
    value = values[0]
    if not (isinstance(value, ast.Name) and value.id == owner.bound_param):
        return None
    return Verdict(Lifetime.INSTANCE, False, (
        f"{shown}: {name} is {owner.bound_param} (line {value.lineno}), so it lives as long as the "
        f"{owner.class_name} instance, which can outlive the object"
    ), f"{owner.class_name}.{path}")


def _thread_local(expr: ast.expr, place: Place, shown: str, path: str, verdict: Verdict) -> Verdict:
    """A container reached from a parameter through thread-local storage (:mod:`threadlocal`),
    else the parameter's own ``verdict``."""
    stored = thread_local(expr, place) if path and not verdict.safe else None
    if stored is None:
        return verdict
    return Verdict(Lifetime.GLOBAL_OBJECT, False, (
        f"{shown} is kept in thread-local storage ({stored[1]} makes it with threading.local()), which "
        "outlives the calls that fill it"
    ), stored[0])


def _comprehension_target(expr: ast.AST, name: str, parents: dict, stop: ast.AST) -> bool:
    """Whether ``name`` in ``expr`` is bound by a comprehension around it (``m`` in
    ``any(k in m.reg for m in stack)``), which the scope table does not record."""
    node = parents.get(expr)
    while node is not None and node is not stop:
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            for generator in node.generators:
                if any(isinstance(t, ast.Name) and t.id == name for t in ast.walk(generator.target)):
                    return True
        node = parents.get(node)
    return False


def _defaults_to_none(scope: Scope, name: str) -> bool:
    node = scope.node
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
    pairs += [(arg, default) for arg, default in zip(args.kwonlyargs, args.kw_defaults) if default is not None]
    return any(arg.arg == name and isinstance(default, ast.Constant) and default.value is None for arg, default in pairs)


def _passed(call: ast.Call, scope: Scope, name: str) -> Optional[ast.expr]:
    """The argument ``call`` passes for parameter ``name`` of ``scope``'s function, or None."""
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword.value
    params = [p for p in scope.params if p != scope.bound_param]
    if name in params:
        index = params.index(name)
        if index < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[: index + 1]):
            return call.args[index]
    return None
