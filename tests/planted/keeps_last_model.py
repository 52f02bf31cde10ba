"""The patched emulated stack plus a module global that keeps the last model built alive.

    ./scripts/run --sut tests.planted.keeps_last_model:STACK --cases repro/hygiene
"""

from __future__ import annotations

from harness.stacks.emulated.stack import EmulatedStack

LAST_MODEL = None


class KeepsLastModelStack(EmulatedStack):
    def __init__(self):
        super().__init__(buggy=False)
        self.name = "planted-keeps-last-model"

    def build(self, spec, ctx):
        global LAST_MODEL
        LAST_MODEL = super().build(spec, ctx)
        return LAST_MODEL

    def reset(self) -> None:
        global LAST_MODEL
        super().reset()
        LAST_MODEL = None


STACK = KeepsLastModelStack()
