"""Was a chunk in its slot when its counter said so, and when it was read?

A communicator's buffer-integrity checks around its counters (docs/design.md, "Early counters
and early reads"), one :class:`Arrivals` per communicator:

* *At the store* (producer): before this rank stores a data counter into a peer's flag region,
  the chunk it announces must already be in the peer's slot (:meth:`Arrivals.check_landed`,
  the guard of every peer's flag region). A counter raised first is noted, and
  :meth:`Arrivals.raise_early_signal` fails the operation at its end.
* *At the read* (consumer): the read must follow a wait that saw the write it reads, and the
  counter must have reached that write now (:meth:`Arrivals.check_arrived`). A read that then
  fails verification, and whose chunk lands within a short grace, came before the producer's
  write landed (:meth:`Arrivals.explain_early_read`).
"""

from __future__ import annotations

import dataclasses
import time

import torch

from harness.comm.integrity import BufferIntegrityError, ChunkHeader, IntegrityMode, landing_problem

READ_BEFORE_LANDED = "read before the producer's write landed"
# How long a consumer whose read failed verification watches the slot for the write it
# expected: a write that lands within it was late, not missing (a diagnosis, not a wait the
# protocol relies on; a slot that never gets the write keeps the verification's own finding).
_LANDING_GRACE_S = 2.0
_LANDING_POLL_S = (20e-6, 1e-3)


@dataclasses.dataclass(frozen=True)
class Arrival:
    """What a consumer's read of ``slot`` (written by rank ``src``, carrying ``chunk``) saw:
    the counter at the read and the count the read expected."""

    src: int
    slot: int
    chunk: int
    seen: int
    expected: int


