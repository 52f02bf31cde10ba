"""A keyed object held by a collection of the frame that made the registry.

    def connect(self, toolkits):
        pending = [t for t in toolkits if not t.connected]
        failed = set()
        async def run():
            for toolkit in pending:           # every keyed object is an element of pending
                ...failed.add(id(toolkit))
        thread = threading.Thread(target=run)
        ...
        return set(failed)

    def appender(items):
        seen = {id(item) for item in items}
        def append(item):
            if id(item) not in seen:
                seen.add(id(item))
                items.append(item)            # the keyed object joins items
        return append

The registry (``failed``, ``seen``) is a local of one function, and the keyed object is an
element of another local or parameter of that same function (``pending``, ``items``): by a
loop over it, or by being appended to it beside the store. Both live in the same frame, so
the registry cannot outlive the collection unless it leaves that frame without it. The rule
checks that it does not: the registry is never returned, yielded, stored in an attribute, an
item or a global, and every nested function that names the registry names the collection
too (a closure kept elsewhere keeps both); a registry no nested function names is left to
the lifetime verdict, which sees it die with its frame. The collection must keep what it is given: it is
never emptied (``pop``, ``remove``, ``clear``, ``del``) nor bound again.

:mod:`harness.scan.holders` has the narrower tuple rule (``loop_holder``), which needs none
of these checks because a tuple cannot lose an element.
"""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.holders import loop_source_around
from harness.scan.scopes import Binding, Scope, ScopeKind
from harness.scan.syntax import SCOPE_NODES, assigned_to, root_of

# Methods by which a collection lets an element go.
_EMPTYING = {"pop", "popleft", "popitem", "remove", "discard", "clear"}
# Methods by which a collection takes an element in.
_TAKING = {"append", "appendleft", "add", "insert", "extend"}


def frame_holder(sink: ast.AST, obj: ast.expr, container: ast.expr, place) -> Optional[str]:
    """Why ``obj`` stays alive as long as the registry ``container`` (a local of the same
    frame as a collection holding ``obj``), or None."""
    if not isinstance(obj, ast.Name):
        return None
    registry, _ = root_of(container)
    if not isinstance(registry, ast.Name):
        return None
    registry_binding, frame = place.scope.resolve(registry.id)
    if registry_binding not in (Binding.LOCAL, Binding.CLOSURE) or frame.kind is not ScopeKind.FUNCTION:
        return None
    for collection, how in _collections_holding(sink, obj, place):
        binding, owner = place.scope.resolve(collection)
        if owner is not frame or binding not in (Binding.LOCAL, Binding.CLOSURE, Binding.PARAM):
            continue
        if collection == registry.id or not _keeps_everything(frame, collection):
            continue
        if _leaves_frame(frame, registry.id, place.module.parents) or not _captured_together(frame, registry.id, collection):
            continue
        return (
            f"{obj.id} {how} {collection}, which {frame.name}() holds as long as {registry.id}: the registry "
            "cannot outlive the objects it keys"
        )
    return None


def _collections_holding(sink: ast.AST, obj: ast.Name, place):
    """The names of collections ``obj`` comes from (the loop around the sink iterates one) or
    goes into (``items.append(obj)`` in the sink's function), with how."""
    iterable = loop_source_around(sink, obj.id, place.module.parents)
    if iterable is not None:
        if isinstance(iterable, ast.Name):
            yield iterable.id, "is an element of"
        return
    for node in ast.walk(place.scope.node):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _TAKING
            and isinstance(node.func.value, ast.Name)
            and any(isinstance(a, ast.Name) and a.id == obj.id for a in node.args)
        ):
            yield node.func.value.id, "is added to"


def _keeps_everything(frame: Scope, name: str) -> bool:
    """``name`` is bound once in ``frame`` (or is a parameter never bound again), and no code
    of the frame or its nested functions takes an element out of it."""
    if name in frame.params and name in frame.assigned:
        return False
    if len(frame.values.get(name, [])) > 1:
        return False
    for node in ast.walk(frame.node):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _EMPTYING
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == name
        ):
            return False
        if isinstance(node, ast.Delete) and any(
            isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == name for t in node.targets
        ):
            return False
        if isinstance(node, (ast.Nonlocal, ast.Global)) and name in node.names:
            return False
    return True


def _leaves_frame(frame: Scope, name: str, parents: dict) -> bool:
    """The registry itself is returned, yielded, or stored outside the frame's locals."""
    for node in ast.walk(frame.node):
        if not (isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)):
            continue
        holder = parents.get(node)
        if isinstance(holder, (ast.Return, ast.Yield, ast.YieldFrom)):
            return True
        if isinstance(holder, ast.Assign) and holder.value is node:
            if any(not isinstance(t, ast.Name) for t in holder.targets):
                return True
        if isinstance(holder, (ast.Tuple, ast.List, ast.Dict)):
            return True
    return False


def _captured_together(frame: Scope, registry: str, collection: str) -> bool:
    """A function nested in the frame names the registry (how it can outlive the frame: a
    registry that stays in its frame dies with it, as the lifetime verdict says already), and
    every such function names the collection too."""
    captured = False
    for node in ast.walk(frame.node):
        if node is frame.node or not isinstance(node, SCOPE_NODES) or isinstance(node, ast.ClassDef):
            continue
        names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        if registry in names:
            if collection not in names:
                return False
            captured = True
    return captured


def creation_held(node: ast.expr, objects: tuple, place) -> Optional[str]:
    """``seen = {id(item) for item in items}``: the same question for a registry built in one
    expression and bound to a local (the registry is the name it is bound to)."""
    target = assigned_to(node, place.module.parents)
    if not isinstance(target, ast.Name):
        return None
    name = ast.Name(id=target.id, ctx=ast.Load())
    inside = next(ast.iter_child_nodes(node), node)   # the element of a comprehension: its loops are around it
    reasons = [frame_holder(inside, obj, name, place) for obj in objects]
    return reasons[0] if reasons and all(reasons) else None
