"""The delayed-scaling update (docs/design.md, "Numerics") on hand-worked histories, for both
implementations.

``harness.fp8.scaling.delayed_scaling_update`` (the reference's, one tensor at a time), its
row-wise form ``delayed_scaling_update_rows`` (the reference's, many tensors at once) and
``harness.stacks.emulated.kernels.fused_amax_and_scale_update`` (the emulated stack's, in place
on ``[L, n]`` histories) must both produce the bit patterns worked out here by hand, or by a
pure-Python statement of the formula that rounds every float32 operation explicitly.

Every float32 result below is ``f32(exact double result)``: the quotient or product of two
float32 values computed in double and rounded once to float32 is the correctly rounded float32
quotient or product (53 >= 2 * 24 + 2, so the double rounding is innocuous).
"""

from __future__ import annotations

import math
import random
import struct

import pytest
import torch

from harness.fp8.formats import E4M3, E5M2, Fp8Format
from harness.fp8.recipe import DelayedScalingRecipe
from harness.fp8.scaling import delayed_scaling_update, delayed_scaling_update_rows
from harness.stacks.emulated.kernels import fused_amax_and_scale_update

INF, NAN = math.inf, math.nan
FLT_MAX = float.fromhex("0x1.fffffep+127")        # 3.4028234663852886e38, bits 0x7f7fffff
FP8_MAX = {E4M3: 448.0, E5M2: 57344.0}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


# --------------------------------------------------------------------------- float32 by hand


def f32(x: float) -> float:
    """Round a double to the nearest float32, ties to even; beyond the float32 range: +-inf."""
    if math.isnan(x):
        return x
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return math.copysign(INF, x)


def bits(x: float) -> int:
    """float32 bit pattern of a float32-representable double (canonical NaN: 0x7fc00000)."""
    if math.isnan(x):
        return 0x7FC00000
    return struct.unpack("<I", struct.pack("<f", x))[0]


def from_bits(b: int) -> float:
    return struct.unpack("<f", struct.pack("<I", b))[0]


def tbits(t: torch.Tensor) -> list[int]:
    return [v & 0xFFFFFFFF for v in t.detach().contiguous().reshape(-1).view(torch.int32).tolist()]


def scaled_max(fmt: Fp8Format, margin: int) -> float:
    return FP8_MAX[fmt] * 2.0 ** -margin       # 448, 112 (margin 2), 57344, 14336: exact


# --------------------------------------------------------------------------- the two implementations


def _recipe(length: int, algo: str, margin: int, fmt: Fp8Format) -> DelayedScalingRecipe:
    return DelayedScalingRecipe(fp8_format=fmt.value, margin=margin, amax_history_len=length, amax_compute_algo=algo)


def via_reference(history, scale, reduced, *, algo, margin, fmt):
    h, s, si = delayed_scaling_update(torch.tensor(history, dtype=torch.float32), torch.tensor(scale),
                                      torch.tensor(reduced), _recipe(len(history), algo, margin, fmt), fmt)
    return tbits(h), tbits(s)[0], tbits(si)[0]


def via_reference_rows(history, scale, reduced, *, algo, margin, fmt):
    """The row-wise form on a batch of three rows, the tensor under test in the middle."""
    other = [float(k) for k in range(len(history))]
    h, s, si = delayed_scaling_update_rows(
        torch.tensor([other, history, other[::-1]], dtype=torch.float32),
        torch.tensor([3.0, scale, 5.0], dtype=torch.float32),
        torch.tensor([7.0, reduced, 0.0], dtype=torch.float32), _recipe(len(history), algo, margin, fmt), fmt)
    return tbits(h[1]), tbits(s[1:2])[0], tbits(si[1:2])[0]


