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
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self._registered:
            self._registrar(self)
            self._registered = True
        dtype = self.meta_fwd.dtype
        qx, sinv_x = self.meta_fwd.cast("input", x)
        qw, sinv_w = self.weight_fp8()
        self.last_casts = {"input": (qx, sinv_x), "weight": (qw.clone(), sinv_w.clone())}
        if not hasattr(self, "gemm_scale_inv"):
            self.gemm_scale_inv = sinv_w.clone()          # the bug: never refreshed
        x_hp = qx.view(dtype).float() * sinv_x
        w_hp = qw.view(dtype).float() * self.gemm_scale_inv
        return torch.matmul(x_hp, w_hp.t())

    def backward(self, grad_out: torch.Tensor) -> torch.Tensor:
        qw, _ = self.last_casts["weight"]
        self.last_casts["weight"] = (qw, self.gemm_scale_inv)
        try:
            return super().backward(grad_out)
        finally:
            self.last_casts["weight"] = (qw, self.weight_fp8()[1].clone())


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
