"""Containers of ints that may be ids: finding them in a package's modules, and reading them.

Shared by the hygiene oracle (after a model died, which containers in the stack's modules hold a
dead object's id, declared among ``registries()`` or not) and by the pytest sentinel plugin
(:mod:`harness.sentinel`, which reads the registries a user names). Standard library only: the
plugin stays cheap to import.

* :func:`registry_ints` -- the address-like ints in one container, each with where it sits;
* :func:`stack_modules` -- the modules a stack object is made of: the modules of its classes and
  every loaded module of their packages (the harness's own runner, oracles and morgue are not);
* :func:`discover_containers` -- every dict, set, list and tuple reachable by name from those
  modules: module globals, class attributes, attributes of module-level objects of the stack's
  own classes (singletons such as a global state manager, callable ones too), the stack object's own
  attributes, and what the callables found there keep: the closure cells of functions (kept by
  name, in a list, tuple or dict of hooks, or registered as torch's global module hooks), the
  attributes of callable objects and of bound methods' objects, each under its dotted name
  (``package.module.NAME``, ``package.module.Class.attr``, ``package.module.HOOKS['fwd'].<closure cache>``,
  ``package.module.memo.by_module``), and the tables of ``functools.lru_cache``/``cache`` wrappers
  found there, under the cached function's dotted name (:func:`lru_table`).
"""

from __future__ import annotations

import functools
import gc
import reprlib
import sys
import types
from typing import Any, Iterable, Iterator

CONTAINER_TYPES = (dict, set, frozenset, list, tuple)
_INT_HOLDERS = (int,) + CONTAINER_TYPES
SEARCH_DEPTH = 4
MAX_INTS_PER_REGISTRY = 100_000
LOWEST_ADDRESS = 4096

_short_repr = reprlib.Repr()
_short_repr.maxother = 120
_short_repr.maxstring = 120

# Loaded modules never scanned as part of a stack: the harness's own machinery (whose ledgers,
# morgue and graveyard hold dead ids by design) and the libraries every stack imports.
_NOT_STACK_PREFIXES = ("harness.runner", "harness.oracles", "harness.idreuse", "harness.report",
                       "harness.comm", "harness.case", "harness.fp8", "harness.reference", "harness.cli",
                       "harness.stress", "harness.bench", "harness.sentinel", "harness.scan",
                       "harness.stacks.protocol", "torch", "numpy", "pytest", "_pytest", "pluggy")
_TORCH_HOOK_DICTS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                     "_global_backward_pre_hooks", "_global_buffer_registration_hooks",
                     "_global_module_registration_hooks", "_global_parameter_registration_hooks")


def place(name: str, where: str) -> str:
    """A registry's name and a place in it (:func:`registry_ints`) as one text: ``NAME key``,
    ``NAME['fwd'] element``."""
    return f"{name}{'' if where.startswith(('[', '.')) else ' '}{where}".rstrip()


def plausible_address(value: Any) -> bool:
    """An int that can be an object's address (positive, 8-byte aligned, above 4096)."""
    return type(value) is int and value > LOWEST_ADDRESS and value % 8 == 0 and value < 1 << 64


def registry_ints(registry: Any) -> dict[int, str]:
    """Address-like ints found in ``registry``, each with where it was found (``key``,
    ``['fwd'] element``...), up to :data:`SEARCH_DEPTH` levels deep. An object that is not a
    container is searched through its ``vars()``."""
    found: dict[int, str] = {}
    stack: list[tuple[Any, int, str]] = [(registry, 0, "")]
    if not isinstance(registry, CONTAINER_TYPES) and hasattr(registry, "__dict__"):
        stack = [(value, 1, f".{name}") for name, value in list(vars(registry).items())]
    while stack and len(found) < MAX_INTS_PER_REGISTRY:
        container, depth, where = stack.pop()
        for value, place in _entries(container, where):
            if plausible_address(value):
                found.setdefault(value, place)
            elif depth < SEARCH_DEPTH and isinstance(value, CONTAINER_TYPES):
                stack.append((value, depth + 1, place))
    return found


