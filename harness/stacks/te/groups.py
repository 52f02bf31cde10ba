"""The NCCL group TE reduces amaxes over, beside the gloo group the harness runs ranks in.

The runner's process group is gloo (CPU collectives, its precheck and ledger); TE's amax
reductions and our gradient sync move CUDA tensors, which is NCCL's job. So each harness
group gets one NCCL group over the same ranks, made once and reused by every model built on
that group: TE's autocast key includes the group, and one group per model would give every
model its own key (and its own NCCL communicator). When the runner replaces its group (a
recycle after a failed case), the next build makes a new NCCL group for the new one.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


class AmaxGroups:
    """The NCCL group for the harness group in use (the last one asked for)."""

    def __init__(self):
        self._harness_group = None
        self._nccl_group = None

    def for_group(self, group):
        """The NCCL group over ``group``'s ranks (``group`` itself when it is NCCL already)."""
        if group is None:
            return None
        if dist.get_backend(group) == dist.Backend.NCCL:
            return group
        if group is not self._harness_group:
            # Every rank of the group builds the model at the same point of the case, so every
            # rank arrives here together, as new_group requires.
            ranks = dist.get_process_group_ranks(group)
            self._nccl_group = dist.new_group(ranks=ranks, backend="nccl")
            self._harness_group = group
        return self._nccl_group

    def forget(self) -> None:
        self._harness_group = None
        self._nccl_group = None


def select_device(rank: int) -> torch.device:
    """One GPU per rank (rank modulo the GPUs here), made the current device."""
    index = rank % torch.cuda.device_count()
    torch.cuda.set_device(index)
    return torch.device("cuda", index)
