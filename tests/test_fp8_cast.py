"""The saturating FP8 cast and fmaxf amax against an independent, pure-Python computation.

The expected side never uses torch's FP8 conversion: each format's finite values are decoded
from their bit patterns here, and every expected byte is found by round-to-nearest-even over
that table, with saturation to +-max, NaN -> 0x7F whatever its sign (what TE's kernels write).
Inputs are float32 bit patterns; ``x * scale`` is formed exactly in double (two float32
significands need 48 bits) and rounded once to float32, as a float32 multiply does.
"""

from __future__ import annotations

import bisect
import math
import random
import struct

import pytest
import torch

from harness.fp8.cast import amax_fmaxf, cast_to_fp8, dequantize
from harness.fp8.formats import E4M3, E5M2, Fp8Format
from harness.stacks.emulated.kernels import cast_and_amax

INF = math.inf
TORCH_DTYPE = {E4M3: torch.float8_e4m3fn, E5M2: torch.float8_e5m2}


# --------------------------------------------------------------------------- float32 helpers


def f32(x: float) -> float:
    if math.isnan(x):
        return x
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return math.copysign(INF, x)


def f32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def from_bits(b: int) -> float:
    return struct.unpack("<f", struct.pack("<I", b))[0]


def tensor_from_bits(patterns: list[int]) -> torch.Tensor:
    """float32 tensor with exactly these bit patterns (NaN signs and payloads included)."""
    signed = [b - (1 << 32) if b & 0x80000000 else b for b in patterns]
    return torch.tensor(signed, dtype=torch.int32).view(torch.float32)


# --------------------------------------------------------------------------- the FP8 tables, from bits


def decode(byte: int, fmt: Fp8Format) -> float:
    """The value of an FP8 bit pattern: sign, biased exponent, mantissa (subnormal when exponent 0)."""
    sign = -1.0 if byte & 0x80 else 1.0
    if fmt is E4M3:
        exp, man, bias, mbits = (byte >> 3) & 0xF, byte & 0x7, 7, 3
        if exp == 0xF and man == 0x7:
            return math.nan                    # E4M3 (fn): S.1111.111 is NaN; no infinities
    else:
        exp, man, bias, mbits = (byte >> 2) & 0x1F, byte & 0x3, 15, 2
        if exp == 0x1F:
            return sign * INF if man == 0 else math.nan
    if exp == 0:
        return sign * man * 2.0 ** (1 - bias - mbits)
    return sign * (1 + man / 2 ** mbits) * 2.0 ** (exp - bias)


def table(fmt: Fp8Format) -> tuple[list[float], list[int]]:
    """Sorted non-negative finite values of ``fmt`` and their bytes (0x00 .. max)."""
    pairs = sorted((decode(b, fmt), b) for b in range(0x80) if math.isfinite(decode(b, fmt)))
    return [v for v, _ in pairs], [b for _, b in pairs]


TABLES = {fmt: table(fmt) for fmt in (E4M3, E5M2)}


def test_tables_decoded_from_bits():
    mags, codes = TABLES[E4M3]
    assert len(mags) == 127 and mags[-1] == 448.0 and codes[-1] == 0x7E      # 1.75 * 2**8
    assert mags[1] == 2.0 ** -9                                              # smallest subnormal
    mags, codes = TABLES[E5M2]
    assert len(mags) == 124 and mags[-1] == 57344.0 and codes[-1] == 0x7B    # 1.75 * 2**15
    assert mags[1] == 2.0 ** -16
    assert decode(0x7C, E5M2) == INF and math.isnan(decode(0x7F, E5M2)) and math.isnan(decode(0x7F, E4M3))
    for fmt in (E4M3, E5M2):
        assert TABLES[fmt][1] == sorted(TABLES[fmt][1])                      # codes grow with value


def expected_byte(v: float, fmt: Fp8Format) -> int:
    """Round a float32 value to ``fmt``: nearest, ties to even mantissa, saturating; NaN -> 0x7F."""
    if math.isnan(v):
        return 0x7F
    mags, codes = TABLES[fmt]
    sign = 0x80 if math.copysign(1.0, v) < 0 else 0x00
    a = abs(v)
    if a >= mags[-1]:
        return sign | codes[-1]
    i = bisect.bisect_left(mags, a)
    if mags[i] == a:
        return sign | codes[i]
    lo, hi = i - 1, i
    twice, total = 2 * a, mags[lo] + mags[hi]     # exact in double: compare 2a with lo + hi
    if twice < total:
        return sign | codes[lo]
    if twice > total:
        return sign | codes[hi]
    return sign | (codes[lo] if codes[lo] % 2 == 0 else codes[hi])          # a tie: even mantissa


