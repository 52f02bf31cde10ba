"""The patched emulated stack whose tensor-parallel layer adds its bias to the output twice.

The layer's forward returns ``y + b`` and this one adds ``b`` once more: the bias is zeros when the
layer is built, so the first step's output is right; from the second step on (the bias has had an
SGD update) the output is off by ``b``. No FP8 state is touched: every amax, scale and byte the
snapshot shows is right, so only a comparison of what the step returned sees it.

    ./scripts/run --sut tests.planted.tp_bias_twice:STACK --cases userbuffers/column-bias
"""

from __future__ import annotations

import torch

from harness.stacks.emulated.stack import EmulatedStack
from harness.stacks.emulated.tp_model import TPLinear


class BiasTwiceTPLinear(TPLinear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = super().forward(x)
        return y + self.bias if self.bias is not None else y      # the bug: already added


class TPBiasTwiceStack(EmulatedStack):
    def __init__(self):
        super().__init__(buggy=False)
        self.name = "planted-tp-bias-twice"

    def build(self, spec, ctx):
        model = super().build(spec, ctx)
        for layer in getattr(model, "layers", ()):
            if type(layer) is TPLinear:
                layer.__class__ = BiasTwiceTPLinear
        return model


STACK = TPBiasTwiceStack()
