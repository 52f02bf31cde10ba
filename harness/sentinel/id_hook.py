"""The ``id`` wrapper, and what it remembers: every weakly referenceable object whose id a test
takes, with a weak reference, its type's name and the line that called ``id()``. Nothing is kept
alive but the caller's code object. If a remembered object is dead and a new object takes its
address while a registry still holds it, the reuse itself is recorded.

The wrapper runs on every ``id()`` call of the code under test (hundreds of thousands in a
dask test, from its worker threads too), so it keeps a raw tuple and leaves the words to
:meth:`IdWatch.witness`, which is asked only about the addresses a registry holds."""

from __future__ import annotations

import builtins
import sys
import tracemalloc
import weakref
from typing import Any, Callable, Optional

from harness.sentinel.witness import Stale, Witness, type_name

MAX_OBSERVED = 200_000
_real_id = builtins.id


class IdStandIn:
    """What ``builtins.id`` is while a test runs: the builtin's answer, and ``observe(obj, address)``
    told of it. A callable object, not a Python function, so that code inspecting ``id`` sees
    what it sees of the builtin: ``inspect.isfunction`` and ``inspect.ismethod`` are false (joblib's
    ``Memory.cache(id)`` then takes the builtin's path), its signature is ``(obj, /)``, it pickles
    and copies as the global ``builtins.id``, and its name, module, doc and repr are the builtin's."""

    def __init__(self, observe: Callable[[Any, int], None]):
        self._observe = observe
        self.__name__ = self.__qualname__ = _real_id.__name__
        self.__module__ = _real_id.__module__
        self.__doc__ = _real_id.__doc__
        self.__self__ = _real_id.__self__

    def __call__(self, obj, /):
        address = _real_id(obj)
        try:
            self._observe(obj, address)
        except Exception:  # watching must never change what the code under test sees
            pass
        return address

    def __reduce__(self) -> str:
        return _real_id.__name__    # pickle and copy: the global builtins.id, whatever it is then

    def __repr__(self) -> str:
        return repr(_real_id)


class IdWatch:
    """One test's memory of the ids it took. ``holds(address)`` names the registry entries
    (registry name, where) that hold an address and were not there before the test."""

    def __init__(self, holds: Callable[[int], list[tuple[str, str]]]):
        self.holds = holds
        self.test = ""
        # address -> Witness, or the raw (ref, type name, code, line, allocation) the wrapper keeps
        self.witnesses: dict[int, Any] = {}
        self.reuses: list[Stale] = []
        self.hooked = False
        self.tracing = False

    def reset(self, test: str) -> None:
        self.test = test
        self.witnesses = {}
        self.reuses = []

    def start(self) -> None:
        if self.hooked:
            return
        self.tracing = tracemalloc.is_tracing()
        builtins.id = IdStandIn(self._observe)
        self.hooked = True

    def stop(self) -> None:
        if self.hooked:
            builtins.id = _real_id
            self.hooked = False

    def witness(self, address: int) -> Optional[Witness]:
        """What is known of the object last seen at ``address`` (None: nothing)."""
        record = self.witnesses.get(address)
        if type(record) is tuple:
            ref, kind, code, line, allocated = record
            made_by = f"key made by id() at {code.co_filename}:{line} ({code.co_name})"
            record = Witness(address, ref, kind, made_by, self.test, "", allocated, self.tracing)
            self.witnesses[address] = record
        return record

    def _observe(self, obj: Any, address: int) -> None:
        kind = type(obj)
        if kind.__weakrefoffset__ == 0:
            return  # cannot be weakly referenced: its death could not be seen
        known = self.witnesses.get(address)
        if known is not None:
            ref = known[0] if type(known) is tuple else known.ref
            alive = ref() if ref is not None else None
            if alive is obj:
                return
            if ref is not None and alive is None:
                self._note_reuse(self.witness(address), obj)
        elif len(self.witnesses) >= MAX_OBSERVED:
            return
        caller = sys._getframe(2)
        allocated = tracemalloc.get_object_traceback(obj) if self.tracing else None
        self.witnesses[address] = (weakref.ref(obj), f"{kind.__module__}.{kind.__qualname__}",
                                   caller.f_code, caller.f_lineno, allocated)

    def _note_reuse(self, dead: Witness, newcomer: Any) -> None:
        """A dead object's address went to ``newcomer``: stale if a registry still holds it."""
        for name, where in self.holds(dead.address)[:1]:
            self.reuses.append(Stale(name, dead.address, where, dead, reused_by=f"a new {type_name(newcomer)}"))

