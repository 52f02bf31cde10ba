"""Process groups that die: the group a stack receives, destroyed and made anew between cases.

A stack that declares ``renews_group`` (the emulated and torchao stacks) receives a process
group of every rank made for it (:meth:`RankState._stack_group`), not the default group, and at
the end of every case, once it has told its peers it is done with the case, the rank destroys
that group and makes a new one, in lock step with its peers (every rank ends every case). So state a stack keys on a group's identity meets groups
that die, the way TE's autocast buffers (keyed on the recipe and the group) meet a training
script's groups. The TE stacks keep one group for the rank's life: TE keeps the group of every
autocast key it has seen and reduces every key at each autocast exit, so a destroyed group would
be used again by the very next exit (TE's own design, not something a case could fix).

At the death:

* the dead group's id is a dead id like a dead tensor's: any registry of the stack (declared or
  not) that holds it fails hygiene in the case the group died at the end of, naming the group;
* the new group is made on the dead group's address where the allocator allows it (the dead
  wrapper freed, nothing else of its size class allocated meanwhile): its Python object is built
  through :func:`harness.idreuse.morgue.land_on`, so state keyed by ``id(group)`` that survived
  its group meets the new one. A stack that still holds the dead group (the emulated stacks'
  autocast arguments do until the next registration) leaves its block taken: then the new group
  lands elsewhere, and the case's reuse examples say so.
"""

from __future__ import annotations

import weakref

from harness.idreuse.morgue import land_on, probe_slots, quiet_allocator
from harness.idreuse.tracker import collect
from harness.oracles.findings import HOLDS_DEAD_ID, Failure, Oracle
from harness.oracles.hygiene import EntryOrigins, scan_registries

__harness_hidden__ = True

PROBES = 4096      # objects of the wrapper's size class allocated before giving up on the dead block


def end_group(state, case, result) -> None:
    """After a case, once this rank has told its peers it is done with it (so a peer still waiting
    inside the case hears that first): destroy the stack's process group, scan for its id, make a
    new one. Every rank calls it after every case, so the group's collectives pair up."""
    import torch.distributed as dist

    if state.group is None or state.group is dist.group.WORLD:
        return
    try:
        _renew(state, case, result)
    except Exception as exc:
        result.failures.append(Failure(Oracle.ERROR, f"the process group's death: {type(exc).__name__}: {exc}",
                                       rank=state.rank))


def _renew(state, case, result) -> None:
    import torch.distributed as dist

    dead_id, desc = id(state.group), f"process group #{state.groups_made} (ranks {list(range(state.world))})"
    try:
        alive = weakref.ref(state.group)
    except TypeError:
        alive = None
    held = probe_slots(PROBES)        # made before the block is freed (see probe_slots)
    dist.destroy_process_group(state.group)
    state.group = None
    collect()
    last = case.models - 1
    scan = scan_registries(state.stack, state.stack.registries(), {dead_id: desc}, EntryOrigins(), case.name, last)
    for found in scan.failures[:8]:
        result.failures.append(Failure(Oracle.HYGIENE, found.line, rank=state.rank, model=last, kind=HOLDS_DEAD_ID,
                                       registry=found.registry))
    freed = alive is not None and alive() is None
    state.group = state._stack_group(lambda make, held=held: _made_on(dead_id, held, make) if freed else make())
    del held
    if freed and id(state.group) == dead_id:
        result.reuse_events += 1
        result.reuse_examples.append(f"the new {desc_of(state)} took the id of dead {desc}")
    elif not freed:
        result.reuse_examples.append(f"the new {desc_of(state)} could not take the id of dead {desc}: the "
                                     f"stack still holds it")


def desc_of(state) -> str:
    return f"process group #{state.groups_made}"


def _made_on(target: int, held: list, make):
    """``make()`` (a new_group) with its ProcessGroup object built on the block at ``target``."""
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
                pg = land_on(target, lambda: real(*args), held)
            return pg if pg is not None else real(*args)

    c10d.ProcessGroup = ProcessGroup
    try:
        return make()
    finally:
        c10d.ProcessGroup = real
