"""What prunes an entry when the object of its key dies: a ``weakref.finalize(obj, ...)`` or a
``weakref.ref(obj, callback)`` whose callback reaches code naming the container, made in the
function of the store or in a function of the module that function hands the object to
(``_register(obj, key)`` making ``weakref.ref(obj, _on_gc)``), and a finalizer that pops the
very key (``weakref.finalize(arg, cache.pop, key, None)``).

A mixin of :class:`~harness.scan.keepalive.KeepAlive`: it reads the analyzer's ``place`` and
``module`` and the block helpers KeepAlive defines (``_runs_with``, ``_statement_of``,
``_block_of``, ``_blocks_around``, ``_function_nodes``).
"""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.passthrough import param_given
from harness.scan.syntax import dotted, render, root_of, same_expr


class Finalizers:
    """The finalizer questions of :class:`~harness.scan.keepalive.KeepAlive`."""

    def _finalizer_pruning(self, sink: ast.AST, obj: ast.expr, container: ast.expr) -> Optional[int]:
        """The line of a ``weakref.finalize(obj, ...)`` (or ``weakref.ref(obj, callback)``)
        in this function whose callback mentions the container."""
        root, parts = root_of(container)
        tail = next((part for part in reversed(parts) if part != "[]"), None) or (root.id if isinstance(root, ast.Name) else None)
        if tail is None:
            return None
        for node in self._function_nodes():
            if not isinstance(node, ast.Call) or len(node.args) < 2 or not same_expr(node.args[0], obj):
                continue
            if not (self._runs_with(node, sink) or self._once_per_key(node, sink)):
                continue
            name = dotted(node.func) or ""
            if not (name.endswith("finalize") or name in ("weakref.ref", "ref")):
                continue
            rest = [*node.args[1:], *(k.value for k in node.keywords)]
            if any(tail in render(part) for part in rest):
                return node.lineno
            if any(self._callback_mentions(part, tail) for part in rest):
                return node.lineno
        return self._finalizer_in_callee(sink, obj, tail)

    def _finalizer_in_callee(self, sink: ast.AST, obj: ast.expr, tail: str) -> Optional[int]:
        """``_register(obj, key)`` beside the store, where ``_register`` is a function of this
        module that makes ``weakref.ref(param, on_gc)`` (or ``weakref.finalize(param, ...)``)
        for the parameter ``obj`` is passed to, and the callback reaches code naming the
        container: the line of that call."""
        for node in self._function_nodes():
            if not isinstance(node, ast.Call) or not self._runs_with(node, sink):
                continue
            function = self._function_named(node.func)
            param = _parameter_given(function, node, obj)
            if param is None:
                continue
            for inner in ast.walk(function):
                if not (isinstance(inner, ast.Call) and len(inner.args) >= 2 and isinstance(inner.args[0], ast.Name)):
                    continue
                name = dotted(inner.func) or ""
                if inner.args[0].id != param or not (name.endswith("finalize") or name in ("weakref.ref", "ref")):
                    continue
                for part in [*inner.args[1:], *(k.value for k in inner.keywords)]:
                    nested = _nested_function(function, part)
                    if tail in render(nested or part) or self._callback_mentions(part, tail):
                        return node.lineno
                    if nested is not None and any(
                        isinstance(call, ast.Call) and self._callback_mentions(call.func, tail, 1) for call in ast.walk(nested)
                    ):
                        return node.lineno
        return None

    def _finalizer_popping(self, sink: ast.AST, container: ast.expr, key_node: Optional[ast.expr]) -> Optional[int]:
        """``weakref.finalize(arg, cache.pop, key, None)`` for each object of the key (a
        loop over the arguments the key is made of): the line of such a finalizer that runs
        whenever the sink does and pops this very key from this container, or None."""
        pop = f"{render(container)}.pop"
        for node in self._function_nodes():
            # weakref.ref(self, lambda ref, key=key: registry.pop(key, None)): the callback
            # pops from this very container when the referent dies
            name = dotted(node.func) if isinstance(node, ast.Call) else None
            if name in ("weakref.ref", "ref") and len(node.args) >= 2 and pop in render(node.args[1]) and self._runs_with(node, sink):
                return node.lineno
        if key_node is None:
            return None
        for node in self._function_nodes():
            if not (isinstance(node, ast.Call) and (dotted(node.func) or "").endswith("finalize") and len(node.args) >= 3):
                continue
            if render(node.args[1]) != pop or render(node.args[2]) != render(key_node):
                continue
            statement = self._statement_of(node)
            loop = self.module.parents.get(statement)
            if self._runs_with(node, sink) or (isinstance(loop, ast.For) and self._runs_with(loop, sink)):
                return node.lineno
        return None

    def _pruned_in_del(self, container: ast.expr) -> Optional[int]:
        """The line of ``__del__`` of the class this method belongs to, when it removes
        entries from this container (``WORLD_OBJECTS.pop(hex(id(self)), None)``): the entry
        goes when the object dies, before its address can be reused."""
        scope = self.place.scope.enclosing_method
        if scope is None or scope.parent is None:
            return None
        shown = render(container)
        for method in scope.parent.node.body:
            if not (isinstance(method, ast.FunctionDef) and method.name == "__del__"):
                continue
            for node in ast.walk(method):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("pop", "__delitem__"):
                    if render(node.func.value) == shown:
                        return method.lineno
                if isinstance(node, ast.Delete) and any(isinstance(t, ast.Subscript) and render(t.value) == shown for t in node.targets):
                    return method.lineno
        return None

    def _once_per_key(self, node: ast.AST, sink: ast.AST) -> bool:
        """``if idx not in self.refs: self.refs[idx] = weakref.ref(key, prune)`` before the
        sink: the finalizer is made the first time the key is stored and kept for later
        stores of the same key, so every store runs with one."""
        statement = self._statement_of(node)
        guard = self.module.parents.get(statement)
        if not (isinstance(guard, ast.If) and isinstance(guard.test, ast.Compare) and len(guard.test.ops) == 1):
            return False
        if not isinstance(guard.test.ops[0], ast.NotIn) or not any(s is statement for s in guard.body):
            return False
        block = self._block_of(guard)
        return block is not None and block in self._blocks_around(sink) and guard.lineno < getattr(sink, "lineno", 0)

    def _callback_mentions(self, callback: ast.expr, tail: str, depth: int = 0) -> bool:
        """Whether a callback reaches code naming the container: a function or method of
        this module (or a nested function), a lambda or ``functools.partial`` calling one,
        followed through the calls it makes (``finalize(x, self._drop, k)`` where ``_drop``
        calls ``self._forget(k)``, which deletes the key), up to three calls deep."""
        function = self._function_named(callback)
        if function is not None:
            if tail in render(function):
                return True
            callback = function
        elif tail in render(callback):
            return True
        if depth >= 3:
            return False
        for inner in ast.walk(callback):
            if inner is callback:
                continue
            target = inner.func if isinstance(inner, ast.Call) else inner
            if isinstance(target, (ast.Name, ast.Attribute)) and self._function_named(target) not in (None, callback):
                if self._callback_mentions(target, tail, depth + 1):
                    return True
        return False

    def _function_named(self, node: ast.expr) -> Optional[ast.AST]:
        """The function of this module ``node`` names (``f``, ``self.m``, ``Class.m``, a
        nested function of the current one), or None."""
        name = None
        if isinstance(node, ast.Name):
            name = node.id
        elif isinstance(node, ast.Attribute):
            owner = self.place.method_owner(node.value) or (node.value.id if isinstance(node.value, ast.Name) else None)
            name = f"{owner}.{node.attr}" if owner else None
        function = self.module.functions.get(name) if name else None
        if function is None and isinstance(node, ast.Name):
            nested = (
                n for n in self._function_nodes()
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == node.id
            )
            function = next(nested, None)
        return function


def _parameter_given(function: Optional[ast.AST], call: ast.Call, obj: ast.expr) -> Optional[str]:
    """The parameter of ``function`` that ``call`` binds ``obj`` to (a method called through an
    attribute fills its ``self`` itself), or None."""
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    first = [a.arg for a in [*function.args.posonlyargs, *function.args.args]][:1]
    return param_given(call, obj, function, bound=isinstance(call.func, ast.Attribute) and first in (["self"], ["cls"]))


def _nested_function(function: ast.AST, callback: ast.expr) -> Optional[ast.AST]:
    """The function defined inside ``function`` that ``callback`` names, or None."""
    if not isinstance(callback, ast.Name):
        return None
    return next(
        (n for n in ast.walk(function) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == callback.id and n is not function),
        None,
    )
