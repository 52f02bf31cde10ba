"""The patched emulated stack plus a per-group amax arena keyed by ``id(group)``, never pruned.

On the first build on a process group the stack makes that group an arena (a tensor standing
for the group's amax workspace, TE keys its autocast buffers on the recipe and the group) and
files it under ``id(group)``; nothing removes an entry when its group is destroyed, so a group
born later at a dead group's address finds the dead one's arena. The stack declares the arena
in ``registries()``. While the process group a stack receives lives as long as the rank, no
entry ever outlives its group.

    ./scripts/run --sut tests.planted.group_id_registry:STACK

Its tests: ``tests/test_group_death.py``.
"""

from __future__ import annotations

import torch

from harness.stacks.emulated.stack import EmulatedStack

ARENAS: dict[int, torch.Tensor] = {}


class GroupIdRegistryStack(EmulatedStack):
    def __init__(self):
        super().__init__(buggy=False)
        self.name = "planted-group-id-registry"

    def build(self, spec, ctx):
        if ctx.group is not None:
            ARENAS.setdefault(id(ctx.group), torch.zeros(4))       # the bug: never pruned
        return super().build(spec, ctx)

    def registries(self) -> dict:
        return {**super().registries(), "group_arena.ARENAS": ARENAS}

    def reset(self) -> None:
        super().reset()
        ARENAS.clear()


STACK = GroupIdRegistryStack()
