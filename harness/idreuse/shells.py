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
   something else: the hygiene oracle names it as a survivor, and it gets no shell.
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
import gc
import weakref
from typing import Any

from harness.idreuse.morgue import MORGUE, land_on, probe_slots, quiet_allocator

__harness_hidden__ = True

LANDING_LIMIT = 20_000      # allocations tried per block at death (a shell landing on the freed block)
_HEAPTYPE = 1 << 9          # Py_TPFLAGS_HEAPTYPE: a class defined in Python


def _new(klass, *args, **kwargs):
    """The ``__new__`` of a class the shells have placed an instance of (see the module docstring)."""
    queue = SHELLS.active.get(klass) if SHELLS.active else None
    if queue:
        return SHELLS.place(klass, queue)
    return object.__new__(klass)


_NEW = staticmethod(_new)


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
    def take(self, box: list) -> int:
        """Release the objects in ``box`` (the caller's only references; emptied here), in order,
        and keep a shell on the block of each one that dies. Returns how many shells were taken.

        Between a release and its shell nothing is allocated but the tries (the weak references,
        the tries' list and their makers are made first), so a block freed by a release is the
        first of its size class that a try of the same class finds."""
        if not box:
            return 0
        with quiet_allocator():
            refs = [weakref.ref(o) for o in box]
            where = [(id(o), type(o)) for o in box]
            makers = {cls: (lambda c=cls: object.__new__(c)) for _, cls in where}
            held = probe_slots(LANDING_LIMIT)
            shells: list = [None] * len(box)
            for i in range(len(box)):
                box[i] = None
                if refs[i]() is None:
                    shells[i] = land_on(where[i][0], makers[where[i][1]], held)
                    held[:] = [None] * len(held)     # the misses go; the next block is freed after this
            alive = [i for i in range(len(box)) if shells[i] is None and refs[i]() is not None]
            if alive:
                gc.collect()               # objects in reference cycles die here
                for i in alive:
                    if refs[i]() is None:
                        shells[i] = land_on(where[i][0], makers[where[i][1]], held)
                        held[:] = [None] * len(held)
            for (_, cls), shell in zip(where, shells):
                if shell is not None:
                    self._queues.setdefault(cls, collections.deque()).append(shell)
            box.clear()
        return sum(shell is not None for shell in shells)

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
