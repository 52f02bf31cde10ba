"""A keyed object saved first in the same container by a helper of the module:

    def _save_tensors(*tensors):
        cache = get_sharing_cache()
        for tensor in tensors:
            cache["tensor", id(tensor)] = tensor     # the entry holds the object

    def cached_transpose(a, axes):
        _save_tensors(a)
        key = "transpose", id(a), axes
        return _memoize(key, transpose, a, axes)    # cache = get_sharing_cache(); cache[key] = ...

The container holds the object for as long as the container lives, so its address cannot be
reused while any entry keyed by it exists. The helper must store what it is given (or each
element of it, for ``*args``) as the value, into a container reached the same way as the
registry's (the same getter call or the same module global).
"""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.getters import module_function
from harness.scan.scopes import UNTRACKED, Binding
from harness.scan.syntax import render, root_of, walk_same_scope


def saved_first(hit) -> Optional[str]:
    """Why every keyed object of ``hit`` is held by its own container through a helper, or None."""
    if hit.key is None or not hit.key.objects or hit.container is None:
        return None
    source = container_source(hit.container, hit.module)
    if source is None:
        return None
    caller = hit.module.scope_of(hit.node).node
    reasons = []
    for obj in hit.key.objects:
        if not isinstance(obj, ast.Name):
            return None
        found = next((
            f"{obj.id} is first kept as a value in {source} by {call.func.id}() (line {call.lineno})"
            for call in walk_same_scope(caller)
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
            and any(isinstance(a, ast.Name) and a.id == obj.id for a in call.args)
            and _helper_keeps_arguments(call.func.id, hit.module, source)
        ), None)
        if found is None:
            return None
        reasons.append(found)
    return reasons[0]


def container_source(container: ast.expr, module) -> Optional[str]:
    """How the container is reached: the getter call a local is bound to (``get_cache()``),
    or a module global's name."""
    root, parts = root_of(container)
    if not isinstance(root, ast.Name) or any(part != "[]" for part in parts):
        return None
    binding, owner = module.scope_of(root).resolve(root.id)
    if binding is Binding.MODULE:
        return root.id
    values = owner.values.get(root.id, []) if binding is Binding.LOCAL else []
    if len(values) == 1 and values[0] is not UNTRACKED and isinstance(values[0], ast.Call):
        return render(values[0])
    return None


def _helper_keeps_arguments(name: str, module, source: str) -> bool:
    owner, function = module_function(name, module)
    if not isinstance(function, ast.FunctionDef):
        return False
    params = {a.arg for a in function.args.args}
    if function.args.vararg is not None:
        params.add(function.args.vararg.arg)
    elements = {
        node.target.id for node in walk_same_scope(function)
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name)
        and isinstance(node.iter, ast.Name) and node.iter.id in params
    }
    for node in walk_same_scope(function):
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in params | elements):
            continue
        for target in node.targets:
            if isinstance(target, ast.Subscript) and container_source(target.value, owner) == source:
                return True
    return False
