"""The launcher protocol: start W worker processes; stop them, surely, within bounded time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Protocol

__harness_hidden__ = True

WORKER_MODULE = "harness.runner.rank.worker"


class GroupProcesses:
    """The OS processes of one rank group: the top-level ones we started, each in its own session.

    Every top-level process is started with ``start_new_session=True``, so one ``killpg`` reaches
    it and everything it started (torchrun's and mpirun's children included).
    """

    def __init__(self, procs: list[subprocess.Popen], log_paths: list[str]):
        self.procs = procs
        self.log_paths = log_paths

    def alive(self) -> bool:
        return any(p.poll() is None for p in self.procs)

    def exit_codes(self) -> list[int | None]:
        return [p.poll() for p in self.procs]

    def stop(self, grace_s: float = 2.0) -> None:
        """SIGTERM every process group, wait (bounded), then SIGKILL, then wait (bounded).

        Bounded at each stage so a stuck kill cannot hang the caller forever.
        """
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            for p in self.procs:
                try:
                    os.killpg(p.pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            deadline = time.monotonic() + wait_s
            for p in self.procs:
                try:
                    p.wait(timeout=max(0.05, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
            if not self.alive() and not _group_members_alive(self.procs):
                return

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]


def _group_members_alive(procs) -> bool:
    for p in procs:
        try:
            os.killpg(p.pid, 0)
            return True
        except (ProcessLookupError, PermissionError):
            continue
    return False


class Launcher(Protocol):
    name: str

    def check(self) -> None:
        """Raise SetupError with one clear line when this launcher cannot run here."""

    def start(self, world_size: int, env: dict, run_dir: str) -> GroupProcesses:
        """Start ``world_size`` workers (``python -m harness.runner.rank.worker``) with ``env``."""


def python() -> str:
    return sys.executable
