"""How sure the scan is that a hazard finding is a real one, judged from lifetimes.

A registry keyed by ``id(obj)`` goes wrong only when ``obj`` can die while its entry lives
and a later lookup can then match a new object. :func:`assess` looks for evidence of both
halves in the source: a container that provably outlives the objects (process-wide state, a
closure installed somewhere, an attribute of another object than the one keyed) and keyed
objects that provably can die (objects callers pass in, attributes their owner replaces).
Where a half cannot be seen -- only lookups are in the scanned files, the container belongs
to a caller or to an owner that may live for one phase only, the keyed objects are functions
a decorator registers or members of a namespace, another process-wide structure holds them --
the finding is ``LOW``: the default output leaves it out and ``--all`` shows it.

Called by :func:`harness.scan.registry.group` once per hazard registry, after every use has
been judged (pins can be in other files). Nothing here decides safe or hazard: only how sure.
"""

from __future__ import annotations

import ast
import dataclasses
from types import SimpleNamespace
from typing import Iterable, Optional

from harness.scan.analyzer import Use
from harness.scan.decorators import descriptor_read, module_level_instance, wrapping_call
from harness.scan.blockvars import reset_per_block
from harness.scan.caught import keeps_caught_exceptions
from harness.scan.callbacks import removed_by_callback
from harness.scan.closures import kept_for_one_use, memoising_method, memoising_wrapper, wrapper_kept
from harness.scan.compared import checked_by_identity, saved_only_in_text
from harness.scan.owned import owned_keys_elsewhere
from harness.scan.pins import Pin, pinned_by_factory
from harness.scan.removedlater import removed_by_the_same_call
from harness.scan.factories import closure_made_per_call
from harness.scan.finding import Confidence
from harness.scan.getters import keyed_by_getters
from harness.scan.heldbeside import held_beside
from harness.scan.holders import immortal
from harness.scan.importtime import taken_at_import
from harness.scan.lastarg import remembers_last_argument
from harness.scan.metaclass import instances_per_arguments
from harness.scan.livewalk import walks_live_objects
from harness.scan.savedfirst import saved_first
from harness.scan.stategetters import module_state_getter
from harness.scan.testcode import only_in_tests
from harness.scan.transient import handed_for_one_call
from harness.scan.unread import never_read
from harness.scan.uses import harmless_staleness
from harness.scan.verdict import Lifetime
from harness.scan.weakvalue import holds_only_weakly
from harness.scan.weakentries import weak_reference_entries
from harness.scan.weakvalued import weak_valued
from harness.scan.scopes import UNTRACKED, Binding, ScopeKind
from harness.scan.syntax import root_of


@dataclasses.dataclass(frozen=True)
class Assessment:
    confidence: Confidence
    reason: str


