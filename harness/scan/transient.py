"""Functions handed out only for the time a call runs: a hook registered and removed in a
``finally``, a callback given to a ``with`` block, a function installed on an attribute
that a ``finally`` restores.

A nested function passed on as a value can outlive the call that defines it, and with it
what it captures (:meth:`~harness.scan.nested.NestedFunctions._definition_escapes`). These
shapes take it back before that call returns, so it dies with the call's frame::

    handle = model.register_forward_hook(hook)
    try:
        model(x)
    finally:
        handle.remove()

    with saved_tensors_hooks(pack, unpack):
        ...
"""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.syntax import finally_blocks, render, walk_block
from harness.scan.verdict import Lifetime

# Methods of a handle that undo the registration that returned it.
_RELEASES = {"remove", "unregister", "close", "detach", "__exit__", "cancel"}


def released_with_frame(use: ast.Name, function: ast.AST, parents: dict) -> Optional[str]:
    """Why the function named by ``use`` (a value, not a call) is taken back before
    ``function`` returns, or None when nothing shows it."""
    parent = parents.get(use)
    call = parents.get(parent) if isinstance(parent, ast.keyword) else parent
    if isinstance(call, ast.Call) and call.func is not use:
        holder = parents.get(call)
        if isinstance(holder, ast.withitem) and holder.context_expr is call:
            return f"it is given to {render(call.func)}() for one with block (line {call.lineno})"
        handle = _bound_handle(call, parents)
        if handle is not None and _released_in_finally(handle, function):
            return f"the handle {render(call.func)}() returns is released in a finally block"
        if handle is not None and _released_in_finally(handle, function, blocks=_body_of(function)):
            return f"the handle {render(call.func)}() returns is released before the function returns"
        return None
    if isinstance(parent, ast.Assign) and parent.value is use:
        targets = [t for t in parent.targets if isinstance(t, (ast.Attribute, ast.Subscript))]
        if targets and all(_restored_in_finally(t, function) for t in targets):
            return f"a finally block restores {render(targets[0])}"
    return None


def _bound_handle(call: ast.Call, parents: dict) -> Optional[ast.expr]:
    """The name or list the registration's handle goes to: ``h = reg(f)``, ``hs.append(reg(f))``."""
    parent = parents.get(call)
    if isinstance(parent, ast.Assign) and parent.value is call and len(parent.targets) == 1:
        return parent.targets[0]
    if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Attribute) and parent.func.attr == "append":
        return parent.func.value
    return None


def _same(a: ast.AST, b: ast.AST) -> bool:
    """Spelled the same, whether stored or loaded (``h = ...`` and ``h.remove()``)."""
    return render(a) == render(b)


def _body_of(function: ast.AST):
    """The function's own body, as the one block to search (a release written after the
    registration, on the path every normal return takes)."""
    body = getattr(function, "body", None)
    return [body] if isinstance(body, list) else []


def _released_in_finally(handle: ast.expr, function: ast.AST, blocks=None) -> bool:
    """``finally: handle.remove()``, or ``for h in handles: h.remove()`` in a finally (or in
    the ``blocks`` given)."""
    for block in (finally_blocks(function) if blocks is None else blocks):
        for statement in block:
            for node in ast.walk(statement):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _RELEASES):
                    continue
                if _same(node.func.value, handle):
                    return True
                loop = _loop_over(node.func.value, statement)
                if loop is not None and _same(loop, handle):
                    return True
    return False


def _loop_over(name: ast.expr, statement: ast.stmt) -> Optional[ast.expr]:
    if not isinstance(name, ast.Name):
        return None
    for node in ast.walk(statement):
        if isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Name) and node.target.id == name.id:
            return node.iter
    return None


def _restored_in_finally(target: ast.expr, function: ast.AST) -> bool:
    return any(
        isinstance(node, (ast.Assign, ast.Delete)) and any(_same(t, target) for t in node.targets)
        for block in finally_blocks(function)
        for node in walk_block(block)
    )


# How a lifetime verdict says that a closure was only handed to calls whose results are not kept.
HANDED_FOR_THE_CALL = "only hands, keeping no result, to"

# Words in a callee's name that say it keeps the function it is given past the call.
_KEEPING_WORDS = (
    "register", "connect", "subscribe", "hook", "install", "listen", "attach", "bind", "watch",
    "schedule", "submit", "thread", "timer", "partial", "callback", "add", "append", "set", "on_",
)


def handed_for_the_call(call, use: ast.AST, module, escape) -> bool:
    """``use`` (a nested function or lambda) is an argument of ``call``, a call of a plain
    function or class (or of a function of a scanned module) whose name does not say that it
    keeps what it is given (``mod.f``, ``mod.Walk.run`` and ``Walk.run`` too), and the call's result is dropped or bound to a local that does not
    escape (``escape(name)`` is None): ``traverse_all(fn, config)``, ``walk = Walk(fn, root)``.
    Whether the callee keeps the function anyway is not read: this lowers confidence only."""
    if not isinstance(call, ast.Call) or call.func is use:
        return False
    if use not in call.args and all(keyword.value is not use for keyword in call.keywords):
        return False
    func = call.func
    if isinstance(func, ast.Attribute):
        if not module_or_class(func.value, module):
            return False
        name = func.attr
    elif isinstance(func, ast.Name):
        name = func.id
    else:
        return False
    if any(word in name.lower() for word in _KEEPING_WORDS):
        return False
    statement = module.parents.get(call)
    if isinstance(statement, ast.Expr):
        return True
    if isinstance(statement, ast.Assign) and statement.value is call and len(statement.targets) == 1:
        target = statement.targets[0]
        return isinstance(target, ast.Name) and escape(target.id) is None
    return False


def module_or_class(receiver: ast.expr, module) -> bool:
    """``mod.f``, ``mod.Cls.f`` or ``Cls.f``: a function reached from a scanned module or a
    class of this one, not from an object that can hold what it is given."""
    while isinstance(receiver, ast.Attribute):
        receiver = receiver.value
    if not isinstance(receiver, ast.Name):
        return False
    imported = module.imports.get(receiver.id)
    return (imported is not None and imported.name is None) or receiver.id in module.classes


def handed_for_one_call(writes: list, lifetime) -> Optional[str]:
    """The confidence reason for a registry whose every store is into a container that
    escapes its call only through a function handed to calls that keep no result, or None."""
    if lifetime not in (Lifetime.LOCAL, Lifetime.CLOSURE):
        return None
    if not all(HANDED_FOR_THE_CALL in hit.verdict.reason for hit in writes):
        return None
    return (
        "the function capturing the container is handed only to calls whose results the defining call does "
        "not keep: unless those calls keep it, the container lives for one call, over objects its caller "
        "may hold for that call; the scan cannot tell"
    )
