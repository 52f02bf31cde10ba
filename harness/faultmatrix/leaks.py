"""What a run must not leave behind: processes, shared-memory segments, run folders.

Processes are found by their environment, not by name or parent: every rank, and everything a
rank or a launcher starts (torchrun's agent, mpirun's proxies, the zygote and its children),
inherits the controller's environment, which holds ``HARNESS_CONTROLLER_PID=<pid>`` and
``HARNESS_RUN_DIR=<the group's own folder>``. A test can add its own marker variable to the
controller's environment and look for that instead. Zombies (exited, not yet reaped) have an
empty ``/proc/PID/environ`` and are not counted: they hold no resources but a pid.
"""

from __future__ import annotations

import os

from harness.runner.cleanup import processes_with_env

SHM_DIR = "/dev/shm"


def describe_processes(pids: list[int]) -> str:
    """``pid: command line`` for each pid, for failure messages."""
    lines = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            cmd = "(gone)"
        lines.append(f"{pid}: {cmd}")
    return "\n".join(lines)


def shm_segments(prefix: str) -> list[str]:
    """Names of ``/dev/shm`` entries that start with ``prefix``."""
    try:
        return sorted(n for n in os.listdir(SHM_DIR) if n.startswith(prefix))
    except FileNotFoundError:
        return []


def group_leftovers(run_dir: str, shm_prefix: str) -> dict[str, list]:
    """What a stopped rank group left: its processes, its segments, its run folder."""
    return {
        "processes": processes_with_env("HARNESS_RUN_DIR", run_dir),
        "segments": shm_segments(shm_prefix),
        "run_dir": [run_dir] if os.path.exists(run_dir) else [],
    }
