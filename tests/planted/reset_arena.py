"""The patched emulated stack plus a per-group arena of master weights that survives ``reset()``.

``ARENAS[(world size, rank)]`` is a scratch arena per process group, keyed by the group's shape
(so that a recreated group finds it again). A build takes each layer's fp32 master weight from
the arena's slot for the weight's shape when one is there, and puts its own there otherwise;
``reset()`` clears the stack's registries but not the arenas. A model whose shapes an earlier
model (of this case or of an earlier one) had starts its optimizer steps from that model's
initial master weight: the FP8 state after its first optimizer step is wrong, and the run alone
(in a fresh process) differs from the run after other cases.

    ./scripts/run --sut tests.planted.reset_arena:STACK
"""

from __future__ import annotations

from harness.stacks.emulated.stack import EmulatedStack

ARENAS: dict[tuple, dict] = {}


class ResetArenaStack(EmulatedStack):
    def __init__(self):
        super().__init__(buggy=False)
        self.name = "planted-reset-arena"

    def build(self, spec, ctx):
        model = super().build(spec, ctx)
        arena = ARENAS.setdefault((ctx.world_size, ctx.rank), {})
        for i, layer in enumerate(model.layers):
            if layer.fp8_weight and model.master[i] is not layer.weight:
                model.master[i] = arena.setdefault(tuple(model.master[i].shape), model.master[i])
        return model


STACK = ResetArenaStack()