# --------------------------------------------------------------------------- the dense input set


def dense_inputs(fmt: Fp8Format, seed: int = 8) -> list[int]:
    """float32 bit patterns: every FP8 value, midpoints +-1 ulp, beyond max, random binades, subnormals."""
    mags, _ = TABLES[fmt]
    pos: set[int] = set()
    for v in mags:
        pos.add(f32_bits(v))
    for lo, hi in zip(mags, mags[1:]):
        mid = (lo + hi) / 2
        assert f32(mid) == mid                 # one more significand bit than the format: exact
        b = f32_bits(mid)
        pos.update({b - 1, b, b + 1})          # the midpoint and its float32 neighbours
    top = mags[-1]
    beyond = [top * 1.0625, top * 1.125, top * 1.25, 2 * top, 1e9, 1e30, float.fromhex("0x1.fffffep+127"), INF]
    pos.update(f32_bits(f32(v)) for v in beyond)
    pos.update(f32_bits(v) for v in (464.0, 480.0, 61440.0, 65536.0))
    pos.update(f32_bits(top) + k for k in range(-3, 4))
    pos.update({1, 2, 3, 0x000116C2, 0x007FFFFF, 0x00800000, 0x00800001})      # float32 subnormals and min normal
    rng = random.Random(seed)
    for _ in range(6000):
        pos.add(f32_bits(f32(2.0 ** rng.uniform(-40, 40))))
    for _ in range(2000):
        pos.add(rng.randrange(0, 0x7F800000))                                    # any finite float32
    patterns = sorted(pos)
    return patterns + [b | 0x80000000 for b in patterns]


def expected_bytes(patterns: list[int], fmt: Fp8Format, scale: float = 1.0) -> list[int]:
    return [expected_byte(f32(from_bits(b) * scale), fmt) for b in patterns]


def first_differences(patterns, want, got, limit=6):
    out = []
    for b, w, g in zip(patterns, want, got):
        if w != g:
            out.append(f"x=0x{b:08x} ({from_bits(b)!r}): expected 0x{w:02x}, got 0x{g:02x}")
            if len(out) == limit:
                break
    return out


def run_cast(impl: str, x: torch.Tensor, scale: torch.Tensor, fmt: Fp8Format) -> list[int]:
    if impl == "harness.fp8":
        q = cast_to_fp8(x, scale, fmt)
    else:
        q, _ = cast_and_amax(x, scale, TORCH_DTYPE[fmt])
    assert q.dtype == torch.uint8 and q.shape == x.shape
    return q.tolist()


IMPLS = ["harness.fp8", "emulated-kernel"]


# --------------------------------------------------------------------------- the sweep


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("fmt", [E4M3, E5M2])
def test_dense_sweep_round_to_nearest_even_saturating(impl, fmt):
    patterns = dense_inputs(fmt)
    want = expected_bytes(patterns, fmt)
    got = run_cast(impl, tensor_from_bits(patterns), torch.tensor(1.0), fmt)
    diffs = first_differences(patterns, want, got)
    assert not diffs, "\n".join(diffs)
    # The sweep exercised ties both ways: some midpoints round down, some up.
    mags, _ = TABLES[fmt]
    mids = [(lo + hi) / 2 for lo, hi in zip(mags, mags[1:])]
    ups = sum(expected_byte(m, fmt) == expected_byte(hi, fmt) for m, hi in zip(mids, mags[1:]))
    assert 0 < ups < len(mids)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("fmt, value, byte", [
    (E4M3, 448.0, 0x7E), (E4M3, 464.0, 0x7E), (E4M3, 480.0, 0x7E), (E4M3, 1e9, 0x7E), (E4M3, INF, 0x7E),
    (E4M3, -448.0, 0xFE), (E4M3, -464.0, 0xFE), (E4M3, -480.0, 0xFE), (E4M3, -1e9, 0xFE), (E4M3, -INF, 0xFE),
    # Below max: 416 = 1.625 * 2**8 is 0x7d, 448 = 1.75 * 2**8 is 0x7e, midpoint 432. 424 -> 0x7d,
    # 440 -> 0x7e, and the tie 432 -> 0x7e (mantissa 110 is even, 101 is odd).
    (E4M3, 440.0, 0x7E), (E4M3, 432.0, 0x7E), (E4M3, 424.0, 0x7D),
    (E5M2, 57344.0, 0x7B), (E5M2, 61440.0, 0x7B), (E5M2, 65536.0, 0x7B), (E5M2, 1e9, 0x7B), (E5M2, INF, 0x7B),
    (E5M2, -57344.0, 0xFB), (E5M2, -61440.0, 0xFB), (E5M2, -1e9, 0xFB), (E5M2, -INF, 0xFB),
    # Subnormal ties: half the smallest subnormal rounds to (even) zero, keeping the sign.
    (E4M3, 2.0 ** -10, 0x00), (E4M3, -(2.0 ** -10), 0x80), (E4M3, 3 * 2.0 ** -10, 0x02),
    (E5M2, 2.0 ** -17, 0x00), (E5M2, -(2.0 ** -17), 0x80), (E5M2, 3 * 2.0 ** -17, 0x02),
    (E4M3, 0.0, 0x00), (E4M3, -0.0, 0x80), (E5M2, 0.0, 0x00), (E5M2, -0.0, 0x80),
    (E4M3, -1e-45, 0x80), (E5M2, 1e-45, 0x00),
])
def test_hand_worked_edges(impl, fmt, value, byte):
    got = run_cast(impl, torch.tensor([value], dtype=torch.float32), torch.tensor(1.0), fmt)
    assert got == [byte]
    assert expected_byte(f32(value), fmt) == byte          # the table-based rule agrees with the hand value


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("fmt", [E4M3, E5M2])
@pytest.mark.parametrize("nan_bits", [0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF])
def test_nan_becomes_0x7f_whatever_its_sign(impl, fmt, nan_bits):
    got = run_cast(impl, tensor_from_bits([nan_bits, 0x3F800000]), torch.tensor(1.0), fmt)
    assert got[0] == 0x7F
    assert got[1] == expected_byte(1.0, fmt)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("fmt", [E4M3, E5M2])
