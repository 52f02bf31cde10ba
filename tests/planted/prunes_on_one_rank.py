"""The patched emulated stack plus a ``destroy()`` that prunes the dead model's metas from the
global amax buffers, on rank 1 only (the other ranks keep them, as TE does).

From the next model on, rank 1's buffers hold fewer metas than rank 0's, and its amax all-reduce
is shorter.

    ./scripts/run --sut tests.planted.prunes_on_one_rank:STACK --cases delayed/wide
"""

from __future__ import annotations

from harness.stacks.emulated.amax_buffers import GLOBAL_AMAX_BUFFERS
from harness.stacks.emulated.stack import EmulatedStack


class PrunesOnOneRankStack(EmulatedStack):
    def __init__(self):
        super().__init__(buggy=False)
        self.name = "planted-prunes-on-one-rank"
        self.rank = 0

    def build(self, spec, ctx):
        self.rank = ctx.rank
        return super().build(spec, ctx)

    def destroy(self, model) -> None:
        super().destroy(model)
        if self.rank != 1:
            return
        mine = {id(meta) for layer in model.layers for meta in (layer.meta_fwd, layer.meta_bwd)}
        buffers = GLOBAL_AMAX_BUFFERS.buffers
        for key in list(buffers):
            buffers[key] = [meta for meta in buffers[key] if id(meta) not in mine]


STACK = PrunesOnOneRankStack()
