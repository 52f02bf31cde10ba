"""Whether this process is one rank of an SPMD launch (torchrun, mpirun), and leaving one together.

Imported by the CLI before torch, so that bad input is seen by every rank of a launch at once.
The SPMD backend itself is :mod:`harness.runner.spmd`.
"""

from __future__ import annotations

import dataclasses
import datetime
import os

__harness_hidden__ = True


@dataclasses.dataclass
class SpmdEnv:
    launcher: str
    rank: int
    world_size: int


def spmd_environment() -> SpmdEnv | None:
    if os.environ.get("HARNESS_WORKER") == "1":
        return None
    if "TORCHELASTIC_RUN_ID" in os.environ and "RANK" in os.environ:
        return SpmdEnv("torchrun", int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
    for rank_var, size_var in (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")):
        if rank_var in os.environ and size_var in os.environ:
            return SpmdEnv("mpirun", int(os.environ[rank_var]), int(os.environ[size_var]))
    return None


def exit_together(env: SpmdEnv, line: str, code: int, timeout_s: float = 30.0) -> None:
    """Bad input seen by every rank of an SPMD launch: each prints ``line`` once and exits ``code``.

    torchrun's agent terminates the other ranks as soon as one exits with an error, so a rank
    that exits first could have a slower peer killed before it said anything. Under torchrun
    the ranks therefore ignore SIGTERM and leave together, after a bounded barrier on the
    agent's store (a rank that never arrives costs ``timeout_s``, not a hang). mpirun (hydra)
    lets every rank finish on its own, so there each rank just leaves.
    """
    import signal
    import sys

    if env.launcher == "torchrun":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print(line, file=sys.stderr, flush=True)
    if env.launcher == "torchrun" and env.world_size > 1:
        try:
            import torch.distributed as dist

            store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                                  timeout=datetime.timedelta(seconds=timeout_s))
            key = f"harness-{os.environ.get('TORCHELASTIC_RUN_ID', '')}/bad-input"
            if store.add(key, 1) >= env.world_size:
                store.set(key + "/all", "1")
            store.wait([key + "/all"], datetime.timedelta(seconds=timeout_s))
        except Exception:
            pass   # no store, or a rank that never came: leave anyway
    sys.stdout.flush()
    os._exit(code)


def remove_empty_agent_folders(environ) -> None:
    """Under torchrun, the empty folders its agent made for this rank under ``--log-dir``
    (``RUN_ID/attempt_N/RANK/``, where ``TORCHELASTIC_ERROR_FILE`` points): removed as the rank
    ends, each only if empty, and the ``--log-dir`` itself when that leaves it empty: a run leaves
    no empty folder behind. What holds a file (an error.json, a log) stays; the last rank to end
    removes the shared ones."""
    error_file = environ.get("TORCHELASTIC_ERROR_FILE")
    if not error_file:
        return
    folder = os.path.dirname(error_file)
    for _ in range(4):
        try:
            os.rmdir(folder)
        except OSError:          # not empty (another rank's, or evidence), or gone already
            return
        folder = os.path.dirname(folder)
