"""Process groups that die: the group a stack receives, destroyed and made anew between cases.

A stack that declares ``renews_group`` (the emulated and torchao stacks) receives a process
group of every rank made for it (:meth:`RankState._stack_group`), not the default group. The
group dies at the end of every case and its successor is born at the start of the next one, so
state a stack keys on a group's identity meets groups that die, the way TE's autocast buffers
(keyed on the recipe and the group) meet a training script's groups. The TE stacks keep one
group for the rank's life: TE keeps the group of every autocast key it has seen and reduces
every key at each autocast exit, so a destroyed group would be used again by the very next exit
(TE's own design, not something a case could fix).

The death and the birth are apart because only the death is the rank's own business:

* :func:`end_group`, after the case and before its result goes out, destroys the group (no peer
  takes part) and scans for its id. The dead group's id is a dead id like a dead tensor's: any
  registry of the stack (declared or not) that holds it fails hygiene in the case the group died
  at the end of, naming the group.
* :func:`begin_group`, before the next case, makes the new group: a collective of every rank
  (``new_group``), so it waits for every peer. It runs only where a case is about to run, that
  is where the controller has every rank's result of the last case and kept the group; were it
  after the case, a rank whose peer died in the case would wait there for the dead peer instead
  of reporting the case, and its report (the peer's connection closed) would be lost to a hang.
  A group recycled in between (:meth:`RankState.renew_group`) makes its own and drops the dead.

The new group is made on the dead group's address where the allocator allows it. At the death
the group's wrapper dies for real (the stack's weak references to it clear), and where nothing
else held it a *shell* takes its block at once: a bytes object of the wrapper's size, so that
nothing of the rank's work between the cases does. At the birth the shell is freed and the new
group's Python object is built through :func:`harness.idreuse.morgue.land_on`, so state keyed by
``id(group)`` that survived its group meets the new one. A stack that still holds the dead group
(the emulated stacks' autocast arguments do until the next registration) leaves its block taken:
then the new group lands elsewhere, and the case's reuse examples say so.
"""

from __future__ import annotations

import dataclasses
import sys
import weakref

from harness.idreuse.morgue import land_on, probe_slots, quiet_allocator
from harness.idreuse.tracker import collect
from harness.oracles.findings import HOLDS_DEAD_ID, Failure, Oracle
from harness.oracles.hygiene import EntryOrigins, scan_registries

__harness_hidden__ = True

PROBES = 4096      # objects of the wrapper's size class allocated before giving up on the dead block


@dataclasses.dataclass
class DeadGroup:
    """A destroyed group, from its death to its successor's birth."""

    ident: int
    desc: str
    freed: bool                 # its wrapper died (nothing of the stack held it)
    shell: object = None        # what holds the wrapper's block meanwhile (None: nothing landed there)


@dataclasses.dataclass
class Birth:
    """What making the new group before a case found, for that case's result."""

    reuse_events: int = 0
    examples: list = dataclasses.field(default_factory=list)
    failures: list = dataclasses.field(default_factory=list)

    def into(self, result) -> None:
        result.reuse_events += self.reuse_events
        result.reuse_examples[:0] = self.examples
        result.failures += self.failures


def begin_group(state) -> Birth:
    """Before a case, on every rank (so the group's ``new_group`` pairs up): the stack's new
    group, where the last one died at the end of the case before. Nothing where none died."""
    birth = Birth()
    dead, state.dead_group = state.dead_group, None
    if dead is None:
        return birth
    try:
        _remake(state, dead, birth)
    except Exception as exc:
        birth.failures.append(Failure(Oracle.ERROR, f"the process group's birth: {type(exc).__name__}: {exc}",
                                      rank=state.rank))
    return birth


def end_group(state, case, result, birth: Birth) -> None:
    """After a case, before its result goes out: ``birth`` (the case's group's making) into the
    result; destroy the stack's group and scan for its id. Nothing here waits for a peer."""
    import torch.distributed as dist

    birth.into(result)
    if state.group is None or state.group is dist.group.WORLD:
        return
    try:
        _kill(state, case, result)
    except Exception as exc:
        result.failures.append(Failure(Oracle.ERROR, f"the process group's death: {type(exc).__name__}: {exc}",
                                       rank=state.rank))


def _kill(state, case, result) -> None:
    import torch.distributed as dist

    desc, size = f"{desc_of(state)} (ranks {list(range(state.world))})", sys.getsizeof(state.group)
    try:
        alive = weakref.ref(state.group)
    except TypeError:
        alive = None
    held = probe_slots(PROBES)        # made before the block is freed (see probe_slots)
    dead = DeadGroup(id(state.group), desc, freed=False)
    dist.destroy_process_group(state.group)
    state.group = None
    collect()
    dead.freed = alive is not None and alive() is None
    filler = _filler(size)
    if dead.freed and filler is not None:
        with quiet_allocator():
            dead.shell = land_on(dead.ident, filler, held)
    del held
    state.dead_group = dead
    last = case.models - 1
    scan = scan_registries(state.stack, state.stack.registries(), {dead.ident: desc}, EntryOrigins(), case.name, last,
                           {dead.ident: "the id of a process group"})
    for found in scan.failures[:8]:
        result.failures.append(Failure(Oracle.HYGIENE, found.line, rank=state.rank, model=last, kind=HOLDS_DEAD_ID,
                                       registry=found.registry))


def _filler(size: int):
    """A maker of shells for a block of ``size`` bytes (what ``sys.getsizeof`` says an object
    takes): bytes objects of that size, or None where none is (the shortest ones are shared)."""
    n = size - sys.getsizeof(b"")
    return (lambda: bytes(n)) if n >= 2 else None


def _remake(state, dead: DeadGroup, birth: Birth) -> None:
    held = probe_slots(PROBES)
    landing = dead.shell is not None
    shell, dead.shell = [dead.shell], None     # freed by _made_on right before the wrapper is made
    target = dead.ident
    state.group = state._stack_group(lambda make, held=held, release=shell.clear:
                                     _made_on(target, held, make, release) if landing else make())
    del held, shell
    if landing and id(state.group) == dead.ident:
        birth.reuse_events += 1
        birth.examples.append(f"the new {desc_of(state)} took the id of dead {dead.desc}")
    elif not dead.freed:
        birth.examples.append(f"the new {desc_of(state)} could not take the id of dead {dead.desc}: the "
                              f"stack still holds it")


def desc_of(state) -> str:
    return f"process group #{state.groups_made}"


def _made_on(target: int, held: list, make, release):
    """``make()`` (a new_group) with its ProcessGroup object built on the block at ``target``,
    which ``release()`` frees just before (nothing of new_group's own work can take it then)."""
    import torch.distributed.distributed_c10d as c10d

    real = c10d.ProcessGroup

    class _Landing(type):
        def __instancecheck__(cls, obj):
            return isinstance(obj, real)

        def __getattr__(cls, name):
            return getattr(real, name)

    class ProcessGroup(metaclass=_Landing):
        def __new__(cls, *args):
            with quiet_allocator():
                release()
                pg = land_on(target, lambda: real(*args), held)
            return pg if pg is not None else real(*args)

    c10d.ProcessGroup = ProcessGroup
    try:
        return make()
    finally:
        c10d.ProcessGroup = real