def via_kernel(history, scale, reduced, *, algo, margin, fmt):
    """The fused kernel on one slot of an [L, 1] history, in place."""
    h = torch.tensor(history, dtype=torch.float32).reshape(len(history), 1).clone()
    s = torch.tensor([scale], dtype=torch.float32)
    si = torch.tensor([12345.0], dtype=torch.float32)        # overwritten: scale_inv' = 1 / scale'
    sm = torch.tensor([scaled_max(fmt, margin)], dtype=torch.float32)
    fused_amax_and_scale_update(torch.tensor([reduced], dtype=torch.float32), h, s, si, sm, algo == "max")
    return tbits(h[:, 0]), tbits(s)[0], tbits(si)[0]


IMPLS = [pytest.param(via_reference, id="reference"), pytest.param(via_reference_rows, id="reference-rows"),
         pytest.param(via_kernel, id="fused-kernel")]


def check(impl, history, scale, reduced, *, algo="max", margin=0, fmt=E4M3,
          expect_history, expect_scale, expect_scale_inv=None):
    got_h, got_s, got_si = impl(history, scale, reduced, algo=algo, margin=margin, fmt=fmt)
    want_h = [bits(v) for v in expect_history]
    want_s = bits(expect_scale)
    want_si = bits(f32(1.0 / expect_scale)) if expect_scale_inv is None else bits(expect_scale_inv)
    assert [f"{b:08x}" for b in got_h] == [f"{b:08x}" for b in want_h], "amax history"
    assert f"{got_s:08x}" == f"{want_s:08x}", "scale"
    assert f"{got_si:08x}" == f"{want_si:08x}", "scale_inv"


# --------------------------------------------------------------------------- zero amax


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("length", [1, 2, 16])
@pytest.mark.parametrize("algo", ["max", "most_recent"])
@pytest.mark.parametrize("margin", [0, 2])
def test_zero_amax_rolls_nothing_and_keeps_the_scale(impl, length, algo, margin):
    # reduced 0 and H[0] 0: last = 0, nothing rolls; scale 2.5 kept; scale_inv = f32(1/2.5) = 0x3ecccccd.
    history = [0.0] + [float(k) for k in range(1, length)]
    check(impl, history, 2.5, 0.0, algo=algo, margin=margin,
          expect_history=history, expect_scale=2.5, expect_scale_inv=from_bits(0x3ECCCCCD))


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("algo", ["max", "most_recent"])
def test_zero_reduced_amax_falls_back_to_h0(impl, algo):
    # last = H[0] = 7; window = H[1:] + [7] = [3, 5, 7]: max 7 (most_recent 7); 448 / 7 = 64 exactly.
    check(impl, [7.0, 3.0, 5.0], 1.0, 0.0, algo=algo,
          expect_history=[0.0, 5.0, 7.0], expect_scale=64.0, expect_scale_inv=0.015625)


@pytest.mark.parametrize("impl", IMPLS)
def test_nonzero_reduced_amax_wins_over_h0(impl):
    # last = reduced = 2 (H[0] = 7 is not looked at); window [3, 5, 2]: max 5; 448 / 5 = 89.6
    # rounds to float32 0x42b33333 (89.59999847...).
    check(impl, [7.0, 3.0, 5.0], 1.0, 2.0, algo="max",
          expect_history=[0.0, 5.0, 2.0], expect_scale=from_bits(0x42B33333))
    assert f32(448.0 / 5.0) == from_bits(0x42B33333)
    # most_recent: amax = last = 2: 448 / 2 = 224.
    check(impl, [7.0, 3.0, 5.0], 1.0, 2.0, algo="most_recent",
          expect_history=[0.0, 5.0, 2.0], expect_scale=224.0)


@pytest.mark.parametrize("impl", IMPLS)
def test_minus_zero_reduced_amax_counts_as_zero(impl):
    # -0 != 0 is false: last = H[0] = 4; window [1, 4]: max 4; 448 / 4 = 112.
    check(impl, [4.0, 1.0], 1.0, -0.0, expect_history=[0.0, 4.0], expect_scale=112.0)


# --------------------------------------------------------------------------- infinities


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("algo", ["max", "most_recent"])
def test_inf_amax_rolls_and_keeps_the_scale(impl, algo):
    # last = inf: window [1, 2, inf], amax inf (either algo): not finite, scale 3 kept.
    check(impl, [INF, 1.0, 2.0], 3.0, INF, algo=algo, expect_history=[0.0, 2.0, INF], expect_scale=3.0)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("algo", ["max", "most_recent"])
