"""Stores not written as ``d[k] = v``: made on a caller's behalf (``self._put(id(obj),
value)`` where ``_put`` does ``self._seen[key] = value``), and through ``dict.update``
with pairs, a generator or ``zip`` (:class:`IndirectStores`).

The key is id-derived at the call, not in the callee (there it is a plain parameter), so
the store is found by following the call: :func:`param_stores` lists where a function of
the scanned module stores one of its parameters as a key, and the analyzer records each
as a store at the call, judged by the callee's container.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Optional

from harness.scan.hits import Use, code_for
from harness.scan.scopes import Binding
from harness.scan.syntax import callee_name, render, walk_same_scope

_KEYED_STORES = {"setdefault", "__setitem__"}
_ELEMENT_STORES = {"add", "append", "appendleft"}
_KEYED_READS = {"get", "__getitem__", "__contains__"}
# A cache's own setter: ``cache.set(key, value)``, ``store.put(key, value)``,
# ``func_cache.add_cache_entry(key, value)``, a Redis client's ``setex(key, ttl, value)``: a
# method whose name starts with one of these verbs, given the key first and something more
# (``event.set()``, ``var.set(value)`` and ``queue.put(item)`` are not stores).
KEYED_SETTERS = {"set", "setex", "psetex", "put", "store", "save", "add", "write", "insert", "cache"}
# Setters given a time before the value.
_TIMED_SETTERS = {"setex", "psetex"}


def setter_verb(method: str) -> bool:
    """``set``, ``put``, ``add_cache_entry``, ``set_one``: a method named by a setter's verb
    (``insert`` puts by position, not by key)."""
    word = method.lstrip("_")
    return word != "insert" and word.split("_")[0] in KEYED_SETTERS


def setter_value(call: ast.Call) -> Optional[ast.expr]:
    """The value a keyed store call stores: its second argument, or its third for a setter
    given a time first."""
    index = 2 if callee_name(call) in _TIMED_SETTERS else 1
    return call.args[index] if len(call.args) > index else None


@dataclasses.dataclass(frozen=True)
class ParamStore:
    """``container[param] = value`` (or ``container.add(param)``) in the callee."""

    node: ast.AST
    container: ast.expr
    value: Optional[ast.expr]
    sink: str          # "mapping" or "element"


# How many calls deep a key parameter is followed (``set(k, v)`` calling ``self._set(k, v)``).
MAX_DELEGATION = 3


def param_stores(function: ast.AST, param: str, module=None, depth: int = 0) -> list[ParamStore]:
    """Where ``function`` stores its parameter ``param`` (never rebound in it) as a key,
    itself or through functions of ``module`` it hands the parameter to (the value of such a
    store is not followed: None)."""
    return _param_uses(function, param, module, depth, _stores_here, lambda store: dataclasses.replace(store, value=None))


def param_reads(function: ast.AST, param: str, module=None, depth: int = 0) -> list[ParamStore]:
    """Where ``function`` looks its parameter ``param`` (never rebound in it) up as a key:
    ``container[param]``, ``container.get(param)``, ``param in container``; itself or through
    functions of ``module`` it hands the parameter to."""
    return _param_uses(function, param, module, depth, _reads_here, lambda read: read)


def _param_uses(function: ast.AST, param: str, module, depth: int, here, handed_use) -> list[ParamStore]:
    """The uses ``here(nodes, param)`` finds of ``param`` in ``function``, after those of the
    functions it hands ``param`` on to (each passed through ``handed_use``); none when
    ``function`` rebinds ``param``."""
    nodes = list(walk_same_scope(function))
    if any(isinstance(n, ast.Name) and n.id == param and not isinstance(n.ctx, ast.Load) for n in nodes):
        return []
    handed = _handed_on(function, nodes, param, module, depth)
    found = [
        handed_use(use)
        for _, callee, inner in handed
        for use in _param_uses(callee, inner, module, depth + 1, here, handed_use)
    ]
    calls = {id(call) for call, _, _ in handed}
    return found + [use for use in here(nodes, param) if id(use.node) not in calls]


def _stores_here(nodes: list, param: str) -> list[ParamStore]:
    found = []
    for node in nodes:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Subscript) and _is(target.slice, param):
                    found.append(ParamStore(node, target.value, node.value, "mapping"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args and _is(node.args[0], param):
            if node.func.attr in _KEYED_STORES or (setter_verb(node.func.attr) and len(node.args) >= 2):
                found.append(ParamStore(node, node.func.value, setter_value(node), "mapping"))
            elif node.func.attr in _ELEMENT_STORES:
                found.append(ParamStore(node, node.func.value, None, "element"))
    return found


def _reads_here(nodes: list, param: str) -> list[ParamStore]:
    found = []
    for node in nodes:
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is(node.slice, param):
            found.append(ParamStore(node, node.value, None, "mapping"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args and _is(node.args[0], param):
            if node.func.attr in _KEYED_READS:
                found.append(ParamStore(node, node.func.value, None, "mapping"))
        elif isinstance(node, ast.Compare) and _is(node.left, param) and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            found.append(ParamStore(node, node.comparators[0], None, "membership"))
    return found


def _handed_on(function: ast.AST, nodes: list, param: str, module, depth: int) -> list[tuple[ast.Call, ast.AST, str]]:
    """``(call, callee, its parameter)`` for every call among ``nodes`` of a function of
    ``module`` that is given ``param`` as an argument (``self._set(key, value)``): followed
    into, not taken for a store itself."""
    if module is None or depth >= MAX_DELEGATION:
        return []
    handed = []
    for node in nodes:
        if not isinstance(node, ast.Call):
            continue
        qualified = module.callee_qualname(node, module.scope_of(node))
        callee = module.functions.get(qualified) if qualified else None
        if callee is None or callee is function:
            continue
        scope = module.scopes[callee]
        params = [p for p in scope.params if p != scope.bound_param]
        handed += [(node, callee, inner) for inner, argument in passed(node, params) if _is(argument, param)]
    return handed


def _nested_function(name: str, scope) -> Optional[ast.AST]:
    """The function named ``name`` defined in the body of the function that binds it for
    ``scope`` (``def _run(key, ...)`` beside the wrapper that calls it), or None."""
    binding, owner = scope.resolve(name)
    if binding not in (Binding.LOCAL, Binding.CLOSURE) or not isinstance(owner.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    defined = [
        node for node in walk_same_scope(owner.node)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name and node is not owner.node
    ]
    return defined[0] if len(defined) == 1 else None


def _given_container(store: ParamStore, function: ast.AST, arguments: dict) -> Optional[ast.expr]:
    """The caller's argument that ``store``'s container is, when the callee stores into a
    parameter of its own (``def _cache_put(cache, key, value): cache[key] = value``)."""
    if not isinstance(store.container, ast.Name) or store.container.id not in arguments:
        return None
    if not any(node is store.node for node in walk_same_scope(function)):
        return None   # a store of a function it hands the key on to: its names are its own
    return arguments[store.container.id]


def _one_per_container(uses: list[ParamStore]) -> list[ParamStore]:
    """The first use of each container and sink (a key reaching ``self._cache`` along
    several calls is one store, or one read, at the call that hands it on)."""
    seen = set()
    kept = []
    for use in uses:
        mark = (render(use.container), use.sink)
        if mark not in seen:
            seen.add(mark)
            kept.append(use)
    return kept


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


class IndirectStores:
    """The part of :class:`~harness.scan.analyzer.ModuleAnalyzer` that finds stores not
    written as ``d[k] = v``: through a method of the module, and through ``dict.update``."""

    def own_function(self, call: ast.Call) -> Optional[ast.AST]:
        """The function of this module that ``call`` runs (``self.get(k)`` of a class that
        defines ``get``), or None."""
        qualified = self.module.callee_qualname(call, self.place.scope)
        function = self.module.functions.get(qualified) if qualified else None
        if function is None and isinstance(call.func, ast.Name):
            function = _nested_function(call.func.id, self.place.scope)
        if function is None or qualified in self.module.cached_functions or function is self.place.scope.node:
            return None
        return function

    def _delegated(self, call: ast.Call, function: ast.AST) -> None:
        """``self._put(id(obj), value)`` where ``_put`` (``function``, of this module) stores
        its key parameter, and ``self.get(id(obj))`` where ``get`` looks it up in
        ``self._data``: a store or a read at the call, of the callee's container
        (:mod:`harness.scan.delegated`)."""
        if not call.args and not call.keywords:
            return
        callee = self.module.scopes[function]
        arguments = passed(call, [p for p in callee.params if p != callee.bound_param])
        keyed = [(param, argument, self.reader.key(argument)) for param, argument in arguments]
        keyed = [(param, argument, key) for param, argument, key in keyed if key is not None]
        for param, argument, key in keyed:
            for store in _one_per_container(param_stores(function, param, self.module)):
                value = dict(arguments).get(store.value.id) if isinstance(store.value, ast.Name) else None
                container = _given_container(store, function, dict(arguments))
                if container is not None:
                    # _cache_put(_CACHE, key, value): the callee stores into the container it is given
                    self._store(call, container, key, argument, None, also_holding=value, sink=store.sink)
                    continue
                verdict = self.judge.container(store.container, self.place.at(callee))
                line = getattr(store.node, "lineno", "?")
                verdict = dataclasses.replace(verdict, reason=f"{render(call.func)}() stores it in {render(store.container)} (line {line}): {verdict.reason}")
                self._store(call, store.container, key, argument, None, also_holding=value, sink=store.sink, verdict=verdict)
        for param, argument, key in keyed:
            for read in _one_per_container(param_reads(function, param, self.module)):
                verdict = self.judge.container(read.container, self.place.at(callee))
                self._hit(call, code_for(key, read.sink), self._subject(call, key), Use.READ, verdict,
                          container=read.container, key=key, sink=read.sink)

    def _update(self, call: ast.Call, receiver: ast.expr, argument: ast.expr) -> None:
        """``d.update([(id(x), v)])``, ``d.update((id(x), v) for x in xs)``,
        ``d.update(zip(map(id, xs), vs))``: every pair is a store into ``d`` (a dict built in
        place, ``d.update({id(x): v})``, is one through :meth:`~harness.scan.analyzer.ModuleAnalyzer._creation`)."""
        pairs: list[tuple[ast.expr, Optional[ast.expr]]] = []
        if isinstance(argument, (ast.List, ast.Tuple, ast.Set)):
            pairs = [(e.elts[0], e.elts[1]) for e in argument.elts if isinstance(e, ast.Tuple) and len(e.elts) == 2]
        elif isinstance(argument, (ast.GeneratorExp, ast.ListComp)) and isinstance(argument.elt, ast.Tuple) and len(argument.elt.elts) == 2:
            pairs = [(argument.elt.elts[0], argument.elt.elts[1])]
        elif isinstance(argument, ast.Call) and callee_name(argument) == "zip" and len(argument.args) == 2:
            source = self.reader.id_source(argument.args[0])
            if source is not None:
                self._consume(argument)
                self._store(call, receiver, source, argument.args[0], None)
            return
        for key_node, value in pairs:
            key = self.reader.key(key_node)
            if key is not None:
                self._consume(argument)
                self._store(call, receiver, key, key_node, value)

    def _consume(self, node: ast.AST) -> None:
        """Leave ``node`` and what it is made of out of :meth:`_creation`: it is judged as
        part of the store it is an argument of."""
        self._consumed.update(ast.walk(node))
