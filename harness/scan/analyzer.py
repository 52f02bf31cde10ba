"""The analysis walk: find every place a key is made of an object's identity, and judge it.

:class:`ModuleAnalyzer` walks one module in source order, keeping per function the names
bound to id-derived values (see :class:`~harness.scan.flow.FlowState`). At each sink
-- a subscript, a dict/set method, a membership test, a dict or set built in place, an
``lru_cache`` call, an id stored on an attribute -- it records a :class:`Hit` with the
lifetime verdict of the container and what keeps the object alive (the entry, a finalizer, a
second holder: :mod:`harness.scan.holders`), and every removal of one entry (for
:mod:`harness.scan.resets`). :func:`harness.scan.registry.judge` then judges the hits once
every module has been walked, because a read (``id(x) in registry``) is safe exactly when
every store into that registry, in any scanned file, is safe.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
from typing import Optional

from harness.scan.codes import Code
from harness.scan.delegated import param_stores, passed
from harness.scan.environment import Place
from harness.scan.facts import Factory, ModuleFacts
from harness.scan.filenames import names_a_file
from harness.scan.flow import FlowState
from harness.scan.keys import CollectionFacts, KeyFacts, KeyKind
from harness.scan.holders import aliases, immortal, loop_holder, membership_guards, object_free_value, owner_pinned, roots
from harness.scan.lifetime import MUTATORS, LifetimeJudge, Verdict
from harness.scan.resets import Prune
from harness.scan.scopes import Binding
from harness.scan.syntax import callee_name, dotted, render, root_of, same_expr, walk_same_scope

_READ_METHODS = {"get", "__getitem__"}
_CONTAINS_METHODS = {"__contains__"}
_STORE_METHODS = {"setdefault", "__setitem__"}
_ELEMENT_METHODS = {"add", "append", "appendleft", "put"}
# Removing an entry is how id-keyed state is pruned: the cure, not the hazard.
_PRUNE_METHODS = {"pop", "discard", "remove", "__delitem__"}



class Use(enum.Enum):
    """What the code does with the id-derived key at a sink, and what goes wrong if stale."""

    STORE = "when the object dies the entry stays, and a new object that gets the address matches it"
    READ = "a new object that gets a dead object's address finds the dead object's entry"
    SAVED = "a new object that gets the same address compares equal to the saved id"
    CACHED = "the cache keeps results for dead objects and hands them to new objects at the same address"


@dataclasses.dataclass(eq=False)
class Hit:
    """One sink, before the whole-scan judgement of reads."""

    module: ModuleFacts
    node: ast.AST
    code: Code
    subject: str
    use: Use
    verdict: Verdict
    kept_alive: Optional[str] = None
    container: Optional[ast.expr] = None
    key: Optional[KeyFacts] = None
    where: str = ""                                      # qualified name of the function
    guards: tuple[tuple[str, int], ...] = ()             # registries checked to hold the key
    sink: str = "mapping"                                # mapping, element, membership, saved, cached
    allocated: bool = False                              # the key's objects are made by this function
    file_name: bool = False                              # the id is written into a file or registered name
    count: bool = False                                  # the use only adds to a count kept per key

    @property
    def attribute(self) -> Optional[str]:
        """The last attribute naming the container (``_external_params`` for
        ``module._external_params[k]``): stores and reads are matched by it when the object
        the attribute belongs to cannot be told."""
        if self.container is None:
            return None
        _, parts = root_of(self.container)
        parts = parts[: parts.index("[]")] if "[]" in parts else parts
        return parts[-1] if parts else None


def code_for(key: KeyFacts, sink: str) -> Code:
    """The finding code for an id-derived ``key`` used as a ``sink`` ("mapping", "element",
    "membership")."""
    if key.kind is KeyKind.HASH:
        return Code.KEY_FROM_IDENTITY_HASH
    if key.kind is KeyKind.COMPOSITE:
        return Code.KEY_BUILT_FROM_ID
    return {
        "mapping": Code.DICT_KEYED_BY_ID,
        "element": Code.COLLECTION_OF_IDS,
        "membership": Code.MEMBERSHIP_BY_ID,
    }[sink]


def _holds(value: Optional[ast.expr], obj: ast.expr, flow: FlowState, followed: frozenset = frozenset()) -> bool:
    """Whether ``value`` is ``obj`` or a literal (or a name bound to one) containing it.
    Each name is followed once: ``params = [params]`` binds a name to a list holding
    itself, and the cycle ends there."""
    if value is None:
        return False
    if same_expr(value, obj):
        return True
    if isinstance(value, (ast.Tuple, ast.List, ast.Set)):
        return any(_holds(element, obj, flow, followed) for element in value.elts)
    if isinstance(value, ast.Dict):
        return any(_holds(part, obj, flow, followed) for part in [*value.keys, *value.values] if part is not None)
    if isinstance(value, ast.Starred):
        return _holds(value.value, obj, flow, followed)
    if isinstance(value, ast.Call) and _constructs(value):
        # Entry(obj, meta): an instance made with the object holds it
        return any(_holds(part, obj, flow, followed) for part in [*value.args, *(k.value for k in value.keywords)])
    if isinstance(value, ast.Name) and value.id in flow.holders and value.id not in followed:
        return _holds(flow.holders[value.id], obj, flow, followed | {value.id})
    return False


class ModuleAnalyzer:
    """Walks one module and collects its :class:`Hit` list."""

    def __init__(self, module: ModuleFacts, factories: dict[str, Factory]):
        self.module = module
        self.factories = factories
        self.judge = LifetimeJudge()
        self.place = Place(module, module.module_scope, FlowState(), factories)
        self.hits: list[Hit] = []
        self.prunes: list[Prune] = []
        self._consumed: set[ast.AST] = set()

    @property
    def reader(self):
        return self.place.reader

    def run(self) -> list[Hit]:
        self._visit_block(self.module.tree.body)
        return self.hits

    def _visit_block(self, statements: list) -> None:
        """Walk a block statement by statement. A statement nested deeper than Python's
        recursion limit lets walking it fail alone: the statements inside it are walked
        one by one, and only the expression too deep to follow goes unchecked."""
        for statement in statements:
            try:
                self.visit(statement)
            except RecursionError:
                if statement in self.module.scopes:
                    self._in_scope(statement, statement.body)
                else:
                    self._visit_block(_inner_statements(statement))

    # ---- walking ----------------------------------------------------------------------

    def visit(self, node: Optional[ast.AST]) -> None:
        if node is None:
            return
        handler = getattr(self, f"visit_{type(node).__name__}", None)
        if handler is not None:
            handler(node)
        else:
            self.generic_visit(node)

    def generic_visit(self, node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            self.visit(child)

    def _in_scope(self, node: ast.AST, body: list) -> None:
        outer = self.place
        self.place = outer.at(self.module.scopes[node])
        try:
            self._visit_block(body)
        finally:
            self.place = outer

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        for decorator in node.decorator_list:
            self.visit(decorator)
        self.visit(node.args)
        self._in_scope(node, node.body)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_arguments(self, node: ast.arguments) -> None:
        for default in [*node.defaults, *node.kw_defaults]:
            self.visit(default)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.visit(node.args)
        self._in_scope(node, [node.body])

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for part in [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]:
            self.visit(part)
        self._in_scope(node, node.body)

    # ---- statements that bind names ----------------------------------------------------

    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        for target in node.targets:
            self._assign(target, node.value, node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
            self._assign(node.target, node.value, node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.visit(node.value)
        target = node.target
        if isinstance(target, ast.Subscript):
            key = self.reader.key(target.slice)
            if key is not None:
                self._store(target, target.value, key, target.slice, None)
                self.hits[-1].count = (
                    isinstance(node.op, (ast.Add, ast.Sub)) and _is_number(node.value)
                    and self._only_counted(target.value, node)
                )
            self.visit(target.value)
            self.visit(target.slice)
        elif isinstance(target, ast.Name):
            self.place.flow.forget(target.id)
        else:
            self.visit(target)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        self.place.flow.bind(node.target.id, node.value, self.reader)

    def _assign(self, target: ast.expr, value: Optional[ast.expr], statement: ast.stmt) -> None:
        if isinstance(target, ast.Name):
            self._saved_id(target, value, statement)
            self.place.flow.bind(target.id, value, self.reader)
        elif isinstance(target, ast.Attribute):
            self._saved_id(target, value, statement)
            self.visit(target.value)
        elif isinstance(target, ast.Subscript):
            key = self.reader.key(target.slice)
            if key is not None:
                self._store(target, target.value, key, target.slice, value)
                self._mark_count(self.hits[-1], target, value)
            else:
                self._saved_id(target, value, statement)
            self.visit(target.value)
            self.visit(target.slice)
        elif isinstance(target, (ast.Tuple, ast.List)):
            values = value.elts if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts) else None
            for index, element in enumerate(target.elts):
                self._assign(element, values[index] if values else None, statement)
        elif isinstance(target, ast.Starred):
            self._assign(target.value, None, statement)

    def visit_For(self, node: ast.For) -> None:
        self.visit(node.iter)
        self._bind_loop_target(node.target, node.iter)
        for statement in [*node.body, *node.orelse]:
            self.visit(statement)

    visit_AsyncFor = visit_For

    def _bind_loop_target(self, target: ast.expr, iterable: ast.expr) -> None:
        flow = self.place.flow
        key_target = target
        source = self.reader.id_source(iterable)
        if source is None:
            mapping = self._mapping_iterated(iterable)
            if mapping is not None:
                source = mapping
                if isinstance(target, ast.Tuple) and target.elts and _is_items_call(iterable):
                    key_target = target.elts[0]
        for name_node in ast.walk(target):
            if isinstance(name_node, ast.Name):
                flow.forget(name_node.id)
        if source is not None and isinstance(key_target, ast.Name):
            flow.bind_key(key_target.id, KeyFacts(source.kind, (), f"{key_target.id} in {render(iterable)}"))

    def _mapping_iterated(self, iterable: ast.expr) -> Optional[KeyFacts]:
        """The key of an id-keyed dict iterated as ``d``, ``d.keys()`` or ``d.items()``."""
        node = iterable
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("keys", "items"):
            node = node.func.value
        if isinstance(node, ast.Name):
            bound = self.place.flow.collections.get(node.id)
            if bound is not None and bound.is_mapping:
                return bound.element
        return None

    def visit_withitem(self, node: ast.withitem) -> None:
        self.visit(node.context_expr)
        if node.optional_vars is not None:
            for name_node in ast.walk(node.optional_vars):
                if isinstance(name_node, ast.Name):
                    self.place.flow.forget(name_node.id)

    def visit_Delete(self, node: ast.Delete) -> None:
        # del d[id(x)] prunes; only what the subscripts are made of is walked.
        for target in node.targets:
            if isinstance(target, ast.Subscript):
                self._prune(target.value, target.slice, node)
                self.visit(target.value)
                self.visit(target.slice)
            else:
                self.visit(target)

    def _prune(self, container: ast.expr, key_node: ast.expr, node: ast.AST) -> None:
        """Record a removal of one entry (see :mod:`harness.scan.resets`); the key need not
        read as id-derived here (``for b in ids: del reg[b]`` over a list built elsewhere)."""
        identity = self.judge.container(container, self.place).identity
        if identity:
            self.prunes.append(Prune(identity, self.place.scope.qualname, self.module.path, node.lineno))

    # ---- expressions that are sinks -----------------------------------------------------

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
        self._method_sink(node)
        self._delegated_store(node)
        self._cached_call(node)
        self._creation(node)
        self.generic_visit(node)

    def _method_sink(self, call: ast.Call) -> None:
        if not isinstance(call.func, ast.Attribute) or not call.args:
            return
        method = call.func.attr
        receiver = call.func.value
        if method in _PRUNE_METHODS:
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
        elif method in _STORE_METHODS:
            value = call.args[1] if len(call.args) > 1 else None
            appended = self._appended_to_result(call)
            self._store(call, receiver, key, argument, value, also_holding=appended)
        elif method in _ELEMENT_METHODS or method == "insert":
            self._store(call, receiver, key, argument, None, sink="element")

    def _delegated_store(self, call: ast.Call) -> None:
        """``self._put(id(obj), value)`` where ``_put`` (of this module) stores its key
        parameter: a store at the call, into the callee's container (:mod:`harness.scan.delegated`)."""
        if not call.args and not call.keywords:
            return
        qualified = self.module.callee_qualname(call, self.place.scope)
        function = self.module.functions.get(qualified) if qualified else None
        if function is None or qualified in self.module.cached_functions or function is self.place.scope.node:
            return
        callee = self.module.scopes[function]
        params = [p for p in callee.params if p != callee.bound_param]
        arguments = passed(call, params)
        for param, argument in arguments:
            key = self.reader.key(argument)
            if key is None:
                continue
            for store in param_stores(function, param):
                value = dict(arguments).get(store.value.id) if isinstance(store.value, ast.Name) else None
                verdict = self.judge.container(store.container, self.place.at(callee))
                line = getattr(store.node, "lineno", "?")
                verdict = dataclasses.replace(verdict, reason=f"{render(call.func)}() stores it in {render(store.container)} (line {line}): {verdict.reason}")
                self._store(call, store.container, key, argument, None, also_holding=value, sink=store.sink, verdict=verdict)

    def _mark_count(self, store: Hit, target: ast.Subscript, value: Optional[ast.expr]) -> None:
        """``d[k] = d.get(k, 0) + 1``: the store, and the read it adds to, only count."""
        if not (isinstance(value, ast.BinOp) and isinstance(value.op, (ast.Add, ast.Sub))):
            return
        sides = [value.left, value.right]
        if not any(_is_number(side) for side in sides):
            return
        read = next((side for side in sides if not _is_number(side)), None)
        if read is None or not (isinstance(read, (ast.Subscript, ast.Call)) and render(root_of(read)[0]) == render(root_of(target)[0])):
            return
        if not self._only_counted(target.value, self.module.parents.get(value)):
            return
        inside = set(ast.walk(value))
        for hit in self.hits:
            if hit is store or (hit.node in inside and hit.use is Use.READ):
                hit.count = True

    def _only_counted(self, container: ast.expr, statement: Optional[ast.AST]) -> bool:
        """Whether the module reads ``container`` nowhere but in ``statement`` and in
        statements that count or log (``len(counts)`` returned is a use of its own)."""
        shown = render(container)
        inside = set(ast.walk(statement)) if statement is not None else set()
        for node in ast.walk(self.module.tree):
            if node in inside or not isinstance(node, (ast.Name, ast.Attribute)) or not isinstance(node.ctx, ast.Load):
                continue
            if (node.id if isinstance(node, ast.Name) else node.attr) != (shown.rsplit(".", 1)[-1]):
                continue
            if render(node) != shown:
                continue
            statement_of = self._statement_of(node)
            if isinstance(statement_of, ast.AugAssign) or _logs(statement_of):
                continue
            return False
        return True

    def _update(self, call: ast.Call, receiver: ast.expr, argument: ast.expr) -> None:
        """``d.update([(id(x), v)])``, ``d.update((id(x), v) for x in xs)``,
        ``d.update(zip(map(id, xs), vs))``: every pair is a store into ``d`` (a dict built in
        place, ``d.update({id(x): v})``, is one through :meth:`_creation`)."""
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

    def _appended_to_result(self, call: ast.Call) -> Optional[ast.expr]:
        """``d.setdefault(id(x), []).append(x)``: the object appended to the entry."""
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
        if collection.is_mapping and key.objects and all(_holds(collection.entry_value, obj, self.place.flow) for obj in key.objects):
            kept = f"each entry holds {render(key.objects[0])} itself, so its id cannot be reused while the entry exists"
        if kept is None and key.objects:
            kept = self._never_die(key)
        subject = render(node)
        self._hit(node, code_for(key, sink), subject, Use.STORE, verdict, kept, container=node, key=key, sink=sink)

    def visit_SetComp(self, node: ast.SetComp) -> None:
        self._creation(node)
        self.generic_visit(node)

    visit_ListComp = visit_SetComp
    visit_DictComp = visit_SetComp
    visit_Set = visit_SetComp
    visit_Dict = visit_SetComp

    # ---- recording --------------------------------------------------------------------

    def _store(
        self,
        node: ast.AST,
        container: ast.expr,
        key: KeyFacts,
        key_node: ast.expr,
        value: Optional[ast.expr],
        also_holding: Optional[ast.expr] = None,
        sink: str = "mapping",
        verdict: Optional[Verdict] = None,
    ) -> None:
        verdict = verdict or self.judge.container(container, self.place)
        if isinstance(container, ast.Name) and sink == "mapping" and container.id not in self.place.flow.collections:
            # by_id[id(x)].append(n) fills a local mapping keyed by ids: a later loop over
            # by_id.items() yields those ids
            self.place.flow.collections[container.id] = CollectionFacts(key, True, False, None, node)
        kept = self._kept_alive(node, key, container, value, also_holding, key_node)
        if kept is None:
            kept = self._pruned_in_finally(node, container, key_node)
        if kept is None and sink == "mapping":
            kept = object_free_value(value, container, self.place)
        guards = tuple(membership_guards(node, key_node, self.place, self.judge)) if kept is None else ()
        self._hit(node, code_for(key, sink), self._subject(node, key), Use.STORE, verdict, kept,
                  container=container, key=key, sink=sink, guards=guards)
        self.hits[-1].allocated = bool(key.objects) and all(self._made_here(obj) for obj in key.objects)

    def _saved_id(self, target: ast.expr, value: Optional[ast.expr], statement: ast.stmt) -> None:
        """``self.owner_id = id(owner)``: an id kept in state that outlives the function."""
        if value is None or self.reader.collection(value) is not None:
            return
        key = self.reader.key(value)
        if key is None or key.kind is KeyKind.HASH:
            return
        if isinstance(target, ast.Name):
            binding = self.place.scope.resolve(target.id)[0].value
            if binding not in ("module", "class"):
                return
            verdict = self.judge.container(target, self.place)
        elif isinstance(target, ast.Attribute):
            verdict = self.judge.container(target, self.place)
        else:
            verdict = self.judge.container(target.value, self.place)
        if verdict.safe:
            return
        kept = self._kept_alive(statement, key, target, None, None, value)
        if kept is None and names_a_file(value, target, self.place.scope.node):
            verdict = dataclasses.replace(verdict, reason=(
                f"{render(target)} is a name made of {key.text} that leaves the object (a file, or a name "
                "registered with the process): it outlives the object, and a new object at the same address makes the same name"
            ))
        guards = tuple(membership_guards(statement, value, self.place, self.judge)) if kept is None else ()
        self._hit(statement, Code.ID_SAVED_IN_STATE, f"{render(target)} = {key.text}", Use.SAVED, verdict, kept,
                  container=target, key=key, sink="saved", guards=guards)
        self.hits[-1].file_name = kept is None and names_a_file(value, target, self.place.scope.node)

    def _hit(
        self, node: ast.AST, code: Code, subject: str, use: Use, verdict: Verdict, kept: Optional[str] = None, *,
        container: Optional[ast.expr] = None, key: Optional[KeyFacts] = None, sink: str = "mapping",
        guards: tuple = (),
    ) -> None:
        if kept is None and key is not None and key.objects and use is not Use.STORE:
            kept = self._never_die(key)
        self.hits.append(Hit(
            self.module, node, code, subject, use, verdict, kept, container, key,
            self.place.scope.qualname, guards, sink,
        ))

    @staticmethod
    def _subject(node: ast.AST, key: KeyFacts) -> str:
        shown = render(node)
        return shown if key.text in shown else f"{shown} (key {key.text})"

    # ---- what keeps an object alive ----------------------------------------------------

    def _kept_alive(
        self,
        sink: ast.AST,
        key: KeyFacts,
        container: ast.expr,
        value: Optional[ast.expr],
        also_holding: Optional[ast.expr],
        key_node: Optional[ast.expr] = None,
    ) -> Optional[str]:
        """Why every object of ``key`` outlives the entry, or None when nothing shows it.

        A finalizer or a second holder counts only when it runs whenever the sink does: it
        sits in the sink's own block or in a block around it (not in a branch beside it).
        """
        if not key.objects:
            return None
        flow = self.place.flow
        reasons = []
        root, _ = root_of(container)
        for obj in key.objects:
            shown = render(obj)
            if same_expr(root, obj) and not names_a_file(key_node, container, self.place.scope.node):
                reasons.append(f"{render(container)} belongs to {shown} itself, so it cannot outlive it")
                continue
            if _holds(value, obj, flow) or _holds(also_holding, obj, flow):
                reasons.append(f"the entry holds {shown} itself, so its id cannot be reused while the entry exists")
                continue
            never = immortal(obj, self.place) or owner_pinned(obj, container, self.place)
            if never is not None:
                reasons.append(never)
                continue
            finalizer = self._finalizer_pruning(sink, obj, container)
            if finalizer is not None:
                reasons.append(f"weakref.finalize on {shown} (line {finalizer}) prunes the entry before the address can be reused")
                continue
            sibling = self._sibling_holder(sink, obj, container) or loop_holder(sink, obj, container, self.place)
            if sibling is not None:
                reasons.append(sibling)
                continue
            return None
        return "; ".join(dict.fromkeys(reasons))

    def _function_nodes(self) -> list[ast.AST]:
        scope = self.place.scope
        return list(walk_same_scope(scope.node))

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

    def _pruned_in_finally(self, sink: ast.AST, container: ast.expr, key_node: ast.expr) -> Optional[str]:
        """``s.add(key)`` then ``try: ... finally: s.discard(key)``: the entry lives only while
        this call runs, and the call holds the object (a recursion guard)."""
        for node in self._function_nodes():
            if not isinstance(node, ast.Try) or not node.finalbody:
                continue
            inside = any(child is sink for statement in node.body for child in ast.walk(statement))
            if not (inside or self._runs_with(node, sink)):
                continue
            for statement in node.finalbody:
                for prune in ast.walk(statement):
                    if self._prunes(prune, container, key_node):
                        return (
                            f"the finally block at line {prune.lineno} removes the entry, so it lives "
                            "only while this call, which holds the object, runs"
                        )
        return None

    @staticmethod
    def _prunes(node: ast.AST, container: ast.expr, key_node: ast.expr) -> bool:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _PRUNE_METHODS:
            return bool(node.args) and same_expr(node.func.value, container) and same_expr(node.args[0], key_node)
        if isinstance(node, ast.Delete):
            return any(
                isinstance(t, ast.Subscript) and same_expr(t.value, container) and same_expr(t.slice, key_node)
                for t in node.targets
            )
        return False

    def _sibling_holder(self, sink: ast.AST, obj: ast.expr, container: ast.expr) -> Optional[str]:
        """Another store in this function, into state with the same root (``self``, ``cls``,
        the same global), that holds the object: the state keeps it alive with the key."""
        registry_roots = roots(container, self.place)
        if not registry_roots:
            return None
        flow = self.place.flow
        for node in self._function_nodes():
            targets: list[tuple[ast.expr, Optional[ast.expr]]] = []
            if isinstance(node, ast.Assign):
                targets = [(target, node.value) for target in node.targets]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS and node.args:
                targets = [(node.func.value, node.args[-1])]
            for target, value in targets:
                if same_expr(target, container) or not _holds(value, obj, flow):
                    continue
                # A holder reached through a local alias counts as the state it aliases
                # (streams = self.rs_streams if rs else self.ag_streams; streams.append(s)).
                resolved = aliases(target, self.place)
                if isinstance(target, ast.Name) and resolved == [target]:
                    continue
                holder_roots = {root.id for root, _ in map(root_of, resolved) if isinstance(root, ast.Name)}
                if holder_roots and holder_roots <= registry_roots and self._runs_with(node, sink):
                    return f"{render(target)} also holds {render(obj)} (line {node.lineno}), with the same lifetime as the key"
        return None

    def _made_here(self, obj: ast.expr) -> bool:
        """Whether ``obj`` is a local of this function bound only to call results (an object
        this function makes, rather than one a caller brings)."""
        if not isinstance(obj, ast.Name):
            return False
        binding, owner = self.place.scope.resolve(obj.id)
        values = owner.values.get(obj.id, [])
        return binding is Binding.LOCAL and bool(values) and all(isinstance(v, ast.Call) for v in values)

    def _never_die(self, key: KeyFacts) -> Optional[str]:
        """Why every object of ``key`` lives for the whole process, or None."""
        reasons = [immortal(obj, self.place) for obj in key.objects]
        return "; ".join(dict.fromkeys(reasons)) if reasons and all(reasons) else None


    def _runs_with(self, node: ast.AST, sink: ast.AST) -> bool:
        """Whether the statement of ``node`` sits in a block that also (directly or through
        nesting) contains ``sink``: then both run, or neither (exceptions aside)."""
        block = self._block_of(self._statement_of(node))
        return block is not None and block in self._blocks_around(sink)

    def _statement_of(self, node: ast.AST) -> ast.AST:
        parents = self.module.parents
        while not isinstance(node, ast.stmt) and node in parents:
            node = parents[node]
        return node

    def _block_of(self, statement: ast.AST) -> Optional[tuple[ast.AST, str]]:
        parent = self.module.parents.get(statement)
        if parent is None:
            return None
        for field in ("body", "orelse", "finalbody"):
            block = getattr(parent, field, None)
            if isinstance(block, list) and any(item is statement for item in block):
                return (parent, field)
        return None

    def _blocks_around(self, node: ast.AST) -> list[tuple[ast.AST, str]]:
        blocks = []
        current = self._statement_of(node)
        while current is not None and current is not self.place.scope.node:
            block = self._block_of(current)
            if block is not None:
                blocks.append(block)
            current = self.module.parents.get(current)
        return blocks


