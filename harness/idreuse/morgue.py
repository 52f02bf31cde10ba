"""Forced id reuse through CPython's allocator (docs/design.md, "Forcing id reuse").

CPython's ``id()`` is an address, and pymalloc hands the most recently freed block of a size
class to the next allocation of that class (10,000 of 10,000 in a tight loop here). So to make
a new model's tensor take a dead model's id we do what the allocator would do on a lucky day,
on purpose:

1. When a model dies, the harness *parks* the objects the stack keys state on
   (:meth:`Stack.reuse_targets`, e.g. every FP8 weight's ``_data``) in the morgue instead of
   letting them be freed among the model's other objects. Nothing but the morgue holds them:
   to the stack they are dead, and the hygiene oracle treats them so.
2. While the next model is built, the stack calls :func:`reuse_point` right before each such
   allocation. On a rank that forces reuse, that drops the oldest parked object, and makes
   sure its block is what the allocator hands out next: pymalloc serves a size class from the
   pool at the head of its used-pool list, and a freed block's pool is moved to that head only
   if it was full. So after freeing, the morgue allocates throw-away objects of the same type
   until one lands on the freed block (every pool ahead of it is then exhausted), frees that
   one again, and returns; the stack's very next allocation of that size class (the new
   tensor) lands on the block. The throw-away objects are freed after the build.

   That is :func:`reuse_point`, for a stack whose allocation happens inside code it does not
   own (TE's quantizer allocates ``_data``). It relies on nothing else of that size class being
   freed or allocated between the reuse point and the allocation, and now and then something is
   (about 1 in 1,000 forced reuses measured on torchao weights in two-rank groups).
3. A stack that makes the object itself passes its constructor to :func:`reuse_alloc` instead:
   the morgue frees the parked object, then calls the constructor until a result lands on the
   freed block (each miss used up a free block served ahead of it, and is kept until the build
   ends), and returns that result. Nothing can come between, so it lands whenever the block is
   free. Every release that did not end up as one of the new model's targets is counted
   (``reuse_misses`` in the report), whichever way it was forced.

On ranks that do not force reuse, parked objects stay in quarantine for the rest of the
process, so their ids cannot come back at all. That is what makes asymmetric reuse
deterministic: one rank reuses every id, the other none.

Modes (``--reuse``): ``off`` quarantines on every rank (a control: zero reuse events),
``natural`` parks nothing (objects die as they would, reuse is only counted), ``symmetric``
releases on every rank, ``asymmetric[:RANKS]`` releases on the listed ranks (rank 0 by default)
and quarantines elsewhere.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import enum
import gc
import threading
import time

from harness.errors import UsageError

__harness_hidden__ = True

class ReuseMode(str, enum.Enum):
    """How the harness treats the ids of a dead model's reuse targets (see the module docstring)."""

    OFF = "off"                    # quarantine on every rank: a control with zero reuse events
    NATURAL = "natural"            # park nothing; only count what the allocator does by itself
    SYMMETRIC = "symmetric"        # release on every rank
    ASYMMETRIC = "asymmetric"      # release on the listed ranks, quarantine elsewhere

    __str__ = str.__str__
    __format__ = str.__format__


MODES = tuple(m.value for m in ReuseMode)


@dataclasses.dataclass(frozen=True)
class ReusePolicy:
    mode: ReuseMode = ReuseMode.NATURAL
    ranks: tuple[int, ...] = (0,)

    def __post_init__(self):
        try:
            object.__setattr__(self, "mode", ReuseMode(self.mode))
        except ValueError:
            raise UsageError(f"--reuse {self.mode!r}: expected one of off, natural, symmetric, asymmetric[:RANKS]") from None

    @classmethod
    def parse(cls, text: str) -> "ReusePolicy":
        """``off``, ``natural``, ``symmetric``, ``asymmetric`` or ``asymmetric:0,2``."""
        mode, _, rest = (text or "natural").partition(":")
        if mode not in MODES:
            raise UsageError(f"--reuse {text!r}: expected one of off, natural, symmetric, asymmetric[:RANKS]")
        ranks: tuple[int, ...] = (0,)
        if rest:
            if mode != "asymmetric":
                raise UsageError(f"--reuse {text!r}: only asymmetric takes a rank list")
            try:
                ranks = tuple(sorted({int(r) for r in rest.split(",") if r.strip()}))
            except ValueError:
                raise UsageError(f"--reuse {text!r}: ranks must be integers, e.g. asymmetric:0,2") from None
            if not ranks or min(ranks) < 0:
                raise UsageError(f"--reuse {text!r}: ranks must be non-negative integers")
        return cls(mode, ranks)

    def text(self) -> str:
        if self.mode is ReuseMode.ASYMMETRIC:
            return "asymmetric:" + ",".join(str(r) for r in self.ranks)
        return self.mode.value

    def parks(self) -> bool:
        return self.mode is not ReuseMode.NATURAL

    def releases_on(self, rank: int) -> bool:
        return self.mode is ReuseMode.SYMMETRIC or (self.mode is ReuseMode.ASYMMETRIC and rank in self.ranks)


