"""A per-rank record of the Userbuffers exchanges TE issued, and where the GPU is in them.

TE's Userbuffers waits spin inside CUDA kernels: a rank whose peer never sends a chunk shows,
from Python, only a CPU waiting for its GPU. So the adapter records every exchange TE starts
(the fused ops call ``general_gemm(..., ub=communicator, ub_type=AG|RS, bulk_overlap=...)``):
the communicator's name, the kind of exchange, which model, step and pass issued it, and two
CUDA events on the stream it joins, one before (its inputs are ready: the exchange can start)
and one after (it finished). From those, :meth:`UbProgress.pending` says, per rank, which
exchange is in progress and which chunk of which peer it waits for, or that it has not
started because earlier GPU work (a collective, say) has not finished.

The chunk a rank waits for follows TE's schedules (``comm_gemm_overlap.cpp``):

* ring-exchange all-gather: at step ``i`` rank ``r`` sends chunk ``(r - i) mod tp`` to rank
  ``r + 1`` and receives chunk ``(r - i - 1) mod tp`` from rank ``r - 1``;
* ring-exchange reduce-scatter: rank ``r`` receives, from ranks ``r - 1``, ``r - 2``, ...,
  their partial sums of its own chunk ``r``;
* pipelined and bulk reduce-scatter: every peer's partial sums of chunk ``r``, all at once;
* bulk all-gather: every peer's chunk.

With two ranks each exchange has a single chunk to receive, so the record names it exactly;
with more it names the chunks in the order they come.

Who calls what: the stack installs :func:`install` on TE's two fused modules once, sets what is
running with :meth:`UbProgress.at` around each forward and backward, and asks
:meth:`UbProgress.pending` when a wait for the GPU ran out (:mod:`.gpu_wait`); the hang report
(:mod:`harness.hangs.report`) asks the same from the rank's watchdog thread.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools

import torch

RING_REDUCE_SCATTER = ("fc1_dgrad",)     # made ring-exchange by the adapter's ub_cfgs (TE's test does too)
KEEP = 64


def kind_of(comm: str, ub_type: str, bulk: bool) -> str:
    """The exchange a communicator runs, from its name and TE's call (``ub_type`` AG or RS)."""
    gather = ub_type.upper().endswith("AG")
    if bulk:
        return "bulk all-gather" if gather else "bulk reduce-scatter"
    if gather:
        return "ring-exchange all-gather"
    return "ring-exchange reduce-scatter" if comm in RING_REDUCE_SCATTER else "pipelined reduce-scatter"


def waiting_for(kind: str, rank: int, tp: int) -> str:
    """What rank ``rank`` waits for while this exchange is in progress."""
    peers = [(rank - i) % tp for i in range(1, tp)]
    if kind == "ring-exchange all-gather":
        prev = (rank - 1) % tp
        chunks = [(rank - i - 1) % tp for i in range(tp - 1)]
        if len(chunks) == 1:
            return f"rank {rank} waiting for chunk {chunks[0]} from rank {prev}"
        return f"rank {rank} waiting for chunks {chunks} from rank {prev}, in that order"
    if kind == "ring-exchange reduce-scatter":
        if len(peers) == 1:
            return f"rank {rank} waiting for rank {peers[0]}'s partial sum of chunk {rank}"
        return f"rank {rank} waiting for the partial sums of chunk {rank} from ranks {peers}, in that order"
    if kind.endswith("reduce-scatter"):
        return f"rank {rank} waiting for the partial sums of chunk {rank} from rank(s) {sorted(peers)}"
    return f"rank {rank} waiting for the chunks of rank(s) {sorted(peers)}"


@dataclasses.dataclass
class UbOp:
    seq: int
    comm: str
    kind: str
    where: str
    rank: int
    tp: int
    ready: object          # torch.cuda.Event, recorded before the exchange
    done: object           # torch.cuda.Event, recorded after it

    def describe(self) -> str:
        return f"userbuffers '{self.comm}' {self.kind} ({self.where})"


def _query(event) -> bool | None:
    try:
        return bool(event.query())
    except Exception:          # a CUDA error leaves the answer unknown, not a crash of the report
        return None


class UbProgress:
    """The exchanges of this process, newest last (at most :data:`KEEP`)."""

    def __init__(self, event=None):
        self.event = event or torch.cuda.Event     # made and recorded on the current stream
        self.ops: collections.deque = collections.deque(maxlen=KEEP)
        self.where = "outside any model step"
        self.rank, self.tp = 0, 1
        self._seq = 0

    @contextlib.contextmanager
    def at(self, where: str, rank: int, tp: int):
        """Exchanges issued inside the block are recorded as issued ``where``."""
        before = (self.where, self.rank, self.tp)
        self.where, self.rank, self.tp = where, rank, tp
        try:
            yield
        finally:
            self.where, self.rank, self.tp = before

    def record(self, comm: str, kind: str, call):
        """Run ``call()`` (TE's GEMM with its exchange) between two events; returns its result."""
        ready = self.event()
        ready.record()
        out = call()
        done = self.event()
        done.record()
        self._seq += 1
        self.ops.append(UbOp(self._seq, comm, kind, self.where, self.rank, self.tp, ready, done))
        return out

    def pending(self) -> list[str]:
        """Lines for every exchange the GPU has not finished: the first one in progress, with the
        chunk it waits for, and those queued behind unfinished work."""
        lines = []
        for op in list(self.ops):
            done = _query(op.done)
            if done:
                continue
            ready = _query(op.ready)
            if done is None or ready is None:
                lines.append(f"{op.describe()}: state unknown (CUDA event query failed)")
            elif ready:
                lines.append(f"{op.describe()} in progress: {waiting_for(op.kind, op.rank, op.tp)}")
            else:
                lines.append(f"{op.describe()} not started: earlier GPU work on this rank has not finished")
        return lines


PROGRESS = UbProgress()


def install(modules, name_of) -> None:
    """Wrap ``general_gemm`` in TE's fused Userbuffers modules so that every call with ``ub=`` is
    recorded in :data:`PROGRESS` (idempotent). ``name_of(comm)`` names a communicator."""
    for module in modules:
        original = module.general_gemm
        if getattr(original, "_harness_ub_progress", False):
            continue

        @functools.wraps(original)
        def general_gemm(*args, _original=original, **kwargs):
            comm = kwargs.get("ub")
            if comm is None:
                return _original(*args, **kwargs)
            ub_type = getattr(kwargs.get("ub_type"), "name", str(kwargs.get("ub_type")))
            name = name_of(comm)
            kind = kind_of(name, ub_type, bool(kwargs.get("bulk_overlap", False)))
            return PROGRESS.record(name, kind, lambda: _original(*args, **kwargs))

        general_gemm._harness_ub_progress = True
        module.general_gemm = general_gemm
