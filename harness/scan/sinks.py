"""The sinks of the analysis walk: expressions that key a container by an id-derived value
-- a subscript, a membership test, a dict or set method, a call of a functools-cached
function, a dict or set built in place -- each recorded as a read or a store through the
analyzer's ``_hit`` and ``_store``."""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.codes import Code
from harness.scan.delegated import KEYED_SETTERS, setter_value, setter_verb
from harness.scan.destinations import MUTATORS
from harness.scan.framemates import creation_held
from harness.scan.hits import Use, code_for
from harness.scan.holders import holds, module_binding
from harness.scan.keepalive import PRUNE_METHODS
from harness.scan.scopes import Binding
from harness.scan.syntax import render, root_of
from harness.scan.verdict import Verdict

_READ_METHODS = {"get", "__getitem__"}
_CONTAINS_METHODS = {"__contains__"}
_STORE_METHODS = {"setdefault", "__setitem__"}
_ELEMENT_METHODS = {"add", "append", "appendleft", "put"}


class Sinks:
    """The part of :class:`~harness.scan.analyzer.ModuleAnalyzer` that visits the expressions
    that are sinks (it records through the analyzer's ``_hit`` and ``_store``)."""

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, ast.Load):
            key = self.reader.key(node.slice)
            if key is not None and self._entry_mutated(node):
                # reg[id(x)].append(v): the entry is changed in place, a store into reg
                call = self.module.parents[self.module.parents[node]]
                self._store(node, node.value, key, node.slice, None, also_holding=call.args[0] if call.args else None)
            elif key is not None:
                verdict = self.judge.container(node.value, self.place)
                self._hit(node, code_for(key, "mapping"), self._subject(node, key), Use.READ, verdict, container=node.value, key=key)
        self.generic_visit(node)

    def _entry_mutated(self, node: ast.Subscript) -> bool:
        """``reg[k].append(v)``, ``reg[k].add(v)``: the looked-up entry is changed in place."""
        attribute = self.module.parents.get(node)
        call = self.module.parents.get(attribute) if attribute is not None else None
        return (
            isinstance(attribute, ast.Attribute) and attribute.attr in MUTATORS
            and isinstance(call, ast.Call) and call.func is attribute
        )

    def visit_Compare(self, node: ast.Compare) -> None:
        left = node.left
        for operator, right in zip(node.ops, node.comparators):
            if isinstance(operator, (ast.In, ast.NotIn)):
                key = self.reader.key(left)
                if key is not None:
                    verdict = self._membership_container(right)
                    self._hit(node, code_for(key, "membership"), self._subject(node, key), Use.READ, verdict,
                              container=right, key=key, sink="membership")
            left = right
        self.generic_visit(node)

    def _membership_container(self, container: ast.expr) -> Verdict:
        if self.reader.collection(container) is not None:
            return self.judge.destination(container, self.place)
        return self.judge.container(container, self.place)

    def visit_Call(self, node: ast.Call) -> None:
        own = self.own_function(node)
        if own is None:
            self._method_sink(node)
        else:
            self._delegated(node, own)   # a method this module defines is followed into, not taken for dict's
        self._cached_call(node)
        self._creation(node)
        self.generic_visit(node)

    def _method_sink(self, call: ast.Call) -> None:
        if not isinstance(call.func, ast.Attribute) or not call.args:
            return
        method = call.func.attr
        receiver = call.func.value
        if method in PRUNE_METHODS:
            self._prune(receiver, call.args[0], call)
            return
        argument = call.args[1] if method == "insert" and len(call.args) > 1 else call.args[0]
        if method == "update" and len(call.args) == 1:
            self._update(call, receiver, argument)
            return
        key = self.reader.key(argument)
        if key is None:
            return
        if method in _READ_METHODS:
            verdict = self.judge.container(receiver, self.place)
            self._hit(call, code_for(key, "mapping"), self._subject(call, key), Use.READ, verdict, container=receiver, key=key)
        elif method in _CONTAINS_METHODS:
            verdict = self.judge.container(receiver, self.place)
            self._hit(call, code_for(key, "membership"), self._subject(call, key), Use.READ, verdict,
                      container=receiver, key=key, sink="membership")
        elif method in _STORE_METHODS or (self._keyed_setter(method, receiver) and len(call.args) >= 2):
            value = setter_value(call)
            appended = self._appended_to_result(call)
            self._store(call, receiver, key, argument, value, also_holding=appended)
        elif method in _ELEMENT_METHODS or method == "insert":
            self._store(call, receiver, key, argument, None, sink="element")

    def _keyed_setter(self, method: str, receiver: ast.expr) -> bool:
        """``set``, ``put``, ``add_cache_entry``, ``store_result``: a setter's verb first; of
        an imported module (``signal_handling._set_worker_pids(id(self), pids)``) only the
        bare verbs, since a module's function named like a setter is no cache's store."""
        if not setter_verb(method):
            return False
        if method.lstrip("_") in KEYED_SETTERS:
            return True
        root, _ = root_of(receiver)
        imported = (
            isinstance(root, ast.Name) and self.place.scope.resolve(root.id)[0] is Binding.MODULE
            and module_binding(root.id, self.place) == "import"
        )
        return not imported

    def _appended_to_result(self, call: ast.Call) -> Optional[ast.expr]:
        """``d.setdefault(id(x), []).append(x)``: the object appended to the entry; also
        through a local bound once to the entry (``active = d.setdefault(k, [])`` and then
        ``active.append(Record(x))`` in the same block)."""
        attribute = self.module.parents.get(call)
        outer = self.module.parents.get(attribute) if attribute is not None else None
        if (
            isinstance(attribute, ast.Attribute)
            and attribute.attr in MUTATORS
            and isinstance(outer, ast.Call)
            and outer.func is attribute
            and outer.args
        ):
            return outer.args[0]
        statement = attribute
        if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name)):
            return None
        name = statement.targets[0].id
        if len(self.place.scope.values.get(name, [])) != 1:
            return None
        block = self._block_of(statement)
        for later in getattr(block[0], block[1], []) if block is not None else []:
            if later.lineno <= statement.lineno or not isinstance(later, ast.Expr):
                continue
            inner = later.value
            if (
                isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr in MUTATORS
                and isinstance(inner.func.value, ast.Name) and inner.func.value.id == name and inner.args
            ):
                added = inner.args[-1]
                bound = self.place.scope.values.get(added.id, []) if isinstance(added, ast.Name) else []
                return bound[0] if len(bound) == 1 and bound[0] is not None else added
        return None

    def _cached_call(self, call: ast.Call) -> None:
        qualified = self.module.callee_qualname(call, self.place.scope)
        if qualified not in self.module.cached_functions:
            return
        for argument in [*call.args, *(k.value for k in call.keywords)]:
            key = self.reader.key(argument)
            if key is None:
                continue
            verdict = Verdict(
                self.judge.container(call.func, self.place).lifetime,
                False,
                f"the functools cache of {qualified}() is keyed by {key.text} and lives as long as the function",
            )
            self._hit(call, Code.KEY_BUILT_FROM_ID, render(call), Use.CACHED, verdict, container=call.func, key=key, sink="cached")
            return

    def _creation(self, node: ast.expr) -> None:
        if node in self._consumed:
            return
        collection = self.reader.collection(node)
        if collection is None:
            return
        for inner in ast.walk(node):
            if inner is not node:
                self._consumed.add(inner)
        verdict = self.judge.destination(node, self.place)
        key = collection.element
        if not collection.is_mapping and not collection.is_set and verdict.safe:
            return  # a local list of ids is not a registry; it is reported once it escapes
        sink = "mapping" if collection.is_mapping else "element"
        kept = None
        if collection.is_mapping and key.objects and all(holds(collection.entry_value, obj, self.place.flow) for obj in key.objects):
            kept = f"each entry holds {render(key.objects[0])} itself, so its id cannot be reused while the entry exists"
        if kept is None and key.objects:
            kept = self._never_die(key) or (None if verdict.safe else creation_held(node, key.objects, self.place))
        subject = render(node)
        self._hit(node, code_for(key, sink), subject, Use.STORE, verdict, kept, container=node, key=key, sink=sink)

    def visit_SetComp(self, node: ast.SetComp) -> None:
        self._creation(node)
        self.generic_visit(node)

    visit_ListComp = visit_SetComp
    visit_DictComp = visit_SetComp
    visit_Set = visit_SetComp
    visit_Dict = visit_SetComp

