"""A Userbuffers-style communicator: one buffer and one flag region per rank, every peer's mapped.

Construction (every rank of the group, in any order)::

    comm = Communicator("qkv", rank, world_size, nbytes, store, prefix, deadline_s=30.0)

creates this rank's segments and maps every peer's, agreed through ``store``
(:mod:`harness.comm.handshake`). ``close()`` drops the mappings, and the owner unlinks its own
segments (a peer's are never unlinked here: a killed rank's segments stay until a controller runs
:func:`harness.comm.unlink_prefix`). Every live communicator of the process is also reachable
through :func:`~harness.comm.live.get_ub`, and :func:`~harness.comm.live.destroy_ub` closes them
all, like TE's ``destroy_ub``.

The operations themselves live in :mod:`harness.comm.ring`, :mod:`harness.comm.reduce_scatter` and
:mod:`harness.comm.bulk`; this module provides the primitives they are built from: slots, headers,
``put`` (copy into a peer's slot, then bump the peer's counter), ``wait_data``, and the
per-operation release handshake. What checks each counter against its chunk:
:mod:`harness.comm.arrivals`.

Counters (all in the *receiving* rank's flag region, one writer each):

* ``data[src][slot]``: how many times rank ``src`` has written ``slot`` of this rank's
  buffer. The receiver expects one more than it has consumed.
* ``release[src]``: how many operations rank ``src`` has completed on this communicator.
  Before its first write into peer ``dst``'s buffer in operation ``#s``, a rank waits for
  ``release[dst] >= s``: ``dst`` has finished reading everything of operation ``#s - 1``,
  so the slot can be overwritten. (TE leans on stream order for this; with free-running
  CPU threads the handshake is what keeps a fast rank from overwriting a chunk a slow
  peer has not consumed yet.)
"""

from __future__ import annotations

import threading
import time
from typing import Any

import torch

from harness.comm import handshake, live
from harness.comm.arrivals import Arrivals
from harness.comm.decode import DecodeCache
from harness.comm.flags import FlagRegion, check_memory_model, wait_counter
from harness.comm.integrity import HEADER_BYTES, ChunkHeader, IntegrityMode, clear_header
from harness.comm.link import LinkModel
from harness.comm.methods import TE_DEFAULT_METHODS, OverlapMethod
from harness.comm.segments import PAGE, Segment, segment_name
from harness.comm.stagger import CounterStagger
from harness.errors import HarnessError, UsageError

SLOT_ALIGN = 64


