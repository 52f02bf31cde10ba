"""Process-global amax buffers (TE's ``FP8GlobalStateManager``), shared by every model.

On a module's first forward inside an autocast, its forward and backward metas are appended to
one buffer per key. Reduction concatenates every ``H[0]`` of a buffer, MAX-all-reduces it over
the key's fp8 group and runs the fused update on every meta of the buffer.

Like TE (main branch included), nothing is ever removed except by :meth:`reset`: a process that
builds and destroys many models keeps every dead module's metas alive and reduces them at every
autocast exit. The harness's retention report shows this growth.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from harness.stacks.emulated.kernels import fused_amax_and_scale_update


def autocast_key(recipe, group) -> tuple:
    """Unique key of (recipe, fp8 group), like TE's ``get_unique_autocast_key``."""
    ranks = tuple(dist.get_process_group_ranks(group)) if group is not None else (0,)
    return (tuple(sorted(recipe.to_dict().items())), ranks)


class AmaxBuffers:
    def __init__(self):
        self.buffers: dict[tuple, list] = {}          # buffer key -> list of Fp8Meta
        self.autocast_arguments: dict[tuple, tuple] = {}  # autocast key -> (recipe, group)

    def register(self, buffer_key: tuple, akey: tuple, recipe, group, meta) -> None:
        self.autocast_arguments[akey] = (recipe, group)
        if group is not None:
            # A group made since replaces a dead one of the same ranks in every key (the harness
            # destroys and recreates groups; TE keeps each key's first group, see group_death).
            for key, (other_recipe, other) in list(self.autocast_arguments.items()):
                if other is not group and key[-1] == akey[-1]:
                    self.autocast_arguments[key] = (other_recipe, group)
        self.buffers.setdefault(buffer_key, []).append(meta)

    def reduce_and_update(self, forward: bool, select=lambda key: True) -> None:
        """Reduce and update every buffer of one direction (and, optionally, a key filter)."""
        for key, metas in list(self.buffers.items()):
            if key[0] != ("fwd" if forward else "bwd") or not select(key) or not metas:
                continue
            recipe, group = self.autocast_arguments[key[-1]]
            contiguous_amax = torch.cat([m.amax_history[0] for m in metas])
            if recipe.reduce_amax and group is not None and dist.get_world_size(group) > 1:
                dist.all_reduce(contiguous_amax, op=dist.ReduceOp.MAX, group=group)
            # One fused update over the whole buffer (TE launches one kernel for all of it),
            # then every meta gets its slice back.
            use_max = recipe.amax_compute_algo.value == "max"
            history = torch.cat([m.amax_history for m in metas], dim=1)
            scale = torch.cat([m.scale for m in metas])
            scale_inv = torch.cat([m.scale_inv for m in metas])
            scaled_max = torch.cat([m.scaled_max for m in metas])
            fused_amax_and_scale_update(contiguous_amax, history, scale, scale_inv, scaled_max, use_max)
            offset = 0
            for meta in metas:
                n = meta.scale.numel()
                meta.amax_history.copy_(history[:, offset:offset + n])
                meta.scale.copy_(scale[offset:offset + n])
                meta.scale_inv.copy_(scale_inv[offset:offset + n])
                offset += n

    def reset(self) -> None:
        self.buffers.clear()
        self.autocast_arguments.clear()


GLOBAL_AMAX_BUFFERS = AmaxBuffers()