def test_inf_amax_length_one(impl, algo):
    # length 1: H = [0], amax = last = inf: scale kept.
    check(impl, [INF], 3.0, INF, algo=algo, expect_history=[0.0], expect_scale=3.0)


@pytest.mark.parametrize("impl", IMPLS)
def test_inf_in_window_keeps_scale_until_it_drops_out(impl):
    # H = [4, inf, 2], reduced 4: window [inf, 2, 4]: max inf, scale 3 kept; H' = [0, 2, 4].
    check(impl, [4.0, INF, 2.0], 3.0, 4.0, expect_history=[0.0, 2.0, 4.0], expect_scale=3.0)
    # most_recent ignores the window: 448 / 4 = 112.
    check(impl, [4.0, INF, 2.0], 3.0, 4.0, algo="most_recent", expect_history=[0.0, 2.0, 4.0], expect_scale=112.0)
    # One roll later the inf is gone: H = [1, 2, 4], reduced 1: window [2, 4, 1], max 4 -> 112.
    check(impl, [1.0, 2.0, 4.0], 3.0, 1.0, expect_history=[0.0, 4.0, 1.0], expect_scale=112.0)


# --------------------------------------------------------------------------- NaN


@pytest.mark.parametrize("impl", IMPLS)
def test_nan_amax_rolls_and_max_ignores_it_like_fmaxf(impl):
    # last = NaN (NaN != 0): window [1, 2, NaN]; fmaxf ignores NaN: amax 2; 448 / 2 = 224.
    check(impl, [NAN, 1.0, 2.0], 3.0, NAN, expect_history=[0.0, 2.0, NAN], expect_scale=224.0)


@pytest.mark.parametrize("impl", IMPLS)
def test_nan_amax_most_recent_keeps_the_scale(impl):
    check(impl, [NAN, 1.0, 2.0], 3.0, NAN, algo="most_recent", expect_history=[0.0, 2.0, NAN], expect_scale=3.0)


@pytest.mark.parametrize("impl", IMPLS)
def test_nan_in_history_is_ignored_by_max(impl):
    # last = H[0] = 5; window [NaN, 1, 5]: max 5; 448 / 5 = 0x42b33333.
    check(impl, [5.0, NAN, 1.0], 3.0, 0.0, expect_history=[0.0, 1.0, 5.0], expect_scale=from_bits(0x42B33333))


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("length", [1, 2, 16])
@pytest.mark.parametrize("algo", ["max", "most_recent"])
def test_all_nan_window_keeps_the_scale(impl, length, algo):
    # Every window entry NaN: amax NaN (fmaxf of NaNs only), not finite: scale 3 kept; still rolls.
    history = [NAN] * length
    rolled = [0.0] if length == 1 else [0.0] + [NAN] * (length - 2) + [NAN]
    check(impl, history, 3.0, NAN, algo=algo, expect_history=rolled, expect_scale=3.0)


# --------------------------------------------------------------------------- tiny and subnormal amaxes


@pytest.mark.parametrize("impl", IMPLS)
def test_tiny_amax_overflows_to_flt_max(impl):
    tiny = f32(1e-36)                          # normal float32 (min normal 2**-126 ~ 1.18e-38)
    assert 448.0 / tiny > FLT_MAX             # 4.48e38 > 3.40e38: the float32 quotient is inf
    # scale = FLT_MAX; scale_inv = f32(1 / FLT_MAX) = 2**-128 = 0x00200000, a float32 subnormal:
    # 1 / (2**128 - 2**104) = 2**-128 (1 + 2**-24 + ...), and the subnormal grid there is 2**-149.
    assert bits(f32(1.0 / FLT_MAX)) == 0x00200000
    check(impl, [0.0, 0.0], 1.0, tiny, expect_history=[0.0, tiny], expect_scale=FLT_MAX,
          expect_scale_inv=from_bits(0x00200000))
    # With margin 2 the same amax does not overflow: 112 / 1e-36 = 1.12e38 < FLT_MAX.
    expected = f32(112.0 / tiny)
    assert math.isfinite(expected)
    check(impl, [0.0, 0.0], 1.0, tiny, margin=2, expect_history=[0.0, tiny], expect_scale=expected)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("fmt", [E4M3, E5M2])