def _entries(container: Any, where: str) -> Iterator[tuple[Any, str]]:
    for _ in range(3):  # another thread may resize it while it is copied
        try:
            # Entries that can hold no int (a registry's tensors, metas, modules) are skipped before
            # their place is formatted: formatting it for every entry dominated scans of big registries.
            if isinstance(container, dict):
                items = list(container.items())
                pairs = [(k, f"{where} key".strip()) for k, _ in items if isinstance(k, _INT_HOLDERS)]
                pairs += [(v, f"{where}[{_short_repr.repr(k)}]") for k, v in items if isinstance(v, _INT_HOLDERS)]
                return iter(pairs)
            if isinstance(container, (set, frozenset, list, tuple)):
                return iter([(v, f"{where} element".strip()) for v in list(container) if isinstance(v, _INT_HOLDERS)])
            return iter(())
        except RuntimeError:
            continue
    return iter(())


def is_stack_module(name: str) -> bool:
    """A module of a stack, not of the harness's machinery, the standard library or the libraries
    every stack imports."""
    return not any(name == p or name.startswith(p + ".") for p in _NOT_STACK_PREFIXES) \
        and name.split(".")[0] not in sys.stdlib_module_names and name != "builtins"


def stack_modules(stack: Any) -> list[types.ModuleType]:
    """The loaded modules a stack object is made of, by name.

    The modules that define its class and base classes, plus every loaded module of those
    modules' packages (``harness.stacks.emulated.stack`` brings ``harness.stacks.emulated.*``);
    a top-level module brings itself only.
    """
    key = (type(stack), len(sys.modules))      # modules imported since (lazily, say) change the count
    if _MODULES_CACHE.get("key") == key:
        return list(_MODULES_CACHE["modules"])
    owners = [cls.__module__ for cls in type(stack).__mro__ if cls.__module__ and is_stack_module(cls.__module__)]
    prefixes = tuple({name.rpartition(".")[0] + "." for name in owners if "." in name})
    chosen = []
    for name, module in list(sys.modules.items()):
        if (name in owners or name.startswith(prefixes) or name + "." in prefixes) \
                and isinstance(module, types.ModuleType) and is_stack_module(name):
            chosen.append(module)
    chosen.sort(key=lambda m: m.__name__)
    _MODULES_CACHE.update(key=key, modules=chosen)
    return list(chosen)


_MODULES_CACHE: dict = {}


def _closure_containers(fn: Any, name: str, out: dict[str, Any], depth: int = 0) -> None:
    fn = getattr(fn, "__func__", fn)          # a bound method's function
    cells = getattr(fn, "__closure__", None) or ()
    names = getattr(getattr(fn, "__code__", None), "co_freevars", ())
    for var, cell in zip(names, cells):
        try:
            value = cell.cell_contents
        except ValueError:                     # an empty cell
            continue
        if isinstance(value, CONTAINER_TYPES):
            out.setdefault(f"{name}.<closure {var}>", value)
        elif _stack_object(value):             # a closure over a memo object
            _attributes(value, f"{name}.<closure {var}>", out, depth + 1)


def _stack_object(value: Any) -> bool:
    """An instance (not a class, module or function) of a class of the stack's own modules."""
    return not isinstance(value, (type, types.ModuleType, types.FunctionType, types.MethodType)) \
        and hasattr(value, "__dict__") and is_stack_module(type(value).__module__)


def lru_table(wrapper: Any) -> dict | None:
    """The table of a ``functools.lru_cache`` (or ``cache``) wrapper: kept in C, it is no attribute;
    the garbage collector's referents of the wrapper reach it (the dict that is not its
    ``__dict__``). None for any other object."""
    if not isinstance(wrapper, _LRU_WRAPPER):
        return None
    own = getattr(wrapper, "__dict__", None)
    return next((r for r in gc.get_referents(wrapper) if type(r) is dict and r is not own), None)


