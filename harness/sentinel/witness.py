"""What is known of the object an address belonged to, and a registry entry that outlived it."""

from __future__ import annotations

import dataclasses
import reprlib
import tracemalloc
import weakref
from typing import Any, Optional

_short_repr = reprlib.Repr()
_short_repr.maxother = 120
_short_repr.maxstring = 120


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


def type_name(obj: Any) -> str:
    kind = type(obj)
    return f"{kind.__module__}.{kind.__qualname__}"


def short_repr(obj: Any) -> str:
    try:
        return _short_repr.repr(obj)
    except Exception as error:  # a broken __repr__ must not break the check
        return f"<repr failed: {type(error).__name__}>"


def witness(obj: Any, address: int, made_by: str, test: str, describe: bool) -> Witness:
    try:
        ref = weakref.ref(obj)
    except TypeError:
        ref = None
    description = short_repr(obj) if describe else ""
    traced = tracemalloc.is_tracing()
    allocated = tracemalloc.get_object_traceback(obj) if traced else None
    return Witness(address, ref, type_name(obj), made_by, test, description, allocated, traced)


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

    def headline(self, test: str) -> str:
        """One line for the session summary: the test, registry, key, object and how its id was taken."""
        made = "" if self.witness.test == test else f", made during {self.witness.test}"
        return (f"{test}: {self.registry} {self.where} {self.address:#x} -> a {self.witness.type_name} "
                f"({self.witness.made_by}{made})")
