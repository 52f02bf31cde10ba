"""What an expression means as a key: the id() of an object, a key built from ids, an
identity hash -- or nothing the scan cares about.

The analyzer asks a :class:`KeyReader` about every expression used as a dict key, set
element, membership operand or cache argument. The reader knows the names the current
function bound to id-derived values (``key = id(x)``), so simple data flow within a function
is followed; it knows nothing about values that cross function boundaries except through
key factories (functions whose return value is id-derived, found before the walk).
"""

from __future__ import annotations

import ast
import dataclasses
import enum
from typing import Optional, Protocol

from harness.scan.syntax import callee_name, dotted, render


class KeyKind(enum.Enum):
    ID = "id"                # the bare id() of one object (or a name holding it)
    COMPOSITE = "composite"  # a tuple, string, f-string or sum built from ids
    HASH = "hash"            # hash() of an object whose hash is its identity


@dataclasses.dataclass(frozen=True)
class KeyFacts:
    """An id-derived key: what it is built of and from which objects.

    ``objects`` are the expressions whose identity the key encodes, as written where the key
    was made (``w._data`` for ``id(w._data)``); empty when the key came from somewhere the
    scan cannot see the object (a loop over a set of ids, an attribute).
    """

    kind: KeyKind
    objects: tuple[ast.expr, ...]
    text: str
    # hash() of whatever callers pass: an identity hash only when they pass plain objects,
    # which a memo of any function's arguments meets and a function of strings does not
    guessed: bool = False
    # also made of a clock reading or a random token (``"%s_%f" % (id(self), time())``): no
    # later key equals a dead object's
    fresh: bool = False

    def combined_with(self, other: "KeyFacts", text: str) -> "KeyFacts":
        kind = KeyKind.HASH if self.kind is other.kind is KeyKind.HASH else KeyKind.COMPOSITE
        return KeyFacts(kind, self.objects + other.objects, text, self.guessed and other.guessed, self.fresh or other.fresh)


@dataclasses.dataclass(frozen=True)
class CollectionFacts:
    """A set, list, generator or dict built from id-derived elements or keys.

    ``entry_value`` is, for dicts, the expression stored against each key (the value of a
    dict comprehension, or of the single pair of a one-entry literal); None otherwise.
    """

    element: KeyFacts
    is_mapping: bool
    is_set: bool
    entry_value: Optional[ast.expr]
    node: ast.AST


class KeyEnvironment(Protocol):
    """What a :class:`KeyReader` needs to know about the place it reads in."""

    def id_is_builtin(self) -> bool: ...

    def key_bound_to(self, name: str) -> Optional[KeyFacts]: ...

    def collection_bound_to(self, name: str) -> Optional[CollectionFacts]: ...

    def key_in_attribute(self, node: ast.Attribute) -> Optional[KeyFacts]: ...

    def is_identity_hashed(self, node: ast.expr) -> bool: ...

    def arbitrary_arguments(self, node: ast.expr) -> tuple[ast.expr, ...]: ...

    def key_from_factory(self, call: ast.Call) -> Optional[KeyFacts]: ...


# Calls that turn one id-derived argument into a derived key: str(id(x)), hex(id(x)), ...
_KEY_FORMATTERS = {"str", "hex", "oct", "bin", "repr", "format"}
# Calls whose every result differs from the last: a clock reading or a random token.
_FRESH_CALLS = {
    "time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns",
    "uuid1", "uuid4", "token_hex", "token_urlsafe", "urandom",
}
# Calls that build a composite key from an iterable of ids: tuple(id(x) for x in xs).
_SEQUENCE_KEY_BUILDERS = {"tuple", "frozenset"}
_SET_BUILDERS = {"set", "frozenset"}
# Digests of a key (hashlib's constructors, and the methods that encode or finish one).
_DIGESTS = {"md5", "sha1", "sha224", "sha256", "sha384", "sha512", "blake2b", "blake2s", "crc32", "adler32", "xxh64", "xxh3_64"}
_DIGEST_METHODS = {"encode", "hexdigest", "digest", "intdigest"}
# How many nested parts a key is read through (``(id(a), (id(b), n))`` is three).
MAX_KEY_DEPTH = 48
_LIST_BUILDERS = {"list", "sorted", "tuple"}


