"""Stale entries that change nothing a user sees, read from how the registry is used:

* source put in ``linecache.cache`` (also imported as ``from linecache import cache as c``):
  a stale entry changes only the text a traceback shows;
* a registry filled only when a parameter that defaults to ``False`` is passed true
  (``if is_debug: pool[id(item)] = True``), and no scanned call passes it;
* ``sys.modules`` only written under a name made from an id, never looked up by it;
* a set that only keeps a warning from being repeated: every lookup is ``if k in seen:
  return`` in a function that returns nothing, stores nothing but the set, and warns or logs
  (or ``if k not in seen:`` around the add and the warning), or an ``if k not in seen:``
  block, anywhere, that holds nothing but the add and the report;
* an entry made from other objects alone and made anew whenever the one found was made from
  others (``if k not in h or h[k].logger is not logger: h[k] = Helper(logger)``): a stale
  entry is what a new one would be;
* a registry whose every entry is one value that never dies, read by key or filled when
  missing (:mod:`harness.scan.samevalue`).

Each gives a hazard low confidence (:func:`harness.scan.confidence.assess`); none makes it
safe, since a caller outside the scanned files could still read the registry.
"""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.samevalue import same_value_everywhere
from harness.scan.syntax import callee_name, render, same_expr, walk_same_scope

# Calls that only report: a warning or a log record.
_REPORTS = {"warn", "warning", "warn_explicit", "info", "debug", "error", "log", "exception", "critical", "warning_once", "info_once", "warn_once"}


def harmless_staleness(hits: list, writes: list) -> Optional[str]:
    """Why a stale entry of this registry changes nothing a user sees, or None."""
    rules = (_linecache, _debug_only, _warning_dedup, _rebuilt_when_changed, _module_names_written, same_value_everywhere)
    for rule in rules:
        reason = rule(hits, writes)
        if reason is not None:
            return reason
    return None


def _module_names_written(hits: list, writes: list) -> Optional[str]:
    """``sys.modules[f"{id(self)}_{name}"] = module``, never looked up by that key in view:
    import statements name modules in code, and no code spells a name holding an id; each
    load stores its new module over any stale one."""
    if not writes or len(writes) != len(hits):
        return None
    if not all(hit.container is not None and render(hit.container) == "sys.modules" for hit in writes):
        return None
    return (
        "sys.modules is only written under a name made from an id, never looked up by it: an import names its "
        "module in code, and each load stores a new module over a stale one"
    )


def _linecache(hits: list, writes: list) -> Optional[str]:
    if not writes or not all(hit.container is not None and _is_linecache(hit) for hit in writes):
        return None
    return (
        "linecache.cache holds the source lines tracebacks and inspect show: a stale entry changes only the "
        "text shown for code whose object died"
    )


def _is_linecache(hit) -> bool:
    shown = render(hit.container)
    if shown == "linecache.cache":
        return True
    for node in hit.module.tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "linecache":
            if any(alias.name == "cache" and (alias.asname or alias.name) == shown for alias in node.names):
                return True
    return False


def _debug_only(hits: list, writes: list) -> Optional[str]:
    flags = set()
    if not writes:
        return None
    for hit in writes:
        flag = _guarding_flag(hit)
        if flag is None:
            return None
        flags.add(flag)
    for function, param in flags:
        index = getattr(writes[0].module, "index", None)
        sites = index.calls_of(function.name) if index is not None else None
        if sites is None:
            return None
        for site in sites:
            if any(keyword.arg in (param, None) for keyword in site.call.keywords) or _positional_reaches(site.call, function, param):
                return None
    shown = ", ".join(sorted({param for _, param in flags}))
    return f"every store runs only when {shown} (default False) is passed true, and no scanned call passes it"


def _guarding_flag(hit) -> Optional[tuple]:
    """``(function, param)`` when the store sits under ``if param:`` of a parameter of its
    function that defaults to ``False``."""
    scope = hit.module.scope_of(hit.node)
    function = scope.node
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    defaults = _false_defaults(function)
    node = hit.node
    parents = hit.module.parents
    while node is not None and node is not function:
        parent = parents.get(node)
        if isinstance(parent, ast.If) and any(child is node for child in parent.body):
            if isinstance(parent.test, ast.Name) and parent.test.id in defaults:
                return function, parent.test.id
        node = parent
    return None


