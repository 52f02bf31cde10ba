"""pytest plugin: fail a test that leaves an id()-keyed registry entry behind a dead object.

Usage, in any project::

    pytest -p harness.sentinel --sentinel-registry pkg.fp8:FP8GlobalStateManager.fp8_param_to_autocast
    pytest -p harness.sentinel --sentinel-registry pkg.hooks:updated_params --sentinel-registry ...

or in the ini file (``sentinel_registries`` is a line list)::

    [pytest]
    sentinel_registries =
        pkg.fp8:FP8GlobalStateManager.fp8_param_to_autocast
        pkg.hooks:updated_params

A registry is ``MODULE:ATTR`` with ``ATTR`` a dotted path from the module (a global, or a
class attribute ``Class.attr``). It is looked up again at every check, so a ``reset()`` that
rebinds it is followed. Dicts (keys and values), sets, lists and tuples are searched for ints
up to four levels deep; an object that is none of those is searched through its ``vars()``.
Only ints that can be addresses count (positive, 8-byte aligned, above 4096).

What happens per test:

1. Before fixtures are set up, the ints already in the registries are noted; they belong to
   earlier tests and are not judged again.
2. While the test runs (fixtures included), the builtin ``id`` is wrapped: every object whose
   id is taken is remembered with a weak reference, its type and the line that called
   ``id()``. Nothing is kept alive. If a remembered object is dead and a new object gets its
   address while the registries still hold that address, the reuse itself is recorded -- it
   is exactly the bug this plugin exists for. ``--sentinel-no-id-hook`` turns the wrapper off.
3. After the test body (before fixture teardown), every new registry int not yet tied to
   an object is looked up once in ``gc.get_objects()``; a live object at that
   address is remembered the same way (with its ``repr``). This catches keys made without
   the builtin ``id`` (an alias bound before the test, C code) while their object is alive,
   e.g. held by a fixture.
4. After fixture teardown and a ``gc.collect()``, a new registry int whose remembered object
   is dead fails the test (an error in teardown) naming the registry, the key, the object's
   type, the line that took its id and, when ``tracemalloc`` is tracing
   (``PYTHONTRACEMALLOC=25``), where the object was allocated. Ints whose object is still
   alive are kept under watch: if one dies in a later test (a module fixture's teardown,
   say) that test's teardown reports it, naming the test that made it; what is left at the
   end of the session is checked once more and reported in the summary.

Ignored, on purpose: ints never tied to an object (counters, sizes, keys whose object died
before any check saw it and whose id was not taken through the builtin ``id``), and objects
that cannot be weakly referenced (plain ``list``, ``dict``, ``int``...), whose death cannot
be seen without keeping them alive.

The plugin imports only the standard library, pytest and :mod:`harness.idreuse.containers` (whose
registry walk the hygiene oracle shares; standard library only); the registries' modules are
imported when the session starts collecting, never when the plugin is loaded.
"""

from __future__ import annotations

import builtins
import dataclasses
import gc
import importlib
import reprlib
import sys
import tracemalloc
import weakref
from typing import Any, Iterator, Optional

import pytest

from harness.idreuse.containers import registry_ints

_INI_NAME = "sentinel_registries"
_MAX_OBSERVED = 200_000
_MAX_REPORTED = 20
_HINT = (
    "Prune the entry when the object dies (weakref.finalize(obj, registry.pop, key, None)), "
    "or key the registry by the object itself (weakref.WeakKeyDictionary)."
)
_real_id = builtins.id
_short_repr = reprlib.Repr()
_short_repr.maxother = 120
_short_repr.maxstring = 120


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sentinel", "id()-keyed registry sentinel (harness.sentinel)")
    group.addoption(
        "--sentinel-registry",
        action="append",
        default=[],
        metavar="MODULE:ATTR",
        help="a registry to watch, e.g. pkg.fp8:Manager.fp8_param_to_autocast (repeatable)",
    )
    group.addoption(
        "--sentinel-no-id-hook",
        action="store_true",
        default=False,
        help="do not wrap the builtin id() during tests (only heap walks tie keys to objects)",
    )
    parser.addini(_INI_NAME, type="linelist", default=[], help="registries to watch, one MODULE:ATTR per line")


def pytest_configure(config: pytest.Config) -> None:
    texts = [*config.getini(_INI_NAME), *config.getoption("sentinel_registry")]
    specs = [RegistrySpec.parse(text) for text in dict.fromkeys(t.strip() for t in texts if t.strip())]
    if specs:
        hook_id = not config.getoption("sentinel_no_id_hook")
        config.pluginmanager.register(Sentinel(specs, hook_id), "harness-sentinel")


