"""Why an object is still alive: the chain of references from a root to it.

The hygiene oracle calls :func:`referrer_chain` for each model object that outlived its model.
It searches backwards through ``gc.get_referrers``, breadth first, until it reaches a root: a
module's globals (``package.module.NAME``) or a class attribute (``package.module.Class.attr``).
The chain is written root first, containers folded into the path and every other object named by
its type::

    tests.planted.keeps_model.LAST_MODEL -> Model
    harness.stacks.x.CACHE['w'] -> Holder.model -> Model

``gc.get_referrers`` searches only the collector's generations. The runners freeze the heap after
their imports (``gc.freeze``, :func:`harness.idreuse.tracker.freeze_imports`), so the dict of a
module imported before (the stack's own), a class's namespace and a module-level object or
container made at import are in the permanent generation, and no search finds them as referrers.
:func:`frozen_referrers` indexes, by walking forward from those modules, what their globals,
classes, module-level objects and containers refer to, and :func:`referrer_chain` adds what the
index knows to what the collector finds.

Standard library only.
"""

from __future__ import annotations

import dataclasses
import gc
import sys
import types
from typing import Any

from harness.idreuse.containers import is_stack_module

MAX_DEPTH = 12
MAX_NODES = 5000
_ATOMS = (int, float, str, bytes, bool, type(None))
MAX_ITEMS = 1000         # items of one module-level container indexed by frozen_referrers


def _module_dicts() -> dict[int, str]:
    return {id(vars(m)): name for name, m in list(sys.modules.items()) if isinstance(m, types.ModuleType)}


def _key_text(key: Any) -> str:
    text = repr(key)
    return text if len(text) <= 40 else text[:37] + "..."


def _edge(parent: Any, child: Any) -> str:
    """How ``parent`` refers to ``child``: ``.attr``, ``[key]``, ``[i]``, `` element``..."""
    if isinstance(parent, dict):
        for k, v in list(parent.items()):
            if v is child:
                return f"[{_key_text(k)}]"
            if k is child:
                return " key"
        return "[?]"
    if isinstance(parent, (list, tuple)):
        for i, v in enumerate(parent):
            if v is child:
                return f"[{i}]"
        return "[?]"
    if isinstance(parent, (set, frozenset)):
        return " element"
    if isinstance(parent, types.CellType):
        return ""
    if isinstance(parent, types.FunctionType):
        if child is parent.__closure__:
            return ""                               # the next hop names the variable
        for attr in ("__defaults__", "__kwdefaults__", "__globals__", "__dict__"):
            if getattr(parent, attr, None) is child:
                return f".{attr}"
        return "[?]"
    if hasattr(parent, "__dict__") and vars(parent) is child:
        return ""                                   # the instance dict: the next hop names the attribute
    try:
        for attr, v in vars(parent).items():
            if v is child:
                return f".{attr}"
    except TypeError:
        pass
    for attr in getattr(type(parent), "__slots__", ()):
        if getattr(parent, attr, None) is child:
            return f".{attr}"
    return " -> ?"


def _is_container(obj: Any) -> bool:
    return isinstance(obj, (dict, list, tuple, set, frozenset, types.CellType))


def _namespace(obj: Any) -> dict | None:
    """The dict holding ``obj``'s attributes (a class's namespace, an instance's ``__dict__``)."""
    if isinstance(obj, type):
        inner = gc.get_referents(obj.__dict__)       # a mappingproxy refers to the real dict only
        return inner[0] if inner and isinstance(inner[0], dict) else None
    try:
        return object.__getattribute__(obj, "__dict__") if not isinstance(obj, (dict, list, tuple)) else None
    except AttributeError:
        return None


def _render(root: str, owner: Any, pairs: list, target: Any) -> str:
    """``owner``: the object the root names (a module or class namespace holder, or None);
    ``pairs``: ``(parent, child)`` from what the root refers to down to ``target``."""
    text, prev = root, owner
    for parent, child in pairs:
        if isinstance(parent, dict) and prev is not None and _namespace(prev) is parent:
            key = next((k for k, v in parent.items() if v is child), "?")
            text += f".{key}"
        elif isinstance(prev, types.FunctionType) and parent is prev.__closure__:
            index = next((i for i, cell in enumerate(parent) if cell is child), None)
            names = prev.__code__.co_freevars
            text += f".<closure {names[index]}>" if index is not None and index < len(names) else "[?]"
        else:
            text += _edge(parent, child)
        if child is not target and not _is_container(child) and not isinstance(child, types.FunctionType) \
                and _namespace(parent) is not child:
            text += f" -> {type(child).__name__}"
        prev = parent
    return f"{text} -> {type(target).__name__}"


