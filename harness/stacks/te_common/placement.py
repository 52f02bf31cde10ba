"""Where each rank of a TE stack runs, and what TE's amax reductions and the gradient sync travel over.

One GPU per rank is TE's own set-up: every rank on a GPU of its own, an NCCL group for TE's amax
reductions and for the data-parallel gradient sync. When a host runs more ranks than it has
GPUs, the ranks share them, placed round-robin (local rank ``r`` on GPU ``r % gpus``), and both
go over **gloo** instead: NCCL refuses two ranks on one device ("Duplicate GPU detected"), while
gloo reduces CUDA tensors through host memory. TE's reductions are the same calls either way
(``torch.distributed.all_reduce(MAX)`` on the concatenated amaxes, over the group the autocast
was given), so what each rank issues, in what order and from which line, does not change:
only the transport does. That sequence is what the id-reuse bug breaks, so sharing a GPU keeps
the bug's cross-rank damage in reach of a machine with one GPU.

What sharing cannot carry: Userbuffers (TE maps its peers' buffers through CUDA IPC between
distinct devices and refuses one device: "No peer-to-peer access available between GPUs") and
TE's plain NCCL tensor-parallel collectives. :func:`shared_gpu_reason` says so for the cases
that need them.

The choice is a pure function of the ranks on this host and the GPUs it sees, so every rank of a
launch makes the same one (hosts of one launch are alike), and a repro command run on the same
machine is placed the same way. Plain Python: nothing here starts CUDA.
"""

from __future__ import annotations

import dataclasses
import enum
import os

# How the launchers say how many ranks run on this host, and which one this is
# (torchrun; MPICH's hydra; Open MPI). The spawn launcher runs every rank on one host.
LOCAL_SIZE_VARIABLES = ("LOCAL_WORLD_SIZE", "MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE")
LOCAL_RANK_VARIABLES = ("LOCAL_RANK", "MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK")

UB_ON_SHARED_GPU = ("TE's Userbuffers map each peer's buffer from another GPU through CUDA IPC and refuse "
                    "ranks on one GPU (\"No peer-to-peer access available between GPUs\")")
NCCL_ON_SHARED_GPU = "TE's tensor-parallel collectives without overlap are NCCL's, which refuses two ranks on one GPU"


class Transport(str, enum.Enum):
    """What TE's amax reductions and the gradient sync go over."""

    NCCL = "nccl"
    GLOO = "gloo"

    __str__ = str.__str__


@dataclasses.dataclass(frozen=True)
class Placement:
    """Ranks on one host and the GPUs it has: which GPU each rank uses, and the transport."""

    local_ranks: int          # ranks this host runs
    gpus: int                 # GPUs this host's ranks may use

    def __post_init__(self):
        if self.local_ranks < 1:
            raise ValueError(f"a host runs at least one rank, got {self.local_ranks}")
        if self.gpus < 1:
            raise ValueError(f"placing ranks needs at least one GPU, got {self.gpus}")

    @property
    def shared(self) -> bool:
        """Whether some GPU runs more than one rank."""
        return self.local_ranks > self.gpus

    @property
    def transport(self) -> Transport:
        return Transport.GLOO if self.shared else Transport.NCCL

    def gpu_of(self, local_rank: int) -> int:
        """Round-robin: local rank ``r`` on GPU ``r % gpus``."""
        return local_rank % self.gpus

    def ranks_per_gpu(self) -> dict[int, list[int]]:
        """GPU index -> the local ranks on it, for every GPU used."""
        out: dict[int, list[int]] = {}
        for rank in range(self.local_ranks):
            out.setdefault(self.gpu_of(rank), []).append(rank)
        return out

    def describe(self) -> str:
        """One line for the report: how the ranks were placed and what TE reduced over."""
        used = self.ranks_per_gpu()
        where = "; ".join(f"GPU {gpu}: rank{'s' * (len(r) > 1)} {','.join(map(str, r))}" for gpu, r in used.items())
        if self.shared:
            return (f"{self.local_ranks} ranks sharing {self.gpus} GPU{'s' * (self.gpus > 1)} round-robin ({where}); "
                    f"TE's amax reductions and the gradient sync over gloo")
        return f"one GPU per rank ({where}); TE's amax reductions and the gradient sync over NCCL"

    def to_dict(self) -> dict:
        return {"local_ranks": self.local_ranks, "gpus": self.gpus, "shared": self.shared,
                "transport": self.transport.value, "ranks_per_gpu": {str(g): r for g, r in self.ranks_per_gpu().items()},
                "description": self.describe()}


def _first_int(names, environ) -> int | None:
    for name in names:
        value = environ.get(name)
        if value is not None and value.strip().isdigit():
            return int(value)
    return None


def local_ranks(world_size: int, environ=None) -> int:
    """The ranks on this host: the launcher's word for it, else the whole group (spawn)."""
    found = _first_int(LOCAL_SIZE_VARIABLES, os.environ if environ is None else environ)
    return found if found is not None else world_size


def local_rank(rank: int, environ=None) -> int:
    """This rank's index on its host: the launcher's word for it, else its rank (spawn)."""
    found = _first_int(LOCAL_RANK_VARIABLES, os.environ if environ is None else environ)
    return found if found is not None else rank


def shared_gpu_reason(overlap: bool) -> str:
    """Why a tensor-parallel case is declined where ranks share a GPU: its Userbuffers (overlap on)
    or its NCCL collectives (overlap off) need a GPU per rank."""
    return UB_ON_SHARED_GPU if overlap else NCCL_ON_SHARED_GPU