def assess(items: Iterable, pins: dict[str, Pin], factory_bases: dict[str, set[str]]) -> Assessment:
    """The confidence of one hazard registry from its judged uses (``items``: the
    :class:`~harness.scan.registry.Judged` records of its uses)."""
    items = list(items)
    hits = [item.hit for item in items]
    writes = [hit for hit in hits if hit.use in (Use.STORE, Use.SAVED, Use.CACHED)]
    primary = writes[0] if writes else hits[0]
    lifetime = primary.verdict.lifetime
    owned = owned_keys_elsewhere(hits, _all_own, bound_param)

    if writes and all(hit.key is not None and hit.key.fresh for hit in writes):
        return Assessment(Confidence.LOW, (
            "every key also holds a clock reading or a random token taken when it was made, so no later object's key "
            "equals a dead one's"
        ))
    per_block = reset_per_block(hits)
    if per_block is not None:
        return Assessment(Confidence.LOW, per_block)
    if any(hit.file_name for hit in writes):
        return Assessment(Confidence.HIGH, (
            "the id is written into a file name, a name registered with the process or an identifier made of the "
            "mapping that holds it, which outlive every object"
        ))
    harmless = harmless_staleness(hits, writes) or only_in_tests(hits) or weak_valued(primary) or weak_reference_entries(writes)
    if harmless is not None:
        return Assessment(Confidence.LOW, harmless)

    if not writes:
        if owned:
            return Assessment(owned.confidence, owned.reason)
        walk = walks_live_objects(_scope(primary), primary.container) if lifetime is Lifetime.INSTANCE else None
        if walk is not None:
            return Assessment(Confidence.HIGH, (
                f"{walk} and looks their ids up in its own attribute, filled elsewhere in the class, which holds "
                "none of them: an object found later on a dead one's address matches its entry"
            ))
        return Assessment(Confidence.LOW, (
            "only lookups are in the scanned files: what is stored, and whether those objects die, cannot be seen"
        ))
    saved = [saved_first(hit) for hit in writes]
    if all(saved):
        return Assessment(Confidence.LOW, f"{saved[0]}: the object cannot die while its entries exist")
    removed = removed_by_the_same_call(writes) or removed_by_callback(writes)
    if removed is not None:
        return Assessment(Confidence.LOW, removed)
    last_argument = remembers_last_argument(writes, _own)
    if last_argument is not None:
        return Assessment(Confidence.HIGH, last_argument)
    unread = never_read(hits, writes)
    caught = keeps_caught_exceptions(writes)
    if caught is not None and unread is None:
        return Assessment(Confidence.HIGH, caught)
    if lifetime is Lifetime.PARAM:
        memo = (memoising_wrapper(writes) or wrapper_kept(writes)) if all(map(_maker_given, writes)) else None
        if memo is not None:
            return Assessment(Confidence.HIGH, memo)   # the store its maker was given, kept as long as the wrapper
        return Assessment(Confidence.LOW, (
            "the container is the caller's: whether it outlives the keyed objects depends on callers the scan cannot follow"
        ))
    if lifetime in (Lifetime.RETURNED, Lifetime.UNKNOWN):
        if owned:
            return Assessment(owned.confidence, owned.reason)
        memo = _memo(writes)
        if memo is not None:
            return Assessment(Confidence.HIGH, memo)   # a memo's store fetched on each call: a shared one
        state = module_state_getter(primary)
        if state is None:
            return Assessment(Confidence.LOW, (
                "the container comes from code whose result's lifetime cannot be seen, so it may die with the objects"
            ))
        # Module state a getter hands out: process-wide, and only the callers' arguments can
        # show that the keyed objects live as long (a mark(value) that returns its argument
        # is no registering decorator).
        passed = [_callers_pass_immortals(hit) for hit in writes]
        if all(passed):
            return Assessment(Confidence.LOW, passed[0])
        return Assessment(Confidence.LOW, _GUESSED) if _guessed(writes) else Assessment(Confidence.HIGH, state)
    if lifetime is Lifetime.INSTANCE:
        if owned:
            return Assessment(owned.confidence, owned.reason)
        per_arguments = instances_per_arguments(writes)
        if per_arguments is not None:
            return Assessment(Confidence.HIGH, per_arguments)
        if unread is not None:
            return Assessment(Confidence.LOW, unread)
        wrapper = wrapping_call(_scope(primary))
        if wrapper is not None:
            return Assessment(Confidence.HIGH, (
                f"{wrapper} calls the function its instance wraps, keyed by the arguments: a decorator's cache, "
                "which lives as long as the decorated function while the arguments come and go"
            ))
        memo = _memo(writes)
        if memo is not None:
            return Assessment(Confidence.HIGH, memo)   # a memo, of a module-level instance or not
        read_on = [descriptor_read(hit, _scope(hit), hit.key.objects if hit.key else ()) for hit in writes]
        if all(read_on):
            return Assessment(Confidence.HIGH, (
                f"{read_on[0]} keys by the instance it is read on: a descriptor lives as long as its class, "
                "while the instances come and go"
            ))
        singleton = module_level_instance(_scope(primary), primary.module.index)
        if singleton is not None:
            return Assessment(Confidence.LOW, (
                f"the container belongs to a module-level instance ({singleton}), which lives for the whole process, "
                "keyed by objects passed to it: whether they die first depends on that manager's users, which the "
                "scan cannot follow"
            ))
        saved_own = [hit for hit in writes if hit.use is Use.SAVED and _all_own(hit)]
        if saved_own:
            named = saved_only_in_text(saved_own)
            if named is not None:
                return Assessment(Confidence.LOW, named)
            return Assessment(Confidence.HIGH, (
                "the saved ids are of objects the owner holds and replaces, so the owner outlives them"
            ))
        walk = walks_live_objects(_scope(primary), primary.container)
        if walk is not None:
            return Assessment(Confidence.HIGH, (
                f"{walk} and keeps ids in its own attribute, holding none of those objects: the registry "
                "outlives them by design"
            ))
        weak = holds_only_weakly(writes) if checked_by_identity(hits) is None else None
        if weak is not None:
            return Assessment(Confidence.HIGH, weak)
        return Assessment(Confidence.LOW, (
            "an attribute of an object keyed by objects passed to it: if that object lives for one phase "
            "(a pickler, a builder, one compile), its entries die with it; the scan cannot tell"
        ))
    if lifetime in (Lifetime.LOCAL, Lifetime.TEMPORARY) and not any("captured by" in hit.verdict.reason for hit in writes):
        return Assessment(Confidence.LOW, "the container escapes its function in a way whose lifetime cannot be seen")

    handed_out = keyed_by_getters(writes)
    if handed_out is not None:
        return Assessment(Confidence.LOW, handed_out)
    decorated = [hit for hit in writes if _registered_functions(hit)]
    if decorated and len(decorated) == len(writes):
        return Assessment(Confidence.LOW, (
            "the keyed objects are the functions a decorator registers and returns: they live as long as the "
            "module that defines them"
        ))
    once = handed_for_one_call(writes, lifetime) or taken_at_import(writes)
    if once is not None:
        return Assessment(Confidence.LOW, once)
    passed = [_callers_pass_immortals(hit) for hit in writes]
    if all(passed):
        return Assessment(Confidence.LOW, passed[0])
    members = [hit for hit in writes if _namespace_members(hit)]
    if members and len(members) == len(writes):
        return Assessment(Confidence.LOW, (
            "the keyed objects are members of a module or class namespace, which live as long as it"
        ))
    checked = checked_by_identity(hits)
    if checked:
        return Assessment(Confidence.LOW, checked)
    held = [held_beside(hit) for hit in writes]
    if all(held):
        return Assessment(Confidence.LOW, f"{held[0]}: the object cannot die while that entry exists")
    pinned = [pinned_by_factory(hit, pins, factory_bases) for hit in writes]
    if all(pinned):
        return Assessment(Confidence.LOW, pinned[0])
    per_call = [closure_made_per_call(hit) for hit in writes] if lifetime is Lifetime.CLOSURE else [None]
    if all(per_call):
        return Assessment(Confidence.LOW, per_call[0])
    if unread is not None:
        return Assessment(Confidence.LOW, unread)
    if lifetime in (Lifetime.LOCAL, Lifetime.TEMPORARY, Lifetime.CLOSURE):
        one_use = kept_for_one_use(writes)
        if one_use is not None:
            return Assessment(Confidence.LOW, one_use)
        memo = memoising_wrapper(writes) or wrapper_kept(writes)
        if memo is not None:
            return Assessment(Confidence.HIGH, memo)
        return Assessment(Confidence.LOW, (
            "the container is captured by a function that is installed or kept, but not as a memo of its callers' "
            "arguments: how long it is called, and with which objects, the scan cannot follow"
        ))
    if _guessed(writes):
        memo = _memo(writes)
        return Assessment(Confidence.HIGH, memo) if memo is not None else Assessment(Confidence.LOW, _GUESSED)
    if "thread-local storage" in primary.verdict.reason:
        return Assessment(Confidence.HIGH, "the container is kept in thread-local storage across calls, and the keyed objects come from callers")
    return Assessment(Confidence.HIGH, "the container lives for the whole process and the keyed objects come from callers")


