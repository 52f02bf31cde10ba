"""The value a bit pattern stands for, per dtype, without torch: what ``diff`` prints beside it.

A report carries a one-element tensor as its bit pattern (``=43e00000``,
:mod:`harness.fp8.digest`); ``python -m harness diff`` shows the value next to it. Reading a
report needs no torch (importing it takes seconds), so the formats are decoded here from their
definitions: IEEE binary16/32/64 through :mod:`struct`, bfloat16 as the top half of a binary32,
FP8 E4M3 (bias 7, no infinities, S.1111.111 is NaN) and E5M2 (bias 15, IEEE-like) by hand.
``tests/test_diff.py`` checks every dtype against torch's own reading of the same bits.
"""

from __future__ import annotations

import math
import struct

_WIDTH = {"float64": 64, "float32": 32, "float16": 16, "bfloat16": 16, "float8_e4m3fn": 8, "float8_e5m2": 8,
          "uint8": 8, "int8": 8, "int32": 32, "int64": 64}
EXACT = "="       # what starts an exact token (harness.fp8.digest.EXACT)


def _fp8(bits: int, exp_bits: int, bias: int, ieee_specials: bool) -> float:
    mant_bits = 7 - exp_bits
    sign = -1.0 if bits & 0x80 else 1.0
    exp = (bits >> mant_bits) & ((1 << exp_bits) - 1)
    mant = bits & ((1 << mant_bits) - 1)
    top = (1 << exp_bits) - 1
    if ieee_specials and exp == top:
        return sign * math.inf if mant == 0 else math.nan
    if not ieee_specials and exp == top and mant == (1 << mant_bits) - 1:
        return math.nan
    if exp == 0:
        return sign * math.ldexp(mant, 1 - bias - mant_bits)
    return sign * math.ldexp((1 << mant_bits) + mant, exp - bias - mant_bits)


def value_of_bits(bits: int, dtype: str) -> float | int:
    """The value of ``bits`` read as one ``dtype`` element (``float32`` or ``torch.float32``)."""
    dtype = dtype.replace("torch.", "")
    if dtype == "float64":
        return struct.unpack("<d", bits.to_bytes(8, "little"))[0]
    if dtype == "float32":
        return struct.unpack("<f", bits.to_bytes(4, "little"))[0]
    if dtype == "float16":
        return struct.unpack("<e", bits.to_bytes(2, "little"))[0]
    if dtype == "bfloat16":
        return struct.unpack("<f", (bits << 16).to_bytes(4, "little"))[0]
    if dtype == "float8_e4m3fn":
        return _fp8(bits, 4, 7, ieee_specials=False)
    if dtype == "float8_e5m2":
        return _fp8(bits, 5, 15, ieee_specials=True)
    if dtype == "uint8":
        return bits
    if dtype in ("int8", "int32", "int64"):
        width = _WIDTH[dtype]
        return bits - (1 << width) if bits >> (width - 1) else bits
    raise KeyError(dtype)


def value_of(tok: str, dtype: str) -> str | None:
    """The value an exact token (``=`` + bits) of a ``dtype`` tensor stands for, as Python prints
    it (``448.0``); None for a hashed token, a dtype this cannot read or bits too wide for it."""
    width = _WIDTH.get(dtype.replace("torch.", ""))
    if not tok.startswith(EXACT) or width is None:
        return None
    try:
        bits = int(tok[len(EXACT):], 16)
    except ValueError:
        return None
    if bits >= 1 << width:
        return None
    return repr(value_of_bits(bits, dtype))