class Morgue:
    """Per-process holder of parked objects (see the module docstring)."""

    STEER_LIMIT = 200_000
    ALLOC_LIMIT = 50_000    # tries of reuse_alloc: each makes a real object, so fewer than probes

    def __init__(self):
        self._parked: collections.deque = collections.deque()
        self._quarantine: list = []
        self._ballast: list = []
        self.releasing = False
        self.released = 0
        self.released_ids: list[int] = []   # ids handed back to the allocator since configure()

    def configure(self, policy: ReusePolicy, rank: int) -> None:
        self.releasing = policy.releases_on(rank)
        self.released_ids = []

    def park(self, objects) -> None:
        """Park a dying model's targets, in allocation order.

        Whatever an earlier death left parked goes to quarantine first: like pymalloc's LIFO free
        lists, the next model takes the ids of the model that died last, so a chain of models of
        one shape keeps handing the same ids on, as in TE's many-models-per-launch tests.
        """
        self.settle()
        for obj in objects:
            self._parked.append(obj)

    def parked_ids(self) -> set[int]:
        return {id(o) for o in self._parked} | {id(o) for o in self._quarantine}

    def holds(self, obj) -> bool:
        return any(o is obj for o in self._parked) or any(o is obj for o in self._quarantine)

    def release_next(self) -> None:
        """Free the oldest parked object and make its block the next one of its size class."""
        if not (self.releasing and self._parked):
            return
        make = _throwaway_factory(self._parked[0])
        target, held = self._free_oldest(self.STEER_LIMIT if make is not None else 0)
        if make is None:
            return
        probe = land_on(target, make, held)
        self._ballast.append(held)
        if probe is not None:
            # One more object stays alive before the probe goes: if the probe were the last live
            # block of its pool, freeing it would hand the whole pool back and the next
            # allocation could come from anywhere. (16 misses in 584 forced reuses without this
            # keeper, 1 in 599 with it, measured in forked two-rank processes.) It goes on the
            # ballast before the probe is freed: growing the ballast list may take a small block.
            self._ballast.append(make())
            del probe                # back on the head pool's free list, first in line

    def allocate(self, make):
        """``make()``, on the block of the oldest parked object when this rank forces reuse.

        Calls ``make`` until a result lands on the freed block (at most :data:`ALLOC_LIMIT`
        times; each call that lands elsewhere used up a block served ahead of it and stays alive
        until :meth:`settle`). If it never lands (something else took the block), the last
        result is returned all the same, and the release shows up as a miss.
        """
        if not (self.releasing and self._parked):
            return make()
        target, held = self._free_oldest(self.ALLOC_LIMIT)
        landed = land_on(target, make, held)
        self._ballast.append(held)
        return landed if landed is not None else held[-1]

    def _free_oldest(self, probe_limit: int) -> tuple[int, list]:
        """Free the oldest parked object; return its address and a probe list of ``probe_limit``
        slots (see :func:`probe_slots`) made before the free."""
        obj = self._parked.popleft()
        target = id(obj)
        # Everything that allocates is done before the free: growing ``released_ids`` or making
        # the probe list may take a small block, which must not be the one about to come free.
        self.released += 1
        self.released_ids.append(target)
        held = probe_slots(probe_limit)
        del obj                      # the last reference: freed here, at this exact moment
        return target, held

    def settle(self) -> None:
        """After a build: whatever is still parked goes to quarantine (never freed, ids never reused)."""
        while self._parked:
            self._quarantine.append(self._parked.popleft())
        self._ballast.clear()

    def clear(self) -> None:
        self._parked.clear()
        self._quarantine.clear()
        self._ballast.clear()


