"""Known-bad stacks for the oracles' own tests: the patched emulated stack with one defect each."""

from __future__ import annotations

import torch.distributed as dist

from harness.stacks.emulated.stack import EmulatedStack


class InputScaleSkew(EmulatedStack):
    """Rank 1 doubles its input scale before each forward of model 1: its ring all-gather chunk is
    then written with a scale its peers do not have (what a rank-local scale update does)."""

    def __init__(self):
        super().__init__(buggy=False)
        self.name = "emulated-patched+input-scale-skew"
        self._models = 0

    def build(self, spec, ctx):
        self._models += 1
        return super().build(spec, ctx)

    def forward_backward(self, model, inputs, grad_output):
        if dist.is_initialized() and dist.get_rank() == 1 and self._models % 2 == 0:
            meta = model.layers[0].meta_fwd
            slot = meta.slot("input")
            meta.scale[slot] = meta.scale[slot] * 2
            meta.scale_inv[slot] = 1.0 / meta.scale[slot]
        return super().forward_backward(model, inputs, grad_output)


INPUT_SCALE_SKEW = InputScaleSkew()