def _false_defaults(function: ast.AST) -> set[str]:
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
    return {a.arg for a, d in pairs if isinstance(d, ast.Constant) and d.value is False}


def _positional_reaches(call: ast.Call, function: ast.AST, param: str) -> bool:
    positional = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
    if param not in positional:
        return False
    offset = 1 if positional and positional[0] in ("self", "cls") and isinstance(call.func, ast.Attribute) else 0
    return any(isinstance(a, ast.Starred) for a in call.args) or len(call.args) + offset > positional.index(param)


def _warning_dedup(hits: list, writes: list) -> Optional[str]:
    reads = [hit for hit in hits if hit not in writes]
    if not reads or any(not isinstance(hit.node, ast.Compare) for hit in reads):
        return None
    for hit in hits:
        function = hit.module.scope_of(hit.node).node
        if not _only_warns(function, hit) and _warning_block(hit) is None:
            return None
    return "the set only keeps a warning from being repeated: a stale entry skips a message, nothing else"


def _warning_block(hit) -> Optional[ast.If]:
    """``if k not in seen: seen.add(k); warnings.warn(...)``, with no ``else``: the block the
    membership test guards does nothing but add the key and report, so the test (and the add
    in that block) only decides whether a message is printed."""
    parents = hit.module.parents
    node = hit.node
    while node is not None and not isinstance(node, ast.If):
        node = parents.get(node)
    if node is None or node.orelse or not isinstance(node.test, ast.Compare):
        return None
    test = node.test
    if len(test.ops) != 1 or not isinstance(test.ops[0], ast.NotIn):
        return None
    if hit.node is not test and not any(hit.node is inner for statement in node.body for inner in ast.walk(statement)):
        return None
    reports = False
    for statement in node.body:
        call = statement.value if isinstance(statement, ast.Expr) else None
        if not isinstance(call, ast.Call):
            return None
        name = callee_name(call)
        if name in _REPORTS:
            reports = True
        elif not (name == "add" and isinstance(call.func, ast.Attribute) and same_expr(call.func.value, test.comparators[0])):
            return None
    return node if reports else None


def _only_warns(function: ast.AST, hit) -> bool:
    """The function returns nothing, stores into nothing but locals (and the set through
    ``add``), and reports, itself: a membership hit only skips its message. A report made in a
    function it defines (a handler it installs) is not enough."""
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    reports = False
    for node in walk_same_scope(function):   # a report in a nested handler is not this function's
        if isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom)) and getattr(node, "value", None) is not None:
            return False
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(not isinstance(t, (ast.Name, ast.Tuple)) for t in targets):
                return False
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            return False
        if isinstance(node, ast.Call) and callee_name(node) in _REPORTS:
            reports = True
    return reports


def _rebuilt_when_changed(hits: list, writes: list) -> Optional[str]:
    lines = []
    for hit in writes:
        line = _checked_rebuild(hit)
        if line is None:
            return None
        lines.append(line)
    if not lines:
        return None
    return (
        f"every entry is made from objects the lookup checks with 'is not' (line {lines[0]}) and made anew when they "
        "differ: a stale entry is what a new one would be"
    )


def _checked_rebuild(hit) -> Optional[int]:
    """The line of the ``is not`` check when the store ``c[k] = Made(a, b)`` sits under an
    ``if`` that compares ``c[k].x is not a`` for every argument, else None."""
    parents = hit.module.parents
    statement = parents.get(hit.node)
    if not (isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Call) and hit.container is not None):
        return None
    made = statement.value
    arguments = [*made.args, *(k.value for k in made.keywords)]
    if not arguments or not all(isinstance(a, ast.Name) for a in arguments):
        return None
    guard = parents.get(statement)
    if not isinstance(guard, ast.If):
        return None
    container = render(hit.container)
    checked = set()
    for node in ast.walk(guard.test):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.IsNot):
            left, right = node.left, node.comparators[0]
            if isinstance(left, ast.Attribute) and render(left.value).startswith(container + "[") and isinstance(right, ast.Name):
                checked.add(right.id)
    return guard.lineno if {a.id for a in arguments} <= checked else None
