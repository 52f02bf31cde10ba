"""The patched emulated stack whose last layer, in a process forked from the one that created the
stack, multiplies with a stale weight scale_inv.

The stack refreshes the scale_inv its last layer's GEMMs use only in the process that created
it (a refresh guarded by the creating process's pid, the way fork-safety code often guards a
cache). A forked child inherits the cache and never refreshes it: from the first step after the
weight's scale changed, its last layer's output and input gradient are wrong, while every FP8
tensor it records is right. A rank that imported the stack itself runs correctly; the isolated
re-run of a case, a child forked from the rank's zygote, does not.

    ./scripts/run --sut tests.planted.forked_stale_gemm:STACK --cases delayed/hybrid-h16-max-m0
"""

from __future__ import annotations

import os

from harness.stacks.emulated.linear import Linear
from harness.stacks.emulated.stack import EmulatedStack
from tests.planted.stale_scale_inv import StaleScaleInvLinear


class ForkedStaleGemmStack(EmulatedStack):
    def __init__(self):
        super().__init__(buggy=False)
        self.name = "planted-forked-stale-gemm"
        self.created_in = os.getpid()

    def build(self, spec, ctx):
        model = super().build(spec, ctx)
        layers = getattr(model, "layers", ())
        if os.getpid() != self.created_in and layers and type(layers[-1]) is Linear:
            layers[-1].__class__ = StaleScaleInvLinear      # the bug: the cache is never refreshed here
        return model


STACK = ForkedStaleGemmStack()
