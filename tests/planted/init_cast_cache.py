"""The patched emulated stack plus an unpruned ``id()``-keyed cache consulted on ``init_cast`` builds.

On an ``init_cast`` build, each FP8 weight's construction cast (its bytes and scale_inv) is kept
in :data:`INIT_CAST_CACHE` under ``id(weight._data)``; a later weight of the same shape whose
``_data`` has a remembered id takes the cached cast instead of its own. Entries are never
removed, so a weight that took a dead weight's id starts from the dead weight's bytes. The cache
is not among the stack's ``registries()``.

    ./scripts/run --sut tests.planted.init_cast_cache:STACK
"""

from __future__ import annotations

from harness.stacks.emulated.stack import EmulatedStack

INIT_CAST_CACHE: dict[int, tuple] = {}


class InitCastCacheStack(EmulatedStack):
    def __init__(self):
        super().__init__(buggy=False)
        self.name = "planted-init-cast-cache"

    def build(self, spec, ctx):
        model = super().build(spec, ctx)
        if spec.fp8_params and spec.construction == "init_cast":
            for layer in model.layers:
                weight = layer.weight
                cached = INIT_CAST_CACHE.get(id(weight._data))
                if cached is not None and cached[0].shape == weight._data.shape:
                    weight._data.copy_(cached[0])
                    weight._scale_inv = cached[1].clone()
                else:
                    INIT_CAST_CACHE[id(weight._data)] = (weight._data.clone(), weight._scale_inv.clone())
        return model

    def reset(self) -> None:
        super().reset()
        INIT_CAST_CACHE.clear()


STACK = InitCastCacheStack()