@pytest.mark.parametrize("amax_bits", [0x00000001, 0x000116C2, 0x007FFFFF])   # 2**-149, ~1e-40, largest subnormal
def test_subnormal_amax(impl, fmt, amax_bits):
    amax = from_bits(amax_bits)
    # Any subnormal amax overflows fp8_max / amax (57344 / 2**-126 ~ 4.8e42 > FLT_MAX).
    assert math.isinf(f32(FP8_MAX[fmt] / amax))
    # Given as H[0] with reduced 0: a subnormal is != 0, so it rolls (a flush-to-zero update would not),
    # and the history keeps its exact bits.
    check(impl, [amax, 0.0, 0.0], 1.0, 0.0, fmt=fmt, expect_history=[0.0, 0.0, amax], expect_scale=FLT_MAX,
          expect_scale_inv=from_bits(0x00200000))


# --------------------------------------------------------------------------- lengths 1, 2, 16


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("algo", ["max", "most_recent"])
def test_length_one(impl, algo):
    # H = [0], amax = last = 5 whatever the algo; 448 / 5 = 0x42b33333; margin 2: 112 / 5 = 22.4 -> f32.
    check(impl, [9.0], 1.0, 5.0, algo=algo, expect_history=[0.0], expect_scale=from_bits(0x42B33333))
    check(impl, [9.0], 1.0, 5.0, algo=algo, margin=2, expect_history=[0.0], expect_scale=f32(112.0 / 5.0))
    check(impl, [9.0], 1.0, 0.0, algo=algo, expect_history=[0.0], expect_scale=f32(448.0 / 9.0))


@pytest.mark.parametrize("impl", IMPLS)
def test_length_two(impl):
    # H = [3, 6], reduced 4: window [6, 4]; H' = [0, 4].
    check(impl, [3.0, 6.0], 1.0, 4.0, algo="max", expect_history=[0.0, 4.0], expect_scale=f32(448.0 / 6.0))
    check(impl, [3.0, 6.0], 1.0, 4.0, algo="most_recent", expect_history=[0.0, 4.0], expect_scale=112.0)
    # E5M2, margin 2: 14336 / 6 and 14336 / 4 = 3584.
    check(impl, [3.0, 6.0], 1.0, 4.0, algo="max", margin=2, fmt=E5M2, expect_history=[0.0, 4.0],
          expect_scale=f32(14336.0 / 6.0))
    check(impl, [3.0, 6.0], 1.0, 4.0, algo="most_recent", margin=2, fmt=E5M2, expect_history=[0.0, 4.0],
          expect_scale=3584.0)


@pytest.mark.parametrize("impl", IMPLS)
def test_length_sixteen(impl):
    # H = [9, 1, 2, ..., 15], reduced 0.5: window [1..15, 0.5]: max 15; H' = [0, 2, 3, ..., 15, 0.5].
    history = [9.0] + [float(k) for k in range(1, 16)]
    rolled = [0.0] + [float(k) for k in range(2, 16)] + [0.5]
    check(impl, history, 1.0, 0.5, algo="max", expect_history=rolled, expect_scale=f32(448.0 / 15.0))
    check(impl, history, 1.0, 0.5, algo="most_recent", expect_history=rolled, expect_scale=896.0)
    check(impl, history, 1.0, 0.5, algo="max", margin=2, expect_history=rolled, expect_scale=f32(112.0 / 15.0))
    check(impl, history, 1.0, 0.5, algo="most_recent", margin=2, expect_history=rolled, expect_scale=224.0)


def test_reference_does_not_modify_its_inputs():
    h, s, r = torch.tensor([7.0, 3.0, 5.0]), torch.tensor(2.0), torch.tensor(4.0)
    before = (tbits(h), tbits(s), tbits(r))
    delayed_scaling_update(h, s, r, _recipe(3, "max", 0, E4M3), E4M3)
    assert (tbits(h), tbits(s), tbits(r)) == before


