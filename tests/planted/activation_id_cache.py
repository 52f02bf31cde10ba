"""The patched emulated stack plus a cache keyed by the ``id()`` of each layer's input activation.

``ROWS_BY_INPUT[id(x)]`` remembers the row count of every input a Linear's forward sees (the way
a cast cache keyed by the input tensor's id would); entries are never removed. The activations
die at the end of their step, so the table fills with dead activations' ids, and an input born
at a dead one's address finds the dead one's entry. Nothing of the model is keyed: a report
that says the ids are a weight's or a master tensor's blames the wrong object.

    ./scripts/run --sut tests.planted.activation_id_cache:STACK
"""

from __future__ import annotations

import torch

from harness.stacks.emulated.linear import Linear
from harness.stacks.emulated.stack import EmulatedStack

ROWS_BY_INPUT: dict[int, int] = {}


class ActivationIdCacheLinear(Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ROWS_BY_INPUT.setdefault(id(x), x.shape[0])      # the bug: keyed by an activation's id
        return super().forward(x)


class ActivationIdCacheStack(EmulatedStack):
    def __init__(self):
        super().__init__(buggy=False)
        self.name = "planted-activation-id-cache"

    def build(self, spec, ctx):
        model = super().build(spec, ctx)
        for layer in getattr(model, "layers", ()):
            if type(layer) is Linear:
                layer.__class__ = ActivationIdCacheLinear
        return model

    def reset(self) -> None:
        super().reset()
        ROWS_BY_INPUT.clear()


STACK = ActivationIdCacheStack()
