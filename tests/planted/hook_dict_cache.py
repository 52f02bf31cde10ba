"""The patched emulated stack plus an ``id()``-keyed cache kept in the closure of a hook that is
reached only through a module-level dict of hooks.

``_HOOKS["post_build"]`` is called for each FP8 weight a build makes; its closure's
``first_scale_inv`` maps ``id(weight._data)`` to the scale_inv that storage had at its first
build, and hands it back to a later weight whose storage has a remembered id. Entries are never
removed, and the cache is not among the stack's ``registries()``; no module global, class
attribute or module-level function names it.

    ./scripts/run --sut tests.planted.hook_dict_cache:STACK
"""

from __future__ import annotations

from harness.stacks.emulated.stack import EmulatedStack


def _make_hooks() -> dict:
    first_scale_inv: dict = {}

    def post_build(weight) -> None:
        remembered = first_scale_inv.setdefault(id(weight._data), weight._scale_inv.clone())
        weight._scale_inv = remembered.clone()

    def clear() -> None:
        first_scale_inv.clear()

    return {"post_build": post_build, "clear": clear}


_HOOKS = _make_hooks()


class HookDictCacheStack(EmulatedStack):
    def __init__(self):
        super().__init__(buggy=False)
        self.name = "planted-hook-dict-cache"

    def build(self, spec, ctx):
        model = super().build(spec, ctx)
        for layer in model.layers:
            if getattr(layer, "fp8_weight", False):
                _HOOKS["post_build"](layer.weight)
        return model

    def reset(self) -> None:
        super().reset()
        _HOOKS["clear"]()


STACK = HookDictCacheStack()
