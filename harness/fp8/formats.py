"""The two FP8 formats and their limits.

E4M3 (``float8_e4m3fn``): 4 exponent bits, 3 mantissa bits, no infinities, largest
finite value 448. E5M2 (``float8_e5m2``): 5 exponent bits, 2 mantissa bits, IEEE-like
infinities, largest finite value 57344.
"""

from __future__ import annotations

import enum

import torch


class Fp8Format(enum.Enum):
    E4M3 = "E4M3"
    E5M2 = "E5M2"


E4M3 = Fp8Format.E4M3
E5M2 = Fp8Format.E5M2

_MAX = {Fp8Format.E4M3: 448.0, Fp8Format.E5M2: 57344.0}
_DTYPE = {Fp8Format.E4M3: torch.float8_e4m3fn, Fp8Format.E5M2: torch.float8_e5m2}
# The byte TE's kernels write for a NaN input, whatever its sign (torch keeps the sign bit).
NAN_BYTE = {Fp8Format.E4M3: 0x7F, Fp8Format.E5M2: 0x7F}


def fp8_max(fmt: Fp8Format) -> float:
    """Largest finite value of ``fmt``: 448 (E4M3) or 57344 (E5M2)."""
    return _MAX[fmt]


def torch_dtype(fmt: Fp8Format) -> torch.dtype:
    """The torch dtype holding ``fmt``."""
    return _DTYPE[fmt]
