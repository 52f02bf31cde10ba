"""The patched emulated stack with the narrower reference of ``--sut te``: what a stack whose
reference leaves tensors out reports (tests/test_diff.py reads which tensors its report marks
compared). Not a defect: every tensor it does compare is right."""

from __future__ import annotations

import dataclasses

from harness.stacks.emulated.stack import EmulatedStack
from harness.stacks.te_common.compared import expected_model


class NarrowReference(EmulatedStack):
    def __init__(self):
        super().__init__(buggy=False)
        self.name = "emulated-patched+te-reference"

    def snapshot(self, model):
        # what TE's snapshot shows: no meta scale_inv; FP8 bytes of the weights only
        out = {}
        for key, st in super().snapshot(model).items():
            weight = key.endswith(".weight")
            out[key] = dataclasses.replace(st, scale_inv=None, fp8_bytes=st.fp8_bytes if weight else None,
                                           fp8_scale_inv=st.fp8_scale_inv if weight else None)
        return out

    def expected_model(self, case, run_seed, world_size, rank, model_index):
        return expected_model(case, run_seed, world_size, rank, model_index)


STACK = NarrowReference()
