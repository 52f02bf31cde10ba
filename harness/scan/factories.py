"""A factory of closures whose every caller keeps the closure for one call:

    def _memoize_by_id(f):
        cache = {}
        def wrapper(g):
            ...cache[id(g)]...
        return wrapper

    def cond(...):
        branch = _memoize_by_id(run_branch)   # a local of one call, called or passed to a call
        lax.cond(pred, branch(true_fun), branch(false_fun), ...)

The closure (and the container it captures) is made anew by each call of ``cond`` and is
dropped when that call returns, with the objects it keyed, which that call's caller passed.
A leading underscore keeps the factory to its module, so its callers are all in view; a public
factory is judged by its calls in every scanned file. One called at module level, used as a
decorator or passed on as a value is kept for the process.
"""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.destinations import MUTATORS
from harness.scan.scopes import Binding, ScopeKind
from harness.scan.syntax import callee_name, root_of


def closure_made_per_call(hit) -> Optional[str]:
    """Why the closure holding ``hit``'s container lives for one call of each caller of its
    private factory, or None."""
    if hit.container is None:
        return None
    root, _ = root_of(hit.container)
    if not isinstance(root, ast.Name):
        return None
    binding, factory = hit.module.scope_of(hit.node).resolve(root.id)
    node = factory.node
    if (
        binding is not Binding.CLOSURE
        or not isinstance(node, ast.FunctionDef)
        or factory.parent is None
        or factory.parent.kind is not ScopeKind.MODULE
    ):
        return None
    sites = [(call, caller, hit.module) for call, caller in hit.module.call_sites.get(node.name, [])]
    if not node.name.startswith("_"):
        # a public factory: its calls in every scanned file (a user's own calls are not seen,
        # so every call the package makes must keep it for one call, and it is named nowhere else)
        index = getattr(hit.module, "index", None)
        found = index.calls_of(node.name) if index is not None else None
        if not found:
            return None
        sites = [(site.call, site.scope, site.module) for site in found if _calls_function(site.call, node.name)]
    if not sites:
        return None
    for module in {id(m): m for _, _, m in sites}.values():
        if _used_as_value(node.name, module, {id(call.func) for call, _, m in sites if m is module}):
            return None
    for call, caller, module in sites:
        if caller.kind is ScopeKind.MODULE or not _kept_for_the_call(call, caller, module.parents):
            return None
    lines = ", ".join(str(call.lineno) if module is hit.module else f"{module.path}:{call.lineno}" for call, _, module in sites[:3])
    return (
        f"{node.name}() makes a new closure and container on each call, and every caller keeps it in a local "
        f"for that call only (line {lines}): it dies with the call, as do the objects it keys"
    )


def _calls_function(call: ast.Call, name: str) -> bool:
    """``name(...)``, not ``obj.name(...)``: the module-level function, called by its name."""
    return isinstance(call.func, ast.Name) and call.func.id == name


def _used_as_value(name: str, module, calls: set) -> bool:
    """The factory named anywhere but as the function of a call (a decorator, an argument)."""
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load) and id(node) not in calls:
            return True
    return False


def _kept_for_the_call(call: ast.Call, caller, parents: dict) -> bool:
    """``local = factory(...)`` whose local is only called or handed to calls, or
    ``factory(...)(x)`` called at once."""
    parent = parents.get(call)
    if isinstance(parent, ast.Call) and parent.func is call:
        return True
    if not (isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name)):
        return False
    name = parent.targets[0].id
    if name in caller.declared_global or name in caller.declared_nonlocal:
        return False
    for use in ast.walk(caller.node):
        if not (isinstance(use, ast.Name) and use.id == name and isinstance(use.ctx, ast.Load)):
            continue
        holder = parents.get(use)
        if isinstance(holder, ast.keyword):
            holder = parents.get(holder)
        if _only_looked_at(use, holder, parents):
            continue   # f"{f}", if f or x:, f is None: the value is read, not kept
        if not isinstance(holder, ast.Call) or holder.func is use:
            if isinstance(holder, ast.Call):
                continue   # called
            return False   # returned, stored, put in a container
        if callee_name(holder) in MUTATORS or callee_name(holder) == "setattr":
            return False   # handlers.append(f): kept by the container
    return True


def _only_looked_at(use: ast.Name, holder: Optional[ast.AST], parents: dict) -> bool:
    """A use that formats, compares or tests the value and keeps nothing of it."""
    if isinstance(holder, (ast.FormattedValue, ast.Compare)) or (isinstance(holder, ast.UnaryOp) and isinstance(holder.op, ast.Not)):
        return True
    if isinstance(holder, ast.BoolOp):
        while isinstance(parents.get(holder), (ast.BoolOp, ast.UnaryOp)):
            holder = parents.get(holder)
        test_of = parents.get(holder)
        return isinstance(test_of, (ast.If, ast.While, ast.IfExp, ast.Assert)) and test_of.test is holder
    return isinstance(holder, (ast.If, ast.While, ast.IfExp, ast.Assert)) and holder.test is use
