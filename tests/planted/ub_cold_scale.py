"""The patched emulated stack whose column-parallel Userbuffers layer, in a process that has not
yet built a data-parallel model, casts its chunk into the buffer with the scale of its first step.

The layer takes the scale it casts into the ``qkv`` buffer from a per-process table that the
data-parallel layers fill; until one has been built in the process, the table holds the scale
the layer had at its first step and is never refreshed. Every consumer dequantizes the chunk
with its own, current scale_inv, so from the step after the first scale update each gathered
chunk is mis-scaled, which the chunk header's scale_inv shows (buffer-integrity).

In a plain run the data-parallel cases come first: the shared run of every Userbuffers case
passes. Its isolated re-run is a fresh process that has built nothing else, and fails there.

    ./scripts/run --sut tests.planted.ub_cold_scale:STACK --cases 'delayed/wide or userbuffers/column'
"""

from __future__ import annotations

import torch

from harness.fp8.formats import Fp8Format
from harness.stacks.emulated.autocast import AUTOCAST
from harness.stacks.emulated.stack import EmulatedStack
from harness.stacks.emulated.tp_model import TPLinear
from harness.stacks.emulated.userbuffers import communicators


class ColdScaleTPLinear(TPLinear):
    """Column-parallel with overlap: the buffer cast uses the first step's scale, the GEMM the
    layer's current scale_inv (as every consumer does)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.layout != "column" or not self.overlap or AUTOCAST.depth == 0:
            return super().forward(x)
        from harness.comm import cast_into_buffer, ring_allgather_gemm

        if not self._registered:
            self._registrar(self)
            self._registered = True
        meta = self.meta_fwd
        slot = meta.slot("input")
        if not hasattr(self, "cold_scale"):
            self.cold_scale = meta.scale[slot].clone()     # the bug: never refreshed
        qx, sinv_x = meta.cast("input", x)
        self.last_casts["input"] = (qx, sinv_x)
        w_hp = self._weight_hp()
        fmt = Fp8Format.E4M3 if meta.dtype == torch.float8_e4m3fn else Fp8Format.E5M2
        qkv = communicators(self.group, self.deadline_s)["qkv"]
        staged = cast_into_buffer(qkv, x.float(), self.cold_scale, fmt)
        y = ring_allgather_gemm(qkv, staged, sinv_x, None, w_hp)
        return y + self.bias if self.bias is not None else y


class UbColdScaleStack(EmulatedStack):
    def __init__(self):
        super().__init__(buggy=False)
        self.name = "planted-ub-cold-scale"
        self.table_filled = False      # a data-parallel model was built in this process

    def build(self, spec, ctx):
        model = super().build(spec, ctx)
        if not spec.userbuffers:
            self.table_filled = True
        elif not self.table_filled:
            for layer in model.layers:
                if type(layer) is TPLinear and layer.layout == "column" and layer.overlap:
                    layer.__class__ = ColdScaleTPLinear
        return model


STACK = UbColdScaleStack()
