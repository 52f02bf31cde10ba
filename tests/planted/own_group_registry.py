"""The patched emulated stack plus a process group of its own per model, and a table keyed by its id.

Each build makes a process group of every rank for the model's own use (the way a layer makes a
communicator of its own), keeps it on the model and files a workspace for it under ``id(group)``
in ``WORKSPACES``; ``destroy()`` destroys the group but never removes its entry. The model's
group dies with the model, so the table fills with dead groups' ids, and a group born later at a
dead one's address finds the dead one's workspace. Nothing else is keyed: a report must name the
id as a process group's, not a weight's, an activation's or an unknown object's. With one rank
(no process group) the stack makes none.

    ./scripts/run --sut tests.planted.own_group_registry:STACK

Its test: ``tests/test_culprit_groups.py``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from harness.stacks.emulated.stack import EmulatedStack

WORKSPACES: dict[int, torch.Tensor] = {}


class OwnGroupRegistryStack(EmulatedStack):
    def __init__(self):
        super().__init__(buggy=False)
        self.name = "planted-own-group-registry"

    def build(self, spec, ctx):
        model = super().build(spec, ctx)
        if ctx.group is not None:
            model.own_group = dist.new_group(list(range(ctx.world_size)))
            WORKSPACES.setdefault(id(model.own_group), torch.zeros(4))       # the bug: never pruned
        return model

    def destroy(self, model) -> None:
        group = getattr(model, "own_group", None)
        if group is not None:
            dist.destroy_process_group(group)
        super().destroy(model)

    def reset(self) -> None:
        super().reset()
        WORKSPACES.clear()


STACK = OwnGroupRegistryStack()
