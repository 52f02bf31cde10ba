"""One Userbuffers operation's lifetime: its name, its start and end, its communication thread.

Every rank of a communicator calls the same operations in the same order (the counters
are never reset). Communication runs on a background thread (:class:`Background`) while the
calling thread does the GEMM: torch kernels (copies, decode, matmul) release the GIL, so the two
really run at once. For a real overlap on a small machine, call ``torch.set_num_threads(1)`` in
each rank so the GEMM and the communication each get a core.

A failed operation (deadline, integrity) leaves the counters out of step: :func:`operation`
marks the communicator unusable, and the error names what to look at.
"""

from __future__ import annotations

import contextlib
import threading

from harness.comm.communicator import Communicator
from harness.comm.flags import WaitCancelled
from harness.comm.methods import OverlapMethod
from harness.errors import DeadlineExceeded, UsageError

RING_ALLGATHER = "ring all-gather"
PIPELINED_REDUCE_SCATTER = "pipelined reduce-scatter"
BULK_ALLGATHER = "bulk all-gather"
BULK_REDUCE_SCATTER = "bulk reduce-scatter"

_JOIN_GRACE_S = 5.0


def require_method(comm: Communicator, method: OverlapMethod, op: str) -> None:
    if comm.method is not method:
        raise UsageError(f"userbuffers {comm.name!r} is configured for {comm.method.value}; "
                         f"{op} needs a {method.value} communicator")


@contextlib.contextmanager
def operation(comm: Communicator, op: str):
    """begin_op ... end_op; a failure poisons the communicator (its counters are out of step)."""
    seq = comm.begin_op(op)
    try:
        yield seq
        comm.arrivals.raise_early_signal()     # a counter this operation raised before its payload landed
    except BaseException as exc:
        comm.poison(f"{op} operation #{seq} failed: {type(exc).__name__}: {exc}")
        if isinstance(exc, Exception):
            comm.arrivals.raise_early_signal(exc)     # this rank's own early counter comes first
        raise
    comm.end_op()


class Background:
    """The communication thread of one operation, and its hand-offs to the GEMM thread.

    The thread marks chunks ready; the GEMM thread waits for them with a bound. An error
    on either side sets ``cancel`` so the other side stops waiting instead of running into
    its own deadline; the first error is the one raised.
    """

    def __init__(self, comm: Communicator, op: str, seq: int):
        self.comm = comm
        self.op = op
        self.seq = seq
        self.cancel = threading.Event()
        self._cond = threading.Condition()
        self._ready: set[int] = set()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        # the thread's waits each have comm.deadline_s; a whole operation has at most
        # world_size of them in sequence
        self.bound_s = comm.deadline_s * max(1, comm.world_size) + _JOIN_GRACE_S

    def start(self, fn, *args) -> None:
        def run():
            try:
                fn(*args)
            except BaseException as exc:     # handed to the GEMM thread, raised there
                with self._cond:
                    self._error = exc
                    self.cancel.set()
                    self._cond.notify_all()
        self._thread = threading.Thread(target=run, name=f"ub-{self.comm.name}-r{self.comm.rank}-op{self.seq}",
                                        daemon=True)
        self._thread.start()

    def mark_ready(self, chunk: int) -> None:
        with self._cond:
            self._ready.add(chunk)
            self._cond.notify_all()

    def wait_ready(self, chunk: int) -> None:
        with self._cond:
            ok = self._cond.wait_for(lambda: chunk in self._ready or self._error is not None, self.bound_s)
            if self._error is not None:
                raise self._error
            if not ok:
                raise DeadlineExceeded(
                    f"userbuffers {self.comm.name!r} {self.op}: rank {self.comm.rank}'s GEMM thread waiting for "
                    f"chunk {chunk} from its communication thread", self.bound_s, f"operation #{self.seq}")

    def finish(self) -> None:
        """Join the thread (bounded) and raise its error, if any."""
        if self._thread is None:
            return
        self._thread.join(self.bound_s)
        if self._thread.is_alive():
            self.cancel.set()
            raise DeadlineExceeded(f"userbuffers {self.comm.name!r} {self.op}: rank {self.comm.rank}'s "
                                   f"communication thread did not finish", self.bound_s, f"operation #{self.seq}")
        if self._error is not None:
            raise self._error

    def abort(self) -> None:
        """After a failure on the GEMM thread: stop the thread's waits and join it (bounded)."""
        self.cancel.set()
        if self._thread is not None:
            self._thread.join(self.bound_s)


def reraise_primary(background: Background, exc: BaseException) -> BaseException:
    """If the GEMM thread failed only because the comm thread was cancelled, prefer the cause."""
    if isinstance(exc, WaitCancelled) and background._error is not None:
        return background._error
    return exc