_GUESSED = (
    "the key is hash() of whatever the callers pass, an identity only for plain objects: a memo of any "
    "function's arguments meets them, and this is no memo, so which values come (strings, tuples, objects) "
    "the scan cannot tell"
)


def _memo(writes: list) -> Optional[str]:
    """Why every store is a memo's, made by a wrapper or by a memo service, or None."""
    return memoising_wrapper(writes) or memoising_method(writes)


def _maker_given(hit) -> bool:
    """The container is a parameter of a function enclosing the one that stores (the
    storage a decorator is given), not one of the storing function's own."""
    root, _ = root_of(hit.container) if hit.container is not None else (None, None)
    if not isinstance(root, ast.Name):
        return False
    binding, owner = _scope(hit).resolve(root.id)
    return binding is Binding.CLOSURE and root.id in owner.params


def _guessed(writes: list) -> bool:
    """Every store keys by a hash of the callers' values (see KeyFacts.guessed)."""
    return bool(writes) and all(hit.key is not None and hit.key.guessed for hit in writes)


# ---- where the keyed objects come from ---------------------------------------------------

def _scope(hit):
    return hit.module.scope_of(hit.node)


def _own(obj: ast.expr, hit, depth: int = 0) -> bool:
    """Whether ``obj`` is the method's own object or something it holds: ``self``,
    ``self.a.b``, ``self.a.get(k)``, or a local bound from those (a loop over
    ``self.sources.items()``, ``src = self.sources.get(s)``)."""
    scope = _scope(hit)
    owner_param = bound_param(scope)
    if owner_param is None or depth > 4:
        return False
    if isinstance(obj, ast.Call) and isinstance(obj.func, ast.Attribute) and obj.func.attr == "get":
        return isinstance(obj.func.value, ast.Attribute) and _own(obj.func.value, hit, depth + 1)
    root, parts = root_of(obj)
    if not isinstance(root, ast.Name):
        return False
    if root.id == owner_param and not _calls_in(obj):
        return True
    if parts:
        return False
    binding, owner = scope.resolve(root.id)
    if binding in (Binding.PARAM, Binding.MODULE, Binding.CLASS_BODY) and loop_source(scope.node, root.id) is None:
        return False
    values = owner.values.get(root.id, []) if binding is Binding.LOCAL else []
    if values and all(value is not UNTRACKED for value in values):
        return all(_own(value, hit, depth + 1) for value in values)
    loop = loop_source(scope.node, root.id)
    return loop is not None and _iterates_own(loop, hit, depth)


