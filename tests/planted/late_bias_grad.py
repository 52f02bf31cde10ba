"""The patched emulated stack whose tensor-parallel layer hands the optimizer a late bias gradient
at a model's last step.

Every Userbuffers case trains each model :data:`STEPS` steps. At the last one the layer's bias
gradient is the one of the step before (it is kept from the step before and handed on one step
late); at every other step it is right. The bias's last update is wrong, and no later step uses
it: no output, no input or weight gradient and no FP8 state shows it, only the bias gradient
itself.

    ./scripts/run --sut tests.planted.late_bias_grad:STACK --cases userbuffers/column-bias
"""

from __future__ import annotations

import torch

from harness.stacks.emulated.stack import EmulatedStack
from harness.stacks.emulated.tp_model import TPLinear

STEPS = 3


class LateBiasGradTPLinear(TPLinear):
    def backward(self, grad_out: torch.Tensor) -> torch.Tensor:
        previous = getattr(self, "bgrad", None)
        dgrad = super().backward(grad_out)
        self.steps_done = getattr(self, "steps_done", 0) + 1
        if self.steps_done == STEPS and previous is not None:
            self.bgrad = previous                          # the bug: the step before's, one step late
        return dgrad


class LateBiasGradStack(EmulatedStack):
    def __init__(self):
        super().__init__(buggy=False)
        self.name = "planted-late-bias-grad"

    def build(self, spec, ctx):
        model = super().build(spec, ctx)
        for layer in getattr(model, "layers", ()):
            if type(layer) is TPLinear:
                layer.__class__ = LateBiasGradTPLinear
        return model


STACK = LateBiasGradStack()