class KeyReader:
    """Reads expressions as keys, in the environment of one place in one function."""

    def __init__(self, env: KeyEnvironment):
        self.env = env
        self._depth = 0
        # The targets of the comprehensions whose element is being read, with what each
        # iterates: ``hash(a) for a in args`` hashes what callers pass.
        self._iterated: dict[str, ast.expr] = {}

    # ---- keys -------------------------------------------------------------------------

    def key(self, node: Optional[ast.expr]) -> Optional[KeyFacts]:
        """The id-derived key ``node`` is, or None. A key is read through at most
        :data:`MAX_KEY_DEPTH` nested parts: deeper nesting (generated tables, long sums) is
        not a key, and reading it would only exhaust Python's recursion limit."""
        if node is None or self._depth >= MAX_KEY_DEPTH:
            return None
        self._depth += 1
        try:
            return self._key(node)
        finally:
            self._depth -= 1

    def _key(self, node: ast.expr) -> Optional[KeyFacts]:
        if isinstance(node, ast.Call):
            return self._key_from_call(node)
        if isinstance(node, ast.Name):
            return self.env.key_bound_to(node.id)
        if isinstance(node, ast.Attribute):
            return self.env.key_in_attribute(node)
        if isinstance(node, (ast.Tuple, ast.List)):
            return self._combine(node.elts, node)
        if isinstance(node, ast.JoinedStr):
            parts = [value.value for value in node.values if isinstance(value, ast.FormattedValue)]
            return self._combine(parts, node)
        if isinstance(node, ast.BinOp):
            return self._combine([node.left, node.right], node)
        if isinstance(node, ast.IfExp):
            # ``id(g) if g is not None else None``: a key whenever either branch is one.
            facts = self.key(node.body) or self.key(node.orelse)
            return facts
        if isinstance(node, (ast.Starred, ast.NamedExpr)):
            return self.key(node.value)
        return None

    def _key_from_call(self, call: ast.Call) -> Optional[KeyFacts]:
        if self.is_id_call(call):
            target = call.args[0]
            return KeyFacts(KeyKind.ID, _listed(self._iterated.get(getattr(target, "id", None))) or (target,), f"id({render(target)})")
        name = callee_name(call)
        if isinstance(call.func, ast.Name) and name == "hash" and len(call.args) == 1:
            target = call.args[0]
            if self.env.is_identity_hashed(target):
                return KeyFacts(KeyKind.HASH, (target,), f"hash({render(target)})")
            inner = self.key(target)
            if inner is not None:
                # hash(str(id(a)) + name): the hash of a key made of ids is that key, folded
                # (a hash value, as hash(obj) is: a key, not an id saved for comparison)
                return KeyFacts(KeyKind.HASH, inner.objects, f"hash({render(target)})", inner.guessed)
            passed = self.env.arbitrary_arguments(self._iterated.get(target.id, target) if isinstance(target, ast.Name) else target)
            if passed:
                # hash(args) of a function taking *args: any object a caller passes, and a
                # plain instance hashes by its address.
                return KeyFacts(KeyKind.HASH, passed, f"hash({render(target)})", guessed=True)
            return None
        if isinstance(call.func, ast.Name) and name in _KEY_FORMATTERS and call.args:
            return self._combine(list(call.args), call)
        if isinstance(call.func, ast.Attribute) and name == "format":
            # "{}-{}".format(id(a), n)
            return self._combine(list(call.args) + [k.value for k in call.keywords], call)
        if isinstance(call.func, ast.Attribute) and name == "join" and call.args:
            # "_".join(str(id(a)) for a in args), os.path.join(root, f"{id(x)}.pt")
            if len(call.args) == 1 and not isinstance(call.args[0], ast.Starred):
                source = self.id_source(call.args[0])
                if source is not None:
                    return KeyFacts(KeyKind.COMPOSITE, source.objects, render(call))
            return self._combine(list(call.args), call) if (dotted(call.func) or "").endswith("path.join") else None
        if isinstance(call.func, ast.Attribute) and name in _DIGEST_METHODS and not call.args:
            # hashlib.md5(key.encode()).hexdigest(): a digest of a key is that key, shorter
            return self._combine([call.func.value], call)
        if name in _DIGESTS and call.args and not isinstance(call.args[0], ast.Starred):
            return self._combine([call.args[0]], call)
        if isinstance(call.func, ast.Name) and name in _SEQUENCE_KEY_BUILDERS and len(call.args) == 1:
            source = self.id_source(call.args[0])
            if source is not None:
                # tuple(hash(a) for a in args) stays a hash key, of what callers pass
                kind = KeyKind.HASH if source.kind is KeyKind.HASH else KeyKind.COMPOSITE
                return KeyFacts(kind, source.objects, render(call), source.guessed)
            return None
        return self.env.key_from_factory(call)

    def _combine(self, parts: list[ast.expr], node: ast.expr) -> Optional[KeyFacts]:
        """The key built of ``parts``: composite whenever any part is id-derived (a
        tuple or string holding only hashes stays a hash key)."""
        found: Optional[KeyFacts] = None
        for part in parts:
            facts = self.key(part)
            if facts is None and isinstance(part, (ast.GeneratorExp, ast.ListComp)):
                source = self.id_source(part)
                facts = KeyFacts(KeyKind.COMPOSITE, source.objects, render(part)) if source else None
            if facts is None:
                continue
            found = facts if found is None else found.combined_with(facts, render(node))
        if found is None:
            return None
        fresh = found.fresh or any(_fresh_part(part) for part in parts)
        if found.kind is KeyKind.HASH:
            return KeyFacts(KeyKind.HASH, found.objects, render(node), found.guessed, fresh)
        return KeyFacts(KeyKind.COMPOSITE, found.objects, render(node), found.guessed, fresh)

    def is_id_call(self, call: ast.Call) -> bool:
        """``id(x)`` with the builtin id (not a local or global that shadows it)."""
        if len(call.args) != 1 or call.keywords or isinstance(call.args[0], ast.Starred):
            return False
        func = call.func
        if isinstance(func, ast.Name) and func.id == "id":
            return self.env.id_is_builtin()
        return isinstance(func, ast.Attribute) and func.attr == "id" and isinstance(func.value, ast.Name) and func.value.id == "builtins"

    def is_id_function(self, node: ast.expr) -> bool:
        """The builtin ``id`` passed as a value, as in ``map(id, xs)``."""
        if isinstance(node, ast.Name) and node.id == "id":
            return self.env.id_is_builtin()
        return isinstance(node, ast.Attribute) and node.attr == "id" and isinstance(node.value, ast.Name) and node.value.id == "builtins"

    def element_key(self, comprehension: ast.expr, element: ast.expr) -> Optional[KeyFacts]:
        """The key each element of ``comprehension`` is, ``element`` read with the
        comprehension's plain targets standing for what they iterate."""
        bound = {g.target.id: g.iter for g in comprehension.generators if isinstance(g.target, ast.Name)}
        outer = {name: self._iterated[name] for name in bound if name in self._iterated}
        self._iterated.update(bound)
        try:
            return self.key(element)
        finally:
            for name in bound:
                del self._iterated[name]
            self._iterated.update(outer)

    # ---- collections ------------------------------------------------------------------

    def id_source(self, node: ast.expr) -> Optional[KeyFacts]:
        """The element key of an iterable that yields id-derived values, or None.

        ``map(id, xs)``, ``(id(x) for x in xs)``, ``[id(x) ...]``, ``{id(x) ...}`` and names
        bound to such collections.
        """
        if isinstance(node, ast.Name):
            bound = self.env.collection_bound_to(node.id)
            return bound.element if bound and not bound.is_mapping else None
        if isinstance(node, (ast.GeneratorExp, ast.ListComp, ast.SetComp)):
            return self.element_key(node, node.elt)
        if isinstance(node, (ast.Set, ast.List, ast.Tuple)):
            for element in node.elts:
                facts = self.key(element)
                if facts is not None:
                    return facts
            return None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "map" and len(node.args) >= 2 and self.is_id_function(node.args[0]):
                return KeyFacts(KeyKind.ID, _listed(node.args[1]), f"id({render(node.args[1])})")
            if node.func.id in _SET_BUILDERS | _LIST_BUILDERS | {"iter", "reversed"} and len(node.args) == 1:
                return self.id_source(node.args[0])
        return None

    def collection(self, node: ast.expr) -> Optional[CollectionFacts]:
        """The id-derived collection that ``node`` builds, when ``node`` builds one."""
        if isinstance(node, ast.SetComp):
            element = self.element_key(node, node.elt)
            return CollectionFacts(element, False, True, None, node) if element else None
        if isinstance(node, ast.Set):
            element = self.id_source(node)
            return CollectionFacts(element, False, True, None, node) if element else None
        if isinstance(node, ast.ListComp):
            element = self.element_key(node, node.elt)
            return CollectionFacts(element, False, False, None, node) if element else None
        if isinstance(node, ast.DictComp):
            element = self.element_key(node, node.key)
            return CollectionFacts(element, True, False, node.value, node) if element else None
        if isinstance(node, ast.Dict):
            for key_node, value_node in zip(node.keys, node.values):
                element = self.key(key_node)
                if element is not None:
                    return CollectionFacts(element, True, False, value_node, node)
            return None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) == 1:
            builder = node.func.id
            argument = node.args[0]
            if builder == "dict":
                return self._dict_from_pairs(argument, node)
            if builder in _SET_BUILDERS | {"list"}:
                element = self.id_source(argument)
                if element is not None:
                    return CollectionFacts(element, False, builder in _SET_BUILDERS, None, node)
        return None

    def _dict_from_pairs(self, argument: ast.expr, node: ast.Call) -> Optional[CollectionFacts]:
        """``dict(zip(ids, values))`` or ``dict((id(x), v) for ...)``."""
        if isinstance(argument, ast.Call) and isinstance(argument.func, ast.Name) and argument.func.id == "zip" and len(argument.args) == 2:
            element = self.id_source(argument.args[0])
            if element is not None:
                return CollectionFacts(element, True, False, None, node)
        if isinstance(argument, (ast.GeneratorExp, ast.ListComp)) and isinstance(argument.elt, ast.Tuple) and len(argument.elt.elts) == 2:
            element = self.key(argument.elt.elts[0])
            if element is not None:
                return CollectionFacts(element, True, False, argument.elt.elts[1], node)
        return None


def _listed(iterable: Optional[ast.expr]) -> tuple[ast.expr, ...]:
    """The elements of a literal tuple, list or set (``map(id, (int, str))``, ``id(t) for t in
    {A, B}``): the objects whose ids the elements are; empty for anything else."""
    if isinstance(iterable, (ast.Tuple, ast.List, ast.Set)) and not any(isinstance(e, ast.Starred) for e in iterable.elts):
        return tuple(iterable.elts)
    return ()


def _fresh_part(part: ast.expr) -> bool:
    """``time()``, ``uuid.uuid4()``, ``str(uuid4())``, ``uuid4().hex``: a part no later key repeats."""
    while isinstance(part, ast.Attribute) or (isinstance(part, ast.Call) and callee_name(part) in _KEY_FORMATTERS and part.args):
        part = part.value if isinstance(part, ast.Attribute) else part.args[0]
    return isinstance(part, ast.Call) and callee_name(part) in _FRESH_CALLS

