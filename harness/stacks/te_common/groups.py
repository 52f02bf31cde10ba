"""The group TE reduces amaxes over, beside the gloo group the harness runs ranks in, and the rank's GPU.

The runner's process group is gloo (CPU collectives, its precheck and ledger); TE's amax
reductions and our gradient sync move CUDA tensors. With one GPU per rank that is NCCL's job,
so each harness group gets one NCCL group over the same ranks; where ranks share a GPU, NCCL
cannot run and the group is gloo (:mod:`harness.stacks.te_common.placement`). Either way it is made
once and reused by every model built on that harness group: TE's autocast key includes the
group, and one group per model would give every model its own key (and its own communicator).
When the runner replaces its group (a recycle after a failed case), the next build makes a new
one for the new group.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from harness.stacks.te_common.placement import Placement, Transport, local_rank, local_ranks


class AmaxGroups:
    """The amax group for the harness group in use (the last one asked for)."""

    def __init__(self):
        self._harness_group = None
        self._amax_group = None

    def for_group(self, group, transport: Transport = Transport.NCCL):
        """The group over ``group``'s ranks on ``transport`` (``group`` itself when it is one already)."""
        if group is None:
            return None
        if dist.get_backend(group) == transport.value:
            return group
        if group is not self._harness_group:
            # Every rank of the group builds the model at the same point of the case, so every
            # rank arrives here together, as new_group requires.
            ranks = dist.get_process_group_ranks(group)
            self._amax_group = dist.new_group(ranks=ranks, backend=transport.value)
            self._harness_group = group
        return self._amax_group

    def forget(self) -> None:
        self._harness_group = None
        self._amax_group = None


def placement(world_size: int) -> Placement:
    """How this host's ranks sit on its GPUs (``torch.cuda.device_count`` asks NVML: no CUDA context)."""
    return Placement(local_ranks(world_size), max(1, torch.cuda.device_count()))


def select_device(rank: int) -> torch.device:
    """The rank's GPU, round-robin over this host's GPUs (one each where there are enough), made current."""
    index = placement(1).gpu_of(local_rank(rank))
    torch.cuda.set_device(index)
    return torch.device("cuda", index)
