"""The place the analyzer stands at: module, scope and what the current function has bound
so far (:class:`~harness.scan.flow.FlowState`). It answers the
:class:`~harness.scan.keys.KeyEnvironment` questions.
"""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.derived import arguments_in
from harness.scan.facts import IDENTITY_HASHED_ANNOTATIONS, Factory, ModuleFacts, nested_factory_name
from harness.scan.flow import FlowState
from harness.scan.keys import CollectionFacts, KeyFacts, KeyKind, KeyReader
from harness.scan.scopes import Binding, Scope
from harness.scan.syntax import constructs, dotted, render


# Annotations that let a caller pass any object.
_ANY_OBJECT = {"Any", "object", "Hashable"}
# Annotations of a container a caller fills with any objects.
_CONTAINERS = {"tuple", "Tuple", "dict", "Dict", "list", "List", "Sequence", "Mapping", "Iterable"}


class Place:
    """Module, scope and flow state, with a :class:`KeyReader` reading in them."""

    def __init__(self, module: ModuleFacts, scope: Scope, flow: FlowState, factories: dict[str, Factory]):
        self.module = module
        self.scope = scope
        self.flow = flow
        self.factories = factories
        self.reader = KeyReader(self)
        # While key factories are sought: hash() of a parameter a caller may pass anything
        # for is that argument's identity hash when the argument is a plain instance.
        self.seeking_factories = False

    def at(self, scope: Scope, flow: Optional[FlowState] = None) -> "Place":
        return Place(self.module, scope, flow or FlowState(), self.factories)

    # ---- KeyEnvironment ---------------------------------------------------------------

    def id_is_builtin(self) -> bool:
        binding, owner = self.scope.resolve("id")
        if binding is Binding.MODULE:
            return "id" not in self.module.module_scope.assigned
        return False

    def key_bound_to(self, name: str) -> Optional[KeyFacts]:
        return self.flow.keys.get(name)

    def collection_bound_to(self, name: str) -> Optional[CollectionFacts]:
        return self.flow.collections.get(name)

    def key_in_attribute(self, node: ast.Attribute) -> Optional[KeyFacts]:
        owner = self.method_owner(node.value)
        if owner is None:
            return None
        return self.module.id_attributes.get(f"{owner}.{node.attr}")

    def is_identity_hashed(self, node: ast.expr) -> bool:
        if not isinstance(node, ast.Name):
            return False
        binding, owner = self.scope.resolve(node.id)
        if owner.bound_param == node.id and binding in (Binding.PARAM, Binding.CLOSURE) and not owner.binds_class:
            return self.module.identity_hashed_class(owner.class_name)
        if binding is Binding.PARAM and node.id in owner.annotations:
            annotation = dotted(owner.annotations[node.id]) or ""
            tail = annotation.split(".")[-1]
            return tail in IDENTITY_HASHED_ANNOTATIONS or (
                tail in self.module.classes and self.module.identity_hashed_class(tail)
            )
        if binding is Binding.LOCAL:
            values = owner.values.get(node.id, [])
            return bool(values) and all(self._makes_identity_hashed(value) for value in values)
        return False

    def arbitrary_arguments(self, node: ast.expr) -> tuple[ast.expr, ...]:
        """The parameters callers may pass anything for that ``node`` is built of
        (``args``, ``(args, frozenset(kwargs.items()))``, a local grown from them, what a
        helper makes of them; see :mod:`harness.scan.derived`): hashing it hashes their
        objects."""
        return arguments_in(node, self.scope, self._takes_anything)

    def _takes_anything(self, owner: Scope, name: str) -> bool:
        """``*args`` (and ``**kwargs`` handed on) of any function; while key factories are
        sought, also a parameter left unannotated or annotated as any object or a plain
        container of them."""
        if name in _catch_all(owner.node):
            return True
        if not self.seeking_factories or owner is not self.scope or name == owner.bound_param or name not in owner.params:
            return False
        annotation = owner.annotations.get(name)
        if annotation is None:
            return True
        if isinstance(annotation, ast.Subscript):
            annotation = annotation.value
        return (dotted(annotation) or "").split(".")[-1] in _ANY_OBJECT | _CONTAINERS

    def _makes_identity_hashed(self, value: Optional[ast.expr]) -> bool:
        if not isinstance(value, ast.Call) or not isinstance(value.func, ast.Name):
            return False
        name = value.func.id
        if name == "object":
            return True
        return name in self.module.classes and self.module.identity_hashed_class(name)

    def key_from_factory(self, call: ast.Call) -> Optional[KeyFacts]:
        qualified = self.module.callee_qualname(call, self.scope)
        factory = self.factories.get(qualified) if qualified else None
        if isinstance(call.func, ast.Name):
            binding, owner = self.scope.resolve(call.func.id)
            if binding in (Binding.LOCAL, Binding.CLOSURE):
                factory = self.factories.get(nested_factory_name(self.module, owner, call.func.id))
        if factory is None:
            return self._key_from_maker(call)
        objects = []
        for param in factory.object_params:
            argument = _argument_for(call, factory.params, param)
            if argument is not None:
                objects.append(argument)
        return KeyFacts(factory.kind, tuple(objects), f"{render(call)} (returns {factory.returned})", factory.guessed)

    def _key_from_maker(self, call: ast.Call) -> Optional[KeyFacts]:
        """``builder = KeyBuilder(prefix=f"m_{id(self)}")`` then ``builder.build_key(args)``: a
        method of an object made here with an id-derived argument gives a key carrying it."""
        if not (isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name)):
            return None
        made = self.flow.holders.get(call.func.value.id)
        if not isinstance(made, ast.Call) or not constructs(made):
            return None
        for argument in [*made.args, *(k.value for k in made.keywords)]:
            facts = self.reader.key(argument)
            if facts is not None:
                return KeyFacts(KeyKind.COMPOSITE, facts.objects, f"{render(call)} (of {render(made)})", facts.guessed)
        return None

    # ---- lookups the analyzer shares ---------------------------------------------------

    def method_owner(self, node: ast.expr) -> Optional[str]:
        """The class name when ``node`` is the bound ``self``/``cls`` of the enclosing method."""
        if not isinstance(node, ast.Name):
            return None
        binding, owner = self.scope.resolve(node.id)
        if binding in (Binding.PARAM, Binding.CLOSURE) and owner.bound_param == node.id:
            return owner.class_name
        return None


def _catch_all(function: ast.AST) -> set[str]:
    """``*args`` of ``function``, and its ``**kwargs`` where it hands them on
    (``func(*args, **kwargs)``): the arguments of whatever its callers call. Keyword
    arguments a function keeps for itself are options, mostly strings and numbers."""
    arguments = getattr(function, "args", None)
    names = {arguments.vararg.arg} if arguments is not None and arguments.vararg is not None else set()
    kwarg = arguments.kwarg.arg if arguments is not None and arguments.kwarg is not None else None
    if kwarg is not None and any(
        isinstance(node, ast.Call) and any(k.arg is None and isinstance(k.value, ast.Name) and k.value.id == kwarg for k in node.keywords)
        for node in ast.walk(function)
    ):
        names.add(kwarg)
    return names


def _argument_for(call: ast.Call, params: tuple[str, ...], param: str) -> Optional[ast.expr]:
    for keyword in call.keywords:
        if keyword.arg == param:
            return keyword.value
    index = params.index(param)
    positional = [a for a in call.args if not isinstance(a, ast.Starred)]
    if len(positional) == len(call.args) and index < len(positional):
        return positional[index]
    return None
