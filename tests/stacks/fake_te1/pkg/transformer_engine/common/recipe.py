"""CPU stand-in of transformer_engine.common.recipe (TE 1.x): Format and DelayedScaling."""

import dataclasses
import enum


@dataclasses.dataclass(frozen=True)
class _FormatHelper:
    max_fwd: float
    max_bwd: float


class Format(enum.Enum):
    E4M3 = _FormatHelper(448.0, 448.0)
    E5M2 = _FormatHelper(57344.0, 57344.0)
    HYBRID = _FormatHelper(448.0, 57344.0)


@dataclasses.dataclass
class DelayedScaling:
    margin: int = 0
    fp8_format: Format = Format.HYBRID
    amax_history_len: int = 1024
    amax_compute_algo: str = "max"
    reduce_amax: bool = True

    def __str__(self):
        return (f"margin={self.margin}, format={self.fp8_format.name}, amax_history_len={self.amax_history_len}, "
                f"amax_compute_algo={self.amax_compute_algo}, reduce_amax={self.reduce_amax}")