class FrozenReferrers:
    """Who refers to what, among objects a forward walk from module globals reaches: parents the
    collector may not see (see the module docstring). ``parents(node)`` lists them."""

    def __init__(self):
        self._parents: dict[int, list] = {}
        self._own: set[int] = {id(self._parents)}     # the index's own lists, never part of a chain

    def add(self, parent: Any, child: Any) -> None:
        if type(child) in _ATOMS:      # type(), not isinstance(): a lazy object can warn when asked its class
            return
        parents = self._parents.get(id(child))
        if parents is None:
            parents = self._parents[id(child)] = []
            self._own.add(id(parents))
        parents.append(parent)

    def parents(self, node: Any) -> list:
        return self._parents.get(id(node), [])

    def holds(self, obj: Any) -> bool:
        return id(obj) in self._own


def frozen_referrers() -> FrozenReferrers:
    """Index what a frozen heap hides: for every loaded module, its dict's values; for modules
    that are not libraries' or the harness's own (:func:`is_stack_module`), also the namespaces
    of their classes and those namespaces' values, the attributes of module-level objects, and the
    items of module-level containers (:data:`MAX_ITEMS` at most each)."""
    index = FrozenReferrers()
    for name, module in list(sys.modules.items()):
        if not isinstance(module, types.ModuleType):
            continue
        namespace = vars(module)
        own = is_stack_module(name)
        for value in list(namespace.values()):
            index.add(namespace, value)
            if not own or isinstance(value, (types.ModuleType, types.FunctionType)):
                continue
            if isinstance(value, type):
                if value.__module__ != name:
                    continue
                inner = _namespace(value)
                if inner is not None:
                    index.add(value, inner)
                    for attr in list(inner.values()):
                        index.add(inner, attr)
            elif isinstance(value, dict):
                for item in list(value.values())[:MAX_ITEMS]:
                    index.add(value, item)
            elif isinstance(value, (list, tuple, set, frozenset)):
                for item in list(value)[:MAX_ITEMS]:
                    index.add(value, item)
            else:
                try:
                    attrs = list(vars(value).values())
                except TypeError:
                    continue
                for attr in attrs:
                    index.add(value, attr)
    return index


@dataclasses.dataclass(frozen=True)
class Chain:
    """A chain of references: ``root`` (the module global or class that starts it) and its text."""

    root: str
    text: str


def referrer_chain(obj: Any, ignore: tuple = (), frozen: FrozenReferrers | None = None) -> str | None:
    """The text of :func:`find_chain`'s chain, or None."""
    chain = find_chain(obj, ignore, frozen)
    return chain.text if chain is not None else None


def find_chain(obj: Any, ignore: tuple = (), frozen: FrozenReferrers | None = None) -> Chain | None:
    """The shortest chain from a module global or class attribute to ``obj``, or None when none
    is found within :data:`MAX_DEPTH` steps (a local variable of a running function, since
    Python 3.11 frames are not seen by the collector, or a reference held by C code).

    ``ignore``: objects the caller holds ``obj`` through (its own lists), not part of any chain.
    ``frozen``: the index of referrers the collector cannot see (:func:`frozen_referrers`; made
    here when not given: a caller asking for several chains makes it once).
    One heap scan per step (``gc.get_referrers`` of the whole frontier at once).
    """
    modules = _module_dicts()
    frozen = frozen if frozen is not None else frozen_referrers()
    toward: dict[int, Any] = {}          # id(node) -> the node it refers to (one step closer to obj)
    nodes: dict[int, Any] = {id(obj): obj}
    frontier = [obj]
    skip = {id(toward), id(nodes), id(ignore), id(sys._getframe())} | {id(o) for o in ignore}
    for _ in range(MAX_DEPTH):
        skip.add(id(frontier))
        by_id = {id(n): n for n in frontier}
        referrers = [(ref, None) for ref in gc.get_referrers(*frontier)]
        referrers += [(ref, n) for n in frontier for ref in frozen.parents(n)]
        skip.add(id(referrers))
        next_frontier: list = []
        for ref, node in referrers:
            if id(ref) in skip or id(ref) in nodes or isinstance(ref, types.FrameType) or frozen.holds(ref):
                continue
            if node is None:
                node = next((by_id[id(r)] for r in gc.get_referents(ref) if id(r) in by_id), None)
            if node is None:
                continue
            if id(ref) in modules:
                key = next((k for k, v in ref.items() if v is node), "?")
                root = f"{modules[id(ref)]}.{key}"
                return Chain(root, _render(root, None, _path(node, toward), obj))
            if isinstance(ref, type):
                if _namespace(ref) is node:   # a class attribute: the class is the root
                    root = f"{ref.__module__}.{ref.__qualname__}"
                    return Chain(root, _render(root, ref, _path(node, toward), obj))
                continue
            nodes[id(ref)] = ref
            toward[id(ref)] = node
            next_frontier.append(ref)
        del referrers, by_id
        frontier = next_frontier[:MAX_NODES]
        if not frontier:
            break
    return None


def _path(start: Any, toward: dict) -> list:
    """``(parent, child)`` pairs from ``start`` (what the root refers to) down to the target."""
    if id(start) not in toward:
        return []
    pairs, node = [], start
    while id(node) in toward:
        child = toward[id(node)]
        pairs.append((node, child))
        node = child
    return pairs
