"""FP8 meta: one module's amax histories and scales for one direction (TE's ``fp8_meta``).

Forward meta slots: ``input``, ``weight``. Backward meta slots: ``grad_output``,
``grad_input`` (never cast here; kept so forward and backward buffers have TE's shapes).
"""

from __future__ import annotations

import math

import torch

from harness.fp8.recipe import DelayedScalingRecipe

FWD_SLOTS = ("input", "weight")
BWD_SLOTS = ("grad_output", "grad_input")


class Fp8Meta:
    def __init__(self, recipe: DelayedScalingRecipe, forward: bool):
        self.forward = forward
        self.slots = FWD_SLOTS if forward else BWD_SLOTS
        fmt = recipe.fp8_format.forward() if forward else recipe.fp8_format.backward()
        self.dtype = torch.float8_e4m3fn if fmt.value == "E4M3" else torch.float8_e5m2
        n = len(self.slots)
        self.amax_history = torch.zeros(recipe.amax_history_len, n)
        self.scale = torch.ones(n)
        self.scale_inv = torch.ones(n)
        limit = 448.0 if self.dtype == torch.float8_e4m3fn else 57344.0
        self.scaled_max = torch.full((n,), limit * math.ldexp(1.0, -recipe.margin))

    def slot(self, name: str) -> int:
        return self.slots.index(name)

    def cast(self, name: str, hp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cast ``hp`` with slot ``name``'s current scale, record its amax in ``H[0]``; returns
        the FP8 bytes and the scale_inv they were written with (a copy, taken now)."""
        from harness.stacks.emulated.kernels import cast_and_amax

        slot = self.slot(name)
        data, amax = cast_and_amax(hp, self.scale[slot], self.dtype)
        self.record_amax(slot, amax)
        return data, self.scale_inv[slot].clone()

    def record_amax(self, slot: int, amax: torch.Tensor) -> None:
        """H[0] = fmaxf(H[0], amax): H[0] holds the max over every cast since the last reduction."""
        self.amax_history[0, slot] = torch.fmax(self.amax_history[0, slot], amax)