def test_nan_from_inf_times_zero_scale(impl, fmt):
    # inf * 0 = NaN in float32: the cast writes 0x7F; finite values times 0 give +-0.
    got = run_cast(impl, torch.tensor([INF, -2.0, 3.0]), torch.tensor(0.0), fmt)
    assert got == [0x7F, 0x80, 0x00]


# --------------------------------------------------------------------------- scale application


def double_rounding_traps(fmt: Fp8Format, scale: float) -> list[int]:
    """float32 inputs x where f32(x * scale) is an exact FP8 midpoint but x * scale is not.

    Rounding the double product straight to FP8 picks the nearer neighbour; the float32 product
    is a tie and goes to the even one. Where these differ, only a float32-first cast is right.
    """
    mags, _ = TABLES[fmt]
    traps = []
    for lo, hi in zip(mags, mags[1:]):
        mid = (lo + hi) / 2
        centre = f32_bits(f32(mid / scale))
        for b in range(centre - 6, centre + 7):
            x = from_bits(b)
            exact = x * scale                  # exact in double
            if f32(exact) == mid and exact != mid and expected_byte(mid, fmt) != expected_byte(exact, fmt):
                traps.append(b)
    return traps


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("fmt", [E4M3, E5M2])
@pytest.mark.parametrize("scale", [f32(1.7), 2.0 ** -3, f32(448.0 / 3.7), 2.0 ** 20, f32(1e-3),
                                   float.fromhex("0x1.fffffep+127")])
def test_scale_is_applied_in_float32_before_rounding(impl, fmt, scale):
    patterns = dense_inputs(fmt, seed=17)[::5]
    traps = double_rounding_traps(fmt, scale)
    patterns += traps + [b | 0x80000000 for b in traps]
    want = expected_bytes(patterns, fmt, scale)
    got = run_cast(impl, tensor_from_bits(patterns), torch.tensor(scale, dtype=torch.float32), fmt)
    diffs = first_differences(patterns, want, got)
    assert not diffs, f"scale {scale!r}:\n" + "\n".join(diffs)


@pytest.mark.parametrize("fmt", [E4M3, E5M2])
def test_double_rounding_traps_exist(fmt):
    # The scale sweep above is only meaningful if it contains inputs that tell a float32 product
    # from a double one; with scale f32(1.7) there are some in both formats.
    assert len(double_rounding_traps(fmt, f32(1.7))) > 0


@pytest.mark.parametrize("impl", IMPLS)
def test_product_overflowing_float32_saturates(impl):
    # 1e30 * 1e10 = 1e40 > FLT_MAX: the float32 product is inf, which saturates to max.
    got = run_cast(impl, torch.tensor([1e30, -1e30]), torch.tensor(1e10), E5M2)
    assert got == [0x7B, 0xFB]


