"""A Userbuffers-style communicator: one buffer and one flag region per rank, every peer's mapped.

Construction (every rank of the group, in any order)::

    comm = Communicator("qkv", rank, world_size, nbytes, store, prefix, deadline_s=30.0)

1. creates this rank's segments: ``<prefix>-qkv-r<rank>-data`` (chunk headers, then
   ``nbytes`` of chunk slots), ``...-flags`` (counters) and, in ``full`` integrity mode,
   ``...-shadow`` (the producer's copies of its own chunks);
2. publishes "created" through ``store`` (anything with ``torch.distributed.Store``'s
   ``set``/``get``/``wait``: a ``FileStore`` in a temp dir across processes, a ``HashStore``
   within one) and waits for every peer's, checking that all ranks agree on the size,
   method and integrity mode;
3. maps every peer's segments, publishes "attached" and waits for every peer's, so no
   rank can start an operation (or close and unlink) before all mappings exist.

``close()`` drops the mappings, and the owner unlinks its own segments (a peer's are never
unlinked here: a killed rank's segments stay until a controller runs
:func:`harness.comm.unlink_prefix`). Every live communicator of the process is also
reachable through :func:`get_ub`, and :func:`destroy_ub` closes them all, like TE's
``destroy_ub``.

The operations themselves live in :mod:`harness.comm.overlap`; this module provides the
primitives they are built from: slots, headers, ``put`` (copy into a peer's slot, then
bump the peer's counter), ``wait_data``, and the per-operation release handshake.

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

import atexit
import dataclasses
import enum
import functools
import json
import threading
import time
from datetime import timedelta
from typing import Any, Iterable

import torch

from harness.comm.decode import DecodeCache
from harness.comm.flags import FlagRegion, check_memory_model, flag_region_bytes, wait_counter
from harness.comm.integrity import (HEADER_BYTES, BufferIntegrityError, ChunkHeader, IntegrityMode, clear_header,
                                    landing_problem)
from harness.comm.link import LinkModel
from harness.comm.stagger import CounterStagger
from harness.comm.segments import PAGE, Segment, segment_name
from harness.errors import DeadlineExceeded, HarnessError, UsageError

SLOT_ALIGN = 64
READ_BEFORE_LANDED = "read before the producer's write landed"
# How long a consumer whose read failed verification watches the slot for the write it
# expected: a write that lands within it was late, not missing (a diagnosis, not a wait the
# protocol relies on; a slot that never gets the write keeps the verification's own finding).
_LANDING_GRACE_S = 2.0
_LANDING_POLL_S = (20e-6, 1e-3)


class OverlapMethod(enum.Enum):
    """How a communicator overlaps communication with its GEMM (TE's three methods)."""

    RING_EXCHANGE = "ring_exchange"   # all-gather by ring exchange, overlapped with the GEMM
    PIPELINE = "pipeline"             # GEMM chunk by chunk, reduce-scatter of finished chunks
    BULK = "bulk"                     # one collective, no overlap

    @classmethod
    def parse(cls, value: "OverlapMethod | str") -> "OverlapMethod":
        if isinstance(value, cls):
            return value
        for member in cls:
            if member.value == str(value).lower():
                return member
        raise UsageError(f"overlap method {value!r} is not one of: "
                         f"{', '.join(m.value for m in cls)}")


# TE's forward-pass layout: column-parallel layers gather their input (ring exchange),
# row-parallel layers reduce-scatter their output (pipeline).
TE_DEFAULT_METHODS: dict[str, OverlapMethod] = {
    "qkv": OverlapMethod.RING_EXCHANGE,
    "proj": OverlapMethod.PIPELINE,
    "fc1": OverlapMethod.RING_EXCHANGE,
    "fc2": OverlapMethod.PIPELINE,
}

# Live communicators of this process, keyed by (prefix, name, rank); closed ones leave.
_LIVE: dict[tuple[str, str, int], "Communicator"] = {}
# How many times each (prefix, name, rank) has been created in this process: keeps the
# store keys of a re-created communicator apart from its predecessor's.
_INCARNATIONS: dict[tuple[str, str, int], int] = {}
_REGISTRY_LOCK = threading.Lock()


@dataclasses.dataclass(frozen=True)
class _Config:
    nbytes: int
    world_size: int
    method: str
    integrity: str
    link: dict
    stagger: dict

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)


