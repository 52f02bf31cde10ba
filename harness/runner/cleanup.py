"""Removing what a group leaves behind: shared-memory segments by name prefix, processes by
environment, and the run folders of a controller that died without its own cleanup (SIGKILL, the
OOM killer), swept by the next group that starts.

A run folder names its owner in a file ``owner``: the controller's pid, that process's start time
and the group's shared-memory prefix. A pid alone would not do: the kernel hands out a dead
process's pid again, so an owner is alive only when a process with that pid exists *and* started
at the recorded time (the same mistake as keying state by ``id()``, which this harness exists to
catch).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time

from harness.files import write_atomic

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


OWNER_FILE = "owner"
PREFIX = "fp8h-"       # every run folder and shared-memory segment of a group starts with it


def process_start(pid: int) -> str | None:
    """When ``pid`` started (clock ticks since boot, /proc/PID/stat field 22), or None if no such process."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]   # fields after the command name start at field 3


def write_owner(folder: str, shm_prefix: str = "") -> None:
    """Name this process as the owner of ``folder`` (and of the segments under ``shm_prefix``)."""
    pid = os.getpid()
    write_atomic(os.path.join(folder, OWNER_FILE),
                 json.dumps({"pid": pid, "start": process_start(pid), "shm_prefix": shm_prefix}))


def owner_alive(owner: dict) -> bool:
    start = process_start(int(owner["pid"]))
    return start is not None and start == owner.get("start")


def run_folders(folder: str) -> list[str]:
    """The names in ``folder`` under the one prefix of every run folder (a group's ``fp8h-run-*``,
    the bench's bare group's ``fp8h-bench-bare-*``), sorted; none if ``folder`` cannot be read."""
    try:
        return sorted(n for n in os.listdir(folder) if n.startswith(PREFIX))
    except OSError:
        return []


def sweep_abandoned(folder: str | None = None) -> list[str]:
    """Remove the run folders in ``folder`` (the temp folder by default) whose owner is dead, with
    their shared-memory segments and any process still carrying the folder in its environment.

    A folder without an owner file (being created, or not ours) is left alone. Returns the
    folders removed.
    """
    folder = folder or tempfile.gettempdir()
    removed = []
    for name in run_folders(folder):
        path = os.path.join(folder, name)
        try:
            with open(os.path.join(path, OWNER_FILE)) as fh:
                owner = json.load(fh)
        except (OSError, ValueError):
            continue
        if not isinstance(owner, dict) or "pid" not in owner or owner_alive(owner):
            continue
        kill_processes_with_env("HARNESS_RUN_DIR", path)
        if owner.get("shm_prefix"):
            unlink_shm_prefix(owner["shm_prefix"])
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed
