"""Which closures that keep an id registry are memos of their callers' objects.

A container captured by a nested function lives as long as that function object. It is a
hazard when the function is called again and again, with objects its callers bring and drop,
long after the call that made it:

    def memoize(fn):
        cache = {}
        def wrapper(x):                    # x comes from wrapper's callers
            if id(x) not in cache:
                cache[id(x)] = fn(x)
            return cache[id(x)]
        return wrapper                     # kept beyond memoize()

Two shapes keep most such closures to one use, and the scan gives them low confidence:

* the keys are ids of what the making call had (its parameters, locals, loop variables), not
  of the closure's own arguments: the closure remembers the objects one call was given, and
  a new object meets an entry only if it is later handed objects from elsewhere
  (``ids = {id(s) for s in states}; return lambda s: id(s) in ids``);
* the closure keys by its arguments but is only handed to methods of objects
  (``module.register_forward_hook(h)``, ``tree.walk(visit)``), never returned or stored by its
  maker: it lives as long as that object keeps it, and is given that object's parts. A plain
  function or a function of an imported module (``register(h)``, ``atexit.register(h)``) may
  keep it for the whole process, so that stays a hazard.

Everything else (returned, installed as an attribute, stored in a container, decorated) stays
a hazard of high confidence.
"""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.scopes import Binding, Scope
from harness.scan.syntax import assigned_to, render, root_of
from harness.scan.transient import module_or_class


def kept_for_one_use(writes: list) -> Optional[str]:
    """Why the closure holding this registry keeps it for one call's objects or one receiver,
    or None (see the module docstring)."""
    makers = set()
    from_callers = []
    for hit in writes:
        frame = _maker(hit)
        if frame is None or hit.key is None or not hit.key.objects:
            return None
        makers.add(id(frame))
        scope = hit.module.scope_of(hit.node)
        for obj in hit.key.objects:
            if _argument_of_nested(obj, scope, frame):
                from_callers.append((hit, scope, frame))
    if len(makers) != 1:
        return None
    if not from_callers:
        shown = ", ".join(dict.fromkeys(render(obj) for hit in writes for obj in hit.key.objects))
        return (
            f"the keys are ids of {shown}, objects of the call that made the container, not arguments of the "
            "closure that keeps it: it remembers what that one call was given"
        )
    hit, scope, frame = from_callers[0]
    nested = _child_of(scope, frame)
    if nested is None or not isinstance(nested.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    if nested.node.decorator_list:
        return None
    handed = _only_handed(nested.node.name, frame, hit.module)
    if handed is None or not _method_of_an_object(handed, hit.module):
        return None
    return (
        f"the closure {nested.node.name}() that keys by its arguments is only handed to {render(handed.func)}() "
        f"(line {handed.lineno}), never returned or stored by {frame.name}(): it lives as long as what that call "
        "keeps it in"
    )


def _maker(hit) -> Optional[Scope]:
    """The function whose local the container is (seen from the store's scope), or None."""
    container = hit.container
    if container is not None:
        container = assigned_to(container, hit.module.parents) or container   # chosen = {id(s) for s in states}
    root, _ = root_of(container) if container is not None else (None, None)
    if not isinstance(root, ast.Name):
        return None
    scope = hit.module.scope_of(hit.node)
    binding, owner = scope.resolve(root.id)
    if binding not in (Binding.LOCAL, Binding.CLOSURE) or not isinstance(owner.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    return owner


def _argument_of_nested(obj: ast.expr, scope: Scope, frame: Scope) -> bool:
    """``obj`` is (rooted at) a parameter of a function nested in ``frame``."""
    node = obj
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    if not isinstance(node, ast.Name):
        return False
    binding, owner = scope.resolve(node.id)
    return binding in (Binding.PARAM, Binding.CLOSURE) and node.id in owner.params and owner is not frame and _inside(owner, frame)


def _inside(scope: Scope, frame: Scope) -> bool:
    current = scope.parent
    while current is not None:
        if current is frame:
            return True
        current = current.parent
    return False


def _child_of(scope: Scope, frame: Scope) -> Optional[Scope]:
    """The scope directly under ``frame`` on the way to ``scope``."""
    current = scope
    while current is not None and current.parent is not frame:
        current = current.parent
    return current


def _only_handed(name: str, frame: Scope, module) -> Optional[ast.Call]:
    """The first call ``name`` is handed to, when every use of it in ``frame`` is an argument
    of a call (or a call of it); None when it is returned, bound, stored or never handed."""
    handed = None
    for use in ast.walk(frame.node):
        if not (isinstance(use, ast.Name) and use.id == name and isinstance(use.ctx, ast.Load)):
            continue
        if module.scope_of(use) is not frame:
            return None
        holder = module.parents.get(use)
        if isinstance(holder, ast.keyword):
            holder = module.parents.get(holder)
        if not isinstance(holder, ast.Call):
            return None
        if holder.func is not use:
            handed = handed or holder
    return handed


def _method_of_an_object(call: ast.Call, module) -> bool:
    """``obj.method(...)`` on an object, not on an imported module or a class."""
    return isinstance(call.func, ast.Attribute) and not module_or_class(call.func.value, module)