# --------------------------------------------------------------------------- random histories vs a pure-Python statement


def _fmax_fold(values):
    acc = NAN                                   # fmaxf(NaN, x) == x: NaN only if every value is NaN
    for v in values:
        if math.isnan(acc):
            acc = v
        elif not math.isnan(v):
            acc = max(acc, v)
    return acc


def model_update(history, scale, reduced, *, algo, margin, fmt):
    """docs/design.md, "Numerics", step by step, on Python floats holding float32 values."""
    last = reduced if reduced != 0 else history[0]
    if last != 0:                               # NaN != 0 is true
        if len(history) == 1:
            amax, new_h = last, [0.0]
        else:
            window = history[1:] + [last]
            amax = _fmax_fold(window) if algo == "max" else last
            new_h = [0.0] + history[2:] + [last]
    else:
        amax, new_h = 0.0, list(history)
    new_s = f32(scaled_max(fmt, margin) / amax) if (math.isfinite(amax) and amax > 0) else scale
    if math.isinf(new_s):
        new_s = FLT_MAX
    return [bits(v) for v in new_h], bits(new_s), bits(f32(1.0 / new_s))


def _random_amax(rng: random.Random) -> float:
    kind = rng.random()
    if kind < 0.12:
        return 0.0
    if kind < 0.17:
        return INF
    if kind < 0.24:
        return NAN
    if kind < 0.30:
        return from_bits(rng.randrange(1, 0x00800000))          # subnormal
    if kind < 0.35:
        return f32(rng.uniform(1e-38, 1e-35))                     # tiny: overflows 448 / amax
    return f32(2.0 ** rng.uniform(-20, 20))


def _random_cases(seed: int, n: int):
    rng = random.Random(seed)
    for _ in range(n):
        length = rng.choice([1, 2, 16])
        history = [_random_amax(rng) for _ in range(length)]
        reduced = _random_amax(rng) if rng.random() < 0.7 else 0.0
        scale = f32(2.0 ** rng.uniform(-10, 10))
        yield history, scale, reduced, rng.choice(["max", "most_recent"]), rng.choice([0, 2]), rng.choice([E4M3, E5M2])


def test_reference_matches_the_statement_on_random_histories():
    for history, scale, reduced, algo, margin, fmt in _random_cases(1326, 400):
        want = model_update(history, scale, reduced, algo=algo, margin=margin, fmt=fmt)
        got = via_reference(history, scale, reduced, algo=algo, margin=margin, fmt=fmt)
        assert got == want, (history, scale, reduced, algo, margin, fmt)


def test_reference_rows_match_the_statement_on_random_histories_many_rows_at_once():
    """One row-wise call per (length, algo, margin, format) over every history: rows must not interact."""
    groups: dict = {}
    for history, scale, reduced, algo, margin, fmt in _random_cases(1327, 800):
        groups.setdefault((len(history), algo, margin, fmt), []).append((history, scale, reduced))
    for (length, algo, margin, fmt), items in groups.items():
        h_in = torch.tensor([it[0] for it in items], dtype=torch.float32)
        s_in = torch.tensor([it[1] for it in items], dtype=torch.float32)
        red = torch.tensor([it[2] for it in items], dtype=torch.float32)
        before = (tbits(h_in), tbits(s_in), tbits(red))
        h, s, si = delayed_scaling_update_rows(h_in, s_in, red, _recipe(length, algo, margin, fmt), fmt)
        assert (tbits(h_in), tbits(s_in), tbits(red)) == before, "inputs modified"
        for j, (history, scale, reduced) in enumerate(items):
            want = model_update(history, scale, reduced, algo=algo, margin=margin, fmt=fmt)
            got = (tbits(h[j]), tbits(s[j])[0], tbits(si[j])[0])
            assert got == want, (history, scale, reduced, algo, margin, fmt)


