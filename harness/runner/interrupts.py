"""SIGINT and SIGTERM to a controller: stop, end the ranks, write what was gathered.

The first signal raises :class:`Interrupted` in the main thread; a second one during the
clean-up that follows is noted and ignored, so it cannot abort the clean-up half way (orphan
ranks, a leaked run folder) or the last report write. A first signal that arrives while a
clean-up runs anyway (the end of a run that finished) waits for it to end
(:meth:`Signals.deferred`).
"""

from __future__ import annotations

import contextlib
import signal
import threading

__harness_hidden__ = True


class Interrupted(BaseException):
    """SIGTERM or SIGINT reached the controller: stop, write what was gathered."""


class Signals:
    """The signals an :func:`interruptible` block received, and where they may not interrupt it."""

    def __init__(self):
        self.received: list[str] = []
        self._deferring = 0

    def handler(self, signum, frame) -> None:
        self.received.append(signal.Signals(signum).name)
        if len(self.received) == 1 and not self._deferring:
            raise Interrupted(self.received[0])

    @contextlib.contextmanager
    def deferred(self):
        """A clean-up that must run to its end (stop the ranks, remove the run folder): a first
        signal that arrives within it is noted, and raised as :class:`Interrupted` once the block
        is done (unless the block itself raised)."""
        before = len(self.received)
        self._deferring += 1
        try:
            yield
        finally:
            self._deferring -= 1
        if before == 0 and self.received:
            raise Interrupted(self.received[0])


@contextlib.contextmanager
def interruptible():
    """Within the block, SIGINT/SIGTERM raise :class:`Interrupted` once; the handlers that were
    there before come back at its end. Outside the main thread, nothing is installed. Yields the
    block's :class:`Signals`, whose ``deferred()`` marks a clean-up no signal may cut short."""
    signals = Signals()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, signals.handler)
    try:
        yield signals
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def raise_on_signals() -> dict:
    """SIGINT and SIGTERM raise :class:`Interrupted` with the signal's name, from now on (the main
    thread only; elsewhere nothing is installed). Returns the handlers they replaced, for the
    caller to put back. For a caller that stops its own work in order (stress and its groups),
    where :func:`interruptible`'s single-raise and deferral are not wanted."""
    def handler(signum, frame):
        raise Interrupted(signal.Signals(signum).name)

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, handler)
    return previous
