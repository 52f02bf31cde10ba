"""Values that are the keyed object itself, handed back by a function of the module:

    def partition(gm, options):
        ...                      # rewrites gm in place
        return gm

    cache[str(id(gm))] = partition(gm, options)

Every ``return`` of ``partition`` returns the parameter the keyed object is passed to, so the
entry's value is that object and its id cannot be reused while the entry lives. A factory of
closures hands the object back inside the function it makes:

    def make_stop(container):
        def stop():
            container.stop()
        return stop

    callbacks[id(container)] = make_stop(container)
"""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.holders import closure_holds
from harness.scan.syntax import callee_name, same_expr, walk_same_scope


def returns_argument(value: Optional[ast.expr], obj: ast.expr, functions: dict, holders: dict) -> bool:
    """Whether ``value`` (or the call a local ``value`` was bound to) calls a module-level
    function of ``functions`` that returns, on every path, the parameter given ``obj``."""
    function, param = _called_with(value, obj, functions, holders)
    if function is None or param is None:
        return False
    returns = [node for node in walk_same_scope(function) if isinstance(node, ast.Return)]
    return bool(returns) and all(isinstance(r.value, ast.Name) and r.value.id == param for r in returns)


def returns_closure_over(value: Optional[ast.expr], obj: ast.expr, functions: dict, holders: dict) -> bool:
    """Whether ``value`` (or the call a local ``value`` was bound to) calls a module-level
    function of ``functions`` that returns, on every path, a function it makes (a nested def or
    a lambda) reading the parameter given ``obj``, which that parameter's name is never rebound in."""
    function, param = _called_with(value, obj, functions, holders)
    if function is None or param is None:
        return False
    returns = [node for node in walk_same_scope(function) if isinstance(node, ast.Return)]
    if not returns or _rebinds(function, param):
        return False
    given = ast.Name(id=param, ctx=ast.Load())
    return all(isinstance(r.value, (ast.Name, ast.Lambda)) and closure_holds(r.value, given, function) for r in returns)


def _called_with(value, obj, functions, holders):
    if isinstance(value, ast.Name):
        value = holders.get(value.id)
    if not isinstance(value, ast.Call) or not isinstance(value.func, ast.Name):
        return None, None
    function = functions.get(callee_name(value) or "")
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None, None
    return function, param_given(value, obj, function)


def _rebinds(function: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load) for n in ast.walk(function))


def param_given(call: ast.Call, obj: ast.expr, function: ast.AST, bound: bool = False) -> Optional[str]:
    """The parameter of ``function`` that ``call`` binds ``obj`` to, positionally or by keyword,
    or None. ``bound``: the call fills the first parameter itself (``self`` of a method called
    through an attribute, of a class's ``__init__`` called through the class)."""
    positional = [a.arg for a in (*function.args.posonlyargs, *function.args.args)][1 if bound else 0:]
    for index, argument in enumerate(call.args):
        if isinstance(argument, ast.Starred):
            return None
        if same_expr(argument, obj):
            return positional[index] if index < len(positional) else None
    for keyword in call.keywords:
        if keyword.arg is not None and same_expr(keyword.value, obj):
            return keyword.arg
    return None

