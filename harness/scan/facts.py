"""Facts gathered before the analysis walk: per module (classes, caches, id-valued
attributes, call sites) and across the whole scan (key factories).

A key factory is a function whose return value is an id-derived key, such as a method that
returns ``f"recipe={r},group={id(group)}"``. Callers that use its result as a dict key are
keying by identity just as much as a direct ``d[id(group)]``, so the scan follows factories
across functions and files by name (``Class.method`` or a module-level function name).
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Iterator, Optional

from harness.scan.flow import FlowState
from harness.scan.imports import Imported, module_imports
from harness.scan.keys import CollectionFacts, KeyFacts, KeyKind
from harness.scan.scopes import Scope, ScopeKind, build_scopes
from harness.scan.syntax import dotted, name_root, parent_map, render, walk_same_scope

# Bases whose instances hash by identity, so hash(obj) is an id in disguise. Any other base
# that the file does not define is assumed to possibly hash by value (no finding).
IDENTITY_HASHED_BASES = {"object", "Module", "Tensor", "Parameter", "ABC", "Generic"}
# Parameter annotations that say "this hashes by identity".
IDENTITY_HASHED_ANNOTATIONS = {"Tensor", "Module", "Parameter"}
_CACHE_DECORATORS = {"lru_cache", "cache"}
_VALUE_CLASS_DECORATORS = {"dataclass", "define", "frozen", "attrs", "s", "dataclass_transform"}


@dataclasses.dataclass
class ClassFacts:
    """What decides how instances of a class defined in the scanned file hash."""

    name: str
    bases: list[str]
    defines_hash: bool = False
    hash_is_identity: bool = False
    defines_eq: bool = False
    value_decorated: bool = False


@dataclasses.dataclass(frozen=True)
class Factory:
    """A function that returns an id-derived key.

    ``params`` are the parameters a caller passes (the bound ``self``/``cls`` left out);
    ``object_params`` are those whose identity ends up in the key, so a caller's argument for
    them is the object the key stands for.
    """

    qualname: str
    kind: KeyKind
    params: tuple[str, ...]
    object_params: tuple[str, ...]
    returned: str
    where: str
    guessed: bool = False   # the key is hash() of whatever callers pass (see KeyFacts.guessed)


class ModuleFacts:
    """One parsed module and what the analysis needs to know about it up front."""

    def __init__(self, path: str, tree: ast.Module):
        self.path = path
        self.tree = tree
        self.index = None   # the scan's ScanIndex, set by the scanner (None: the module stands alone)
        self.parents = parent_map(tree)
        self.scopes = build_scopes(tree)
        self.module_scope = self.scopes[tree]
        self.classes: dict[str, ClassFacts] = {}
        self.cached_functions: set[str] = set()
        self.functions: dict[str, ast.AST] = {}
        self.call_sites: dict[str, list[tuple[ast.Call, Scope]]] = {}
        # "Class.attr" -> the id-derived key a method stores in self.attr
        self.id_attributes: dict[str, KeyFacts] = {}
        self._imports: Optional[dict[str, Imported]] = None
        self._collect()

    @property
    def imports(self) -> dict[str, Imported]:
        """Module-level names bound by importing a scanned file (see :mod:`harness.scan.imports`)."""
        if self._imports is None:
            paths = getattr(self.index, "module_paths", None)
            self._imports = module_imports(self.tree, self.path, paths) if paths is not None else {}
        return self._imports

    def scope_of(self, node: ast.AST) -> Scope:
        """The scope ``node`` (anywhere in the tree) executes in."""
        current = self.parents.get(node)
        while current is not None and current not in self.scopes:
            current = self.parents.get(current)
        return self.scopes[current] if current is not None else self.module_scope

    def function_scopes(self) -> Iterator[Scope]:
        for scope in self.scopes.values():
            if scope.kind is ScopeKind.FUNCTION:
                yield scope

    def identity_hashed_class(self, name: str, seen: Optional[set[str]] = None) -> bool:
        """Whether instances of class ``name`` hash by identity (see IDENTITY_HASHED_BASES)."""
        seen = seen or set()
        if name in seen:
            return False
        seen.add(name)
        facts = self.classes.get(name)
        if facts is None:
            return name.split(".")[-1] in IDENTITY_HASHED_BASES
        if facts.hash_is_identity:
            return True
        if facts.defines_hash or facts.defines_eq or facts.value_decorated:
            return False
        return all(self.identity_hashed_class(base, seen) for base in facts.bases)

    def _collect(self) -> None:
        for node, scope in self.scopes.items():
            if isinstance(node, ast.ClassDef):
                self.classes[node.name] = _class_facts(node)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qualified = f"{scope.class_name}.{node.name}" if scope.class_name else node.name
                if scope.parent is not None and scope.parent.kind in (ScopeKind.MODULE, ScopeKind.CLASS):
                    self.functions[qualified] = node
                    if any(_decorator_name(d) in _CACHE_DECORATORS for d in node.decorator_list):
                        self.cached_functions.add(qualified)
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call):
                name = self.callee_qualname(node, self.scope_of(node))
                if name is not None:
                    self.call_sites.setdefault(name, []).append((node, self.scope_of(node)))
                    if name in self.classes:
                        # Calling a class runs its __init__ with these arguments.
                        self.call_sites.setdefault(f"{name}.__init__", []).append((node, self.scope_of(node)))

    def callee_qualname(self, call: ast.Call, scope: Scope) -> Optional[str]:
        """``f`` for ``f(...)``; ``Class.m`` for ``self.m(...)``, ``cls.m(...)`` inside Class,
        and for ``Class.m(...)``; None for anything else."""
        func = call.func
        if isinstance(func, ast.Name):
            return func.id
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            owner = func.value.id
            method_scope = _method_scope(scope)
            if method_scope is not None and owner == method_scope.bound_param:
                return f"{method_scope.class_name}.{func.attr}"
            return f"{owner}.{func.attr}"
        return None


def _method_scope(scope: Scope) -> Optional[Scope]:
    """The method ``scope`` is (or is nested in), for resolving ``self``."""
    current: Optional[Scope] = scope
    while current is not None:
        if current.bound_param:
            return current
        current = current.parent
    return None


def _decorator_name(decorator: ast.expr) -> str:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    name = dotted(target) or ""
    return name.split(".")[-1]


def _class_facts(node: ast.ClassDef) -> ClassFacts:
    facts = ClassFacts(node.name, [dotted(base) or render(base) for base in node.bases])
    facts.value_decorated = any(_decorator_name(d) in _VALUE_CLASS_DECORATORS for d in node.decorator_list)
    if any(dotted(base) in ("NamedTuple", "typing.NamedTuple", "tuple", "Enum", "enum.Enum", "IntEnum", "str", "int") for base in node.bases):
        facts.value_decorated = True
    for statement in node.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if statement.name == "__hash__":
                facts.defines_hash = True
                facts.hash_is_identity = _returns_identity(statement)
            elif statement.name == "__eq__":
                facts.defines_eq = True
        elif isinstance(statement, ast.Assign):
            for target in statement.targets:
                if isinstance(target, ast.Name) and target.id == "__hash__":
                    facts.defines_hash = True
                    facts.hash_is_identity = dotted(statement.value) == "object.__hash__"
                elif isinstance(target, ast.Name) and target.id == "__eq__":
                    facts.defines_eq = True
    if facts.hash_is_identity:
        # An identity hash paired with an __eq__ of its own is still an identity hash only
        # when __eq__ is identity too; the scan cannot tell, so it trusts the __hash__.
        facts.defines_eq = False
    return facts


def _returns_identity(function: ast.FunctionDef) -> bool:
    """``def __hash__(self): return id(self)`` or ``return object.__hash__(self)``."""
    returns = [n for n in walk_same_scope(function) if isinstance(n, ast.Return) and n.value is not None]
    if len(returns) != 1 or not isinstance(returns[0].value, ast.Call):
        return False
    call = returns[0].value
    return dotted(call.func) in ("id", "object.__hash__") and len(call.args) == 1


def find_factories(modules: list[ModuleFacts], place_for) -> dict[str, Factory]:
    """Every key factory among the modules' functions and methods.

    ``place_for(module, scope, flow, factories)`` builds the key-reading environment
    (a :class:`~harness.scan.environment.Place`; passed in because that module builds on
    this one). Factories that
    call factories are found by repeating until nothing new turns up.
    """
    factories: dict[str, Factory] = {}
    for _ in range(4):
        before = len(factories)
        for module in modules:
            for scope in module.function_scopes():
                node = scope.node
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                if scope.parent is None:
                    continue
                qualified = factory_name(module, scope)
                if qualified in factories:
                    continue
                flow = FlowState()
                place = place_for(module, scope, flow, factories)
                place.seeking_factories = True
                facts = _returned_key(node.body, place, flow)
                if facts is None:
                    continue
                params = tuple(p for p in scope.params if p != scope.bound_param)
                object_params = tuple(dict.fromkeys(
                    root.id for root in map(name_root, facts.objects) if root is not None and root.id in params
                ))
                factories[qualified] = Factory(
                    qualified, facts.kind, params, object_params, facts.text, f"{module.path}:{node.lineno}", facts.guessed
                )
        if len(factories) == before:
            break
    return factories


def factory_name(module: ModuleFacts, scope: Scope) -> str:
    """The name a function is found by as a key factory: ``Class.method`` or ``function``
    at module level; a function nested in another is named by its place (see
    :func:`nested_factory_name`)."""
    if scope.parent.kind in (ScopeKind.MODULE, ScopeKind.CLASS):
        return f"{scope.class_name}.{scope.node.name}" if scope.class_name else scope.node.name
    return nested_factory_name(module, scope.parent, scope.node.name)


def nested_factory_name(module: ModuleFacts, enclosing: Scope, name: str) -> str:
    """``def make_key(*args): return tuple(id(a) for a in args)`` inside a decorator is
    called by its name only within that decorator, so it is known by file, line of the
    enclosing function and name."""
    return f"{module.path}:{getattr(enclosing.node, 'lineno', 0)}:{name}"


def statements_in_order(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement of a function body in source order, blocks flattened, nested
    functions and classes left out."""
    for statement in body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        yield statement
        for field in ("body", "orelse", "finalbody"):
            nested = getattr(statement, field, None)
            if isinstance(nested, list) and nested and isinstance(nested[0], ast.stmt):
                yield from statements_in_order(nested)
        for handler in getattr(statement, "handlers", None) or []:
            yield from statements_in_order(handler.body)
        for case in getattr(statement, "cases", None) or []:
            yield from statements_in_order(case.body)


