"""What else keeps a keyed object alive, or makes a stale entry harmless.

The analyzer (:meth:`~harness.scan.keepalive.KeepAlive._kept_alive`) asks these
questions about one object of one store, after the plain ones (does the entry hold the
object, does a finalizer prune it). Each answer is a sentence for the finding's reason, or
None when the source does not show it:

* :func:`immortal` -- the object never dies: a class, a function or import of the module, a
  builtin, ``type(x)``, ``x.__class__``, an attribute of an imported module;
* :func:`loop_holder` -- the object is an element of a tuple bound in the same function as
  the registry, so both live exactly as long (``for m in skipped: warned.add(id(m))``);
* :func:`object_free_value` -- every entry is made without the object and never changed
  (``streams[key] = torch.cuda.Stream()``), so a new object matching a dead one's entry gets
  a value as good as its own;
* :func:`membership_guards` -- the function checks the key is in another registry
  (``assert key in self.tensors``), whose stores are judged later (an invariant spanning
  two dicts: when that one holds its objects, this entry's object is alive).

:func:`aliases` resolves a local bound to long-lived containers (``ids = self.a if rs else
self.b``), so a second holder reached through it is connected to the registry.
"""

from __future__ import annotations

import ast
import builtins
from typing import Optional

from harness.scan.scopes import UNTRACKED, Binding, ScopeKind
from harness.scan.syntax import block_of, constructs, named_attribute, names_passed, render, root_of, same_expr, statement_of, walk_same_scope

_BUILTIN_NAMES = set(dir(builtins))
_TUPLE_BUILDERS = {"tuple", "frozenset"}


def aliases(expr: ast.expr, place, depth: int = 0) -> list[ast.expr]:
    """The containers a local name stands for (every value it is bound to, both branches of
    an ``if``-expression), or ``[expr]`` when it is not such a local."""
    if isinstance(expr, ast.IfExp):
        return [*aliases(expr.body, place, depth + 1), *aliases(expr.orelse, place, depth + 1)]
    if not isinstance(expr, ast.Name) or depth > 3:
        return [expr]
    binding, owner = place.scope.resolve(expr.id)
    if binding is not Binding.LOCAL or owner is not place.scope:
        return [expr]
    values = owner.values.get(expr.id, [])
    if not values or any(v is UNTRACKED for v in values):
        return [expr]
    resolved: list[ast.expr] = []
    for value in values:
        if isinstance(value, (ast.IfExp, ast.Attribute, ast.Subscript)) or named_attribute(value) or (
            isinstance(value, ast.Name) and value.id != expr.id
        ):
            resolved.extend(aliases(value, place, depth + 1))
        else:
            return [expr]   # a new container: the local is its own root
    return resolved


def roots(expr: ast.expr, place) -> set[str]:
    """The root names of every container ``expr`` stands for (``{"self"}``)."""
    found = set()
    for alias in aliases(expr, place):
        root, _ = root_of(alias)
        if isinstance(root, ast.Name):
            found.add(root.id)
    return found


