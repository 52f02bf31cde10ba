"""Ranks started by ``torchrun --standalone`` (its rendezvous binds a port the OS chooses)."""

from __future__ import annotations

import os
import shutil
import subprocess

from harness.errors import SetupError
from harness.runner.launchers.protocol import WORKER_MODULE, GroupProcesses, python

__harness_hidden__ = True


def torchrun_path() -> str | None:
    beside = os.path.join(os.path.dirname(python()), "torchrun")
    return beside if os.path.exists(beside) else shutil.which("torchrun")


def agent_log_dir(run_dir: str) -> str:
    """Where the torchrun agent of a group keeps its per-rank folders (error files): in the run folder."""
    return os.path.join(run_dir, "torchelastic")


class TorchrunLauncher:
    name = "torchrun"

    def check(self) -> None:
        if torchrun_path() is None:
            raise SetupError("--launcher torchrun: no torchrun beside this Python or on PATH (it ships with torch)")

    def start(self, world_size: int, env: dict, run_dir: str) -> GroupProcesses:
        self.check()
        log = os.path.join(run_dir, "torchrun.log")
        # Without --log-dir, torchrun's agent makes a /tmp/torchelastic_* folder per launch and
        # never removes it (548 of them on this machine after a day of tests and fault matrices).
        # Inside the run folder, the agent's folder goes with the group's clean-up and sweep.
        cmd = [torchrun_path(), "--standalone", "--nnodes", "1", "--nproc-per-node", str(world_size),
               "--max-restarts", "0", "--log-dir", agent_log_dir(run_dir), "-m", WORKER_MODULE]
        with open(log, "wb") as fh:
            proc = subprocess.Popen(cmd, env=dict(env, OMP_NUM_THREADS="1"), stdout=fh, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        return GroupProcesses([proc], [log])
