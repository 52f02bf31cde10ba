"""SPMD mode: ``torchrun ... -m harness run`` and ``mpirun ... python -m harness run``.

Placeholder until the multi-process runner lands: detects the launcher's environment.
"""

from __future__ import annotations

import dataclasses
import os


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
