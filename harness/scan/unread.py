"""A registry that nothing reads: stored into, and never looked at again.

::

    def connect(toolkits):
        failed = set()
        def run():
            for t in toolkits:
                failed.add(id(t))            # the only thing ever done with failed
        ...

A dead object's stale entry does harm only when a lookup meets it. Where no code reads the
container at all -- no ``in``, no subscript read, no ``get``, no iteration, not returned, not
handed to a call, no getter handing it out -- nothing can. The scan reads this only where every
read would be in view:

* a local of a function (or one a closure shares): every use is in that function;
* a private attribute (``self._seen``, ``Cls._seen``) or private module global (``_SEEN``)
  that no other scanned file names: by the leading underscore, only its own module reaches it.

A public registry may be read by code not scanned, and a private one named in another file may
be read there (``from pkg.mod import _SEEN``), so neither is judged here. Stores are calls of a
mutating method whose result is dropped (``s.add(k)``, ``d.update(...)``), assignments to an
item (``d[k] = v``) and removals; any other use of the name counts as a read.
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from harness.scan.scopes import Binding
from harness.scan.syntax import assigned_to, root_of

# Methods that put entries in or take them out, and return nothing a caller could look in.
_STORING = {"add", "append", "appendleft", "extend", "extendleft", "insert", "update", "discard", "remove", "pop",
            "clear", "__setitem__", "__delitem__"}


def never_read(hits: list, writes: list) -> Optional[str]:
    """Why no code can look up a stale entry of this registry, or None (see the module
    docstring). :func:`harness.scan.confidence.assess` asks this after its more particular
    reasons."""
    if not writes or any(hit.use.name != "STORE" for hit in hits):
        return None
    if not all(_unread(hit) for hit in writes):
        return None
    return (
        "nothing reads the registry: every use stores into it, and only the code in view can reach it, so no "
        "lookup can match a dead object's entry (at worst the entries leak)"
    )


def _unread(hit) -> bool:
    container = _named_container(hit)
    if container is None:
        return False
    lifetime = hit.verdict.lifetime.name
    if isinstance(container, ast.Name):
        binding, owner = hit.module.scope_of(hit.node).resolve(container.id)
        if lifetime in ("LOCAL", "TEMPORARY", "CLOSURE") and binding in (Binding.LOCAL, Binding.CLOSURE):
            return not _read_in(owner.node, container.id, hit.module.parents, attribute=False)
        if lifetime in ("MODULE", "CLASS") and binding is Binding.MODULE and _private(container.id):
            return _only_here(hit, container.id) and not _read_in(hit.module.tree, container.id, hit.module.parents,
                                                                  attribute=False)
        return False
    if lifetime in ("INSTANCE", "CLASS") and _private(container.attr):
        return _only_here(hit, container.attr) and not _read_in(hit.module.tree, container.attr, hit.module.parents,
                                                                attribute=True)
    return False


def _named_container(hit) -> Optional[ast.expr]:
    """The registry as a name or one attribute (``seen``, ``self._seen``), also when the store
    is the comprehension a local is bound to (``seen = {id(x) for x in xs}``)."""
    container = hit.container
    if container is None:
        return None
    container = assigned_to(container, hit.module.parents) or container
    if isinstance(container, ast.Name):
        return container
    root, parts = root_of(container)
    if isinstance(container, ast.Attribute) and isinstance(root, ast.Name) and len(parts) == 1:
        return container
    return None


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _only_here(hit, name: str) -> bool:
    """No other scanned file spells the name."""
    index = getattr(hit.module, "index", None)
    if index is None:
        return False
    files = index.files_matching(re.compile(rb"\b" + re.escape(name.encode()) + rb"\b"))
    return all(path == hit.module.path for path in files)


def _read_in(tree: ast.AST, name: str, parents: dict, attribute: bool) -> bool:
    """Whether any use of ``name`` (a plain name, or ``x.name`` when ``attribute``) in ``tree``
    is a read rather than a store."""
    for node in ast.walk(tree):
        if attribute:
            if not (isinstance(node, ast.Attribute) and node.attr == name and isinstance(node.ctx, ast.Load)):
                continue
        elif not (isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)):
            continue
        if not _stored_through(node, parents):
            return True
    return False


def _stored_through(node: ast.expr, parents: dict) -> bool:
    """``node.add(k)`` (a bare statement), ``node[k] = v``, ``del node[k]``: a store, not a read."""
    parent = parents.get(node)
    if isinstance(parent, ast.Subscript) and parent.value is node:
        return isinstance(parent.ctx, (ast.Store, ast.Del))
    if isinstance(parent, ast.Attribute) and parent.value is node and parent.attr in _STORING:
        call = parents.get(parent)
        return isinstance(call, ast.Call) and call.func is parent and isinstance(parents.get(call), ast.Expr)
    return False
