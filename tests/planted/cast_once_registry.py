"""The patched emulated stack plus a declared registry of weight storages, never pruned.

On an ``init_cast`` build every FP8 weight's storage id goes into :data:`CAST_ONCE` (declared
among ``registries()``), and nothing takes it out when the model dies. Builds of other
constructions never touch it: a later case whose weights are born at those addresses (forced
reuse hands them on from case to case) did not store the entries it then seems to hold.

    ./scripts/run --sut tests.planted.cast_once_registry:STACK --cases 'reuse/init-cast-symmetric or reuse/copy-symmetric'
"""

from __future__ import annotations

from harness.stacks.emulated.stack import EmulatedStack

CAST_ONCE: set[int] = set()


class CastOnceRegistryStack(EmulatedStack):
    def __init__(self):
        super().__init__(buggy=False)
        self.name = "planted-cast-once-registry"

    def build(self, spec, ctx):
        model = super().build(spec, ctx)
        if spec.fp8_params and spec.construction == "init_cast":
            CAST_ONCE.update(id(layer.weight._data) for layer in model.layers)
        return model

    def registries(self) -> dict:
        return {**super().registries(), "cast_once.CAST_ONCE": CAST_ONCE}

    def reset(self) -> None:
        super().reset()
        CAST_ONCE.clear()


STACK = CastOnceRegistryStack()
