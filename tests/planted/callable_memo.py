"""The patched emulated stack plus an ``id()``-keyed memo held by a module-level callable object.

``memo(layer)`` remembers, under ``id(layer)``, the layer's weight shape at first sight
(``memo.by_module``) and is consulted by every build; entries are never removed, and the memo is
not among the stack's ``registries()``. The memo is callable, so it is neither a plain
singleton nor a function: only its attributes hold the ids.

    ./scripts/run --sut tests.planted.callable_memo:STACK
"""

from __future__ import annotations

from harness.stacks.emulated.stack import EmulatedStack


class Memo:
    def __init__(self):
        self.by_module: dict[int, tuple] = {}

    def __call__(self, layer) -> tuple:
        return self.by_module.setdefault(id(layer), tuple(layer.weight.shape))


memo = Memo()


class CallableMemoStack(EmulatedStack):
    def __init__(self):
        super().__init__(buggy=False)
        self.name = "planted-callable-memo"

    def build(self, spec, ctx):
        model = super().build(spec, ctx)
        for layer in model.layers:
            memo(layer)
        return model

    def reset(self) -> None:
        super().reset()
        memo.by_module.clear()


STACK = CallableMemoStack()
