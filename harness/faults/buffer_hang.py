"""A rank that hangs in a buffer wait: a spin on a shared-memory flag that nobody will set.

This is the Userbuffers failure mode of the bug class (docs/design.md, "Userbuffers emulation"): a
consumer waits for a producer's counter to reach the value it expects, the producer's operation
sequence is off by one, and the counter never gets there. Here the wait has no deadline at all, the
way a stack under test might write it, so only the harness can notice: the rank's watchdog reports
it stalled, the controller dumps every rank's Python stack (SIGUSR1 -> faulthandler; the spin is
pure Python, and faulthandler's handler runs in C, so it dumps even while this loop holds the GIL),
and then stops the group.

Self-contained on purpose: the flag region is one ``/dev/shm`` file mapped with ``mmap``, laid
out like the emulation's (one 8-byte counter per 64-byte line), under the group's shared-memory
prefix (``HARNESS_SHM_PREFIX``), so the controller's clean-up of a stopped group removes it. A
leaked segment after a fault case is a harness bug the fault tests look for.
"""

from __future__ import annotations

import mmap
import os

SHM_DIR = "/dev/shm"
COUNTER_STRIDE = 64


def flag_path(rank: int) -> str:
    prefix = os.environ.get("HARNESS_SHM_PREFIX") or f"fp8h-{os.getpid()}-"
    return os.path.join(SHM_DIR, f"{prefix}fault-hang-r{rank}-flags")


def wait_forever_on_flag(rank: int, expected: int = 1) -> None:
    """Create this rank's flag region, then spin until counter 0 reaches ``expected``: never.

    No peer ever learns the segment's name, so nothing stores to the counter; the loop ends only
    when the process does.
    """
    path = flag_path(rank)
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.ftruncate(fd, mmap.PAGESIZE)
        mapping = mmap.mmap(fd, mmap.PAGESIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)
    counters = memoryview(mapping).cast("q")
    slot = 0 * (COUNTER_STRIDE // 8)
    while counters[slot] < expected:   # deadline-free: the hang under test
        pass
