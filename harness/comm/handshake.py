"""How the ranks of a communicator find each other's segments through a store.

:func:`connect`, called once by every rank's :class:`~harness.comm.communicator.Communicator`
while it is constructed, in any order:

1. creates this rank's segments: ``<prefix>-<name>-r<rank>-data`` (chunk headers, then
   ``nbytes`` of chunk slots), ``...-flags`` (counters) and, in ``full`` integrity mode,
   ``...-shadow`` (the producer's copies of its own chunks);
2. publishes "created" through the store (anything with ``torch.distributed.Store``'s
   ``set``/``get``/``wait``: a ``FileStore`` in a temp dir across processes, a ``HashStore``
   within one) and waits for every peer's, checking that all ranks agree on the size,
   method and integrity mode (:class:`GroupConfig`);
3. maps every peer's segments, publishes "attached" and waits for every peer's, so no
   rank can start an operation (or close and unlink) before all mappings exist.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from typing import Any

from harness.comm.flags import FlagRegion, flag_region_bytes
from harness.comm.integrity import IntegrityMode
from harness.comm.segments import Segment, segment_name
from harness.errors import DeadlineExceeded, UsageError


@dataclasses.dataclass(frozen=True)
class GroupConfig:
    """What every rank of a communicator must agree on, as each publishes it."""

    nbytes: int
    world_size: int
    method: str
    integrity: str
    link: dict
    stagger: dict

    @classmethod
    def of(cls, comm) -> "GroupConfig":
        return cls(comm.nbytes, comm.world_size, comm.method.value, comm.integrity.value, comm.link.to_json(),
                   comm.stagger.to_json())

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)


def segment_sizes(comm) -> dict[str, int]:
    """The size of each of a rank's segments, by kind."""
    sizes = {"data": comm.header_area + comm.nbytes, "flags": flag_region_bytes(comm.ncounters)}
    if comm.integrity is IntegrityMode.FULL:
        sizes["shadow"] = 2 * comm.slot_capacity
    return sizes


def connect(comm, store: Any, timeout_s: float) -> None:
    """Create ``comm``'s own segments, map every peer's (into ``comm.data``, ``comm.flags``,
    ``comm.shadow``), each step agreed through ``store`` within ``timeout_s``. Each peer's flag
    region gets ``comm.arrivals.check_landed`` as its guard."""
    sizes = segment_sizes(comm)
    r = comm.rank
    config = GroupConfig.of(comm).to_json()

    def seg(rank: int, kind: str) -> str:
        return segment_name(comm.prefix, comm.name, rank, kind)

    def key(phase: str, rank: int) -> str:
        return f"ub/{comm.prefix}/{comm.name}/{comm.incarnation}/{phase}/{rank}"

    comm.data[r] = Segment.create(seg(r, "data"), sizes["data"])
    comm.flags[r] = FlagRegion(Segment.create(seg(r, "flags"), sizes["flags"]), comm.ncounters)
    if "shadow" in sizes:
        comm.shadow[r] = Segment.create(seg(r, "shadow"), sizes["shadow"])
    peers = [p for p in range(comm.world_size) if p != r]
    store.set(key("created", r), config)
    _store_wait(comm, store, [key("created", p) for p in peers], peers, "create their segments", timeout_s)
    for p in peers:
        theirs = store.get(key("created", p))
        theirs = theirs.decode() if isinstance(theirs, (bytes, bytearray)) else str(theirs)
        if theirs != config:
            raise UsageError(f"userbuffers {comm.name!r}: rank {p} was configured as {theirs}, "
                             f"rank {r} as {config}; every rank must agree")
    for p in peers:
        comm.data[p] = Segment.attach(seg(p, "data"), sizes["data"])
        comm.flags[p] = FlagRegion(Segment.attach(seg(p, "flags"), sizes["flags"]), comm.ncounters)
        if "shadow" in sizes:
            comm.shadow[p] = Segment.attach(seg(p, "shadow"), sizes["shadow"])
        comm.flags[p].guard = lambda counter, value, dst=p: comm.arrivals.check_landed(dst, counter, value)
    store.set(key("attached", r), "1")
    _store_wait(comm, store, [key("attached", p) for p in peers], peers, "map every peer's segments", timeout_s)


def _store_wait(comm, store: Any, keys: list[str], peers: list[int], doing: str,
                timeout_s: float) -> None:
    if not keys:
        return
    try:
        store.wait(keys, timedelta(seconds=timeout_s))
    except Exception as exc:           # torch raises DistStoreError (a RuntimeError) on timeout
        missing = peers
        check = getattr(store, "check", None)
        if check is not None:
            try:
                missing = [p for p, k in zip(peers, keys) if not check([k])]
            except Exception:
                pass
        raise DeadlineExceeded(
            f"userbuffers {comm.name!r} setup: rank {comm.rank} waiting for rank(s) {missing} to {doing} "
            f"({type(exc).__name__}: {exc})", timeout_s, f"prefix {comm.prefix}") from None
