"""The patched emulated stack plus a GEMM that dequantizes the FP8 weight with a stale scale_inv.

Each Linear keeps the weight's scale_inv from its first forward and multiplies with it ever
after, while the weight's bytes are re-cast (with a new scale_inv) at every optimizer step. The
FP8 state is untouched: the snapshot shows the right bytes and the right scale_inv, so only the
step's output and its input gradient are wrong (from the first step after a re-cast whose
scale changed). In a one-layer model no later cast sees the wrong values either.

    ./scripts/run --sut tests.planted.stale_scale_inv:STACK --cases delayed/wide
"""

from __future__ import annotations

import torch

from harness.stacks.emulated.linear import Linear
from harness.stacks.emulated.stack import EmulatedStack


class StaleScaleInvLinear(Linear):
    """Its GEMMs use the scale_inv of the weight's first forward; what it records is right."""

    def weight_fp8(self):
        data, scale_inv = super().weight_fp8()
        if not hasattr(self, "gemm_scale_inv"):
            self.gemm_scale_inv = scale_inv.clone()       # the bug: never refreshed
        self.true_scale_inv = scale_inv
        return data, self.gemm_scale_inv

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = super().forward(x)
        self._record_true_scale_inv()
        return out

    def backward(self, grad_out: torch.Tensor) -> torch.Tensor:
        data, _ = self.last_casts["weight"]
        self.last_casts["weight"] = (data, self.gemm_scale_inv)     # the dgrad GEMM uses the stale one too
        try:
            return super().backward(grad_out)
        finally:
            self._record_true_scale_inv()

    def _record_true_scale_inv(self) -> None:
        data, _ = self.last_casts["weight"]
        self.last_casts["weight"] = (data, self.true_scale_inv.clone())


class StaleScaleInvStack(EmulatedStack):
    def __init__(self):
        super().__init__(buggy=False)
        self.name = "planted-stale-scale-inv"

    def build(self, spec, ctx):
        model = super().build(spec, ctx)
        for layer in getattr(model, "layers", ()):
            if type(layer) is Linear:
                layer.__class__ = StaleScaleInvLinear
        return model


STACK = StaleScaleInvStack()