def immortal(obj: ast.expr, place) -> Optional[str]:
    """Why ``obj`` lives for the whole process, or None."""
    if isinstance(obj, ast.Call) and isinstance(obj.func, ast.Name) and obj.func.id == "type" and len(obj.args) == 1:
        return f"{render(obj)} is a class, and classes live for the whole process"
    if isinstance(obj, ast.Attribute) and obj.attr == "__class__":
        return f"{render(obj)} is a class, and classes live for the whole process"
    if isinstance(obj, ast.Attribute):
        root, parts = root_of(obj)
        if "[]" not in parts and isinstance(root, ast.Name) and module_binding(root.id, place) == "import":
            index = place.module.index
            if index is not None and index.replaced([root.id, *parts]) is not None:
                return None   # config.graph where some file sets x.graph = ...: replaced, so it can die
            return f"{render(obj)} is an attribute of the imported module {root.id}, which lives for the whole process"
        return None
    if isinstance(obj, ast.Constant) and (obj.value is None or isinstance(obj.value, (bool, type(Ellipsis)))):
        return f"{render(obj)} is a singleton of the interpreter, which lives for the whole process"
    if not isinstance(obj, ast.Name):
        return None
    binding, owner = place.scope.resolve(obj.id)
    if binding in (Binding.PARAM, Binding.CLOSURE) and owner.bound_param == obj.id and owner.binds_class:
        return f"{obj.id} is the class {owner.class_name} (or a subclass), and classes live for the whole process"
    if binding is not Binding.MODULE:
        return None
    kind = module_binding(obj.id, place)
    if kind in ("def", "class", "import"):
        return f"{obj.id} is a module-level {'function' if kind == 'def' else kind if kind == 'class' else 'import'}, which lives for the whole process"
    if kind is None and obj.id in _BUILTIN_NAMES:
        return f"{obj.id} is a builtin, which lives for the whole process"
    return None


def module_binding(name: str, place) -> Optional[str]:
    """How the module binds ``name`` at top level: "def", "class", "import", "value", or
    None when it does not."""
    module = place.module
    if name not in module.module_scope.assigned:
        return None
    kinds = set()
    for statement in module.tree.body:
        for node in _top_level(statement):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                kinds.add("def")
            elif isinstance(node, ast.ClassDef) and node.name == name:
                kinds.add("class")
            elif isinstance(node, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name).split(".")[0] == name for a in node.names):
                kinds.add("import")
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.With)):
                targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
                if any(isinstance(t, ast.Name) and t.id == name for target in targets if target is not None for t in ast.walk(target)):
                    kinds.add("value")
    return kinds.pop() if len(kinds) == 1 else ("value" if kinds else None)


def _top_level(statement: ast.stmt):
    """A module statement, and the statements inside its if/try blocks (conditional imports)."""
    yield statement
    if isinstance(statement, (ast.If, ast.Try)):
        for field in ("body", "orelse", "finalbody"):
            for inner in getattr(statement, field, []) or []:
                yield from _top_level(inner)
        for handler in getattr(statement, "handlers", []) or []:
            for inner in handler.body:
                yield from _top_level(inner)


def loop_holder(sink: ast.AST, obj: ast.expr, container: ast.expr, place) -> Optional[str]:
    """``for m in mods: seen.add(id(m))`` where ``mods`` is a tuple bound in the same function
    as ``seen``: the tuple holds every object for as long as the registry can be reached."""
    if not isinstance(obj, ast.Name):
        return None
    iterable = loop_source_around(sink, obj.id, place.module.parents)
    if not isinstance(iterable, ast.Name):
        return None
    registry_roots = [root_of(alias)[0] for alias in aliases(container, place)]
    if len(registry_roots) != 1 or not isinstance(registry_roots[0], ast.Name):
        return None
    registry_owner = place.scope.resolve(registry_roots[0].id)[1]
    binding, owner = place.scope.resolve(iterable.id)
    if binding not in (Binding.LOCAL, Binding.CLOSURE) or owner is not registry_owner or owner.kind is not ScopeKind.FUNCTION:
        return None
    if place.scope.resolve(registry_roots[0].id)[0] not in (Binding.LOCAL, Binding.CLOSURE):
        return None
    values = owner.values.get(iterable.id, [])
    if not values or not all(_is_tuple(value) for value in values):
        return None
    return (
        f"{obj.id} comes from {iterable.id}, a tuple bound in {owner.name}() like {render(registry_roots[0])}: "
        "it holds the objects for as long as the registry can be reached"
    )


