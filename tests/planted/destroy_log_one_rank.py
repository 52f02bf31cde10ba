"""The patched emulated stack plus a registry of destroyed models that only rank 1 fills.

``destroy()`` counts the dead model in ``DESTROYED`` on rank 1 and not on the others, and the
stack declares ``DESTROYED`` among its registries. A case whose last model dies after its last
collective passes: nothing of it compares the registries again. The next case meets them apart
at its first collective, which is not its doing; the drift is the case before's.

    ./scripts/run --sut tests.planted.destroy_log_one_rank:STACK --cases repro/hygiene,repro/prelude

Its test: ``tests/test_inherited_drift.py``.
"""

from __future__ import annotations

from harness.stacks.emulated.stack import EmulatedStack

DESTROYED: dict[str, int] = {}       # "layers<N>" -> how many such models rank 1 destroyed


class DestroyLogOneRankStack(EmulatedStack):
    def __init__(self):
        super().__init__(buggy=False)
        self.name = "planted-destroy-log-one-rank"
        self.rank = 0

    def build(self, spec, ctx):
        self.rank = ctx.rank
        return super().build(spec, ctx)

    def destroy(self, model) -> None:
        super().destroy(model)
        if self.rank == 1:
            key = f"layers{len(model.layers)}"
            DESTROYED[key] = DESTROYED.get(key, 0) + 1

    def registries(self) -> dict:
        return {**super().registries(), "planted.DESTROYED": DESTROYED}

    def reset(self) -> None:
        super().reset()
        DESTROYED.clear()


STACK = DestroyLogOneRankStack()
