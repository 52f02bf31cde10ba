"""The default launcher: the controller starts every rank itself (gloo on CPU)."""

from __future__ import annotations

import os
import subprocess

from harness.runner.launchers.protocol import WORKER_MODULE, GroupProcesses, python

__harness_hidden__ = True


class SpawnLauncher:
    name = "spawn"

    def check(self) -> None:
        return None

    def start(self, world_size: int, env: dict, run_dir: str) -> GroupProcesses:
        procs, logs = [], []
        for rank in range(world_size):
            log = os.path.join(run_dir, f"rank{rank}.log")
            rank_env = dict(env, RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
            with open(log, "wb") as fh:
                procs.append(subprocess.Popen([python(), "-m", WORKER_MODULE], env=rank_env, stdout=fh,
                                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                              start_new_session=True))
            logs.append(log)
        return GroupProcesses(procs, logs)
