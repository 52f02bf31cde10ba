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

A closure that is kept (returned, installed, stored, decorated) is of high confidence only as a
memo (:func:`memoising_wrapper`): it calls the function its maker was given with its own
arguments and keys the result by them, so it is called again and again with objects that come
and go. Any other kept closure is low: how long it is called, and with which objects, the scan
cannot follow (hooks and callbacks mostly see objects that live as long as what calls them).
"""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.scopes import Binding, Scope, ScopeKind
from harness.scan.syntax import assigned_to, name_root, render, root_of
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
            if _argument_of_nested(obj, scope, frame, hit.module.parents):
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


def _argument_of_nested(obj: ast.expr, scope: Scope, frame: Scope, parents: dict) -> bool:
    """``obj`` is (rooted at) a parameter of a function nested in ``frame``, or a variable of
    a comprehension over one (``tuple(id(v) for v in args)``)."""
    node = name_root(obj)
    if node is None:
        return False
    source = comprehension_source(node, parents)
    if source is not None:
        return _argument_of_nested(source, scope, frame, parents)
    binding, owner = scope.resolve(node.id)
    return binding in (Binding.PARAM, Binding.CLOSURE) and node.id in owner.params and owner is not frame and _inside(owner, frame)


def comprehension_source(name: ast.Name, parents: dict) -> Optional[ast.expr]:
    """The iterable of the comprehension around ``name`` that binds it, or None."""
    current = parents.get(name)
    while current is not None and not isinstance(current, ast.stmt):
        if isinstance(current, (ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp)):
            for generator in current.generators:
                if any(node is name for node in ast.walk(generator.iter)):
                    break   # the iterable itself is read outside the comprehension's names
                if any(isinstance(t, ast.Name) and t.id == name.id for t in ast.walk(generator.target)):
                    return generator.iter
        current = parents.get(current)
    return None


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


def memoising_wrapper(writes: list) -> Optional[str]:
    """Why every store is made by a memoising wrapper (a nested function that calls the
    function its maker was given with its own arguments, keys by those arguments, and is
    returned or decorated by its maker), or None. Its container, however reached (a captured
    variable, an attribute of the captured ``self``), is kept as long as the wrapper, while
    the arguments come and go with each call."""
    return _made_by_every_store(writes, _wrapper_and_wrapped, (
        "{0}() calls {1}(), which its maker was given, with its own arguments and keys the result by "
        "them: a memo kept as long as the wrapper, while each call's arguments can die after it"
    ))


def memoising_method(writes: list) -> Optional[str]:
    """Why every store is made by a function that calls a function it is given with the rest
    of its own arguments and keys the result by them (``def use_cache(self, key, f, *args):
    ... result = f(*args) ... self._store(make_key(args), result)``), or None: a memo
    service, whose store outlives each call's arguments as a memoising wrapper's does."""
    return _made_by_every_store(writes, _service_and_called, (
        "{0}() calls {1}(), a function it is given, with its own arguments and keys the result by them: "
        "a memo kept as long as its store, while each call's arguments can die after it"
    ))


def _made_by_every_store(writes: list, memo_of, reason: str) -> Optional[str]:
    """``reason`` filled with ``memo_of(hit)`` of the first store (the memo's function and
    the function it calls) when ``memo_of`` names a memo for every store, else None."""
    found = [memo_of(hit) for hit in writes]
    return reason.format(*found[0]) if found and all(found) else None


def _wrapper_and_wrapped(hit) -> Optional[tuple[str, str]]:
    """``(wrapper, wrapped function)`` when ``hit`` is made by a memoising wrapper."""
    scope = hit.module.scope_of(hit.node)
    frame = scope.parent
    node = scope.node
    if frame is None or frame.kind is not ScopeKind.FUNCTION or not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    if hit.key is None:
        return None
    objects = [obj for obj in hit.key.objects if not _display(obj)]
    own = objects and all(_argument_of_nested(obj, scope, frame, hit.module.parents) for obj in objects)
    if not own and not _made_from_own_arguments(hit, scope):
        return None   # objects the scan names in a key factory's own code count by the call
    wrapped = _wrapped_call(node, scope)
    if wrapped is None or not (node.decorator_list or _returned_by(node.name, frame.node)):
        return None
    return node.name, wrapped


def _service_and_called(hit) -> Optional[tuple[str, str]]:
    """``(service, function it calls)`` when ``hit`` is made by a memo service."""
    scope = hit.module.scope_of(hit.node)
    node = scope.node
    if hit.key is None or not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    if hit.key.objects:
        roots = [name_root(obj) for obj in hit.key.objects]
        if not all(root is not None and root.id in scope.params and root.id != scope.bound_param for root in roots):
            return None
    elif not _made_from_own_arguments(hit, scope):
        return None
    called = _calls_given_function(node, scope)
    return (node.name, called) if called is not None else None


def _calls_given_function(function: ast.AST, scope: Scope) -> Optional[str]:
    """The parameter of ``function`` it calls with its own variadic arguments
    (``f(*args, **kwargs)``), or None."""
    variadic = {a.arg for a in (function.args.vararg, function.args.kwarg) if a is not None}
    for node in ast.walk(function):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in scope.params):
            continue
        if node.func.id == scope.bound_param or node.func.id in scope.assigned:
            continue
        if any(isinstance(a, ast.Starred) and isinstance(a.value, ast.Name) and a.value.id in variadic for a in node.args):
            return node.func.id
    return None


def _display(node: ast.expr) -> bool:
    """A literal made at the call (``{}``, ``()``, ``[]``, ``7``): nothing a caller passes."""
    if isinstance(node, (ast.Dict, ast.List, ast.Tuple, ast.Set)):
        return not any(isinstance(child, ast.Name) for child in ast.walk(node))
    return isinstance(node, ast.Constant)


def _made_from_own_arguments(hit, scope: Scope) -> bool:
    """The key is a local bound once to a call given the function's own parameters
    (``key = make_key(*args, **kwargs)``): made from the arguments, whatever objects the
    scan could name in it."""
    key = hit.key_node
    if not isinstance(key, ast.Name):
        return False
    values = scope.values.get(key.id, [])
    if len(values) != 1 or not isinstance(values[0], ast.Call):
        return False
    return any(isinstance(a, ast.Name) and a.id in scope.params for a in _given(values[0]))


def _wrapped_call(function: ast.AST, scope: Scope) -> Optional[str]:
    """The name of the function ``function`` calls with its own arguments when that name is
    a parameter of an enclosing function (``func(*args, **kwargs)``)."""
    own = set(scope.params)
    found = []
    for node in ast.walk(function):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        binding, owner = scope.resolve(node.func.id)
        if binding is not Binding.CLOSURE or owner is scope or not _given_to(owner, node.func.id):
            continue   # the wrapped function is one an enclosing function was given
        roots = [root_of(a)[0] for a in _given(node)]   # func(X[beg:end]) passes (a part of) X
        if any(isinstance(r, ast.Name) and r.id in own for r in roots):
            found.append((owner is not scope.parent, node.lineno, node.func.id))
    # the function the nearest maker was given (decorator(func)), not an option of an outer one
    return min(found)[2] if found else None


def _given_to(maker: Scope, name: str) -> bool:
    """``name`` is a parameter of ``maker``, or a variable of it that is assigned nothing but
    parameters (``func = None``, then ``func = f`` in the inner decorator, ``nonlocal func``):
    what the maker, in one of its forms, was given."""
    if name in maker.params:
        return True
    sources = [value for value in maker.values.get(name, []) if not (isinstance(value, ast.Constant) and value.value is None)]
    return all(isinstance(value, ast.Name) and value.id in maker.params for value in sources) and _set_by_nested(maker, name)


def _set_by_nested(maker: Scope, name: str) -> bool:
    """A function nested in ``maker`` declares ``name`` nonlocal and assigns it one of its
    own parameters."""
    for node in ast.walk(maker.node):
        if node is maker.node or not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        declared = any(isinstance(n, ast.Nonlocal) and name in n.names for n in node.body)
        params = {a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs}
        assigned = [
            n.value for n in ast.walk(node)
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)
        ]
        if declared and assigned and all(isinstance(v, ast.Name) and v.id in params for v in assigned):
            return True
    return False


def _given(call: ast.Call) -> list[ast.expr]:
    """What ``call`` passes, positionally (``*args`` as ``args``) or by keyword, and the items of
    a tuple or list it passes (``make_hash((name, args, kwargs))``)."""
    given = [a.value if isinstance(a, ast.Starred) else a for a in call.args] + [k.value for k in call.keywords]
    return given + [e for a in given if isinstance(a, (ast.Tuple, ast.List)) for e in a.elts]


def _returned_by(name: str, maker: ast.AST) -> bool:
    """``return wrapper``, or the wrapper handed back inside a call: ``return
    property(wrapper)``, ``return update_wrapper(wrapper, func)``."""
    for node in ast.walk(maker):
        if not isinstance(node, ast.Return):
            continue
        value = node.value
        if isinstance(value, ast.Name) and value.id == name:
            return True
        if isinstance(value, ast.Call) and any(isinstance(a, ast.Name) and a.id == name for a in value.args):
            return True
    return False


def wrapper_kept(writes: list) -> Optional[str]:
    """Why the kept closure that uses this registry wraps a function its maker was given
    (``def init_fn(module): ...; module = param_init_fn(module)``), or None: such a
    closure stands in for that function and is called with its callers' objects for as long
    as it is kept, like a memo."""
    for hit in writes:
        frame = _maker(hit)
        if frame is None:
            return None
        root, _ = root_of(assigned_to(hit.container, hit.module.parents) or hit.container)
        for node in ast.walk(frame.node):
            if node is frame.node or not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            scope = hit.module.scopes.get(node)
            if scope is None or scope.parent is not frame:
                continue
            uses = any(isinstance(n, ast.Name) and n.id == getattr(root, "id", None) for n in ast.walk(node))
            wrapped = _wrapped_call(node, scope) if uses else None
            if wrapped is not None:
                return (
                    f"the container is captured by {node.name}(), which is kept and calls {wrapped}(), the function "
                    f"{frame.name}() was given, with its callers' objects"
                )
    return None
