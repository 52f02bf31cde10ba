"""Counters held back on purpose: a gap between a payload landing and the counter that announces it.

Without a modelled link, a producer's copy and its counter store follow each other within a
microsecond, and so do a consumer's wait and its read. A consumer that reads a chunk before
its counter says so (it waits for one count too few, or reads a slot whose counter means an
earlier write) then nearly always finds the bytes already there: the bug is real and the run
passes. :class:`CounterStagger` opens the gap on purpose: in operation ``#s`` the producer rank
``s mod world_size`` holds every counter it raises for ``hold_s`` after its payload has landed,
while its peers raise theirs at once. In every operation one rank's chunks are therefore
visibly not announced yet while the other ranks, not held, are already reading: a consumer
that does not wait for the right count reads before the write is announced, and
``Arrivals.check_arrived`` sees the counter short at the read.

Who calls it: ``Communicator.put`` and ``chunks.put_tensor`` call :meth:`CounterStagger.hold`
after the payload's copy (and the link's hold), right before the counter store. The emulated
stacks' communicators stagger by :data:`DEFAULT_HOLD_S` (``harness/stacks/emulated/userbuffers.py``),
so the default run's Userbuffers family always has the gap; ``CounterStagger()`` (no hold) is
the library default everywhere else (benches, unit tests). A rank holds once per peer it writes
to, and only in one operation of every ``world_size``; a Userbuffers case of the default run has
12 operations (2 models, 3 steps, a forward and a backward operation each). What it cost, measured:
docs/design.md, "Early counters and early reads".
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time

from harness.errors import UsageError

DEFAULT_HOLD_S = 0.003     # the emulated stacks' gap: well above a consumer's wait-to-read time


@dataclasses.dataclass(frozen=True)
class CounterStagger:
    """Rank ``seq mod world_size`` holds the counters it raises in operation ``seq`` by ``hold_s``."""

    hold_s: float = 0.0

    def __post_init__(self):
        if isinstance(self.hold_s, bool) or not isinstance(self.hold_s, (int, float)) \
                or not (math.isfinite(self.hold_s) and self.hold_s >= 0):
            raise UsageError(f"counter stagger: hold_s must be a finite number of seconds >= 0, got {self.hold_s!r}")

    def holds(self, seq: int, rank: int, world_size: int) -> bool:
        """Whether ``rank`` holds its counters back in operation ``seq`` (pure)."""
        return self.hold_s > 0 and world_size > 1 and seq % world_size == rank

    def hold(self, seq: int, rank: int, world_size: int, cancel: threading.Event | None = None) -> None:
        """Wait ``hold_s`` (off the GIL, no CPU) when :meth:`holds` says so; a set ``cancel``
        (the operation failed on another thread) ends the hold at once."""
        if not self.holds(seq, rank, world_size):
            return
        if cancel is not None:
            cancel.wait(self.hold_s)
        else:
            time.sleep(self.hold_s)

    def describe(self) -> str:
        if self.hold_s <= 0:
            return "counters raised as soon as their payload lands"
        return f"counters staggered: one rank per operation holds them {self.hold_s * 1e3:g} ms"

    def to_json(self) -> dict:
        return {"hold_s": self.hold_s}
