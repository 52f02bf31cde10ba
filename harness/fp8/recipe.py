"""The delayed-scaling recipe, as a frozen dataclass checked on construction.

Mirrors TE 1.x ``DelayedScaling``: defaults are TE's (HYBRID, margin 0, history 1024,
'max', reduce_amax on).
"""

from __future__ import annotations

import dataclasses
import enum

from harness.errors import UsageError
from harness.fp8.formats import Fp8Format


class Format(enum.Enum):
    """Which FP8 format each tensor role uses."""

    E4M3 = "E4M3"      # every role E4M3
    E5M2 = "E5M2"      # every role E5M2
    HYBRID = "HYBRID"  # E4M3 forward (inputs, weights), E5M2 backward (gradients)

    def forward(self) -> Fp8Format:
        return Fp8Format.E5M2 if self is Format.E5M2 else Fp8Format.E4M3

    def backward(self) -> Fp8Format:
        return Fp8Format.E4M3 if self is Format.E4M3 else Fp8Format.E5M2


class AmaxComputeAlgo(enum.Enum):
    MAX = "max"
    MOST_RECENT = "most_recent"


@dataclasses.dataclass(frozen=True)
class DelayedScalingRecipe:
    fp8_format: Format = Format.HYBRID
    margin: int = 0
    amax_history_len: int = 1024
    amax_compute_algo: AmaxComputeAlgo = AmaxComputeAlgo.MAX
    reduce_amax: bool = True

    def __post_init__(self):
        # Accept plain strings (from JSON case specs) and normalise them to enums.
        if isinstance(self.fp8_format, str):
            object.__setattr__(self, "fp8_format", _enum(Format, self.fp8_format, "fp8_format"))
        if isinstance(self.amax_compute_algo, str):
            object.__setattr__(self, "amax_compute_algo",
                               _enum(AmaxComputeAlgo, self.amax_compute_algo, "amax_compute_algo"))
        if not isinstance(self.margin, int) or isinstance(self.margin, bool):
            raise UsageError(f"recipe margin must be an integer, got {self.margin!r}")
        if not isinstance(self.amax_history_len, int) or self.amax_history_len < 1:
            raise UsageError(f"recipe amax_history_len must be an integer >= 1, got {self.amax_history_len!r}")
        if not isinstance(self.reduce_amax, bool):
            raise UsageError(f"recipe reduce_amax must be true or false, got {self.reduce_amax!r}")

    def to_dict(self) -> dict:
        return {
            "fp8_format": self.fp8_format.value,
            "margin": self.margin,
            "amax_history_len": self.amax_history_len,
            "amax_compute_algo": self.amax_compute_algo.value,
            "reduce_amax": self.reduce_amax,
        }

    @classmethod
    def from_dict(cls, data: dict) -> "DelayedScalingRecipe":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise UsageError(f"unknown recipe field {unknown[0]!r}; known fields: {', '.join(sorted(known))}")
        return cls(**data)

    def short(self) -> str:
        algo = "max" if self.amax_compute_algo is AmaxComputeAlgo.MAX else "recent"
        return f"{self.fp8_format.value.lower()}-h{self.amax_history_len}-{algo}-m{self.margin}"


def _enum(kind, value, field):
    for member in kind:
        if member.value.lower() == str(value).lower() or member.name.lower() == str(value).lower():
            return member
    raise UsageError(f"recipe {field} {value!r} is not one of {', '.join(m.value for m in kind)}")
