"""One FP8 tensor role's state as stacks report it and the reference computes it."""

from __future__ import annotations

import dataclasses
from typing import Mapping, Optional

import torch


@dataclasses.dataclass
class RoleState:
    """One FP8 tensor role's state: its meta (history, scale, scale_inv) and the bytes of its cast.

    ``fp8_bytes`` are uint8 bit patterns; ``fp8_scale_inv`` is the scale_inv the bytes were
    written with (a weight's private copy, taken at its own cast).
    """

    amax_history: torch.Tensor
    scale: torch.Tensor
    scale_inv: torch.Tensor
    fp8_bytes: Optional[torch.Tensor] = None
    fp8_scale_inv: Optional[torch.Tensor] = None


Snapshot = Mapping[str, RoleState]