class Arrivals:
    """The arrival checks of one communicator on one rank; see the module docstring."""

    def __init__(self, comm):
        self.comm = comm
        self._early_signals: list = []            # counters this operation raised before their payload
        self._read: dict[tuple[int, int], int] = {}

    def begin_op(self) -> None:
        self._early_signals = []

    # ------------------------------------------------------------------ producer side
    def chunk_of(self, dst: int, slot: int) -> int:
        """The chunk a write into ``dst``'s ``slot`` carries: a reduce-scatter sends the
        destination's own chunk into the sender's slot; gathers keep chunk ``c`` in slot ``c``."""
        return dst if "reduce-scatter" in self.comm.op else slot

    def check_landed(self, dst: int, counter: int, value: int) -> None:
        """The guard of peer ``dst``'s flag region, called before this rank stores ``value``
        into ``counter`` there: a data counter must announce a chunk that has landed in
        ``dst``'s slot (header of this operation, bytes with its checksum). A counter raised
        first is noted, and :meth:`raise_early_signal` decides at the operation's end (the
        payload still lands meanwhile, so a peer that read early can see it arrive)."""
        ws = self.comm.world_size
        if counter >= ws * ws or self.comm.integrity is IntegrityMode.OFF:
            return
        slot = counter % ws
        problem, _ = self.landing(dst, slot)
        if problem is not None:
            self._early_signals.append((dst, slot, value, problem))

    def landing(self, dst: int, slot: int) -> tuple[str | None, bool]:
        """What keeps ``dst``'s ``slot`` from holding this operation's chunk (None: nothing),
        and whether its header already names this operation."""
        comm = self.comm
        header = ChunkHeader.unpack_from(comm.data[dst].buffer(), comm.header_offset(slot))
        current = header is not None and header.seq == comm.seq
        return landing_problem(header, comm.seq, lambda n: comm.slot(dst, slot, n)), current

    def raise_early_signal(self, failed: BaseException | None = None) -> None:
        """At an operation's end: raise :class:`BufferIntegrityError` if one of its counters
        was raised before its payload (:meth:`check_landed`) that then landed, or never did.
        A slot whose header is this operation's but whose bytes still miss its checksum was
        written and then changed: that is the consumer's verification to report, not an early
        counter. ``failed``: the error the operation failed with meanwhile (a read of a peer's
        early chunk, say), told after this rank's own finding."""
        comm = self.comm
        noted, self._early_signals = self._early_signals, []
        for dst, slot, value, problem in noted:
            now, current = self.landing(dst, slot)
            if now is not None and current:
                continue
            text = (f"userbuffers {comm.name!r} {comm.op or 'operation'}: rank {comm.rank} raised counter "
                    f"data[{comm.rank}][{slot}] in rank {dst}'s flags to {value} (its write #{value} of chunk "
                    f"{self.chunk_of(dst, slot)}, operation #{comm.seq}) before the payload landed there: "
                    f"{problem}; " + ("the producer signalled before its write, so rank "
                                      f"{dst} could read the chunk before it landed" if now is None else
                                      f"by the operation's end it still had not landed ({now})"))
            if failed is not None:
                text += f"; then this rank's operation failed: {type(failed).__name__}: {failed}"
            raise BufferIntegrityError(text, communicator=comm.name, op=comm.op, producer=comm.rank,
                                       consumer=-1, problem="counter raised before its payload landed")

    # ------------------------------------------------------------------ consumer side
    def check_arrived(self, src: int, slot: int, op: str, chunk: int) -> Arrival:
        """Before a consumer reads ``slot`` (written by rank ``src``): the read must follow a
        ``Communicator.wait_data`` that saw the write it is about to read, and the counter must
        have reached that write now, else raise :class:`BufferIntegrityError` saying the chunk was
        read before its counter reached the expected value. Reads and waits are counted apart,
        so a skipped wait is seen whether or not the data happened to be there already, and a
        wait that ended short (one count too few) is seen by the counter itself. (In every
        integrity mode: two dict look-ups and one load.) Returns what the read saw, for
        :meth:`explain_early_read`."""
        comm = self.comm
        key = (src, slot)
        expected = self._read.get(key, 0) + 1
        self._read[key] = expected
        seen = comm.flags[comm.rank].load(comm.data_counter(src, slot))
        arrival = Arrival(src, slot, chunk, seen, expected)
        waited = comm.waited(src, slot) >= expected
        if waited and seen >= expected:
            return arrival
        if waited:
            raise self._read_error(op, chunk, src, READ_BEFORE_LANDED, (
                f"{READ_BEFORE_LANDED}: rank {comm.rank} read chunk {chunk} from rank {src} while counter "
                f"data[{src}][{slot}] was {seen}, expected {expected} (the wait before the read ended "
                f"{expected - seen} count(s) short)"))
        state = ("it had not arrived" if seen < expected else
                 "the counter has reached it since, but nothing waited for it")
        problem = (f"read chunk {chunk} from rank {src} before its counter reached the expected value "
                   f"(counter {seen}, expected {expected}; {state}): the consumer did not wait for the "
                   f"producer's signal")
        raise self._read_error(op, chunk, src, problem, f"rank {comm.rank} {problem}")

    def _read_error(self, op: str, chunk: int, producer: int, problem: str, text: str) -> BufferIntegrityError:
        """A consumer-side finding on this rank's read of ``chunk`` from ``producer``."""
        comm = self.comm
        return BufferIntegrityError(f"userbuffers {comm.name!r} {op}: {text}", communicator=comm.name, op=op,
                                    chunk=chunk, producer=producer, consumer=comm.rank, problem=problem)

    def explain_early_read(self, error: BufferIntegrityError, arrival: Arrival, *, producer: int, seq: int,
                           header: ChunkHeader | None, data: torch.Tensor) -> BufferIntegrityError:
        """A consumer's read of ``arrival``'s slot failed verification with ``error``; ``header``
        and ``data`` are what it read. If what it read was not operation ``seq``'s chunk (no header,
        another operation's, or bytes off the header's checksum) and that chunk lands in the slot
        within a short grace, the read came before the producer's write landed: return an error
        that says so, with the counts. Otherwise return ``error`` as it is."""
        comm = self.comm
        slot, chunk = arrival.slot, arrival.chunk
        as_read = landing_problem(header, seq, lambda n: data.reshape(-1)[:n], producer, chunk)
        if as_read is None:
            return error                      # the read saw the whole chunk: a scale or format finding
        landed = self.wait_landed(slot, seq, producer, chunk, min(comm.deadline_s, _LANDING_GRACE_S))
        if not landed:
            return error
        now = comm.flags[comm.rank].load(comm.data_counter(arrival.src, slot))
        why = ("the counter was raised before its payload" if arrival.seen >= arrival.expected else
               f"the wait before the read ended {arrival.expected - arrival.seen} count(s) short")
        problem = (f"{READ_BEFORE_LANDED}: rank {comm.rank} read chunk {chunk} from rank {arrival.src} while "
                   f"counter data[{arrival.src}][{slot}] was {arrival.seen}, expected {arrival.expected} ({why}); "
                   f"at the read, {as_read}; operation #{seq}'s chunk landed after the read (counter now {now}), "
                   f"so the ranks' operation sequences agree")
        return self._read_error(error.op, chunk, arrival.src, READ_BEFORE_LANDED, problem)

    def wait_landed(self, slot: int, seq: int, producer: int, chunk: int, bound_s: float) -> bool:
        """Watch this rank's ``slot`` until it holds operation ``seq``'s chunk (header and
        checksum: :func:`landing_problem`) or ``bound_s`` passes; whether it did."""
        comm = self.comm
        end = time.monotonic() + bound_s
        pause = _LANDING_POLL_S[0]
        while True:
            header = comm.read_header(slot)
            if landing_problem(header, seq, lambda n: comm.slot(comm.rank, slot, n), producer, chunk) is None:
                return True
            now = time.monotonic()
            if now >= end:
                return False
            time.sleep(min(pause, end - now))
            pause = min(pause * 2, _LANDING_POLL_S[1])