def _returned_key(body: list[ast.stmt], place, flow) -> Optional[KeyFacts]:
    """The id-derived key a function body returns, following simple assignments in order."""
    reader = place.reader
    for statement in statements_in_order(body):
        if isinstance(statement, ast.Return) and statement.value is not None:
            facts = reader.key(statement.value)
            if facts is not None:
                return facts
        elif isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is not None:
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    flow.bind(target.id, statement.value, reader)
        elif isinstance(statement, ast.AugAssign) and isinstance(statement.target, ast.Name):
            # key = seed; key += hash(args): the key grows by what is added
            facts = reader.key(statement.value)
            before = flow.keys.get(statement.target.id)
            if facts is not None:
                flow.bind_key(statement.target.id, facts if before is None else before.combined_with(facts, statement.target.id))
        elif isinstance(statement, ast.Expr) and _method_of_local(statement.value, ("append", "add")):
            # key = []; for a in args: key.append(hash(a)); return tuple(key)
            call = statement.value
            facts = reader.key(call.args[0])
            if facts is not None:
                flow.forget(call.func.value.id)
                flow.collections[call.func.value.id] = CollectionFacts(facts, False, call.func.attr == "add", None, call)
        elif isinstance(statement, ast.Expr) and _method_of_local(statement.value, ("update",)):
            # h = blake2b(); h.update(f"{hash(a)}".encode()); return h.hexdigest(): the
            # digest is fed the key, and is that key, shorter
            call = statement.value
            facts = reader.key(call.args[0])
            if facts is not None:
                digest = call.func.value.id
                before = flow.keys.get(digest)
                flow.bind_key(digest, facts if before is None else before.combined_with(facts, digest))
    return None