@dataclasses.dataclass(frozen=True)
class RegistrySpec:
    """``MODULE:ATTR.PATH``, resolved afresh at every check."""

    module: str
    path: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.module}:{'.'.join(self.path)}"

    @classmethod
    def parse(cls, text: str) -> "RegistrySpec":
        module, colon, attribute = text.partition(":")
        path = tuple(attribute.split(".")) if attribute else ()
        if not colon or not module or not path or not all(part.isidentifier() for part in path):
            raise pytest.UsageError(
                f"sentinel registry {text!r} is not MODULE:ATTR; write e.g. "
                f"'pkg.fp8:Manager.fp8_param_to_autocast' (a module global or a class attribute)"
            )
        return cls(module, path)

    def resolve(self) -> Any:
        """The registry object; LookupError says what is missing and what to check."""
        try:
            target = importlib.import_module(self.module)
        except Exception as error:
            raise LookupError(
                f"cannot import {self.module!r} for sentinel registry {self.name}: "
                f"{type(error).__name__}: {error}; check the module name and sys.path"
            ) from error
        for depth, part in enumerate(self.path):
            try:
                target = getattr(target, part)
            except AttributeError:
                owner = ".".join((self.module, *self.path[:depth]))
                raise LookupError(
                    f"{owner} has no attribute {part!r} (sentinel registry {self.name}); check the spelling"
                ) from None
        return target


@dataclasses.dataclass(slots=True)
class Witness:
    """What is known of the object that an address belonged to.

    Slotted: one is made per id() call during a test, and a slotted instance is neither as
    big as, nor of the same size class as, a plain instance, so the plugin's own records
    compete less for the addresses that the code under test frees and reuses.
    """

    address: int
    ref: Optional[weakref.ReferenceType]
    type_name: str
    made_by: str  # how the address was tied to the object: an id() call, or a heap walk
    test: str
    description: str = ""
    allocated: Optional[tracemalloc.Traceback] = None
    traced: bool = False

    @property
    def dead(self) -> bool:
        return self.ref is not None and self.ref() is None

    def describe(self) -> str:
        lines = [f"a {self.type_name} ({self.made_by}, during {self.test})"]
        if self.description:
            lines.append(f"repr when last seen alive: {self.description}")
        if self.allocated is not None:
            lines.append("allocated at:")
            lines.extend(f"  {line}" for line in self.allocated.format())
        elif self.traced:
            # CPython 3.11 loses the traceback of instances with a managed __dict__.
            lines.append("(tracemalloc has no allocation traceback for this object)")
        else:
            lines.append("(run with PYTHONTRACEMALLOC=25 to see where it was allocated)")
        return "\n      ".join(lines)


def _type_name(obj: Any) -> str:
    kind = type(obj)
    return f"{kind.__module__}.{kind.__qualname__}"


def _witness(obj: Any, address: int, made_by: str, test: str, describe: bool) -> Witness:
    try:
        ref = weakref.ref(obj)
    except TypeError:
        ref = None
    description = ""
    if describe:
        try:
            description = _short_repr.repr(obj)
        except Exception as error:  # a broken __repr__ must not break the check
            description = f"<repr failed: {type(error).__name__}>"
    traced = tracemalloc.is_tracing()
    allocated = tracemalloc.get_object_traceback(obj) if traced else None
    return Witness(address, ref, _type_name(obj), made_by, test, description, allocated, traced)


@dataclasses.dataclass
class Stale:
    """A registry entry whose object died."""

    registry: str
    address: int
    where: str
    witness: Witness
    reused_by: str = ""

    def describe(self) -> str:
        text = f"{self.registry} {self.where} {self.address} ({self.address:#x}) -> {self.witness.describe()}"
        if self.reused_by:
            text += f"\n      the address was then reused by {self.reused_by}, while the entry was still there"
        return text


