"""The patched emulated stack plus per-module state memoised by ``id(module)`` where no scan sees it.

``_state_of(id(layer))`` (a ``functools.lru_cache``: its table lives in C) hands every layer a
dict of its own state; a build puts the layer's fp32 master weight there on first sight and
takes it from there afterwards (the shape of Megatron's ``_sequence_parallel_attr_cache``, keyed
by ``id(model)``). A new layer born at a dead layer's address gets the dead layer's master weight,
and its first optimizer step starts from it. ``reuse_targets()`` names the weight storages only,
as the emulated stack's does: nothing tells the harness that modules are keyed on.

    ./scripts/run --sut tests.planted.module_id_cache:STACK
"""

from __future__ import annotations

import functools

from harness.stacks.emulated.stack import EmulatedStack


@functools.lru_cache(maxsize=None)
def _state_of(module_id: int) -> dict:
    return {}


class ModuleIdCacheStack(EmulatedStack):
    def __init__(self):
        super().__init__(buggy=False)
        self.name = "planted-module-id-cache"

    def build(self, spec, ctx):
        model = super().build(spec, ctx)
        for i, layer in enumerate(getattr(model, "master", None) and model.layers or ()):
            state = _state_of(id(layer))
            model.master[i] = state.setdefault("master", model.master[i])
        return model

    def reset(self) -> None:
        super().reset()
        _state_of.cache_clear()


STACK = ModuleIdCacheStack()
