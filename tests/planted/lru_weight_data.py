"""The patched emulated stack plus a master-weight cache in an ``lru_cache`` keyed by ``id(weight._data)``.

``_master_of(id(layer.weight._data))`` (a ``functools.lru_cache``: its table lives in C, under
the function) hands every FP8 weight a dict of its own; a build keeps the layer's fp32 master
weight there on first sight and takes it from there afterwards. Entries are never removed. A
new weight whose storage is born at a dead one's address (the reuse the harness forces) starts
its optimizer steps from the dead weight's master; every dead weight's id stays in the table.

    ./scripts/run --sut tests.planted.lru_weight_data:STACK
"""

from __future__ import annotations

import functools

from harness.stacks.emulated.stack import EmulatedStack


@functools.lru_cache(maxsize=None)
def _master_of(data_id: int) -> dict:
    return {}


class LruWeightDataStack(EmulatedStack):
    def __init__(self):
        super().__init__(buggy=False)
        self.name = "planted-lru-weight-data"

    def build(self, spec, ctx):
        model = super().build(spec, ctx)
        for i, layer in enumerate(model.layers):
            if layer.fp8_weight and model.master[i] is not layer.weight:
                model.master[i] = _master_of(id(layer.weight._data)).setdefault("master", model.master[i])
        return model

    def reset(self) -> None:
        super().reset()
        _master_of.cache_clear()


STACK = LruWeightDataStack()