def test_fused_kernel_matches_the_statement_on_random_histories_many_slots_at_once():
    """One fused call per (length, algo, margin, format) over every slot: slots must not interact."""
    groups: dict = {}
    for history, scale, reduced, algo, margin, fmt in _random_cases(113, 800):
        groups.setdefault((len(history), algo, margin, fmt), []).append((history, scale, reduced))
    for (length, algo, margin, fmt), items in groups.items():
        n = len(items)
        h = torch.tensor([it[0] for it in items], dtype=torch.float32).t().contiguous()    # [L, n]
        s = torch.tensor([it[1] for it in items], dtype=torch.float32)
        si = torch.zeros(n)
        red = torch.tensor([it[2] for it in items], dtype=torch.float32)
        fused_amax_and_scale_update(red, h, s, si, torch.full((n,), scaled_max(fmt, margin)), algo == "max")
        for j, (history, scale, reduced) in enumerate(items):
            want = model_update(history, scale, reduced, algo=algo, margin=margin, fmt=fmt)
            got = (tbits(h[:, j]), tbits(s[j])[0], tbits(si[j])[0])
            assert got == want, (history, scale, reduced, algo, margin, fmt)


# --------------------------------------------------------------------------- IEEE division


def _random_amaxes(n: int, seed: int) -> torch.Tensor:
    """Positive normal float32 values with uniformly random mantissas over 2**-30 .. 2**30."""
    g = torch.Generator().manual_seed(seed)
    exponent = torch.randint(127 - 30, 127 + 30, (n,), generator=g, dtype=torch.int32)
    mantissa = torch.randint(0, 1 << 23, (n,), generator=g, dtype=torch.int32)
    return ((exponent << 23) | mantissa).view(torch.float32)


@pytest.mark.parametrize("fmt, margin", [(E4M3, 0), (E5M2, 0), (E4M3, 2)])
def test_scale_is_the_ieee_quotient_and_a_scalar_division_would_be_caught(fmt, margin):
    amaxes = _random_amaxes(4096, seed=448 + margin)
    numerator = scaled_max(fmt, margin)
    values = amaxes.tolist()
    ieee = [bits(f32(numerator / a)) for a in values]          # float64-exact quotient, rounded once

    # A 0-dim tensor over a tensor is IEEE division: the premise of the implementations.
    assert tbits(torch.tensor(numerator) / amaxes) == ieee

    # A Python scalar over a tensor rounds through a reciprocal: it differs on a good share of amaxes.
    scalar = tbits(numerator / amaxes)
    differ = [i for i in range(len(values)) if scalar[i] != ieee[i]]
    assert len(differ) > len(values) // 10, f"only {len(differ)} of {len(values)} differ"

    # The fused kernel, all amaxes in one call (length 1: amax = last = the reduced amax).
    n = len(values)
    h, s, si = torch.zeros(1, n), torch.ones(n), torch.ones(n)
    fused_amax_and_scale_update(amaxes.clone(), h, s, si, torch.full((n,), numerator), True)
    got = tbits(s)
    assert got == ieee
    assert all(got[i] != scalar[i] for i in differ)            # so a scalar-division kernel fails here
    assert tbits(si) == [bits(f32(1.0 / from_bits(b))) for b in ieee]

    # The reference's row-wise form, all amaxes in one call.
    _, rows_s, rows_si = delayed_scaling_update_rows(torch.zeros(n, 1), torch.ones(n), amaxes.clone(),
                                                     _recipe(1, "max", margin, fmt), fmt)
    assert tbits(rows_s) == ieee
    assert tbits(rows_si) == [bits(f32(1.0 / from_bits(b))) for b in ieee]

    # The reference, on the amaxes where the scalar division differs.
    recipe = _recipe(1, "max", margin, fmt)
    for i in differ[:300]:
        _, new_s, new_si = delayed_scaling_update(torch.zeros(1), torch.ones(()), amaxes[i], recipe, fmt)
        assert tbits(new_s)[0] == ieee[i] != scalar[i]
        assert tbits(new_si)[0] == bits(f32(1.0 / from_bits(ieee[i])))
