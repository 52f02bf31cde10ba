"""Where a nested function goes when it is passed on, read from the code it goes to.

A nested function handed to another function can be kept by it, and with it what it captures.
Two shapes show that it is not:

* the function it is given is defined in the same module and only calls that parameter, hands
  it to itself again (a recursive walk: ``_map_output(value, fn)`` calling ``fn(leaf)`` and
  ``_map_output(child, fn)``) or to a call that only calls it (``treedef.walk(g, fn, x)``,
  ``tree_leaves(x, is_leaf=fn)``): it runs while the call runs and is dropped with it;
* it is an entry of a dispatch table the defining function builds and keeps to itself
  (``d = {"LOAD_ATTR": from_load_attr, ...}; d.get(op)(x)``).
"""

from __future__ import annotations

import ast
from typing import Callable, Optional

from harness.scan.syntax import callee_name

# Functions that call the function they are given while they run and keep nothing of it.
CALLS_AND_DROPS = {
    "map", "filter", "sorted", "sort", "min", "max", "reduce", "apply",
    "tree_map", "tree_map_", "tree_map_only", "tree_map_only_", "tree_map_with_path", "tree_flatten_with_path",
    "tree_any", "tree_all", "tree_any_only", "tree_all_only", "map_arg", "map_aggregate",
    "_apply",   # nn.Module._apply(fn): fn is called on every parameter and buffer, then dropped
    # dm-tree / keras tree / jax.tree_util: fn is called on every leaf, then dropped
    "map_structure", "map_structure_up_to", "map_structure_with_path", "traverse",
    "leaves", "tree_leaves", "tree_flatten", "tree_reduce", "map_with_path", "walk",
}

# Keyword arguments that name a predicate a tree walk calls on each node and drops.
_PREDICATE_KEYWORDS = {"is_leaf"}
# Calls that keep what they are given for a later call.
_KEEPS = {"partial", "partialmethod"}


def calls_and_drops(call: Optional[ast.AST], use: ast.AST) -> bool:
    """``use`` (a nested function or lambda) is an argument of a call that only calls it:
    ``map(f, xs)``, ``tree_map(f, tree)``, or a call given it as ``is_leaf=`` (but for
    ``partial``, which keeps it)."""
    if not isinstance(call, ast.Call) or call.func is use or callee_name(call) in _KEEPS:
        return False
    if any(keyword.value is use and keyword.arg in _PREDICATE_KEYWORDS for keyword in call.keywords):
        return True
    return callee_name(call) in CALLS_AND_DROPS


def only_calls(call: Optional[ast.AST], use: ast.AST, module) -> bool:
    """``use`` (a nested function or lambda) is an argument of ``call``, and the function
    called is one of ``module``'s own module-level functions that only calls the parameter
    receiving it (or passes it to itself again)."""
    if not isinstance(call, ast.Call) or call.func is use:
        return False
    name = callee_name(call)
    function = module.functions.get(name) if name else None
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    param = _receiving_param(call, use, function)
    return param is not None and _param_only_called(function, param)


def _receiving_param(call: ast.Call, use: ast.AST, function: ast.AST) -> Optional[str]:
    args = function.args
    positional = [a.arg for a in (*args.posonlyargs, *args.args)]
    for keyword in call.keywords:
        if keyword.value is use:
            known = positional + [a.arg for a in args.kwonlyargs]
            return keyword.arg if keyword.arg in known else None
    for index, argument in enumerate(call.args):
        if isinstance(argument, ast.Starred):
            return None
        if argument is use:
            return positional[index] if index < len(positional) else None
    return None


def _param_only_called(function: ast.AST, param: str) -> bool:
    parents = {child: node for node in ast.walk(function) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(function):
        if not (isinstance(node, ast.Name) and node.id == param):
            continue
        if not isinstance(node.ctx, ast.Load):
            return False   # rebound: no longer followed
        if _inside_nested(node, function, parents):
            return False
        parent = parents.get(node)
        if isinstance(parent, ast.Call) and parent.func is node:
            continue
        call = parents.get(parent) if isinstance(parent, ast.keyword) else parent
        if isinstance(call, ast.Call) and callee_name(call) == function.name and _same_slot(call, node, parent, function, param):
            continue
        if calls_and_drops(call, node):
            continue   # handed on to a call that only calls it (treedef.walk(g, f, x))
        return False
    return True


def _same_slot(call: ast.Call, node: ast.Name, parent: ast.AST, function: ast.AST, param: str) -> bool:
    """The recursive call passes the parameter on in its own place."""
    if isinstance(parent, ast.keyword):
        return parent.arg == param
    positional = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
    index = next((i for i, a in enumerate(call.args) if a is node), None)
    return index is not None and index < len(positional) and positional[index] == param


def _inside_nested(node: ast.AST, function: ast.AST, parents: dict) -> bool:
    current = parents.get(node)
    while current is not None and current is not function:
        if isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return True
        current = parents.get(current)
    return False


def in_local_table(use: ast.Name, scope, parents: dict, escape: Callable[[str], Optional[str]]) -> bool:
    """``use`` is a value of a dict (or an element of a list or tuple) written in place and
    bound to a local of ``scope`` that does not escape it."""
    table = parents.get(use)
    if not isinstance(table, (ast.Dict, ast.List, ast.Tuple)) or (isinstance(table, ast.Dict) and use in table.keys):
        return False
    statement = parents.get(table)
    if not (isinstance(statement, ast.Assign) and statement.value is table and len(statement.targets) == 1):
        return False
    target = statement.targets[0]
    return isinstance(target, ast.Name) and target.id in scope.assigned and escape(target.id) is None