def _iterates_own(iterable: ast.expr, hit, depth: int) -> bool:
    """A loop over something the method's own object holds (``self.sources.items()``,
    ``quantizers`` bound to ``self.quantizers.get(k)``)."""
    for node in ast.walk(iterable):
        if isinstance(node, (ast.Attribute, ast.Name)) and _own(node, hit, depth + 1):
            return True
    return False


def _calls_in(expr: ast.expr) -> bool:
    return any(isinstance(node, ast.Call) for node in ast.walk(expr))


def bound_param(scope) -> Optional[str]:
    """``self`` of the method the code is in; also a first parameter spelled ``self`` of a
    function written to be patched onto a class (a ``@staticmethod`` taking ``self``)."""
    while scope is not None:
        if scope.bound_param:
            return scope.bound_param
        if scope.params and scope.params[0] == "self":
            return "self"
        scope = scope.parent
    return None


def loop_source(function: ast.AST, name: str, near: Optional[ast.AST] = None) -> Optional[ast.expr]:
    """What the loop or comprehension binding ``name`` in ``function`` iterates over: the
    comprehension around ``near`` when there is one, else the first loop found."""
    if near is not None:
        for node in ast.walk(function):
            if isinstance(node, (ast.SetComp, ast.ListComp, ast.GeneratorExp, ast.DictComp)):
                for generator in node.generators:
                    if _binds(generator.target, name) and any(inner is near for inner in ast.walk(node)):
                        return generator.iter
    for node in ast.walk(function):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)) and _binds(node.target, name):
            return node.iter
    return None


