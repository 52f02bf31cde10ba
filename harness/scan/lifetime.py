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
import enum
from typing import Optional

from harness.scan.environment import Place
from harness.scan.imports import follow
from harness.scan.index import CallSite, callers
from harness.scan.scopes import UNTRACKED, Binding, Scope, ScopeKind
from harness.scan.transient import released_with_frame
from harness.scan.syntax import callee_name, dotted, render, root_of, walk_same_scope


class Lifetime(enum.Enum):
    TEMPORARY = "temporary"
    LOCAL = "local"
    PARAM = "parameter"
    CLOSURE = "closure"
    MODULE = "module"
    CLASS = "class"
    INSTANCE = "instance"
    GLOBAL_OBJECT = "global object"
    RETURNED = "returned"
    UNKNOWN = "unknown"


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Whether a container provably dies with the function, and why (or why not).

    ``identity`` names the container across functions and files (``Class.attr``,
    ``path::name``) so that reads can be judged by how every store into it behaves.
    """

    lifetime: Lifetime
    safe: bool
    reason: str
    identity: Optional[str] = None


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
# Parameter names and functions of the copy protocol: the memo lives for one copy call.
_MEMO_PARAMS = {"memo", "_memo", "memodict", "memo_dict"}
_COPY_PROTOCOL = {"__deepcopy__", "__copy__", "deepcopy", "_deepcopy", "__reduce_ex__"}
# Decorators that run the function when it is called and keep nothing of it.
_HARMLESS_DECORATORS = {"no_grad", "inference_mode", "enable_grad", "wraps", "staticmethod", "contextmanager"}


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


class LifetimeJudge:
    """Judges containers and destinations within one module."""

    def __init__(self):
        self._current_escape: Optional[tuple[Scope, str]] = None
        self._escapes: dict[tuple[Scope, str], Optional[str]] = {}
        self._returning: set[Scope] = set()   # functions whose callers are being judged
        # (scope, local) -> the verdict of the long-lived container the local is stored in
        self._stored_in: dict[tuple[Scope, str], Verdict] = {}

    # ---- containers -------------------------------------------------------------------

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
            cached = _cached_function(root, place) if isinstance(root, ast.Call) else None
            if cached is not None:
                # @functools.cache / lru_cache: every call hands back the one container the
                # cache keeps, so it is a process-wide registry, not a new container per call.
                return Verdict(
                    Lifetime.MODULE, False,
                    f"{cached}() is cached by functools, so every call returns the same container, which lives for the whole process",
                    f"{place.module.path}::{cached}:<cached>" + (f".{'.'.join(parts)}" if parts and "[]" not in parts else ""),
                )
            returned_class = _annotated_class(root, place) if isinstance(root, ast.Call) else None
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
            elsewhere = _imported_container(name, path, shown, place)
            if elsewhere is not None:
                return elsewhere
            if path and name in place.module.classes:
                return Verdict(Lifetime.CLASS, False, f"class attribute {name}.{path} lives as long as the class", f"{name}.{path}")
            if path:
                replaced = _replaced_holder([name, *path.split(".")[:-1]], place)
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
            identity = f"{place.module.path}::{owner.qualname}:{name}" + (f".{path}" if path else "")
            if owner.kind is ScopeKind.FUNCTION and self._nested_escape(scope, owner, place) is None:
                # Captured only by nested functions that run within the owner's call: as
                # long-lived as the owner's own local or parameter.
                if name in owner.params:
                    verdict = self._parameter(name, owner, place.at(owner), shown, depth)
                else:
                    verdict = self._local(name, owner, place.at(owner), shown, depth, path)
                return dataclasses.replace(verdict, identity=verdict.identity or identity)
            return Verdict(
                Lifetime.CLOSURE, False,
                f"{shown} is a variable of {owner.name}() captured by {scope.name}(), so it lives as long as that function object",
                identity,
            )
        if binding is Binding.PARAM:
            return self._parameter(name, owner, place, shown, depth)
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
                caller_place = place.at(site.scope) if site.module is place.module else _place_in(site, place)
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

    # ---- escape analysis --------------------------------------------------------------

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
        return None

    # ---- functions that run only within the call that defines them ---------------------

    def _nested_escape(self, inner: Scope, owner: Scope, place: Place) -> Optional[str]:
        """How a function nested in ``owner`` (``inner`` or one of its parents) can run after
        ``owner`` returns -- returned, stored, passed on, decorated -- or None when it is only
        ever called (its results used at once) while ``owner`` runs."""
        scope = inner
        while scope is not None and scope is not owner:
            reason = self._definition_escapes(scope, place)
            if reason is not None:
                return reason
            scope = scope.parent
        return None if scope is owner else "is defined elsewhere"

    def _definition_escapes(self, scope: Scope, place: Place) -> Optional[str]:
        node = scope.node
        if isinstance(node, ast.Lambda):
            call = place.module.parents.get(node)
            if isinstance(call, ast.keyword):
                call = place.module.parents.get(call)
            if _calls_and_drops(call, node):
                return None   # sorted(xs, key=lambda x: idx[id(x)]): called during the call, not kept
            return f"is a lambda passed on at line {node.lineno}, which can be kept"
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
            if _calls_and_drops(call, use):
                continue   # map(f, xs), sorted(xs, key=f), tree_map(f, tree): called, not kept
            if not (isinstance(call, ast.Call) and call.func is use):
                if released_with_frame(use, parent.node, parents) is not None:
                    continue   # handed out only while the call runs, taken back before it returns
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

    # ---- containers handed back to callers -------------------------------------------------

    def _builds_fresh(self, call: ast.Call, place: Place) -> bool:
        """Whether the function ``call`` calls (of this module) returns a new container every time."""
        function = _function_called(call, place)
        if function is None:
            return False
        if _cached_function(call, place) is not None:
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
            caller_place = place.at(site.scope) if site.module is place.module else _place_in(site, place)
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

    # ---- destinations of values built in place -----------------------------------------

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



def _imported_container(name: str, path: str, shown: str, place: Place) -> Optional[Verdict]:
    """The verdict for a container reached through a module-level import of a scanned file,
    named as the file that defines it names it (see :mod:`harness.scan.imports`)."""
    imported = place.module.imports.get(name)
    if imported is None:
        return None
    paths = place.module.index.module_paths
    where, rest = follow(imported, path.split(".") if path else [], paths)
    if not rest:
        return None
    head, tail = rest[0], ".".join(rest[1:])
    defining = place.module.index.facts(where)
    if tail and head in defining.classes:
        return Verdict(Lifetime.CLASS, False, f"class attribute {head}.{tail} (of {where}) lives as long as the class", f"{head}.{tail}")
    if tail:
        return Verdict(Lifetime.GLOBAL_OBJECT, False, f"{shown} belongs to {head}, module-level in {where}, which lives for the whole process", f"{head}.{tail}")
    return Verdict(Lifetime.MODULE, False, f"{shown} is module-level {head} of {where}, which lives for the whole process", f"{where}::{head}")


def _replaced_holder(names: list[str], place: Place) -> Optional[str]:
    """The first of the objects on a container's path (``V``, ``V.graph`` of ``V.graph.reg``)
    that some scanned file replaces, or None (see :meth:`~harness.scan.index.ScanIndex.replaced`)."""
    index = place.module.index
    return index.replaced(names) if index is not None else None


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


def _annotated_class(call: ast.Call, place: Place) -> Optional[str]:
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


def _cached_function(call: ast.Call, place: Place) -> Optional[str]:
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


def _place_in(site, place: Place) -> Place:
    return Place(site.module, site.scope, type(place.flow)(), place.factories)


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


# Functions that call the function they are given while they run and keep nothing of it.
_CALLS_AND_DROPS = {
    "map", "filter", "sorted", "sort", "min", "max", "reduce", "apply",
    "tree_map", "tree_map_", "tree_map_only", "tree_map_only_", "tree_map_with_path", "tree_flatten_with_path",
    "tree_any", "tree_all", "tree_any_only", "tree_all_only", "map_arg", "map_aggregate",
}


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


def _calls_and_drops(call: Optional[ast.AST], use: ast.Name) -> bool:
    """``use`` (a nested function's name) is an argument of a call that only calls it."""
    return (
        isinstance(call, ast.Call)
        and call.func is not use
        and callee_name(call) in _CALLS_AND_DROPS
    )


def _is_generator(function: ast.AST) -> bool:
    return any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in walk_same_scope(function))


def _consumed(call: ast.Call, parents: dict) -> bool:
    """Whether the generator ``call`` makes is iterated where it is made: an argument of a
    call, the iterable of a ``for`` or a comprehension."""
    parent = parents.get(call)
    if isinstance(parent, ast.keyword):
        parent = parents.get(parent)
    if isinstance(parent, ast.Call) and call is not parent.func:
        return True
    if isinstance(parent, (ast.For, ast.AsyncFor)) and parent.iter is call:
        return True
    return isinstance(parent, ast.comprehension) and parent.iter is call
