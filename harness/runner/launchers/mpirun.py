"""Ranks started by ``mpirun`` (MPICH's hydra from the ``mpich`` pip package, or any on PATH).

Rank and size come from the PMI environment hydra sets (``PMI_RANK``/``PMI_SIZE``); with a
controller, nothing else needs MPI. In SPMD mode mpi4py bootstraps the rendezvous instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from harness.errors import SetupError
from harness.runner.launchers.protocol import WORKER_MODULE, GroupProcesses, python

__harness_hidden__ = True


def mpirun_path() -> str | None:
    """``$HARNESS_MPIRUN`` if set, else ``mpirun`` on PATH (./scripts/* put the venv's bin first)."""
    return os.environ.get("HARNESS_MPIRUN") or shutil.which("mpirun")


class MpirunLauncher:
    name = "mpirun"

    def check(self) -> None:
        if mpirun_path() is None:
            raise SetupError("--launcher mpirun: no mpirun on PATH; `pip install mpich mpi4py` provides one, "
                             "then put that environment's bin folder on PATH (./scripts/run does)")

    def start(self, world_size: int, env: dict, run_dir: str) -> GroupProcesses:
        self.check()
        log = os.path.join(run_dir, "mpirun.log")
        cmd = [mpirun_path(), "-np", str(world_size), python(), "-m", WORKER_MODULE]
        with open(log, "wb") as fh:
            proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        return GroupProcesses([proc], [log])