def loop_source_around(node: ast.AST, name: str, parents: dict) -> Optional[ast.expr]:
    """The iterable of the innermost ``for`` (or comprehension) around ``node`` that binds ``name``."""
    current = parents.get(node)
    while current is not None:
        if isinstance(current, (ast.For, ast.AsyncFor)) and any(isinstance(t, ast.Name) and t.id == name for t in ast.walk(current.target)):
            return current.iter
        if isinstance(current, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            for generator in current.generators:
                if any(isinstance(t, ast.Name) and t.id == name for t in ast.walk(generator.target)):
                    return generator.iter
        if isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return None
        current = parents.get(current)
    return None


def _is_tuple(value) -> bool:
    if isinstance(value, ast.Tuple):
        return True
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in _TUPLE_BUILDERS


def object_free_value(value: Optional[ast.expr], container: ast.expr, place) -> Optional[str]:
    """``d[key] = Factory()`` with constant arguments only (directly, or through a name bound
    to it: ``s = Stream(priority=0); d[key] = s``), in a container whose entries are never
    changed after the store: a stale match hands out a value made without any object."""
    if isinstance(value, ast.Name):
        if _changed_after_made(value.id, place):
            return None
        value = place.flow.holders.get(value.id, value)
    if not isinstance(value, ast.Call) or any(isinstance(a, ast.Starred) for a in value.args):
        return None
    arguments = [*value.args, *(k.value for k in value.keywords)]
    if not all(isinstance(a, ast.Constant) for a in arguments):
        return None
    if isinstance(value.func, ast.Name) and value.func.id in ("dict", "list", "set", "defaultdict", "deque", "OrderedDict"):
        return None   # an empty container is filled later, with what the scan cannot see
    shown = render(container)
    for node in ast.walk(place.module.tree):
        target = None
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            for candidate in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                if isinstance(candidate, (ast.Subscript, ast.Attribute)) and isinstance(candidate.value, ast.Subscript):
                    target = candidate.value.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Subscript):
            target = node.func.value.value
        if target is not None and render(target) == shown:
            return None
    return (
        f"each entry is a new {render(value)}, made without the object and never changed, so a new "
        "object matching a dead one's entry gets a value as good as its own"
    )


def _changed_after_made(name: str, place) -> bool:
    """The function calls a method of the local ``name`` with one of its own locals or
    parameters other than ``self`` (``entry.register(item)``; ``entry.setdefault("version",
    1)`` fills it with constants, ``entry.init(self._settings)`` with the owner's settings):
    the entry is not left as made, without the objects."""
    function = place.scope.node
    for node in walk_same_scope(function):
        if not (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
            and node.func.value.id == name
        ):
            continue
        if any(
            n != place.scope.bound_param and place.scope.resolve(n)[0] in (Binding.LOCAL, Binding.PARAM)
            for n in names_passed(node)
        ):
            return True
    return False


def membership_guards(sink: ast.AST, key_node: ast.expr, place, judge) -> list[tuple[str, int]]:
    """``(identity, line)`` of every registry this function checks holds ``key_node`` on the
    way to ``sink``: ``assert key in reg`` before it, or ``if key in reg:`` around it."""
    found = []
    function = place.scope.node
    parents = place.module.parents
    for node in walk_same_scope(function):
        if not (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.In)):
            continue
        if not same_expr(node.left, key_node) or node.lineno > getattr(sink, "lineno", 0):
            continue
        statement = parents.get(node)
        guards = isinstance(statement, ast.Assert) and statement.test is node
        if isinstance(statement, ast.If) and statement.test is node:
            guards = any(child is sink for body in statement.body for child in ast.walk(body))
        if not guards:
            continue
        verdict = judge.container(node.comparators[0], place)
        if verdict.identity:
            found.append((verdict.identity, node.lineno))
    return found


