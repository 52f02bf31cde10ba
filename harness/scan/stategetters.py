"""Containers a module-level getter hands out from the module's own state: ``_saves().add(id(v))``
where ``_saves()`` returns an attribute of a module-level ``threading.local`` (made and stored
there on first use), or ``cache = get_cache(); cache[id(a)] = r`` where ``get_cache()`` returns
an item of a module-level stack.

The container is then not the caller's and does not die with a call: it lives as long as the
module state that holds it, which the callers do not drop. Only the container the getter
returns counts here (``get_cache()[k]``), not an attribute of it (``get_mode().cache``): an
object the getter hands out may be replaced per phase, and its attributes with it.
"""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.getters import module_function
from harness.scan.scopes import UNTRACKED, Binding
from harness.scan.syntax import root_of, walk_same_scope


def module_state_getter(hit) -> Optional[str]:
    """Why the container of ``hit`` is module-level state a getter returns, or None."""
    if hit.container is None:
        return None
    root, parts = root_of(hit.container)
    if any(part != "[]" for part in parts):
        return None
    call = _the_call(root, hit)
    if call is None:
        return None
    owner, function = module_function(call.func.id, hit.module)
    if not isinstance(function, ast.FunctionDef):
        return None
    returns = [node for node in walk_same_scope(function) if isinstance(node, ast.Return)]
    if not returns:
        return None
    held = set()
    for ret in returns:
        state = _module_rooted(ret.value, owner, function) if ret.value is not None else None
        if state is None:
            return None
        held.add(state)
    return (
        f"{call.func.id}() hands out module-level state ({', '.join(sorted(held))}), which outlives its callers "
        "and the objects they key in it"
    )


def _the_call(root: ast.expr, hit) -> Optional[ast.Call]:
    """``getter()`` itself, or a local bound once to it."""
    if isinstance(root, ast.Name):
        scope = hit.module.scope_of(root)   # the callee's scope where a call delegates the store
        binding, owner = scope.resolve(root.id)
        values = owner.values.get(root.id, []) if binding is Binding.LOCAL else []
        if len(values) != 1 or values[0] is UNTRACKED:
            return None
        root = values[0]
    if isinstance(root, ast.Call) and isinstance(root.func, ast.Name) and not root.args and not root.keywords:
        return root
    return None


def _module_rooted(expr: ast.expr, module, function: ast.AST) -> Optional[str]:
    """The module global ``expr`` is reached from (``_STACK[k][-1]``, ``getattr(_local, "x",
    None)``), or, for a local of ``function``, the global every assignment of it reads or
    stores into (``saves = _local.saves = set()``)."""
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "getattr" and expr.args:
        expr = expr.args[0]
    root, _ = root_of(expr)
    if not isinstance(root, ast.Name):
        return None
    binding, owner = module.scope_of(root).resolve(root.id)
    if binding is Binding.MODULE:
        return root.id if root.id in owner.assigned else None
    if binding is not Binding.LOCAL:
        return None
    found = None
    for node in walk_same_scope(function):
        if not isinstance(node, ast.Assign) or not any(isinstance(t, ast.Name) and t.id == root.id for t in node.targets):
            continue
        others = [t for t in node.targets if not (isinstance(t, ast.Name) and t.id == root.id)]
        stored = next((_module_rooted(t, module, function) for t in others if isinstance(t, (ast.Attribute, ast.Subscript))), None)
        found = stored or (_module_rooted(node.value, module, function) if not isinstance(node.value, ast.Name) or node.value.id != root.id else None)
        if found is None:
            return None
    return found