_LRU_WRAPPER = type(functools.lru_cache(maxsize=None)(len))


def _hook(value: Any, name: str, out: dict[str, Any], depth: int = 0) -> None:
    """What a callable kept as a hook holds: a function's closure cells, a bound method's function
    and object, a callable object's attributes (``memo = Memo()`` with ``memo.by_module``), a
    cached function's table."""
    if isinstance(value, _LRU_WRAPPER):
        table = lru_table(value)
        if table is not None:
            out.setdefault(name, table)
        _hook(getattr(value, "__wrapped__", None), name, out, depth)
    elif isinstance(value, types.MethodType):
        _closure_containers(value, name, out, depth)
        if _stack_object(value.__self__):
            _attributes(value.__self__, f"{name}.__self__", out, depth + 1)
    elif isinstance(value, types.FunctionType):
        _closure_containers(value, name, out, depth)
    elif isinstance(value, functools.partial):
        _hook(value.func, f"{name}.func", out, depth)
    elif callable(value) and _stack_object(value):
        _attributes(value, name, out, depth + 1)


def _attributes(owner: Any, name: str, out: dict[str, Any], depth: int = 1) -> None:
    """Containers among ``owner``'s attributes, and what the callables kept in them hold
    (objects at most :data:`OBJECT_DEPTH` deep: a memo's bound method refers back to the memo)."""
    if depth > OBJECT_DEPTH:
        return
    try:
        items = list(vars(owner).items())
    except TypeError:
        return
    for attr, value in items:
        if attr.startswith("__"):
            continue
        _one(value, f"{name}.{attr}", out, objects=False, depth=depth)


HOOKS_PER_CONTAINER = 64
OBJECT_DEPTH = 3


def _one(value: Any, name: str, out: dict[str, Any], objects: bool, depth: int = 0) -> None:
    if isinstance(value, CONTAINER_TYPES):
        out.setdefault(name, value)
        if isinstance(value, (list, tuple)):      # hooks kept in a list or tuple
            for i, item in enumerate(value[:HOOKS_PER_CONTAINER]):
                if callable(item):
                    _hook(item, f"{name}[{i}]", out, depth)
        elif isinstance(value, dict):             # hooks kept by name: {"post_quantize": fn}
            items = list(value.items())[:HOOKS_PER_CONTAINER]
            for key, item in items:
                if callable(item) and not isinstance(item, type):
                    _hook(item, f"{name}[{_short_repr.repr(key)}]", out, depth)
    elif callable(value) and not isinstance(value, type):
        _hook(value, name, out, depth)
    elif objects and _stack_object(value):
        _attributes(value, name, out, depth + 1)


def discover_containers(modules: Iterable[types.ModuleType], roots: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every container reachable by name from ``modules`` and ``roots``, by dotted name.

    ``roots``: further objects by name (the stack object itself) whose attributes are searched.
    A container reachable under two names is listed under the first.
    """
    out: dict[str, Any] = {}
    for module in modules:
        mod = module.__name__
        for attr, value in list(vars(module).items()):
            if attr.startswith("__") or isinstance(value, types.ModuleType):
                continue
            if isinstance(value, type):
                if value.__module__ == mod:
                    _attributes(value, f"{mod}.{value.__qualname__}", out)
                continue
            _one(value, f"{mod}.{attr}", out, objects=True)
    for name, root in (roots or {}).items():
        _attributes(root, name, out)
    hooks = sys.modules.get("torch.nn.modules.module")
    for dict_name in _TORCH_HOOK_DICTS if hooks is not None else ():
        for key, fn in list(getattr(hooks, dict_name, {}).items()):
            _hook(fn, f"torch.nn.modules.module.{dict_name}[{key}]", out)
    unique: dict[int, str] = {}
    return {name: c for name, c in out.items() if unique.setdefault(id(c), name) == name}