def _method_of_local(node: ast.expr, methods: tuple[str, ...]) -> bool:
    """``name.method(x)`` on a local name, with one argument: ``parts.append(x)`` grows a
    list, ``h.update(x)`` feeds a digest."""
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in methods
        and isinstance(node.func.value, ast.Name) and len(node.args) == 1 and not node.keywords
    )


def find_id_attributes(module: ModuleFacts, place_for, factories: dict[str, Factory]) -> None:
    """Fill ``module.id_attributes``: ``self.attr = id(...)`` (or a key built from ids) in
    any method makes later ``self.attr`` reads in that class id-derived keys."""
    for scope in module.function_scopes():
        if not scope.class_name or not scope.bound_param or isinstance(scope.node, ast.Lambda):
            continue
        flow = FlowState()
        place = place_for(module, scope, flow, factories)
        for statement in statements_in_order(scope.node.body):
            if not isinstance(statement, (ast.Assign, ast.AnnAssign)) or statement.value is None:
                continue
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    flow.bind(target.id, statement.value, place.reader)
                elif (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == scope.bound_param
                ):
                    facts = place.reader.key(statement.value)
                    if facts is not None:
                        module.id_attributes[f"{scope.class_name}.{target.attr}"] = KeyFacts(
                            facts.kind, (), f"{target.value.id}.{target.attr} (set to {facts.text})", fresh=facts.fresh
                        )
