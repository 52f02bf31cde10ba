"""What keeps a keyed object alive as long as its entry, read at one store: the container
belongs to the object, the entry holds it, it never dies, a finalizer prunes the entry, a
``finally`` removes it, another holder with the registry's lifetime keeps it (the questions
about one object are in :mod:`harness.scan.holders`). A finalizer or a second holder counts
only when it runs whenever the store does: in the store's own block or a block around it."""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.destinations import MUTATORS
from harness.scan.filenames import names_a_file
from harness.scan.bornwrites import written_at_birth
from harness.scan.finalizers import Finalizers
from harness.scan.framemates import frame_holder
from harness.scan.holders import aliases, attached_after, closure_holds, holds, immortal, loop_holder, module_keeper, owner_pinned, roots
from harness.scan.keys import KeyFacts
from harness.scan.passthrough import returns_argument, returns_closure_over
from harness.scan.scopes import Binding
from harness.scan.syntax import block_of, render, root_of, same_expr, statement_of, walk_block, walk_same_scope

# Removing an entry is how id-keyed state is pruned: the cure, not the hazard.
PRUNE_METHODS = {"pop", "discard", "remove", "__delitem__"}


def prunes(node: ast.AST, container: ast.expr, key_node: ast.expr) -> bool:
    """``container.pop(key)`` (or discard, remove, ``del container[key]``) of this very key."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in PRUNE_METHODS:
        return bool(node.args) and same_expr(node.func.value, container) and same_expr(node.args[0], key_node)
    if isinstance(node, ast.Delete):
        return any(
            isinstance(t, ast.Subscript) and same_expr(t.value, container) and same_expr(t.slice, key_node)
            for t in node.targets
        )
    return False


class KeepAlive(Finalizers):
    """The part of :class:`~harness.scan.analyzer.ModuleAnalyzer` that reads why a keyed
    object outlives its entry (it reads the analyzer's ``place`` and ``module``)."""

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
        deleted = self._pruned_in_del(container)
        if deleted is not None:
            return f"__del__ (line {deleted}) removes the entry when the object dies, before its address can be reused"
        if not key.objects:
            line = self._finalizer_popping(sink, container, key_node)
            return None if line is None else (
                f"a weakref.finalize or weakref callback (line {line}) pops the entry when an object of its key dies, before the address can be reused"
            )
        flow = self.place.flow
        reasons = []
        root, _ = root_of(container)
        own = [root, *(root_of(alias)[0] for alias in aliases(container, self.place))]
        for obj in key.objects:
            shown = render(obj)
            if any(same_expr(r, obj) for r in own) and not names_a_file(key_node, container, self.place.scope.node):
                reasons.append(f"{render(container)} belongs to {shown} itself, so it cannot outlive it")
                continue
            if holds(value, obj, flow) or holds(also_holding, obj, flow) or attached_after(sink, value, obj, self.module.parents):
                reasons.append(f"the entry holds {shown} itself, so its id cannot be reused while the entry exists")
                continue
            if closure_holds(value, obj, self.place.scope.node, flow.holders):
                reasons.append(f"the entry is, or is made with, a function made here that holds {shown} (it reads it, or wraps it), so its id cannot be reused while the entry exists")
                continue
            born = written_at_birth(sink, obj, key_node, container, self.place)
            if born is not None:
                reasons.append(born)
                continue
            if returns_argument(value, obj, self.module.functions, flow.holders):
                reasons.append(f"the entry holds {shown} itself, handed back by {render(value)}, so its id cannot be reused while the entry exists")
                continue
            if returns_closure_over(value, obj, self.module.functions, flow.holders):
                made = flow.holders.get(value.id, value) if isinstance(value, ast.Name) else value
                reasons.append(f"the entry is a function {render(made)} makes that reads {shown}, so it holds {shown} and its id cannot be reused while the entry exists")
                continue
            owner = self._read_from_held(obj, (value, also_holding))
            if owner is not None:
                reasons.append(f"the entry holds {owner}, which {shown} was read from, so its id cannot be reused while the entry exists")
                continue
            never = immortal(obj, self.place) or owner_pinned(obj, container, self.place)
            if never is not None:
                reasons.append(never)
                continue
            finalizer = self._finalizer_pruning(sink, obj, container)
            if finalizer is not None:
                reasons.append(f"weakref.finalize on {shown} (line {finalizer}) prunes the entry before the address can be reused")
                continue
            sibling = (
                self._sibling_holder(sink, obj, container)
                or loop_holder(sink, obj, container, self.place)
                or frame_holder(sink, obj, container, self.place)
            )
            if sibling is not None:
                reasons.append(sibling)
                continue
            return None
        return "; ".join(dict.fromkeys(reasons))

    def _read_from_held(self, obj: ast.expr, held: tuple) -> Optional[str]:
        """``owners.setdefault(id(c.group.module), []).append(c)``: the keyed object is read
        from an attribute path (directly, or through a local bound once) of the object the
        entry holds. The entry holds the object the path starts at, and with it the keyed one."""
        path = obj
        if isinstance(obj, ast.Name):
            values = self.place.scope.values.get(obj.id, [])
            path = values[0] if len(values) == 1 and values[0] is not None else obj
        if not isinstance(path, ast.Attribute) or any(isinstance(n, (ast.Call, ast.Subscript)) for n in ast.walk(path)):
            return None
        root, _ = root_of(path)
        for value in held:
            if value is not None and same_expr(value, root):
                return render(value)
        return None

    def _function_nodes(self) -> list[ast.AST]:
        scope = self.place.scope
        return list(walk_same_scope(scope.node))

    def _pruned_in_finally(self, sink: ast.AST, container: ast.expr, key_node: ast.expr) -> Optional[str]:
        """``s.add(key)`` then ``try: ... finally: s.discard(key)``: the entry lives only while
        this call runs, and the call holds the object (a recursion guard)."""
        for node in self._function_nodes():
            if not isinstance(node, ast.Try) or not node.finalbody:
                continue
            inside = any(child is sink for child in walk_block(node.body))
            if not (inside or self._runs_with(node, sink)):
                continue
            for prune in walk_block(node.finalbody):
                if prunes(prune, container, key_node):
                    return (
                        f"the finally block at line {prune.lineno} removes the entry, so it lives "
                        "only while this call, which holds the object, runs"
                    )
        return None

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
                if same_expr(target, container) or not holds(value, obj, flow):
                    continue
                if self._module_global(target) and self._module_global(container) and self._runs_with(node, sink):
                    # _LAST_FONT = font beside _LAST_FONT_ID = id(font): module state, kept together
                    return f"{render(target)} also holds {render(obj)} (line {node.lineno}), a module global beside the saved id"
                # A holder reached through a local alias counts as the state it aliases
                # (streams = self.rs_streams if rs else self.ag_streams; streams.append(s)).
                resolved = aliases(target, self.place)
                if isinstance(target, ast.Name) and resolved == [target]:
                    continue
                holder_roots = {root.id for root, _ in map(root_of, resolved) if isinstance(root, ast.Name)}
                if holder_roots and holder_roots <= registry_roots and self._runs_with(node, sink):
                    return f"{render(target)} also holds {render(obj)} (line {node.lineno}), with the same lifetime as the key"
        return None

    def _module_global(self, node: ast.expr) -> bool:
        return isinstance(node, ast.Name) and module_keeper(node, self.place.scope)

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
        return statement_of(node, self.module.parents)

    def _block_of(self, statement: ast.AST) -> Optional[tuple[ast.AST, str]]:
        return block_of(statement, self.module.parents)

    def _blocks_around(self, node: ast.AST) -> list[tuple[ast.AST, str]]:
        blocks = []
        current = self._statement_of(node)
        while current is not None and current is not self.place.scope.node:
            block = self._block_of(current)
            if block is not None:
                blocks.append(block)
            current = self.module.parents.get(current)
        return blocks