# --------------------------------------------------------------------------- dequantize


@pytest.mark.parametrize("fmt", [E4M3, E5M2])
def test_dequantize_every_byte_with_unit_and_other_scale_inv(fmt):
    codes = list(range(256))
    q = torch.tensor(codes, dtype=torch.uint8)
    for sinv in (1.0, f32(1.0 / 3.0)):
        got = dequantize(q, torch.tensor(sinv), fmt).tolist()
        for b, g in zip(codes, got):
            want = decode(b, fmt)
            if math.isnan(want):
                assert math.isnan(g), hex(b)
            else:
                assert g == f32(want * sinv) or (want == 0 and g == 0), hex(b)


@pytest.mark.parametrize("fmt", [E4M3, E5M2])
@pytest.mark.parametrize("shape", [(), (0,), (256,), (16, 16), (4, 8, 8), (48, 64), (96, 128), (3, 32, 32)])
def test_dequantize_has_the_bits_of_torchs_own_conversion(fmt, shape):
    # Small operands are converted, large ones (TABLE_FROM elements on) looked up in a table of
    # torch's conversion of each pattern; a table built wrong (one entry, a NaN's payload, the
    # order) shows here as a differing bit pattern.
    gen = torch.Generator().manual_seed(len(shape))
    n = math.prod(shape)
    q = torch.cat([torch.arange(256, dtype=torch.uint8), torch.randint(0, 256, (max(n - 256, 0),), generator=gen,
                                                                       dtype=torch.uint8)])[:n].reshape(shape)
    dt = torch.float8_e4m3fn if fmt is E4M3 else torch.float8_e5m2
    for sinv in (1.0, f32(1.0 / 3.0), 2.0 ** -20):
        s = torch.tensor(sinv)
        want = q.view(dt).float() * s
        for got in (dequantize(q, s, fmt), dequantize(q.view(dt), s, fmt)):
            assert got.shape == want.shape and got.dtype == torch.float32
            assert torch.equal(got.view(torch.int32), want.view(torch.int32))
    if q.dim() == 2:      # a transposed (strided) operand, as a GEMM's
        want = q.t().contiguous().view(dt).float()
        assert torch.equal(dequantize(q.t(), torch.tensor(1.0), fmt).view(torch.int32), want.view(torch.int32))


# --------------------------------------------------------------------------- amax (fmaxf semantics)


def amax_impls():
    return [
        pytest.param(lambda x: amax_fmaxf(x), id="amax_fmaxf"),
        pytest.param(lambda x: cast_and_amax(x, torch.tensor(1.0), torch.float8_e4m3fn)[1], id="cast_and_amax"),
    ]


def bits_of(t: torch.Tensor) -> int:
    assert t.dtype == torch.float32 and t.dim() == 0
    return t.view(torch.int32).item() & 0xFFFFFFFF


@pytest.mark.parametrize("amax", amax_impls())
@pytest.mark.parametrize("patterns, expected", [
    ([0x3F800000, 0x7FC00000, 0xC0400000], 0x40400000),   # [1, NaN, -3] -> 3: NaN ignored
    ([0x3F800000, 0xFFC00000, 0xC0400000], 0x40400000),   # negative NaN ignored too
    ([0x3F800000, 0xFF800000, 0x7FC00000], 0x7F800000),   # [1, -inf, NaN] -> inf: inf kept
    ([0x7FC00000, 0xFFC00000], 0x00000000),               # all NaN -> +0
    ([0x80000000], 0x00000000),                           # |-0| = +0
    ([0x00000001, 0x80000003], 0x00000003),               # subnormals kept exactly
    ([], 0x00000000),                                     # empty -> 0
])
def test_amax_hand_worked(amax, patterns, expected):
    assert bits_of(amax(tensor_from_bits(patterns))) == expected


@pytest.mark.parametrize("amax", amax_impls())
def test_amax_random_two_dimensional(amax):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(7, 13, generator=g) * 100
    want = max(abs(v) for v in x.reshape(-1).tolist())
    assert amax(x).item() == want


def test_cast_and_amax_returns_the_unscaled_amax():
    x = torch.tensor([1.5, -6.0, 2.0])
    q, amax = cast_and_amax(x, torch.tensor(8.0), torch.float8_e4m3fn)
    assert bits_of(amax) == f32_bits(6.0)                 # max|x|, not max|x * scale| = 48
    assert q.tolist() == [expected_byte(12.0, E4M3), expected_byte(-48.0, E4M3), expected_byte(16.0, E4M3)]
