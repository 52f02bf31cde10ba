"""Python scopes as the scan needs them: who binds a name, and to what.

Built once per module before the analysis walk. The analyzer asks :meth:`Scope.resolve` where
a name comes from (a local, a parameter, an enclosing function, the module) because that
decides how long a container named by it lives.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
from typing import Optional

from harness.scan.syntax import SCOPE_NODES, walk_same_scope


class ScopeKind(enum.Enum):
    MODULE = "module"
    CLASS = "class"
    FUNCTION = "function"


class Binding(enum.Enum):
    """Where a name used in a scope is bound."""

    LOCAL = "local"          # assigned in this function
    PARAM = "param"          # a parameter of this function
    CLOSURE = "closure"      # a local of an enclosing function (or declared nonlocal)
    MODULE = "module"        # a module global, an import, a builtin
    CLASS_BODY = "class"     # a name assigned in the class body being executed


# Sentinel for bindings whose value the scan does not follow (loop targets, imports, ...).
UNTRACKED = None


@dataclasses.dataclass(eq=False)
class Scope:
    """One module, class body, function or lambda."""

    kind: ScopeKind
    node: ast.AST
    parent: Optional["Scope"]
    name: str
    params: list[str] = dataclasses.field(default_factory=list)
    annotations: dict[str, ast.expr] = dataclasses.field(default_factory=dict)
    # For methods: the class they are defined in, and the name of the bound first parameter
    # ("self" or "cls"); static methods and plain functions have neither.
    class_name: Optional[str] = None
    bound_param: Optional[str] = None
    binds_class: bool = False
    assigned: set[str] = dataclasses.field(default_factory=set)
    # Every value a name is assigned in this scope, in source order (None where not followed).
    values: dict[str, list[Optional[ast.expr]]] = dataclasses.field(default_factory=dict)
    declared_global: set[str] = dataclasses.field(default_factory=set)
    declared_nonlocal: set[str] = dataclasses.field(default_factory=set)

    @property
    def qualname(self) -> str:
        names = []
        scope: Optional[Scope] = self
        while scope is not None and scope.kind is not ScopeKind.MODULE:
            names.append(scope.name)
            scope = scope.parent
        return ".".join(reversed(names)) or "<module>"

    @property
    def enclosing_method(self) -> Optional["Scope"]:
        """The method this scope is, or is nested in (its ``parent`` is the class body)."""
        scope: Optional[Scope] = self
        while scope is not None and not scope.class_name:
            scope = scope.parent
        return scope

    @property
    def enclosing_class(self) -> Optional[str]:
        """The class whose method this is, looking through nested functions."""
        method = self.enclosing_method
        return method.class_name if method is not None else None

    def resolve(self, name: str) -> tuple[Binding, "Scope"]:
        """Where ``name``, used in this scope, is bound, and the scope binding it."""
        if self.kind is ScopeKind.MODULE:
            return Binding.MODULE, self
        if self.kind is ScopeKind.CLASS:
            if name in self.assigned:
                return Binding.CLASS_BODY, self
            return self._module().resolve(name)
        if name in self.declared_global:
            return Binding.MODULE, self._module()
        if name in self.declared_nonlocal:
            return Binding.CLOSURE, self._enclosing_function_binding(name) or self
        if name in self.params:
            return Binding.PARAM, self
        if name in self.assigned:
            return Binding.LOCAL, self
        owner = self._enclosing_function_binding(name)
        if owner is not None:
            return Binding.CLOSURE, owner
        return Binding.MODULE, self._module()

    def _enclosing_function_binding(self, name: str) -> Optional["Scope"]:
        scope = self.parent
        while scope is not None:
            # Class bodies are not visible from the functions defined in them.
            if scope.kind is ScopeKind.FUNCTION and (name in scope.params or name in scope.assigned):
                return scope
            scope = scope.parent
        return None

    def _module(self) -> "Scope":
        scope = self
        while scope.parent is not None:
            scope = scope.parent
        return scope


def build_scopes(tree: ast.Module) -> dict[ast.AST, Scope]:
    """A :class:`Scope` for the module and for every class, function and lambda in it."""
    scopes: dict[ast.AST, Scope] = {}
    module = Scope(ScopeKind.MODULE, tree, None, "<module>")
    scopes[tree] = module
    _fill(module, tree)
    _build_children(tree, module, scopes)
    return scopes


def _build_children(node: ast.AST, scope: Scope, scopes: dict[ast.AST, Scope]) -> None:
    for child in walk_same_scope(node):
        if isinstance(child, SCOPE_NODES):
            # Decorators, defaults and bases run in the enclosing scope, and were walked there.
            child_scope = _new_scope(child, scope)
            scopes[child] = child_scope
            _fill(child_scope, child)
            _build_children(child, child_scope, scopes)


def _new_scope(node: ast.AST, parent: Scope) -> Scope:
    if isinstance(node, ast.ClassDef):
        return Scope(ScopeKind.CLASS, node, parent, node.name)
    name = getattr(node, "name", "<lambda>")
    scope = Scope(ScopeKind.FUNCTION, node, parent, name)
    args = node.args
    ordered = [*args.posonlyargs, *args.args]
    for arg in [*ordered, *args.kwonlyargs, args.vararg, args.kwarg]:
        if arg is not None:
            scope.params.append(arg.arg)
            if arg.annotation is not None:
                scope.annotations[arg.arg] = arg.annotation
    if parent.kind is ScopeKind.CLASS and not isinstance(node, ast.Lambda):
        decorators = {_decorator_name(d) for d in node.decorator_list}
        scope.class_name = parent.name
        if "staticmethod" not in decorators and ordered:
            scope.bound_param = ordered[0].arg
            scope.binds_class = "classmethod" in decorators or name in ("__new__", "__init_subclass__", "__class_getitem__")
    return scope


def _decorator_name(decorator: ast.expr) -> str:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    if isinstance(target, ast.Attribute):
        return target.attr
    if isinstance(target, ast.Name):
        return target.id
    return ""


def _fill(scope: Scope, node: ast.AST) -> None:
    """Record the names ``node``'s own body binds, and the values they are bound to."""
    if isinstance(node, ast.Lambda):
        return
    body_nodes = walk_same_scope(node)
    for child in body_nodes:
        if isinstance(child, ast.Global):
            scope.declared_global.update(child.names)
        elif isinstance(child, ast.Nonlocal):
            scope.declared_nonlocal.update(child.names)
        elif isinstance(child, ast.Assign):
            for target in child.targets:
                _bind_target(scope, target, child.value)
        elif isinstance(child, ast.AnnAssign):
            _bind_target(scope, child.target, child.value)
        elif isinstance(child, ast.AugAssign):
            _bind_target(scope, child.target, UNTRACKED)
        elif isinstance(child, ast.NamedExpr):
            _bind_target(scope, child.target, child.value)
        elif isinstance(child, (ast.For, ast.AsyncFor)):
            _bind_target(scope, child.target, UNTRACKED)
        elif isinstance(child, ast.withitem) and child.optional_vars is not None:
            _bind_target(scope, child.optional_vars, UNTRACKED)
        elif isinstance(child, ast.ExceptHandler) and child.name:
            _bind(scope, child.name, UNTRACKED)
        elif isinstance(child, (ast.Import, ast.ImportFrom)):
            for alias in child.names:
                _bind(scope, (alias.asname or alias.name).split(".")[0], UNTRACKED)
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            _bind(scope, child.name, UNTRACKED)
        # Comprehension targets (ast.comprehension) are local to the comprehension: not bound.
    # A name declared global or nonlocal is bound elsewhere even when assigned here.
    scope.assigned -= scope.declared_global
    scope.assigned -= scope.declared_nonlocal


def _bind_target(scope: Scope, target: ast.expr, value: Optional[ast.expr]) -> None:
    if isinstance(target, ast.Name):
        _bind(scope, target.id, value)
    elif isinstance(target, (ast.Tuple, ast.List)):
        values = value.elts if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts) else None
        for index, element in enumerate(target.elts):
            _bind_target(scope, element, values[index] if values else UNTRACKED)
    elif isinstance(target, ast.Starred):
        _bind_target(scope, target.value, UNTRACKED)


def _bind(scope: Scope, name: str, value: Optional[ast.expr]) -> None:
    scope.assigned.add(name)
    scope.values.setdefault(name, []).append(value)