def owner_pinned(obj: ast.expr, container: ast.expr, place) -> Optional[str]:
    """``self._ctx.reg[id(self.module)]`` where ``self.module`` is set only in ``__init__``
    and ``self._ctx`` is made there too (or the registry is ``self``'s own attribute): the
    owner holds the keyed object for its whole life, and the registry dies with the owner."""
    owner = place.scope.bound_param if place.scope.class_name else None
    obj_root, obj_parts = root_of(obj)
    registry_root, registry_parts = root_of(container)
    if owner is None or not obj_parts or "[]" in obj_parts:
        return None
    if not (isinstance(obj_root, ast.Name) and obj_root.id == owner and isinstance(registry_root, ast.Name) and registry_root.id == owner):
        return None
    if any(isinstance(node, ast.Call) for node in ast.walk(obj)):
        return None
    methods = _class_methods(place.scope)
    if "__init__" not in methods:
        return None
    if not _set_only_in_init(obj_parts[0], methods, owner, made_here=False):
        return None
    held = registry_parts[: registry_parts.index("[]")] if "[]" in registry_parts else registry_parts
    if len(held) > 1 and not _set_only_in_init(held[0], methods, owner, made_here=True):
        return None
    return (
        f"{render(obj)} is set only in {place.scope.class_name}.__init__, so {owner} holds it for its whole life, "
        f"and {render(container)} is {owner}'s own: the registry dies with the object's holder"
    )


def _class_methods(scope) -> dict[str, ast.AST]:
    while scope is not None and scope.kind is not ScopeKind.CLASS:
        scope = scope.parent
    if scope is None:
        return {}
    return {n.name: n for n in scope.node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _set_only_in_init(attribute: str, methods: dict[str, ast.AST], owner: str, made_here: bool) -> bool:
    """Whether ``owner.attribute`` is assigned in ``__init__`` (a new object when
    ``made_here``) and in no other method."""
    in_init = []
    for name, method in methods.items():
        for node in ast.walk(method):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr == attribute and isinstance(target.value, ast.Name) and target.value.id == owner:
                    if name != "__init__":
                        return False
                    in_init.append(node)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" and node.args:
                if isinstance(node.args[0], ast.Name) and node.args[0].id == owner:
                    return False
    if not in_init:
        return False
    return not made_here or all(isinstance(getattr(n, "value", None), ast.Call) for n in in_init)


def holds(value: Optional[ast.expr], obj: ast.expr, flow, followed: frozenset = frozenset()) -> bool:
    """Whether ``value`` is ``obj`` or a literal (or a name bound to one) containing it.
    Each name is followed once: ``params = [params]`` binds a name to a list holding
    itself, and the cycle ends there."""
    if value is None:
        return False
    if same_expr(value, obj):
        return True
    if isinstance(value, (ast.Tuple, ast.List, ast.Set)):
        return any(holds(element, obj, flow, followed) for element in value.elts)
    if isinstance(value, ast.Dict):
        return any(holds(part, obj, flow, followed) for part in [*value.keys, *value.values] if part is not None)
    if isinstance(value, ast.Starred):
        return holds(value.value, obj, flow, followed)
    if isinstance(value, ast.Call) and (constructs(value) or _chosen_for(value, obj)):
        # Entry(obj, meta): an instance made with the object holds it
        if any(holds(part, obj, flow, followed) for part in [*value.args, *(k.value for k in value.keywords)]):
            return True
    if isinstance(obj, ast.Subscript) and isinstance(obj.slice, ast.Constant) and holds(value, obj.value, flow, followed):
        return True   # Jacobian(ys, xs) keyed by id(ys[0]): the entry holds ys, which holds its item
    if isinstance(value, ast.Name) and isinstance(obj, ast.Name) and _read_from(obj.id, value, flow):
        return True   # group = kwargs["group"]; Entry(**kwargs): the mapping handed over holds it
    if isinstance(value, ast.Name) and value.id not in followed:
        followed = followed | {value.id}
        if any(holds(part, obj, flow, followed) for part in flow.attached.get(value.id, [])):
            return True   # prog = Program(f); prog.owner = obj; d[id(obj)] = prog
        if value.id in flow.holders:
            return holds(flow.holders[value.id], obj, flow, followed)
    return False


def closure_holds(value: Optional[ast.expr], obj: ast.expr, function: ast.AST, holders: Optional[dict] = None) -> bool:
    """Whether ``value`` is a function made in ``function`` that keeps ``obj`` (a name of
    ``function``): a lambda or nested def reading it as a free variable, or a def wrapped with
    ``@wraps(obj)`` (which sets ``__wrapped__``). ``d[id(func)] = wrapper`` then holds ``func``.
    An object made with such a function holds it too: ``d[id(src)] = Thread(target=run)``
    (or a local bound to that call, followed through ``holders``)."""
    if not isinstance(obj, ast.Name) or value is None:
        return False
    if isinstance(value, ast.Lambda):
        return obj.id not in _parameters(value.args) and _reads(value.body, obj.id)
    if isinstance(value, ast.Call):
        return constructs(value) and any(
            closure_holds(part, obj, function) for part in [*value.args, *(k.value for k in value.keywords)]
        )
    if not isinstance(value, ast.Name):
        return False
    made = (holders or {}).get(value.id)
    if isinstance(made, ast.Call):
        return closure_holds(made, obj, function)
    for node in walk_same_scope(function):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == value.id:
            if any(isinstance(d, ast.Call) and any(same_expr(a, obj) for a in d.args) for d in node.decorator_list):
                return True
            bound = _parameters(node.args) | {
                t.id for n in ast.walk(node) if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign))
                for target in (n.targets if isinstance(n, ast.Assign) else [n.target]) for t in ast.walk(target)
                if isinstance(t, ast.Name)
            }
            return obj.id not in bound and any(_reads(statement, obj.id) for statement in node.body)
    return False


