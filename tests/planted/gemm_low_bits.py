"""The patched emulated stack with final weights one unit in the last place off the reference,
as a GPU's GEMM accumulation leaves them, and an expectation that leaves the final weights out,
as TE's does.

``OWN_REFERENCE`` declares that expectation (``expected_model``), as ``--sut te`` does; ``NO_OWN_REFERENCE``
does not, so the delayed-scaling reference, final weights included, applies. A case with cycles
runs the long-lived loop, whose checks must ask the same reference as the case's models:

    ./scripts/run --sut tests.planted.gemm_low_bits:OWN_REFERENCE --case-file FILE
"""

from __future__ import annotations

import dataclasses

import torch

from harness.reference import expected_model
from harness.stacks.emulated.stack import EmulatedStack


class GemmLowBitsStack(EmulatedStack):
    def __init__(self, name: str):
        super().__init__(buggy=False)
        self.name = name

    def final_weights(self, model):
        weights = super().final_weights(model)
        for state in weights.values():
            if state.fp8_bytes is not None and state.fp8_bytes.dtype == torch.float32:
                nudged = state.fp8_bytes.clone().view(torch.int32)
                nudged.view(-1)[0] += 1
                state.fp8_bytes.copy_(nudged.view(torch.float32))
        return weights


class OwnReferenceStack(GemmLowBitsStack):
    def expected_model(self, case, run_seed: int, world_size: int, rank: int, model_index: int):
        full = expected_model(case, run_seed, world_size, rank, model_index)
        return dataclasses.replace(full, final={})


OWN_REFERENCE = OwnReferenceStack("planted-gemm-low-bits-own-reference")
NO_OWN_REFERENCE = GemmLowBitsStack("planted-gemm-low-bits")
