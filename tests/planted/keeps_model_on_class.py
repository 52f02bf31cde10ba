"""The patched emulated stack plus a class attribute that keeps the last model built alive.

``Registry`` is defined when the module is imported, which a rank does before it freezes its
heap (``gc.freeze``): the class's namespace is then in the permanent generation, where the
collector's referrer search does not look.

    ./scripts/run --sut tests.planted.keeps_model_on_class:STACK --cases repro/hygiene
"""

from __future__ import annotations

from harness.stacks.emulated.stack import EmulatedStack


class Registry:
    last_model = None


class KeepsModelOnClassStack(EmulatedStack):
    def __init__(self):
        super().__init__(buggy=False)
        self.name = "planted-keeps-model-on-class"

    def build(self, spec, ctx):
        Registry.last_model = super().build(spec, ctx)
        return Registry.last_model

    def reset(self) -> None:
        super().reset()
        Registry.last_model = None


STACK = KeepsModelOnClassStack()
