"""SIGINT and SIGTERM to a controller: stop, end the ranks, write what was gathered.

The first signal raises :class:`Interrupted` in the main thread; a second one during the
clean-up that follows is noted and ignored, so it cannot abort the clean-up half way (orphan
ranks, a leaked run folder) or the last report write.
"""

from __future__ import annotations

import contextlib
import signal
import threading

__harness_hidden__ = True


class Interrupted(BaseException):
    """SIGTERM or SIGINT reached the controller: stop, write what was gathered."""


@contextlib.contextmanager
def interruptible():
    """Within the block, SIGINT/SIGTERM raise :class:`Interrupted` once; the handlers that were
    there before come back at its end. Outside the main thread, nothing is installed."""
    received = []

    def handler(signum, frame):
        received.append(signal.Signals(signum).name)
        if len(received) == 1:
            raise Interrupted(received[0])

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
