"""Whether this machine can run what a configuration asks, checked before any rank starts.

A world size that cannot fit is refused with one line and exit 2 rather than started: a typo of
``--world-size 1000`` for 10 once started 186 ranks holding 9.3 GB of a 24 GB machine within
25 s, on the way to the kernel's out-of-memory killer. The estimate is the world size times
the measured memory of one rank (:data:`RANK_MEMORY_BYTES`), against what the kernel reports
available, and at most :data:`MAX_RANKS_PER_CORE` ranks per core. ``--oversubscribe`` lets a
user who means it go ahead. A stack may add its own check (``check_world_size``: TE refuses
more ranks than visible GPUs).
"""

from __future__ import annotations

import os

from harness.errors import UsageError
from harness.report.model import check_writable

__harness_hidden__ = True

# One emulated-stack rank of a spawn group with its zygote, proportional set size (shared pages
# split between the processes that share them) after its first case: 185 MiB, measured with
# ``python -m harness.runner.machine --measure`` (torch 2.13 CPU, Python 3.11, two ranks).
RANK_MEMORY_BYTES = 185 * 2**20
MAX_RANKS_PER_CORE = 8


def available_memory() -> int | None:
    """``MemAvailable`` of /proc/meminfo in bytes (None where the kernel does not say)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:        # not Linux
        return os.cpu_count() or 1


def check_capacity(world_size: int, *, memory: int | None = None, ncores: int | None = None) -> None:
    """UsageError (one line) when ``world_size`` ranks would not fit on this machine."""
    memory = available_memory() if memory is None else memory
    ncores = cores() if ncores is None else ncores
    need = world_size * RANK_MEMORY_BYTES
    if memory is not None and need > memory:
        raise UsageError(f"--world-size {world_size} needs about {need / 2**30:.1f} GiB ({world_size} ranks x "
                         f"{RANK_MEMORY_BYTES / 2**20:.0f} MiB each) but {memory / 2**30:.1f} GiB is available; "
                         f"use a smaller world size, or --oversubscribe to start them anyway")
    if world_size > MAX_RANKS_PER_CORE * ncores:
        raise UsageError(f"--world-size {world_size} is more than {MAX_RANKS_PER_CORE} ranks per core on this "
                         f"{ncores}-core machine; use a smaller world size, or --oversubscribe to start them anyway")


def check_machine(cfg, spmd: bool = False) -> None:
    """Everything about this machine that would stop ``cfg`` from running, as one UsageError or
    SetupError line, before any rank starts (and before torch is imported: a refusal is
    immediate). Under torchrun or mpirun (``spmd``) the ranks already exist: only the report
    paths are checked."""
    from harness.runner.config import Launcher

    for path, flag in ((cfg.json_path, "--json"), (cfg.junit_path, "--junit")):
        if path:
            check_writable(path, flag)
    if cfg.launcher is not Launcher.INPROC and not spmd:
        from harness.runner.launchers import get_launcher

        get_launcher(cfg.launcher.value).check()     # e.g. no mpirun on PATH
        if not cfg.oversubscribe:
            check_capacity(cfg.world_size)


def check_stack(cfg, stack) -> None:
    """The stack's own check of the run's world size, if it has one (TE: the GPUs visible)."""
    from harness.stacks.hooks import traits

    traits(stack).check_world(cfg.world_size)


def pss_bytes(pid: int) -> int:
    """A process's proportional set size (``/proc/PID/smaps_rollup``), 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def measure_rank_memory(world_size: int = 2) -> float:
    """Mean proportional set size of one rank with its zygote, in bytes, after one case of the
    built-in catalogue on a spawn group of the default stack: how :data:`RANK_MEMORY_BYTES` was
    measured."""
    from harness.case.catalog import builtin_cases
    from harness.runner.cleanup import processes_with_env
    from harness.runner.config import RunConfig
    from harness.runner.session import open_session

    session = open_session(RunConfig(world_size=world_size, oversubscribe=True))
    try:
        session.run(builtin_cases()[0])
        pids = processes_with_env("HARNESS_RUN_DIR", session.backend.group.run_dir)
        return sum(pss_bytes(p) for p in pids) / world_size
    finally:
        session.close()


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["--measure"]:
        sys.exit("usage: python -m harness.runner.machine --measure")
    print(f"{measure_rank_memory() / 2**20:.0f} MiB per rank (with its zygote), proportional set size")