def attached_after(sink: ast.AST, value: Optional[ast.expr], obj: ast.expr, parents: dict) -> bool:
    """``d[id(model)] = self`` then ``self._model = model`` in the same block: a statement after
    the store, run whenever it is, sets ``obj`` on the value the entry holds. Only plain
    assignments and calls may come between (a ``return``, branch or loop may skip it)."""
    if not isinstance(value, ast.Name) or not isinstance(obj, ast.Name):
        return False
    statement = statement_of(sink, parents)
    where = block_of(statement, parents)
    if where is None:
        return False
    block = getattr(*where)
    for later in block[block.index(statement) + 1:]:
        if isinstance(later, ast.Assign) and same_expr(later.value, obj) and any(
            isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == value.id for t in later.targets
        ):
            return True
        if not isinstance(later, (ast.Assign, ast.AnnAssign, ast.Expr)) or any(
            isinstance(n, ast.Name) and n.id in (value.id, obj.id) and not isinstance(n.ctx, ast.Load) for n in ast.walk(later)
        ):
            return False
    return False


def _parameters(arguments: ast.arguments) -> set[str]:
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg]
    return {a.arg for a in every if a is not None}


def _reads(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) for n in ast.walk(node))


def _chosen_for(call: ast.Call, obj: ast.expr) -> bool:
    """``get_preprocessor(space)(space)``: a class chosen for the object, made with it."""
    return isinstance(call.func, ast.Call) and any(same_expr(argument, obj) for argument in call.func.args)


def _read_from(name: str, mapping: ast.Name, flow) -> bool:
    """``name`` was bound to an item of ``mapping`` (``group = kwargs["group"]``)."""
    source = flow.holders.get(name)
    return isinstance(source, ast.Subscript) and same_expr(source.value, mapping)


_WEAK_CONTAINERS = {"WeakSet", "WeakKeyDictionary", "WeakValueDictionary"}


def module_keeper(container: ast.expr, scope) -> bool:
    """``container`` is, or is reached from, a module global that keeps what is put in it: not
    a ``WeakSet`` or weak dictionary bound at module level (putting an object in one keeps
    nothing alive)."""
    root, parts = root_of(container)
    if not isinstance(root, ast.Name):
        return False
    binding, owner = scope.resolve(root.id)
    return binding is Binding.MODULE and (bool(parts) or not any(
        isinstance(value, ast.Call) and (render(value.func) or "").split(".")[-1] in _WEAK_CONTAINERS
        for value in owner.values.get(root.id, [])
    ))

