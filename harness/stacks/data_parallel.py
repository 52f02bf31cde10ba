"""Data-parallel gradient sync shared by the stacks: a sum over ranks in a fixed order.

Every rank's gradient is all-gathered and summed in rank order ``((g_0 + g_1) + g_2) + ...``,
the same on every rank and bit-reproducible, which an all-reduce SUM over more than two ranks
is not (it may add in any order). The references follow the same order.

Over a gloo group (ranks sharing a GPU, :mod:`harness.stacks.te_common.placement`), CUDA gradients are
gathered through host memory and summed there: an fp32 addition rounds the same on either
device, so the sum is the same bits, and gloo's all-gather takes CPU tensors.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def sum_in_rank_order(grads: list[torch.Tensor], group) -> list[torch.Tensor]:
    """Each tensor summed over the group's ranks in rank order (the tensors unchanged alone)."""
    if group is None or dist.get_world_size(group) == 1:
        return grads
    world = dist.get_world_size(group)
    via_host = dist.get_backend(group) == dist.Backend.GLOO
    summed = []
    for g in grads:
        local = g.detach().to("cpu") if via_host else g
        parts = [torch.empty_like(local) for _ in range(world)]
        dist.all_gather(parts, local.contiguous(), group=group)
        total = parts[0]
        for p in parts[1:]:
            total = total + p
        summed.append(total.to(g.device) if via_host else total)
    return summed
