"""The ``id`` wrapper, and what it remembers: every weakly referenceable object whose id a test
takes, with a weak reference, its type and the line that called ``id()``. Nothing is kept alive.
If a remembered object is dead and a new object takes its address while a registry still holds
it, the reuse itself is recorded."""

from __future__ import annotations

import builtins
import sys
from typing import Any, Callable

from harness.sentinel.witness import Stale, Witness, type_name, witness

MAX_OBSERVED = 200_000
_real_id = builtins.id


class IdWatch:
    """One test's memory of the ids it took. ``holds(address)`` names the registry entries
    (registry name, where) that hold an address and were not there before the test."""

    def __init__(self, holds: Callable[[int], list[tuple[str, str]]]):
        self.holds = holds
        self.test = ""
        self.witnesses: dict[int, Witness] = {}
        self.reuses: list[Stale] = []
        self.hooked = False

    def reset(self, test: str) -> None:
        self.test = test
        self.witnesses = {}
        self.reuses = []

    def start(self) -> None:
        if self.hooked:
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
        self.hooked = True

    def stop(self) -> None:
        if self.hooked:
            builtins.id = _real_id
            self.hooked = False

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
        elif len(self.witnesses) >= MAX_OBSERVED:
            return
        caller = sys._getframe(2)
        made_by = f"key made by id() at {caller.f_code.co_filename}:{caller.f_lineno} ({caller.f_code.co_name})"
        self.witnesses[address] = witness(obj, address, made_by, self.test, False)

    def _note_reuse(self, dead: Witness, newcomer: Any) -> None:
        """A dead object's address went to ``newcomer``: stale if a registry still holds it."""
        for name, where in self.holds(dead.address)[:1]:
            self.reuses.append(Stale(name, dead.address, where, dead, reused_by=f"a new {type_name(newcomer)}"))