class Communicator:
    """One Userbuffers communicator on one rank. See the module docstring for the protocol.

    ``nbytes`` is the data capacity of each rank's buffer: ``world_size`` slots of
    ``nbytes // world_size`` bytes (64-byte aligned), one chunk each. ``deadline_s`` bounds
    every wait on a counter, so it must exceed the longest a peer may legitimately lag
    (a slow peer's GEMM of one operation delays the release this rank waits for before
    the next). ``method`` defaults to TE's for ``qkv``/``proj``/``fc1``/``fc2``;
    ``integrity`` is ``cheap`` (default), ``full`` or ``off`` (:mod:`harness.comm.integrity`).
    ``link`` models the time a transfer into a peer's buffer is in flight
    (:mod:`harness.comm.link`; default: unmodelled, a transfer takes as long as its copy).
    ``stagger`` holds one rank's counters back per operation (:mod:`harness.comm.stagger`;
    default: none).

    Every data counter this rank raises in a peer's flag region is checked first: the chunk
    it announces must already be in the peer's slot (``Arrivals.check_landed``); a counter raised
    before its payload fails the operation when it ends. Every read is checked after: the
    counter must have reached the write being read (``Arrivals.check_arrived``).
    """

    def __init__(
        self,
        name: str,
        rank: int,
        world_size: int,
        nbytes: int,
        store: Any,
        prefix: str,
        deadline_s: float,
        *,
        method: OverlapMethod | str | None = None,
        integrity: IntegrityMode | str = IntegrityMode.CHEAP,
        setup_timeout_s: float | None = None,
        link: LinkModel | None = None,
        stagger: CounterStagger | None = None,
    ):
        check_memory_model()
        segment_name(prefix, name, 0, "data")          # validates prefix and name up front
        if not isinstance(world_size, int) or world_size < 1:
            raise UsageError(f"world_size must be a positive integer, got {world_size!r}")
        if not isinstance(rank, int) or not 0 <= rank < world_size:
            raise UsageError(f"rank must be in [0, {world_size}), got {rank!r}")
        if not isinstance(nbytes, int) or nbytes < SLOT_ALIGN * world_size:
            raise UsageError(f"communicator {name!r}: nbytes must be an integer >= {SLOT_ALIGN * world_size}, "
                             f"got {nbytes!r}")
        if not deadline_s > 0:
            raise UsageError(f"deadline_s must be positive, got {deadline_s!r}")
        if method is None:
            if name not in TE_DEFAULT_METHODS:
                raise UsageError(f"communicator {name!r} has no default method; pass method= one of "
                                 f"{', '.join(m.value for m in OverlapMethod)}")
            method = TE_DEFAULT_METHODS[name]
        self.name = name
        self.rank = rank
        self.world_size = world_size
        self.nbytes = nbytes
        self.prefix = prefix
        self.deadline_s = float(deadline_s)
        self.method = OverlapMethod.parse(method)
        self.integrity = IntegrityMode.parse(integrity)
        self.link = link if link is not None else LinkModel()
        if not isinstance(self.link, LinkModel):
            raise UsageError(f"communicator {name!r}: link must be a LinkModel, got {link!r}")
        self.stagger = stagger if stagger is not None else CounterStagger()
        if not isinstance(self.stagger, CounterStagger):
            raise UsageError(f"communicator {name!r}: stagger must be a CounterStagger, got {stagger!r}")
        self.slot_capacity = (nbytes // world_size) // SLOT_ALIGN * SLOT_ALIGN
        self.header_area = max(PAGE, -(-world_size * HEADER_BYTES // PAGE) * PAGE)
        self.ncounters = world_size * world_size + world_size
        self._seq = 0
        self._op = ""                             # the operation under way, for messages
        self._sent: dict[tuple[int, int], int] = {}
        self._recv: dict[tuple[int, int], int] = {}
        self._released_for: set[int] = set()     # peers whose release this operation has waited for
        self._poisoned: str | None = None
        self._closed = False
        self._workspaces: dict[str, torch.Tensor] = {}
        self.decode_cache = DecodeCache()        # FP8 decode tables, by (format, scale_inv bits)
        self.data: dict[int, Segment] = {}
        self.flags: dict[int, FlagRegion] = {}
        self.shadow: dict[int, Segment] = {}
        self.arrivals = Arrivals(self)
        self.incarnation = live.register(self)
        try:
            handshake.connect(self, store, self.deadline_s if setup_timeout_s is None else float(setup_timeout_s))
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------ accessors
    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def seq(self) -> int:
        """Number of operations this rank has completed on this communicator."""
        return self._seq

    @property
    def op(self) -> str:
        """The operation begun last (its name, for messages); "" before the first."""
        return self._op

    def describe(self) -> str:
        return (f"userbuffers {self.name!r} (rank {self.rank} of {self.world_size}, {self.method.value}, "
                f"{self.nbytes} bytes, integrity {self.integrity.value}, {self.link.describe()})")

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"op #{self._seq}"
        return f"<Communicator {self.name!r} rank {self.rank}/{self.world_size} {self.method.value} {state}>"

    def check_chunk_fits(self, chunk_bytes: int, op: str) -> None:
        if chunk_bytes > self.slot_capacity:
            raise UsageError(
                f"userbuffers {self.name!r} {op}: a chunk of {chunk_bytes} bytes does not fit; the buffer has "
                f"{self.nbytes} bytes, {self.slot_capacity} per slot for {self.world_size} ranks "
                f"(create it with nbytes >= {self.world_size * -(-chunk_bytes // SLOT_ALIGN) * SLOT_ALIGN})")

    def slot_offset(self, slot: int) -> int:
        return self.header_area + slot * self.slot_capacity

    def header_offset(self, slot: int) -> int:
        return slot * HEADER_BYTES

    def slot(self, owner: int, slot: int, nbytes: int) -> torch.Tensor:
        """``nbytes`` of ``slot`` in rank ``owner``'s buffer, as a uint8 view (no copy)."""
        return self.data[owner].view(self.slot_offset(slot), nbytes)

    def read_header(self, slot: int) -> ChunkHeader | None:
        return ChunkHeader.unpack_from(self.data[self.rank].buffer(), self.header_offset(slot))

    def write_header(self, slot: int, header: ChunkHeader) -> None:
        header.pack_into(self.data[self.rank].buffer(), self.header_offset(slot))

    def invalidate_header(self, slot: int) -> None:
        clear_header(self.data[self.rank].buffer(), self.header_offset(slot))

    def shadow_view(self, owner: int, seq: int, nbytes: int) -> torch.Tensor | None:
        """Rank ``owner``'s recorded copy of its chunk for operation ``seq`` (full mode), else None.

        Two copies alternate by operation parity: when a producer writes the copy for
        operation ``#s``, every rank has finished operation ``#s - 2`` (it finished ``#s - 1``,
        which needed every rank to have started it), so no consumer still reads that copy.
        """
        if self.integrity is not IntegrityMode.FULL:
            return None
        return self.shadow[owner].view((seq % 2) * self.slot_capacity, nbytes)

    def workspace(self, key: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A reusable private tensor: large fresh allocations page-fault on every call."""
        numel = 1
        for d in shape:
            numel *= d
        ws = self._workspaces.get(key)
        if ws is None or ws.dtype != dtype or ws.numel() < numel:
            ws = torch.empty(numel, dtype=dtype)
            self._workspaces[key] = ws
        return ws[:numel].view(shape)

    # ----------------------------------------------------------- operations
    def begin_op(self, op: str) -> int:
        """Start an operation; return its number. Refuses on a closed or failed communicator."""
        if self._closed:
            raise HarnessError(f"userbuffers {self.name!r} {op}: the communicator is closed")
        if self._poisoned is not None:
            raise HarnessError(f"userbuffers {self.name!r} {op}: the communicator is unusable after an earlier "
                               f"failure ({self._poisoned}); counters are out of step, create a new one")
        self._released_for = set()
        self._op = op
        self.arrivals.begin_op()
        return self._seq

    def end_op(self) -> None:
        """Finish an operation: tell every peer this rank is done reading its buffer."""
        self._seq += 1
        for p, region in self.flags.items():
            if p != self.rank:
                region.store(self._release_counter(self.rank), self._seq)

    def poison(self, reason: str) -> None:
        """Mark the communicator unusable: after a failed operation its counters are out of step."""
        if self._poisoned is None:
            self._poisoned = reason

    def data_counter(self, src: int, slot: int) -> int:
        return src * self.world_size + slot

    def _release_counter(self, src: int) -> int:
        return self.world_size * self.world_size + src

    def wait_release(self, dst: int, op: str, cancel: threading.Event | None = None) -> None:
        """Before the first write into ``dst``'s buffer in this operation: wait until ``dst``
        has completed every earlier operation."""
        if dst in self._released_for or self._seq == 0:
            return
        expected = self._seq

        def describe(seen: int) -> str:
            return (f"userbuffers {self.name!r} {op}: rank {self.rank} waiting for rank {dst} to release its "
                    f"buffer after operation #{expected - 1} (counter {seen}, expected {expected})")

        wait_counter(self.flags[self.rank], self._release_counter(dst), expected, self.deadline_s, describe,
                     self._where(), cancel)
        self._released_for.add(dst)

    def put(self, dst: int, slot: int, nbytes: int, op: str, cancel: threading.Event | None = None) -> None:
        """Copy header and ``nbytes`` of ``slot`` from this rank's buffer into ``dst``'s, then
        bump ``dst``'s ``data[rank][slot]`` counter (data first, counter second)."""
        self.wait_release(dst, op, cancel)
        started = time.perf_counter()
        src_buf, dst_buf = self.data[self.rank], self.data[dst]
        h = self.header_offset(slot)
        dst_buf.view(h, HEADER_BYTES).copy_(src_buf.view(h, HEADER_BYTES))
        self.slot(dst, slot, nbytes).copy_(self.slot(self.rank, slot, nbytes))
        self.land(started, HEADER_BYTES + nbytes, cancel)
        self.signal(dst, slot)

    def land(self, started: float, nbytes: int, cancel: threading.Event | None = None) -> None:
        """Between a payload's copy and its counter: the link's transfer time, then the
        stagger's hold (this rank's turn in this operation)."""
        self.link.hold(started, nbytes, cancel)
        self.stagger.hold(self._seq, self.rank, self.world_size, cancel)

    def signal(self, dst: int, slot: int) -> None:
        """Bump ``data[rank][slot]`` in ``dst``'s flag region: call after the data is written."""
        key = (dst, slot)
        value = self._sent.get(key, 0) + 1
        self._sent[key] = value
        self.flags[dst].store(self.data_counter(self.rank, slot), value)

    def wait_data(self, src: int, slot: int, op: str, chunk: int, cancel: threading.Event | None = None) -> None:
        """Wait until rank ``src`` has written ``slot`` of this rank's buffer once more."""
        key = (src, slot)
        expected = self._recv.get(key, 0) + 1

        def describe(seen: int) -> str:
            return (f"userbuffers {self.name!r} {op}: rank {self.rank} waiting for chunk {chunk} from rank {src} "
                    f"(counter {seen}, expected {expected})")

        seen = wait_counter(self.flags[self.rank], self.data_counter(src, slot), expected, self.deadline_s,
                            describe, self._where(), cancel)
        if seen > expected:
            raise HarnessError(describe(seen) + ": the counter is ahead, rank "
                               f"{src} wrote this slot more often than rank {self.rank} consumed it")
        self._recv[key] = expected

    def waited(self, src: int, slot: int) -> int:
        """How many writes of rank ``src`` into ``slot`` this rank has waited for (:meth:`wait_data`)."""
        return self._recv.get((src, slot), 0)

    def _where(self) -> str:
        return f"operation #{self._seq}, flags {self.flags[self.rank].segment.path}"

    # ------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Unmap everything; unlink this rank's own segments. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._workspaces.clear()
        self.decode_cache.clear()
        for region in self.flags.values():
            region.close()
            region.segment.close()
        for seg in list(self.data.values()) + list(self.shadow.values()):
            seg.close()
        own = [self.data.get(self.rank), self.shadow.get(self.rank)]
        own.append(self.flags[self.rank].segment if self.rank in self.flags else None)
        for seg in own:
            if seg is not None:
                seg.unlink()
        live.unregister(self)

    def __enter__(self) -> "Communicator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def initialize_ub(
    rank: int,
    world_size: int,
    store: Any,
    prefix: str,
    nbytes: int | dict[str, int],
    deadline_s: float,
    methods: dict[str, OverlapMethod | str] | None = None,
    integrity: IntegrityMode | str = IntegrityMode.CHEAP,
    link: LinkModel | None = None,
    stagger: CounterStagger | None = None,
) -> dict[str, Communicator]:
    """Create the named communicators (TE's ``qkv``, ``proj``, ``fc1``, ``fc2`` by default).

    ``nbytes`` is one size for all or a size per name. On failure, those already created
    are closed again.
    """
    methods = dict(TE_DEFAULT_METHODS if methods is None else methods)
    created: dict[str, Communicator] = {}
    try:
        for name, method in methods.items():
            size = nbytes[name] if isinstance(nbytes, dict) else nbytes
            created[name] = Communicator(name, rank, world_size, size, store, prefix, deadline_s,
                                         method=method, integrity=integrity, link=link, stagger=stagger)
    except BaseException:
        for comm in created.values():
            comm.close()
        raise
    return created
