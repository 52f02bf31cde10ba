"""Forced reuse for reproducers of bugs in code the harness does not own.

The morgue (:mod:`harness.idreuse.morgue`) forces reuse inside a stack that calls
:func:`~harness.idreuse.morgue.reuse_point` or :func:`~harness.idreuse.morgue.reuse_alloc`.
Third-party code calls neither, so a reproducer of a bug in it (the class cases of
:mod:`harness.classcases`, driven from ``cases/``) has two ways to put a new object on a dead
object's address, both on the released code, unchanged:

* :func:`land` -- when the reproducer makes the new object itself and making it allocates
  the object first (``Model()``, ``nn.Parameter(data)``): the dead object's block is freed and
  objects are made until one lands on it (each miss is kept, so the tries walk down the size
  class's pools to the freed block).
* :func:`born_on_death_of` -- when the third-party code makes the object, after other
  allocations of the same size class (``mesh["tp"]`` builds tuples and lists before the new
  ``DeviceMesh``): for the duration of a ``with`` block, the class's ``__new__`` is wrapped so
  that the next instance is born at the dead object's address (afterwards the class keeps a
  ``__new__`` that allocates as ``object.__new__`` does; see the function). At that call the dead object
  is freed, its block steered to the head of its size class with bare instances of the class
  (``object.__new__``, no ``__init__``), and the instance allocated at once.

Both run inside :func:`~harness.idreuse.morgue.quiet_allocator` (no collector run, no harness
thread allocating) and both want the dead object's *only* reference in a one-item list, so
that emptying the list frees it at that moment, and the victim born in a seeded pool
(:func:`seed_pools`), so that its death cannot empty the pool.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Callable, Optional

from harness.errors import HarnessError
from harness.idreuse.morgue import land_on, probe_slots

__harness_hidden__ = True

# Tries before giving up: each one keeps an object alive until the scenario ends.
LANDING_LIMIT = 20_000


class LandingMissed(HarnessError):
    """No new object landed on the dead object's address: something else took the block."""


@dataclasses.dataclass
class Landing:
    """Where the dead object was, and the object born there (None until one is)."""

    address: int
    type_name: str
    born: Optional[object] = None
    tries: int = 0

    def require(self) -> object:
        if self.born is None:
            raise LandingMissed(
                f"no new object landed on the dead {self.type_name}'s address {self.address:#x} in "
                f"{self.tries} tries: something else took its block. Run the case alone; a thread "
                "allocating meanwhile would explain it."
            )
        return self.born


SEED_BLOCKS = 512


def seed_pools(make_shell: Callable[[], object], count: int = SEED_BLOCKS) -> list:
    """Call right before the victim is made: fills ``2 * count`` blocks of the victim's size
    class with shells, then frees every other one. Returns the shells left (keep them until
    the scenario ends).

    A freed block goes back to its pool's free list, and the landing tries reach it by using
    up the pools ahead of it -- unless the victim's death emptied its pool, which then goes
    back to the arena, where no allocation of that size class finds the block. Objects of
    other code share the pool and can die at any time. Seeded, the next allocations of the
    size class (the victim among them) take the freed slots, in pools where every other block
    is a shell kept alive: the victim's pool cannot be emptied.
    """
    shells = [make_shell() for _ in range(2 * count)]
    kept = shells[0::2]
    for index in range(len(shells) - 1, 0, -2):
        shells[index] = None
    return kept


def land(box: list, make: Callable[[], object], limit: int = LANDING_LIMIT) -> tuple[Landing, list]:
    """Free the object in ``box`` (its only reference) and call ``make`` until a result lands
    on its address. Returns the landing and the misses (keep them until the scenario ends)."""
    landing = Landing(id(box[0]), type(box[0]).__name__)
    held = probe_slots(limit)
    box.clear()
    landing.born = land_on(landing.address, make, held)
    landing.tries = sum(1 for slot in held if slot is not None) + (landing.born is not None)
    return landing, held


@contextlib.contextmanager
def born_on_death_of(cls: type, box: list, limit: int = LANDING_LIMIT):
    """Within the block, the next ``cls(...)`` frees the object in ``box`` and is born at its
    address; yields the :class:`Landing`. ``cls`` must be allocated by ``object.__new__``
    (it defines no ``__new__`` of its own) and be of the dead object's size class."""
    own = vars(cls).get("__new__")
    if not (cls.__new__ is object.__new__ or own is _PASS_THROUGH):
        raise HarnessError(f"{cls.__name__} has its own __new__: born_on_death_of cannot place its instances")
    landing = Landing(id(box[0]), type(box[0]).__name__)
    kept: list = []

    def new(klass, *args, **kwargs):
        if klass is cls and landing.born is None and box:
            held = probe_slots(limit)
            box.clear()                                   # the dead object's block is freed here
            probe = land_on(landing.address, lambda: object.__new__(cls), held)
            kept.append(held)
            landing.tries = sum(1 for slot in held if slot is not None)
            if probe is not None:
                # A keeper stays alive so the probe's pool is not emptied (and handed back)
                # when the probe goes; then the probe's block is first in line.
                kept.append(object.__new__(cls))
                del probe
            instance = object.__new__(klass)
            if id(instance) == landing.address:
                landing.born = instance
            return instance
        return object.__new__(klass)

    cls.__new__ = new
    try:
        yield landing
    finally:
        # CPython does not give a class its own allocation slot back once __new__ was
        # assigned (after a del, a call with arguments fails in object.__new__), so the class
        # keeps a pass-through that allocates exactly as object.__new__ does.
        cls.__new__ = _PASS_THROUGH
        kept.clear()


def _pass_through(klass, *args, **kwargs):
    return object.__new__(klass)


_PASS_THROUGH = staticmethod(_pass_through)
