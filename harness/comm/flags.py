"""Flag regions: monotonic 64-bit counters in shared memory, and deadline-bounded waits on them.

Each (communicator, rank) owns one flag region. A counter in it has exactly one writer,
always a *peer*: after writing data into this rank's buffer, the sender stores the new
value of "how many times I have written this slot" into the counter here; this rank
waits until the counter reaches the value it expects. Counters are never reset, so the
expected values are derived from how many operations this rank has issued: ranks must
issue identical operation sequences, and a rank that skips or adds an operation leaves a
counter short (a wait that expires) or ahead (pairing with the wrong operation).

Memory ordering. The protocol is "write the data, then store the counter"; the reader
"sees the counter, then reads the data". On x86-64 (TSO) stores become visible in program
order and loads are not reordered with older loads, and the GIL hand-off between the data
copy (a torch kernel that runs without the GIL) and the counter store is a locked
instruction, a full fence that also drains the non-temporal stores a large ``memcpy`` may
use. So a reader that sees the new counter sees the data written before it. A weakly
ordered CPU (aarch64, POWER) would need a release fence before the counter store and an
acquire fence after the load, which pure Python cannot issue; :func:`check_memory_model`
refuses to run there rather than risk reporting the emulation's own races as corruption.

Counter stores and loads are single aligned 8-byte accesses through a ``memoryview`` cast
to ``'q'`` (a ``memcpy`` of 8 bytes, one ``mov``), so they are never torn. Counters sit one
per 64-byte line so that a writer never shares a cache line with another counter.

Waits spin briefly, then back off with short sleeps. A polling wait is the mechanism here
(the peer has no way to wake us), not synchronisation by sleeping: the sleep only bounds
how much CPU the poll burns. The spin phase is short on purpose: a Python spin loop holds
the GIL, and the GEMM thread beside it needs the GIL back between kernels.
"""

from __future__ import annotations

import platform
import threading
import time
from typing import Callable

from harness.comm.segments import Segment
from harness.errors import DeadlineExceeded, HarnessError, SetupError

COUNTER_STRIDE = 64          # bytes between counters: one cache line each
_WORDS_PER_COUNTER = COUNTER_STRIDE // 8
_SPIN_POLLS = 64             # polls before the first sleep (a few microseconds)
_SLEEP_MIN_S = 20e-6
_SLEEP_MAX_S = 1e-3          # cap: a ready counter is noticed within about a millisecond

_TSO_MACHINES = {"x86_64", "amd64", "i386", "i486", "i586", "i686", "x86"}


class WaitCancelled(HarnessError):
    """A wait was abandoned because its operation already failed elsewhere."""


def check_memory_model() -> None:
    """Raise SetupError unless this CPU orders stores the way the flag protocol assumes."""
    machine = platform.machine().lower()
    if machine not in _TSO_MACHINES:
        raise SetupError(
            f"the Userbuffers emulation relies on x86-64 store ordering (write data, then the "
            f"counter); this machine is {platform.machine()!r}, where pure Python cannot issue the "
            f"fences the protocol would need")


def flag_region_bytes(ncounters: int) -> int:
    """Bytes a flag region with ``ncounters`` counters needs."""
    return ncounters * COUNTER_STRIDE


class FlagRegion:
    """The counters of one rank's flag segment, mapped locally (own) or remotely (peer's)."""

    def __init__(self, segment: Segment, ncounters: int):
        if segment.nbytes < flag_region_bytes(ncounters):
            raise HarnessError(f"flag segment {segment.path} has {segment.nbytes} bytes, "
                               f"needs {flag_region_bytes(ncounters)} for {ncounters} counters")
        self.segment = segment
        self.ncounters = ncounters
        self._words: memoryview | None = segment.buffer().cast("q")
        # Called as guard(counter, value) before every store through this mapping: a
        # communicator installs one on its peers' regions to check that the payload a data
        # counter announces has landed (``Arrivals.check_landed``).
        self.guard: Callable[[int, int], None] | None = None

    def _index(self, counter: int) -> int:
        if not 0 <= counter < self.ncounters:
            raise HarnessError(f"counter {counter} outside flag region {self.segment.path} "
                               f"of {self.ncounters} counters")
        return counter * _WORDS_PER_COUNTER

    def load(self, counter: int) -> int:
        """The counter's current value (one aligned 8-byte load)."""
        return self._words[self._index(counter)]

    def store(self, counter: int, value: int) -> None:
        """Set the counter (one aligned 8-byte store). Only the counter's single writer calls
        this, after the data it announces is written; a guard sees the store first."""
        index = self._index(counter)
        if self.guard is not None:
            self.guard(counter, value)
        self._words[index] = value

    def close(self) -> None:
        if self._words is not None:
            self._words.release()
            self._words = None


def wait_counter(
    region: FlagRegion,
    counter: int,
    expected: int,
    deadline_s: float,
    describe: Callable[[int], str],
    where: str = "",
    cancel: threading.Event | None = None,
) -> int:
    """Wait until ``region``'s ``counter`` is at least ``expected``; return the value seen.

    On expiry raise :class:`DeadlineExceeded` whose ``what`` is ``describe(value_seen)``, a
    sentence naming the communicator, operation, chunk, waiting rank and peer rank. If
    ``cancel`` gets set meanwhile (the operation failed on another thread), raise
    :class:`WaitCancelled` instead of waiting out the deadline.
    """
    value = region.load(counter)
    if value >= expected:
        return value
    for _ in range(_SPIN_POLLS):
        value = region.load(counter)
        if value >= expected:
            return value
    start = time.monotonic()
    end = start + deadline_s
    pause = _SLEEP_MIN_S
    while True:
        value = region.load(counter)
        if value >= expected:
            return value
        if cancel is not None and cancel.is_set():
            raise WaitCancelled(f"cancelled: {describe(value)}")
        now = time.monotonic()
        if now >= end:
            raise DeadlineExceeded(describe(value), deadline_s, where)
        time.sleep(min(pause, end - now))
        pause = min(pause * 2, _SLEEP_MAX_S)

