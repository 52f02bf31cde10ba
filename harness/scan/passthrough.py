"""Values that are the keyed object itself, handed back by a function of the module:

    def partition(gm, options):
        ...                      # rewrites gm in place
        return gm

    cache[str(id(gm))] = partition(gm, options)

Every ``return`` of ``partition`` returns the parameter the keyed object is passed to, so the
entry's value is that object and its id cannot be reused while the entry lives.
"""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.syntax import callee_name, same_expr, walk_same_scope


def returns_argument(value: Optional[ast.expr], obj: ast.expr, functions: dict, holders: dict) -> bool:
    """Whether ``value`` (or the call a local ``value`` was bound to) calls a module-level
    function of ``functions`` that returns, on every path, the parameter given ``obj``."""
    if isinstance(value, ast.Name):
        value = holders.get(value.id)
    if not isinstance(value, ast.Call) or not isinstance(value.func, ast.Name):
        return False
    function = functions.get(callee_name(value) or "")
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    param = param_given(value, obj, function)
    if param is None:
        return False
    returns = [node for node in walk_same_scope(function) if isinstance(node, ast.Return)]
    return bool(returns) and all(isinstance(r.value, ast.Name) and r.value.id == param for r in returns)


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