def _constructs(call: ast.Call) -> bool:
    """A call of a class by its name (``Entry(...)``, ``mod.Entry(...)``), not of a weak reference."""
    name = callee_name(call) or ""
    return name[:1].isupper() and not name[1:2].isupper() and "weak" not in name.lower() and "Ref" not in name


def _logs(statement: ast.AST) -> bool:
    """A statement that only prints or logs (``logger.info(...)``, ``print(...)``)."""
    if not isinstance(statement, ast.Expr) or not isinstance(statement.value, ast.Call):
        return False
    name = callee_name(statement.value) or ""
    return name in ("print", "info", "debug", "warning", "warn", "log", "error", "record", "add_scalar")


def _is_number(node: Optional[ast.AST]) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool)


def _inner_statements(statement: ast.AST) -> list:
    """The statements of the blocks inside ``statement`` (a function's body, a loop's, each
    handler's), in source order."""
    inner = []
    for node in ast.iter_child_nodes(statement):
        if isinstance(node, ast.stmt):
            inner.append(node)
        elif isinstance(node, (ast.ExceptHandler, ast.match_case)):
            inner.extend(node.body)
    return inner


def _is_items_call(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "items"


def analyze(modules: list[ModuleFacts], factories: dict[str, Factory]) -> tuple[list[Hit], list[Prune]]:
    """Every module's hits, and every removal of one entry (for the bounds of
    :mod:`harness.scan.resets`). Every parsed module is walked to its end (see
    :meth:`ModuleAnalyzer._visit_block`)."""
    hits: list[Hit] = []
    prunes: list[Prune] = []
    for module in modules:
        analyzer = ModuleAnalyzer(module, factories)
        hits.extend(analyzer.run())
        prunes.extend(analyzer.prunes)
    return hits, prunes
