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
from typing import Optional

from harness.scan.codes import Code
from harness.scan.counting import Counting, is_number
from harness.scan.delegated import IndirectStores
from harness.scan.environment import Place
from harness.scan.facts import Factory, ModuleFacts
from harness.scan.filenames import names_a_file
from harness.scan.flow import FlowState
from harness.scan.hits import Hit, Use, code_for
from harness.scan.holders import membership_guards, object_free_value
from harness.scan.keepalive import KeepAlive
from harness.scan.keys import CollectionFacts, KeyFacts, KeyKind
from harness.scan.lifetime import LifetimeJudge
from harness.scan.resets import Prune
from harness.scan.sinks import Sinks
from harness.scan.syntax import render
from harness.scan.verdict import Verdict


class ModuleAnalyzer(Sinks, KeepAlive, Counting, IndirectStores):
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
                    isinstance(node.op, (ast.Add, ast.Sub)) and is_number(node.value)
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
            if isinstance(target.value, ast.Name) and value is not None:
                self.place.flow.attach(target.value.id, value)
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

    def visit_If(self, node: ast.If) -> None:
        """Either branch may run: a name bound to an id-derived value on either path keeps
        it after the ``if`` (``key = (id(m), s)`` / ``else: key = (token, s)``, then
        ``self._key = key``; ``cid = f"{n}_{id(c)}"`` / ``if dup: cid = other``, then
        ``reg[cid] = c``)."""
        self.visit(node.test)
        keys = self.place.flow.keys
        before = dict(keys)
        for statement in node.body:
            self.visit(statement)
        after_body = dict(keys)
        keys.clear()
        keys.update(before)
        for statement in node.orelse:
            self.visit(statement)
        for name, facts in after_body.items():
            keys.setdefault(name, facts)

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