class Sentinel:
    """The plugin object registered when at least one registry is named."""

    def __init__(self, specs: list[RegistrySpec], hook_id: bool):
        self.specs = specs
        self.hook_id = hook_id
        self.test = ""
        self.baseline: set[tuple[str, int]] = set()
        self.witnesses: dict[int, Witness] = {}
        self.reuses: list[Stale] = []
        self.watched: list[Stale] = []  # entries whose object was alive at teardown
        self.late: list[Stale] = []
        self._hooked = False

    # ---- pytest hooks -----------------------------------------------------------------

    def pytest_report_header(self) -> str:
        names = ", ".join(spec.name for spec in self.specs)
        return f"sentinel: watching {len(self.specs)} registr{'y' if len(self.specs) == 1 else 'ies'}: {names}"

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        problems = []
        for spec in self.specs:
            try:
                spec.resolve()
            except LookupError as error:
                problems.append(str(error))
        if problems:
            raise pytest.UsageError("\n".join(problems))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self.test = item.nodeid
        self.witnesses = {}
        self.reuses = []
        self.baseline = {(name, address) for name, address, _ in self._current_ints()}
        self._start_id_hook()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        # After the body (passed or not) and before fixture teardown: objects held by
        # fixtures are still alive and can be found in the heap.
        yield
        self._tie_new_ints_to_objects()

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        # trylast: runs after pytest's own teardown has finalized the fixtures.
        self._stop_id_hook()
        if isinstance(getattr(item, "funcargs", None), dict):
            # pytest drops the fixture values right after the teardown hooks; dropping them
            # now lets finalized function-scoped fixture objects die before the check.
            item.funcargs = {}
        gc.collect()
        present = {(name, address) for name, address, _ in self._current_ints()}
        # A reuse counts if the stale entry is still there: code that checks and prunes
        # dead entries on lookup has handled it.
        reuses = [r for r in self.reuses if (r.registry, r.address) in present]
        stale = reuses + self._judge_new_entries() + self._judge_watched()
        self.witnesses = {}
        self.reuses = []
        if stale:
            count = len(stale)
            entries = "\n  ".join(s.describe() for s in stale[:_MAX_REPORTED])
            if count > _MAX_REPORTED:
                entries += f"\n  ... and {count - _MAX_REPORTED} more"
            pytest.fail(
                f"sentinel: {count} registry entr{'y' if count == 1 else 'ies'} outlived {'its' if count == 1 else 'their'} "
                f"object{'s' if count > 1 else ''}:\n  {entries}\n{_HINT}",
                pytrace=False,
            )

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item):
        try:
            yield
        finally:
            self._stop_id_hook()

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self._stop_id_hook()
        gc.collect()
        self.late = self._judge_watched()
        if self.late and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.late:
            return
        terminalreporter.section("sentinel: registry entries that outlived their objects after the last test")
        for stale in self.late:
            terminalreporter.line(stale.describe())
        terminalreporter.line(_HINT)

    def pytest_unconfigure(self) -> None:
        self._stop_id_hook()

    # ---- registries -------------------------------------------------------------------

    def _current_ints(self) -> Iterator[tuple[str, int, str]]:
        for spec in self.specs:
            try:
                registry = spec.resolve()
            except LookupError:
                continue  # reported at collection; a registry removed later has nothing in it
            for address, where in registry_ints(registry).items():
                yield spec.name, address, where

    def _tie_new_ints_to_objects(self) -> None:
        """Find the live object of every new registry int that no id() call explained."""
        wanted = {
            address
            for name, address, _ in self._current_ints()
            if (name, address) not in self.baseline and address not in self.witnesses
        }
        if not wanted:
            return
        heap = gc.get_objects()
        try:
            for obj in heap:
                address = _real_id(obj)
                if address in wanted:
                    self.witnesses[address] = _witness(
                        obj, address, "found at that address by a heap walk after the test body", self.test, True
                    )
                    wanted.discard(address)
                    if not wanted:
                        break
        finally:
            del heap
        for address, witness in self.witnesses.items():
            if not witness.description and witness.ref is not None:
                obj = witness.ref()
                if obj is not None:
                    witness.description = _witness(obj, address, "", "", True).description
                del obj

    def _judge_new_entries(self) -> list[Stale]:
        stale = []
        reused = {r.address for r in self.reuses}
        for name, address, where in self._current_ints():
            if (name, address) in self.baseline or address in reused:
                continue
            witness = self.witnesses.get(address)
            if witness is None or witness.ref is None:
                continue  # never tied to an object, or not weakly referenceable: ignored
            entry = Stale(name, address, where, witness)
            if witness.dead:
                stale.append(entry)
            else:
                self.watched.append(entry)
        return stale

    def _judge_watched(self) -> list[Stale]:
        if not self.watched:
            return []
        present = {(name, address) for name, address, _ in self._current_ints()}
        stale, still_alive = [], []
        for entry in self.watched:
            if (entry.registry, entry.address) not in present:
                continue  # pruned
            (stale if entry.witness.dead else still_alive).append(entry)
        self.watched = still_alive
        return stale

    # ---- the id() wrapper -------------------------------------------------------------

    def _start_id_hook(self) -> None:
        if not self.hook_id or self._hooked:
            return
        observe = self._observe

        def id(obj, /):  # noqa: A001 - it stands in for the builtin
            address = _real_id(obj)
            try:
                observe(obj, address)
            except Exception:  # watching must never change what the code under test sees
                pass
            return address

        id.__doc__ = _real_id.__doc__
        builtins.id = id
        self._hooked = True

    def _stop_id_hook(self) -> None:
        if self._hooked:
            builtins.id = _real_id
            self._hooked = False

    def _observe(self, obj: Any, address: int) -> None:
        if type(obj).__weakrefoffset__ == 0:
            return  # cannot be weakly referenced: its death could not be seen
        known = self.witnesses.get(address)
        if known is not None:
            alive = known.ref() if known.ref is not None else None
            if alive is obj:
                return
            if known.dead:
                self._note_reuse(known, obj)
        elif len(self.witnesses) >= _MAX_OBSERVED:
            return
        caller = sys._getframe(2)
        made_by = f"key made by id() at {caller.f_code.co_filename}:{caller.f_lineno} ({caller.f_code.co_name})"
        self.witnesses[address] = _witness(obj, address, made_by, self.test, False)

    def _note_reuse(self, dead: Witness, newcomer: Any) -> None:
        """A dead object's address went to ``newcomer``: stale if a registry still holds it."""
        for name, address, where in self._current_ints():
            if address == dead.address and (name, address) not in self.baseline:
                self.reuses.append(Stale(name, address, where, dead, reused_by=f"a new {_type_name(newcomer)}"))
                return