def probe_slots(limit: int = Morgue.STEER_LIMIT) -> list:
    """The list :func:`land_on` keeps its misses in; make it *before* the block is freed.

    Preallocated, its item array is a large block outside pymalloc, so filling it never
    reallocates a small block. Made after the free, the list object itself (a 64-byte block when
    the list free list is empty, e.g. after a full collection) could take the freed block.
    """
    return [None] * limit


def land_on(target: int, make, held: list):
    """Allocate with ``make`` until an object lands on the freed block at address ``target``.

    Returns that object, or None after ``len(held)`` tries. The misses are kept in ``held``
    (from :func:`probe_slots`): each one used up a free block the allocator served ahead of
    ``target``'s, so the tries walk down the size class's used-pool list until they reach
    ``target``'s pool. Only the caller's own allocations may run meanwhile; see
    :func:`quiet_allocator`.
    """
    return land_from(target, make, held, 0)[0]


def land_from(target: int, make, held: list, start: int):
    """:func:`land_on` with the tries kept in ``held[start:]`` (the slots before ``start`` hold
    earlier searches' misses, left alive): ``(the object, its slot)`` when one lands, the slot
    left empty for the next search, else ``(None, len(held))``."""
    for i in range(start, len(held)):
        probe = make()
        if id(probe) == target:
            return probe, i
        held[i] = probe
    return None, len(held)


def _throwaway_factory(obj):
    """A maker of objects of ``obj``'s size class, or None if unknown.

    Plain tensors, and tensor subclasses whose objects are the same size (``nn.Parameter``):
    one size class, so a plain throw-away tensor can land on a dead Parameter's block.
    """
    import torch

    if isinstance(obj, torch.Tensor) and (type(obj).__basicsize__, type(obj).__itemsize__) == (
            torch.Tensor.__basicsize__, torch.Tensor.__itemsize__):
        dtype = obj.dtype
        return lambda: torch.empty(0, dtype=dtype)
    return None


MORGUE = Morgue()

# Held while a model is built on a rank that forces reuse. torch releases the GIL inside its ops
# (torch.empty included), so any other Python thread of the process could run between the
# release of a parked object and the allocation meant to take its block, and take it first.
# The harness's own threads (the rank watchdog) take this lock before each round of work.
QUIET = threading.Lock()


def run_quietly(round_fn, period_s: float = 0.25) -> None:
    """A harness thread's loop: every ``period_s``, one round of ``round_fn`` under :data:`QUIET`.

    Waits at most a second for the lock, so a build longer than that (a hang inside it) does not
    silence the thread; a forced-reuse build shorter than that never sees it allocate.
    """
    while True:
        time.sleep(period_s)
        got = QUIET.acquire(timeout=1.0)
        try:
            round_fn()
        finally:
            if got:
                QUIET.release()


@contextlib.contextmanager
def quiet_allocator():
    """No collector run and no other harness thread allocating inside the block.

    A collection inside would free cyclic garbage left by earlier work wherever it lies, putting
    free blocks ahead of the one we want back (20,000 cycles interleaved with live objects put
    more than 10,000 ahead), and it empties the dict and tuple free lists, so the next
    call with keyword arguments takes a fresh block for its dict, and that dict, freed, parks
    the block in the free list for good. Nor is a collection run on the way in, for the latter
    reason: the free lists must hold what they hold when the victim is born.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    with QUIET:
        try:
            yield
        finally:
            if was_enabled:
                gc.enable()


@contextlib.contextmanager
def forcing_window():
    """Around a build: quiet (see :func:`quiet_allocator`) on a rank that forces reuse."""
    if not MORGUE.releasing:
        yield
        return
    with quiet_allocator():
        yield


def reuse_alloc(make, kind: str = ""):
    """Allocate the object a stack keys state on: ``make()``, on a dead object's address when the
    harness forces reuse on this rank (see the module docstring, item 3).

    ``make`` must allocate nothing of the result's size class that it frees again before the
    result (a temporary tensor made first would take the block on every call). Its extra calls'
    results are dropped when the build ends, so it must have no other effect.
    """
    return MORGUE.allocate(make)


def reuse_point(kind: str = "") -> None:
    """Called by a stack right before it allocates an object it will key state on.

    A no-op unless the harness forces reuse on this rank; then the next allocation of the
    parked object's size class takes the parked object's address, hence its ``id()``.
    """
    MORGUE.release_next()