def _binds(target: ast.expr, name: str) -> bool:
    return any(isinstance(t, ast.Name) and t.id == name for t in ast.walk(target))


def _all_own(hit) -> bool:
    return hit.key is not None and bool(hit.key.objects) and all(_own(obj, hit) for obj in hit.key.objects)


def _registered_functions(hit) -> bool:
    """``def register(fn): reg.add(id(fn)); return fn`` (or a wrapper around it): the keyed
    objects are the decorated functions."""
    if hit.key is None or not hit.key.objects:
        return False
    scope = _scope(hit)
    for obj in hit.key.objects:
        if not isinstance(obj, ast.Name):
            return False
        binding, owner = scope.resolve(obj.id)
        if binding not in (Binding.PARAM, Binding.CLOSURE) or obj.id not in owner.params:
            return False
        if not _returns_or_wraps(owner.node, obj.id):
            return False
    return True


def _returns_or_wraps(function: ast.AST, name: str) -> bool:
    """The function hands back the very object it was given (``return fn``), as a
    registering decorator does."""
    return any(
        isinstance(n, ast.Return) and isinstance(n.value, ast.Name) and n.value.id == name for n in ast.walk(function)
    )


def _callers_pass_immortals(hit) -> Optional[str]:
    """Every call of the function (in its module) passes, for each keyed parameter, a
    module-level function or class or an import: objects that live for the whole process."""
    if hit.key is None or not hit.key.objects:
        return None
    scope = _scope(hit)
    node = scope.node
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    qualified = f"{scope.class_name}.{node.name}" if scope.class_name else node.name
    sites = [(call, caller, hit.module) for call, caller in hit.module.call_sites.get(qualified, [])]
    index = getattr(hit.module, "index", None)
    if not scope.class_name and scope.parent is not None and scope.parent.kind is ScopeKind.MODULE and index is not None:
        # a module-level function: its callers in every scanned file (torch.jit's
        # _register_builtin(fn, op) is called by the modules that define each fn)
        elsewhere = index.calls_of(node.name)
        if elsewhere:
            sites = [(site.call, site.scope, site.module) for site in elsewhere]
    params = [p for p in scope.params if p != scope.bound_param]
    if not sites:
        return None
    for obj in hit.key.objects:
        if not isinstance(obj, ast.Name) or obj.id not in params:
            return None
        position = params.index(obj.id)
        for call, caller_scope, caller_module in sites:
            argument = next((k.value for k in call.keywords if k.arg == obj.id), None)
            if argument is None and position < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[: position + 1]):
                argument = call.args[position]
            if argument is None or immortal(argument, SimpleNamespace(module=caller_module, scope=caller_scope)) is None:
                return None
    lines = ", ".join(f"{module.path}:{call.lineno}" if module is not hit.module else f"line {call.lineno}" for call, _, module in sites[:3])
    return (
        f"every call of {node.name}() passes a module-level function, class or import for the keyed "
        f"parameter ({lines}), and those live for the whole process"
    )


def _namespace_members(hit) -> bool:
    """Keyed objects bound by a loop over a namespace: ``vars(m).items()``,
    ``m.__dict__.items()``, ``inspect.getmembers(m)``."""
    if hit.key is None or not hit.key.objects:
        return False
    for obj in hit.key.objects:
        if not isinstance(obj, ast.Name):
            return False
        source = loop_source(_function_of(hit), obj.id)
        if source is None or not _is_namespace(source):
            return False
    return True


def _function_of(hit) -> ast.AST:
    scope = _scope(hit)
    return scope.node


def _is_namespace(iterable: ast.expr) -> bool:
    for node in ast.walk(iterable):
        if isinstance(node, ast.Attribute) and node.attr == "__dict__":
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)):
            name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
            if name in ("vars", "getmembers", "dir"):
                return True
    return False
