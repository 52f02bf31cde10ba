"""Where the time of a run goes before its first verdict: timestamped phase marks, off unless asked for.

``HARNESS_PHASES=FILE`` in a run's environment makes the controller, every rank and every forked
child append one line per phase it passes to FILE: wall-clock time, pid, and the phase
(``rank 0: stack preloaded``, ``rank 0: case delayed/te-default ran``, ...). Lines are short
single appends, so processes writing at once do not interleave within a line. Without the
variable :func:`mark` only reads the environment. :mod:`harness.bench.phases` runs a command
with it and reads the file back as a breakdown.
"""

from __future__ import annotations

import os
import time

__harness_hidden__ = True

ENV = "HARNESS_PHASES"


def mark(phase: str) -> None:
    """Append ``phase`` with the time and this process's pid, when a phase file was asked for."""
    path = os.environ.get(ENV)
    if not path:
        return
    line = f"{time.time():.6f} {os.getpid()} {phase}\n".encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
