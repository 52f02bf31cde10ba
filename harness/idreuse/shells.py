"""Forced reuse of a dead model's module objects, which the stack does not name.

The morgue (:mod:`harness.idreuse.morgue`) forces reuse of what a stack lists in
``reuse_targets()``: the objects it says it keys state on (weight storages). A cache keyed by
``id(module)`` (the shape of Megatron's ``_sequence_parallel_attr_cache``) bites only when a new
module is born at a dead one's address, which CPython does now and then by itself, never on
demand. So the runner forces it for every *placeable* model object, without being told:

1. **Take.** When a model dies, the runner hands its model objects (:func:`placeable` ones: plain
   Python instances, not tensors) to :meth:`Shells.take` before anything else lets go of them.
   They are released one at a time, root first; one that dies then (nothing else held it) has its
   block taken at once by a *shell*, a bare instance of its class (``object.__new__``, no
   ``__init__``), which the shells keep. Objects in reference cycles die at one collection, after
   which their blocks are taken the same way. An object that outlives its release is held by
   something else: the hygiene oracle names it as a survivor, and it gets no shell. Taking a
   shell is a search: bare instances are made until one lands on the freed block, each miss
   using up a free block of the size class served ahead of it (tens of thousands in a long-lived
   process). The misses stay alive until the take ends, so the pools ahead stay full and the
   later objects' blocks come at once; the search gives up only after :data:`LANDING_LIMIT`
   tries in all. A dead object that gets no shell is a :class:`ShellMiss`, named in the rank's
   result (``RankResult.shell_misses``) and the case's report (``shell-missed=N``); a case that
   passes with one is reported ``not forced`` (:func:`~harness.oracles.exercised.not_exercised`),
   since the next model's objects of that class were born one dead address early, or elsewhere.
2. **Place.** While the next model is built on a rank that forces reuse (:func:`placing`), the
   first instance of a class made there *is* the oldest shell of that class: a bare instance of
   the class, as ``object.__new__`` makes one, on a dead module's block, which ``__init__`` then
   fills. So it is born at a dead module's address, in the order the dead model's objects were
   taken, whatever the heap holds. (Freeing the shell and allocating until an instance lands on
   its block would be a search through every free block of the size class ahead of the shell's:
   a long-lived process that freed many objects of that size, such as a test process after a few
   long runs' reports, holds tens of thousands, and the search missed.)
3. **Settle.** Shells no build used go to quarantine: never freed, their ids never come back. On
   ranks that do not force reuse every shell ends there, as parked objects do in the morgue.

Placing an instance needs a class whose ``__new__`` is ``object.__new__``: the first time a class
is placed, it gets :func:`_new`, which allocates exactly as ``object.__new__`` does unless a
placement is under way (CPython gives a class no allocation slot back once ``__new__`` was
assigned; :mod:`harness.idreuse.landing` keeps a pass-through for the same reason).
Taking runs inside :func:`~harness.idreuse.morgue.quiet_allocator` (no collector run, no harness
thread allocating).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import gc
import weakref
from typing import Any

from harness.idreuse.morgue import MORGUE, land_from, probe_slots, quiet_allocator

__harness_hidden__ = True

# Allocations tried per death (every shell of one model's objects) before a block is given up on.
# A try that misses used up a free block of the size class served ahead of the freed one: a
# long-lived process holds tens of thousands of them (20,000, the bound once, gave up behind the
# 100,000 of tests/test_shells.py, silently). Each try held costs a block of the size class and a
# slot of the tries' list (8 bytes), until the take ends.
LANDING_LIMIT = 1_000_000
_HEAPTYPE = 1 << 9          # Py_TPFLAGS_HEAPTYPE: a class defined in Python


def _new(klass, *args, **kwargs):
    """The ``__new__`` of a class the shells have placed an instance of (see the module docstring)."""
    queue = SHELLS.active.get(klass) if SHELLS.active else None
    if queue:
        return SHELLS.place(klass, queue)
    return object.__new__(klass)


_NEW = staticmethod(_new)


@dataclasses.dataclass(frozen=True)
class ShellMiss:
    """A model object that died and got no shell: no try of its class landed on its block.

    The next build's instances of its class are then born on the dead objects taken after it,
    one address early each (``model.layers[0]`` on dead ``layers[1]``'s, ...), and the last
    on none: the forced reuse the case stands for did not happen as it claims."""

    name: str          # its path and type in its model: "model.layers[0] (Linear)"
    address: int
    tries: int         # allocations tried before the search gave up
    model: int = -1    # the model it belonged to (set by RankResult.add_shell_misses)

    def line(self) -> str:
        return (f"model {self.model}: no shell landed on dead {self.name} at {self.address:#x} "
                f"({self.tries} tries): model {self.model + 1}'s instances of its class were not "
                "born on their dead counterparts' addresses")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ShellMiss":
        return cls(**d)


@dataclasses.dataclass(frozen=True)
class Taken:
    """What :meth:`Shells.take` did: how many shells it took, and every dead object it did not shell."""

    shells: int
    misses: list


class _Search:
    """The tries of one :meth:`Shells.take`, all kept in one list until the take ends."""

    def __init__(self, held: list):
        self.held = held
        self.used = 0

    def land(self, target: int, make) -> tuple[object, int]:
        """Allocate with ``make`` until an object lands on ``target``'s block: ``(that object,
        tries)``, or ``(None, tries)`` when the list of tries is full."""
        start = self.used
        probe, self.used = land_from(target, make, self.held, start)
        return probe, self.used - start + (probe is not None)


def placeable(obj: Any) -> bool:
    """An object whose class a shell can stand in for: defined in Python, allocated by
    ``object.__new__`` (or already by :func:`_new`), not a tensor, no ``__del__``."""
    cls = type(obj)
    if not cls.__flags__ & _HEAPTYPE or hasattr(cls, "__del__"):
        return False
    if cls.__new__ is not object.__new__ and cls.__new__ is not _new:
        return False
    try:
        weakref.ref(obj)
    except TypeError:
        return False
    return True


class Shells:
    """Per-process holder of shells (see the module docstring)."""

    def __init__(self):
        self._queues: dict[type, collections.deque] = {}
        self._quarantine: list = []
        self.active: dict[type, collections.deque] = {}
        self.placed = 0                              # instances born on a shell, in this process

    # --- death ---------------------------------------------------------------------------------
    def take(self, box: list, names=()) -> "Taken":
        """Release the objects in ``box`` (the caller's only references; emptied here), in order,
        and keep a shell on the block of each one that dies. ``names``: each object's name for a
        miss (its path and type in its model), by position. Returns the shells taken and the
        misses: objects that died and got no shell (an object that outlives its release is held
        elsewhere: no shell, no miss; hygiene names it as a survivor).

        Between a release and its shell nothing is allocated but the tries (the weak references,
        the tries' list and their makers are made first), so a block freed by a release is the
        first of its size class that a try of the same class finds once the free blocks served
        ahead of it are used up. The tries that missed stay alive until every object is shelled:
        the pools ahead stay full, so the next release's block comes next, or after the few
        blocks freed since (freed, the misses would go back ahead of it, and every object
        would search through them again)."""
        if not box:
            return Taken(0, [])
        with quiet_allocator():
            refs = [weakref.ref(o) for o in box]
            where = [(id(o), type(o)) for o in box]
            makers = {cls: (lambda c=cls: object.__new__(c)) for _, cls in where}
            held = probe_slots(LANDING_LIMIT)
            search = _Search(held)
            shells: list = [None] * len(box)
            tries = [0] * len(box)
            for i in range(len(box)):
                box[i] = None
                if refs[i]() is None:
                    shells[i], tries[i] = search.land(where[i][0], makers[where[i][1]])
            alive = [i for i in range(len(box)) if shells[i] is None and refs[i]() is not None]
            if alive:
                gc.collect()               # objects in reference cycles die here
                for i in alive:
                    if refs[i]() is None:
                        shells[i], tries[i] = search.land(where[i][0], makers[where[i][1]])
            for (_, cls), shell in zip(where, shells):
                if shell is not None:
                    self._queues.setdefault(cls, collections.deque()).append(shell)
            dead = [i for i in range(len(box)) if shells[i] is None and refs[i]() is None]
            box.clear()
            held = None
        names = list(names)
        misses = [ShellMiss(names[i] if i < len(names) else f"({where[i][1].__name__})", where[i][0], tries[i])
                  for i in dead]
        return Taken(sum(shell is not None for shell in shells), misses)

    # --- the next build ------------------------------------------------------------------------
    def begin(self) -> None:
        """Before a build on a rank that forces reuse: every class with shells places its next
        instances on them."""
        for cls, queue in self._queues.items():
            if queue:
                if vars(cls).get("__new__") is not _NEW and cls.__new__ is not _new:
                    cls.__new__ = _NEW
                self.active[cls] = queue

    def place(self, klass: type, queue: collections.deque):
        """The oldest shell of ``klass``, as the new instance (a bare one on a dead one's block)."""
        self.placed += 1
        return queue.popleft()

    def settle(self) -> None:
        """After a build (or on a rank that does not force reuse): shells left go to quarantine."""
        self.active.clear()
        for queue in self._queues.values():
            while queue:
                self._quarantine.append(queue.popleft())

    def clear(self) -> None:
        self.active.clear()
        self._queues.clear()
        self._quarantine.clear()


SHELLS = Shells()


@contextlib.contextmanager
def placing():
    """Around a build (inside :func:`~harness.idreuse.morgue.forcing_window`): on a rank that
    forces reuse, new instances of the classes of the last dead model's objects are born on its
    objects' addresses. Yields a list ``[placed]``, filled in when the block ends with the number
    of instances born on a shell."""
    counts = [0]
    before = SHELLS.placed
    if MORGUE.releasing:
        SHELLS.begin()
    try:
        yield counts
    finally:
        SHELLS.active.clear()
        counts[0] = SHELLS.placed - before
