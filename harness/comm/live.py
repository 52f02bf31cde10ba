"""Every live communicator of this process, like TE's ``get_ub``/``destroy_ub``.

A :class:`~harness.comm.communicator.Communicator` registers itself here when it is created
(:func:`register`) and leaves when it is closed (:func:`unregister`). :func:`destroy_ub` closes
every one still open; it also runs at the exit of a process that did not close its
communicators, so a process that exits normally removes its own segments (one that is killed
leaves them for :func:`harness.comm.unlink_prefix`).
"""

from __future__ import annotations

import atexit
import threading
from typing import Any, Iterable

from harness.errors import HarnessError, UsageError

# Live communicators of this process, keyed by (prefix, name, rank); closed ones leave.
_LIVE: dict[tuple[str, str, int], Any] = {}
# How many times each (prefix, name, rank) has been created in this process: keeps the
# store keys of a re-created communicator apart from its predecessor's.
_INCARNATIONS: dict[tuple[str, str, int], int] = {}
_REGISTRY_LOCK = threading.Lock()


def register(comm) -> int:
    """Enter ``comm`` (refused while another of its prefix, name and rank is live); returns how
    many of them this process created before it, which keeps its store keys apart."""
    key = (comm.prefix, comm.name, comm.rank)
    with _REGISTRY_LOCK:
        if key in _LIVE:
            raise UsageError(f"communicator {comm.name!r} rank {comm.rank} with prefix {comm.prefix!r} is already "
                             f"live in this process; close it first")
        incarnation = _INCARNATIONS.get(key, 0)
        _INCARNATIONS[key] = incarnation + 1
        _LIVE[key] = comm
    return incarnation


def unregister(comm) -> None:
    with _REGISTRY_LOCK:
        key = (comm.prefix, comm.name, comm.rank)
        if _LIVE.get(key) is comm:
            del _LIVE[key]


def live_communicators() -> list[Any]:
    """Every communicator of this process that is not closed yet."""
    with _REGISTRY_LOCK:
        return list(_LIVE.values())


def get_ub(name: str, rank: int | None = None, prefix: str | None = None) -> Any:
    """The live communicator called ``name`` (narrowed by ``rank``/``prefix`` if several)."""
    found = [c for c in live_communicators()
             if c.name == name and (rank is None or c.rank == rank) and (prefix is None or c.prefix == prefix)]
    if len(found) != 1:
        live = ", ".join(sorted(f"{c.name}@r{c.rank}" for c in live_communicators())) or "none"
        raise HarnessError(f"{'no' if not found else 'more than one'} live userbuffers communicator "
                           f"{name!r} (live: {live})")
    return found[0]


def destroy_ub(communicators: Iterable[Any] | None = None) -> int:
    """Close ``communicators`` (default: every live one of this process); return how many."""
    targets = list(communicators) if communicators is not None else live_communicators()
    for comm in targets:
        comm.close()
    return len(targets)


# A process that exits normally without closing its communicators still removes its own
# segments; one that is killed leaves them for unlink_prefix.
atexit.register(destroy_ub)