@dataclasses.dataclass(frozen=True)
class Arrival:
    """What a consumer's read of ``slot`` (written by rank ``src``, carrying ``chunk``) saw:
    the counter at the read and the count the read expected."""

    src: int
    slot: int
    chunk: int
    seen: int
    expected: int


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
    it announces must already be in the peer's slot (:meth:`_check_landed`); a counter raised
    before its payload fails the operation when it ends. Every read is checked after: the
    counter must have reached the write being read (:meth:`check_arrived`).
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
        self._config = _Config(nbytes, world_size, self.method.value, self.integrity.value, self.link.to_json(),
                               self.stagger.to_json())
        self._seq = 0
        self._op = ""                             # the operation under way, for messages
        self._early_signals: list = []            # counters this operation raised before their payload
        self._sent: dict[tuple[int, int], int] = {}
        self._recv: dict[tuple[int, int], int] = {}
        self._read: dict[tuple[int, int], int] = {}
        self._released_for: set[int] = set()     # peers whose release this operation has waited for
        self._poisoned: str | None = None
        self._closed = False
        self._workspaces: dict[str, torch.Tensor] = {}
        self.decode_cache = DecodeCache()        # FP8 decode tables, by (format, scale_inv bits)
        self.data: dict[int, Segment] = {}
        self.flags: dict[int, FlagRegion] = {}
        self.shadow: dict[int, Segment] = {}
        key = (prefix, name, rank)
        with _REGISTRY_LOCK:
            if key in _LIVE:
                raise UsageError(f"communicator {name!r} rank {rank} with prefix {prefix!r} is already live "
                                 f"in this process; close it first")
            self._incarnation = _INCARNATIONS.get(key, 0)
            _INCARNATIONS[key] = self._incarnation + 1
            _LIVE[key] = self
        try:
            self._setup(store, self.deadline_s if setup_timeout_s is None else float(setup_timeout_s))
        except BaseException:
            self.close()
            raise

    # ----------------------------------------------------------------- setup
    def _seg(self, rank: int, kind: str) -> str:
        return segment_name(self.prefix, self.name, rank, kind)

    def _key(self, phase: str, rank: int) -> str:
        return f"ub/{self.prefix}/{self.name}/{self._incarnation}/{phase}/{rank}"

    def _segment_sizes(self) -> dict[str, int]:
        sizes = {"data": self.header_area + self.nbytes, "flags": flag_region_bytes(self.ncounters)}
        if self.integrity is IntegrityMode.FULL:
            sizes["shadow"] = 2 * self.slot_capacity
        return sizes

    def _setup(self, store: Any, timeout_s: float) -> None:
        sizes = self._segment_sizes()
        r = self.rank
        self.data[r] = Segment.create(self._seg(r, "data"), sizes["data"])
        self.flags[r] = FlagRegion(Segment.create(self._seg(r, "flags"), sizes["flags"]), self.ncounters)
        if "shadow" in sizes:
            self.shadow[r] = Segment.create(self._seg(r, "shadow"), sizes["shadow"])
        peers = [p for p in range(self.world_size) if p != r]
        store.set(self._key("created", r), self._config.to_json())
        self._store_wait(store, [self._key("created", p) for p in peers], peers, "create their segments", timeout_s)
        for p in peers:
            theirs = store.get(self._key("created", p))
            theirs = theirs.decode() if isinstance(theirs, (bytes, bytearray)) else str(theirs)
            if theirs != self._config.to_json():
                raise UsageError(f"userbuffers {self.name!r}: rank {p} was configured as {theirs}, "
                                 f"rank {r} as {self._config.to_json()}; every rank must agree")
        for p in peers:
            self.data[p] = Segment.attach(self._seg(p, "data"), sizes["data"])
            self.flags[p] = FlagRegion(Segment.attach(self._seg(p, "flags"), sizes["flags"]), self.ncounters)
            if "shadow" in sizes:
                self.shadow[p] = Segment.attach(self._seg(p, "shadow"), sizes["shadow"])
            self.flags[p].guard = functools.partial(self._check_landed, p)
        store.set(self._key("attached", r), "1")
        self._store_wait(store, [self._key("attached", p) for p in peers], peers, "map every peer's segments",
                         timeout_s)

    def _store_wait(self, store: Any, keys: list[str], peers: list[int], doing: str, timeout_s: float) -> None:
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
                f"userbuffers {self.name!r} setup: rank {self.rank} waiting for rank(s) {missing} to {doing} "
                f"({type(exc).__name__}: {exc})", timeout_s, f"prefix {self.prefix}") from None

    # ------------------------------------------------------------ accessors
    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def seq(self) -> int:
        """Number of operations this rank has completed on this communicator."""
        return self._seq

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
        self._early_signals = []
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

    def _data_counter(self, src: int, slot: int) -> int:
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

    def _chunk_of(self, dst: int, slot: int) -> int:
        """The chunk a write into ``dst``'s ``slot`` carries: a reduce-scatter sends the
        destination's own chunk into the sender's slot; gathers keep chunk ``c`` in slot ``c``."""
        return dst if "reduce-scatter" in self._op else slot

    def _check_landed(self, dst: int, counter: int, value: int) -> None:
        """The guard of peer ``dst``'s flag region, called before this rank stores ``value``
        into ``counter`` there: a data counter must announce a chunk that has landed in
        ``dst``'s slot (header of this operation, bytes with its checksum). A counter raised
        first is noted, and :meth:`raise_early_signal` decides at the operation's end (the
        payload still lands meanwhile, so a peer that read early can see it arrive)."""
        ws = self.world_size
        if counter >= ws * ws or self.integrity is IntegrityMode.OFF:
            return
        slot = counter % ws
        problem, _ = self._landing(dst, slot)
        if problem is not None:
            self._early_signals.append((dst, slot, value, problem))

    def _landing(self, dst: int, slot: int) -> tuple[str | None, bool]:
        """What keeps ``dst``'s ``slot`` from holding this operation's chunk (None: nothing),
        and whether its header already names this operation."""
        header = ChunkHeader.unpack_from(self.data[dst].buffer(), self.header_offset(slot))
        current = header is not None and header.seq == self._seq
        return landing_problem(header, self._seq, lambda n: self.slot(dst, slot, n)), current

    def raise_early_signal(self, failed: BaseException | None = None) -> None:
        """At an operation's end: raise :class:`BufferIntegrityError` if one of its counters
        was raised before its payload (:meth:`_check_landed`) that then landed, or never did.
        A slot whose header is this operation's but whose bytes still miss its checksum was
        written and then changed: that is the consumer's verification to report, not an early
        counter. ``failed``: the error the operation failed with meanwhile (a read of a peer's
        early chunk, say), told after this rank's own finding."""
        noted, self._early_signals = self._early_signals, []
        for dst, slot, value, problem in noted:
            now, current = self._landing(dst, slot)
            if now is not None and current:
                continue
            text = (f"userbuffers {self.name!r} {self._op or 'operation'}: rank {self.rank} raised counter "
                    f"data[{self.rank}][{slot}] in rank {dst}'s flags to {value} (its write #{value} of chunk "
                    f"{self._chunk_of(dst, slot)}, operation #{self._seq}) before the payload landed there: "
                    f"{problem}; " + ("the producer signalled before its write, so rank "
                                      f"{dst} could read the chunk before it landed" if now is None else
                                      f"by the operation's end it still had not landed ({now})"))
            if failed is not None:
                text += f"; then this rank's operation failed: {type(failed).__name__}: {failed}"
            raise BufferIntegrityError(text, communicator=self.name, op=self._op, producer=self.rank,
                                       consumer=-1, problem="counter raised before its payload landed")

    def signal(self, dst: int, slot: int) -> None:
        """Bump ``data[rank][slot]`` in ``dst``'s flag region: call after the data is written."""
        key = (dst, slot)
        value = self._sent.get(key, 0) + 1
        self._sent[key] = value
        self.flags[dst].store(self._data_counter(self.rank, slot), value)

    def wait_data(self, src: int, slot: int, op: str, chunk: int, cancel: threading.Event | None = None) -> None:
        """Wait until rank ``src`` has written ``slot`` of this rank's buffer once more."""
        key = (src, slot)
        expected = self._recv.get(key, 0) + 1

        def describe(seen: int) -> str:
            return (f"userbuffers {self.name!r} {op}: rank {self.rank} waiting for chunk {chunk} from rank {src} "
                    f"(counter {seen}, expected {expected})")

        seen = wait_counter(self.flags[self.rank], self._data_counter(src, slot), expected, self.deadline_s,
                            describe, self._where(), cancel)
        if seen > expected:
            raise HarnessError(describe(seen) + ": the counter is ahead, rank "
                               f"{src} wrote this slot more often than rank {self.rank} consumed it")
        self._recv[key] = expected

    def check_arrived(self, src: int, slot: int, op: str, chunk: int) -> "Arrival":
        """Before a consumer reads ``slot`` (written by rank ``src``): the read must follow a
        :meth:`wait_data` that saw the write it is about to read, and the counter must have
        reached that write now, else raise :class:`BufferIntegrityError` saying the chunk was
        read before its counter reached the expected value. Reads and waits are counted apart,
        so a skipped wait is seen whether or not the data happened to be there already, and a
        wait that ended short (one count too few) is seen by the counter itself. (In every
        integrity mode: two dict look-ups and one load.) Returns what the read saw, for
        :meth:`explain_early_read`."""
        key = (src, slot)
        expected = self._read.get(key, 0) + 1
        self._read[key] = expected
        seen = self.flags[self.rank].load(self._data_counter(src, slot))
        arrival = Arrival(src, slot, chunk, seen, expected)
        waited = self._recv.get(key, 0) >= expected
        if waited and seen >= expected:
            return arrival
        if waited:
            raise self._read_error(op, chunk, src, READ_BEFORE_LANDED, (
                f"{READ_BEFORE_LANDED}: rank {self.rank} read chunk {chunk} from rank {src} while counter "
                f"data[{src}][{slot}] was {seen}, expected {expected} (the wait before the read ended "
                f"{expected - seen} count(s) short)"))
        state = ("it had not arrived" if seen < expected else
                 "the counter has reached it since, but nothing waited for it")
        problem = (f"read chunk {chunk} from rank {src} before its counter reached the expected value "
                   f"(counter {seen}, expected {expected}; {state}): the consumer did not wait for the "
                   f"producer's signal")
        raise self._read_error(op, chunk, src, problem, f"rank {self.rank} {problem}")

    def _read_error(self, op: str, chunk: int, producer: int, problem: str, text: str) -> BufferIntegrityError:
        """A consumer-side finding on this rank's read of ``chunk`` from ``producer``."""
        return BufferIntegrityError(f"userbuffers {self.name!r} {op}: {text}", communicator=self.name, op=op,
                                    chunk=chunk, producer=producer, consumer=self.rank, problem=problem)

    def explain_early_read(self, error: BufferIntegrityError, arrival: "Arrival", *, producer: int, seq: int,
                           header: ChunkHeader | None, data: torch.Tensor) -> BufferIntegrityError:
        """A consumer's read of ``arrival``'s slot failed verification with ``error``; ``header``
        and ``data`` are what it read. If what it read was not operation ``seq``'s chunk (no header,
        another operation's, or bytes off the header's checksum) and that chunk lands in the slot
        within a short grace, the read came before the producer's write landed: return an error
        that says so, with the counts. Otherwise return ``error`` as it is."""
        slot, chunk = arrival.slot, arrival.chunk
        as_read = landing_problem(header, seq, lambda n: data.reshape(-1)[:n], producer, chunk)
        if as_read is None:
            return error                      # the read saw the whole chunk: a scale or format finding
        landed = self.wait_landed(slot, seq, producer, chunk, min(self.deadline_s, _LANDING_GRACE_S))
        if not landed:
            return error
        now = self.flags[self.rank].load(self._data_counter(arrival.src, slot))
        why = ("the counter was raised before its payload" if arrival.seen >= arrival.expected else
               f"the wait before the read ended {arrival.expected - arrival.seen} count(s) short")
        problem = (f"{READ_BEFORE_LANDED}: rank {self.rank} read chunk {chunk} from rank {arrival.src} while "
                   f"counter data[{arrival.src}][{slot}] was {arrival.seen}, expected {arrival.expected} ({why}); "
                   f"at the read, {as_read}; operation #{seq}'s chunk landed after the read (counter now {now}), "
                   f"so the ranks' operation sequences agree")
        return self._read_error(error.op, chunk, arrival.src, READ_BEFORE_LANDED, problem)

    def wait_landed(self, slot: int, seq: int, producer: int, chunk: int, bound_s: float) -> bool:
        """Watch this rank's ``slot`` until it holds operation ``seq``'s chunk (header and
        checksum: :func:`landing_problem`) or ``bound_s`` passes; whether it did."""
        end = time.monotonic() + bound_s
        pause = _LANDING_POLL_S[0]
        while True:
            header = self.read_header(slot)
            if landing_problem(header, seq, lambda n: self.slot(self.rank, slot, n), producer, chunk) is None:
                return True
            now = time.monotonic()
            if now >= end:
                return False
            time.sleep(min(pause, end - now))
            pause = min(pause * 2, _LANDING_POLL_S[1])

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
        with _REGISTRY_LOCK:
            key = (self.prefix, self.name, self.rank)
            if _LIVE.get(key) is self:
                del _LIVE[key]

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


def live_communicators() -> list[Communicator]:
    """Every communicator of this process that is not closed yet."""
    with _REGISTRY_LOCK:
        return list(_LIVE.values())


def get_ub(name: str, rank: int | None = None, prefix: str | None = None) -> Communicator:
    """The live communicator called ``name`` (narrowed by ``rank``/``prefix`` if several)."""
    found = [c for c in live_communicators()
             if c.name == name and (rank is None or c.rank == rank) and (prefix is None or c.prefix == prefix)]
    if len(found) != 1:
        live = ", ".join(sorted(f"{c.name}@r{c.rank}" for c in live_communicators())) or "none"
        raise HarnessError(f"{'no' if not found else 'more than one'} live userbuffers communicator "
                           f"{name!r} (live: {live})")
    return found[0]


def destroy_ub(communicators: Iterable[Communicator] | None = None) -> int:
    """Close ``communicators`` (default: every live one of this process); return how many."""
    targets = list(communicators) if communicators is not None else live_communicators()
    for comm in targets:
        comm.close()
    return len(targets)


# A process that exits normally without closing its communicators still removes its own
# segments; one that is killed leaves them for unlink_prefix.
atexit.register(destroy_ub)
