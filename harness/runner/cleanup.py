"""Removing what a group leaves behind: shared-memory segments by name prefix, processes by environment."""

from __future__ import annotations

import os
import signal
import time

__harness_hidden__ = True

SHM_DIR = "/dev/shm"


def unlink_shm_prefix(prefix: str) -> list[str]:
    removed = []
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return removed
    for name in names:
        if name.startswith(prefix):
            try:
                os.unlink(os.path.join(SHM_DIR, name))
                removed.append(name)
            except OSError:
                pass
    return removed


def processes_with_env(name: str, value: str) -> list[int]:
    """Pids of live processes whose environment holds ``name=value`` (this process excluded).

    Every process a group starts, directly or not (ranks, their zygotes, torchrun's agent,
    mpirun's proxies), inherits the group's environment, so this finds them all whatever
    session or parent they ended up with. Zombies have an empty environ and are not listed.
    """
    needle = f"{name}={value}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                env = fh.read()
        except OSError:
            continue   # gone meanwhile, or not ours to read
        if needle in env.split(b"\0"):
            found.append(int(entry))
    return sorted(found)


def kill_processes_with_env(name: str, value: str, wait_s: float = 2.0) -> list[int]:
    """SIGKILL every process carrying ``name=value``; wait (bounded) until none is left.

    The last stage of stopping a group: torchrun starts each rank in a session of its own, so
    a kill of the launcher's process group does not reach a rank (or its zygote) that the
    launcher did not stop in time. Returns the pids that had to be killed.
    """
    killed = processes_with_env(name, value)
    for pid in killed:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + wait_s
    while killed and processes_with_env(name, value) and time.monotonic() < deadline:
        time.sleep(0.02)
    return killed
