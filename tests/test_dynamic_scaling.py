"""The dynamic-scaling reference: hand-worked values, then bitwise agreement with torchao when installed."""

from __future__ import annotations

import dataclasses
import math
import struct

import pytest
import torch

from harness.fp8 import dynamic_scaling as ds
from harness.fp8.bits import first_bit_mismatch
from harness.fp8.formats import E4M3, E5M2, Fp8Format, torch_dtype


def f32_bits(t: torch.Tensor) -> int:
    return t.detach().reshape(()).view(torch.int32).item() & 0xFFFFFFFF


def as_f32(value: float) -> float:
    """Round a Python float (double) to the nearest float32."""
    return struct.unpack("<f", struct.pack("<f", value))[0]


def assert_bits_equal(expected: torch.Tensor, actual: torch.Tensor, what: str = "tensor") -> None:
    mismatch = first_bit_mismatch(expected.contiguous(), actual.contiguous(), what)
    assert mismatch is None, str(mismatch)


def bytes_of(values, fmt: Fp8Format) -> list[int]:
    q, _ = ds.cast_tensorwise(torch.tensor(values, dtype=torch.float32), fmt)
    return q.tolist()


# --------------------------------------------------------------------------- scales by hand


@pytest.mark.parametrize("fmt, amax_value, expected", [
    (E4M3, 448.0, 1.0),
    (E5M2, 57344.0, 1.0),
    (E4M3, 1.0, 448.0),
    (E4M3, 2.0, 224.0),
    (E5M2, 0.5, 114688.0),
    (E4M3, 3.0, as_f32(448.0 / 3.0)),        # 149.33333 -> 0x43155555
    (E4M3, 7.0, 64.0),
])
def test_scale_hand_worked(fmt, amax_value, expected):
    scale = ds.amax_to_scale(torch.tensor(amax_value), fmt)
    assert scale.dtype == torch.float32 and scale.dim() == 0
    assert f32_bits(scale) == f32_bits(torch.tensor(expected, dtype=torch.float32))


def test_scale_of_three_bits():
    assert f32_bits(ds.amax_to_scale(torch.tensor(3.0), E4M3)) == 0x43155555


@pytest.mark.parametrize("fmt, bits", [(E4M3, 0x57CBBA10), (E5M2, 0x5B4BBA10)])
@pytest.mark.parametrize("amax_value", [0.0, 1e-20, 1e-40, as_f32(1e-12)])
def test_amax_below_eps_is_clamped_in_float64(fmt, bits, amax_value):
    # float32(1e-12) is just below the float64 1e-12, so it is clamped too
    scale = ds.amax_to_scale(torch.tensor(amax_value, dtype=torch.float32), fmt)
    assert f32_bits(scale) == bits
    expected = as_f32((1.0 / 1e-12) * (448.0 if fmt is E4M3 else 57344.0))
    assert scale.item() == expected


def test_scale_matches_python_double_formula():
    """float32(fl64(1 / max(amax, 1e-12)) * M), worked in Python doubles, for many amaxes."""
    gen = torch.Generator().manual_seed(1)
    amaxes = torch.exp(torch.empty(2000).uniform_(-60, 80, generator=gen)).float()
    for fmt, fmax in ((E4M3, 448.0), (E5M2, 57344.0)):
        scales = ds.amax_to_scale(amaxes, fmt)
        for a, s in zip(amaxes.tolist(), scales.tolist()):
            assert s == as_f32((1.0 / max(a, 1e-12)) * fmax)


def test_scale_equals_float32_ieee_division_for_normal_amaxes():
    # Both fp8 maxima are 7 * 2**k, so this holds for every float32 amax >= 1e-12 (checked
    # exhaustively over one binade); a random sample keeps the test fast.
    gen = torch.Generator().manual_seed(2)
    bits = torch.randint(0x2B8CBCCC, 0x7F800000, (200_000,), dtype=torch.int32, generator=gen)  # [1e-12, inf)
    amaxes = bits.view(torch.float32)
    for fmt, fmax in ((E4M3, 448.0), (E5M2, 57344.0)):
        ieee = torch.tensor(fmax, dtype=torch.float32) / amaxes
        assert torch.equal(ds.amax_to_scale(amaxes, fmt).view(torch.int32), ieee.view(torch.int32))


def test_special_amaxes():
    assert f32_bits(ds.amax_to_scale(torch.tensor(float("inf")), E4M3)) == 0
    assert math.isnan(ds.amax_to_scale(torch.tensor(float("nan")), E4M3).item())
    assert ds.amax_to_scale(torch.tensor(torch.finfo(torch.float32).max), E4M3).item() > 0


def test_amax_propagates_nan_and_keeps_inf():
    assert math.isnan(ds.amax(torch.tensor([1.0, float("nan"), 3.0])).item())
    assert ds.amax(torch.tensor([1.0, -float("inf")])).item() == float("inf")
    assert ds.amax(torch.tensor([[1.0, -5.0], [2.0, 0.5]]), dim=0).tolist() == [[2.0, 5.0]]
    assert ds.amax(torch.tensor([[1.0, -5.0], [2.0, 0.5]]), dim=-1).tolist() == [[5.0], [2.0]]


@pytest.mark.parametrize("scale, expected", [
    (1024.0, 1024.0), (1023.9, 512.0), (3.0, 2.0), (0.75, 0.5), (448.0, 256.0), (1.0, 1.0),
    (0.0, 0.0), (float("inf"), float("inf")),
])
def test_round_scale_to_power_of_2(scale, expected):
    assert ds.round_scale_down_to_power_of_2(torch.tensor(scale)).item() == expected


def test_power_of_2_rounding_goes_up_just_below_a_power_of_2():
    # float32 log2(1024 - 1 ulp) rounds to 10.0, so "rounding down" gives 1024, above the scale
    below = torch.nextafter(torch.tensor(1024.0), torch.tensor(0.0))
    assert ds.round_scale_down_to_power_of_2(below).item() == 1024.0
    # ... which then makes the amax element overflow M by a hair and saturate
    amax_value = (448.0 / below.double()).item()
    q, scale = ds.cast_tensorwise(torch.tensor([amax_value, -amax_value]), E4M3, round_scales_to_power_of_2=True)
    assert scale.item() == 1024.0
    assert q.tolist() == [0x7E, 0xFE]


def test_round_scale_rejects_non_float32():
    with pytest.raises(TypeError):
        ds.round_scale_down_to_power_of_2(torch.tensor(2.0, dtype=torch.float64))


# --------------------------------------------------------------------------- casts by hand


def test_cast_saturates_rounds_to_nearest_even_and_keeps_sign_of_zero():
    # amax 448 -> scale 1; 1.0625 is halfway between 1.0 (0x38) and 1.125 (0x39): to even, 0x38;
    # 1.1875 is halfway between 1.125 and 1.25 (0x3A): to even, 0x3A
    assert bytes_of([448.0, 1.0625, 1.1875, -1.0625, -0.0], E4M3) == [0x7E, 0x38, 0x3A, 0xB8, 0x80]
    assert bytes_of([57344.0, 1.125, 1.375], E5M2) == [0x7B, 0x3C, 0x3E]


def test_saturated_cast_clamps_before_converting():
    # with a scale from elsewhere the product can overflow: both formats saturate to +-M
    # (torch 2.13's own E5M2 conversion would give inf from 61440 up); NaN stays NaN
    x = torch.tensor([1e5, -1e6, 70000.0, float("inf"), -float("inf")])
    assert ds.saturated_cast(x, torch.tensor(1.0), E4M3).tolist() == [0x7E, 0xFE, 0x7E, 0x7E, 0xFE]
    assert ds.saturated_cast(x, torch.tensor(1.0), E5M2).tolist() == [0x7B, 0xFB, 0x7B, 0x7B, 0xFB]
    assert ds.saturated_cast(torch.tensor([float("nan")]), torch.tensor(1.0), E5M2).item() & 0x7F > 0x7C


def test_cast_of_zeros():
    q, scale = ds.cast_tensorwise(torch.tensor([0.0, -0.0, 0.0]), E4M3)
    assert q.tolist() == [0x00, 0x80, 0x00]
    assert f32_bits(scale) == 0x57CBBA10


def test_cast_of_fp32_max_saturates():
    # the scale rounds up (0x03E00001), so max * scale is just above 448: the clamp saturates it
    fmax32 = torch.finfo(torch.float32).max
    q, scale = ds.cast_tensorwise(torch.tensor([fmax32, -fmax32, 1.0]), E4M3)
    assert f32_bits(scale) == 0x03E00001
    assert q.tolist() == [0x7E, 0xFE, 0x00]


def test_cast_with_inf_gives_zero_scale_and_nan_bytes():
    q, scale = ds.cast_tensorwise(torch.tensor([float("inf"), 2.0, -2.0]), E4M3)
    assert scale.item() == 0.0
    assert q[0].item() & 0x7F == 0x7F            # inf * 0 is NaN (its sign bit depends on the CPU)
    assert q[1:].tolist() == [0x00, 0x80]


def test_cast_with_nan_gives_nan_everywhere():
    q, scale = ds.cast_tensorwise(torch.tensor([float("nan"), 2.0, -2.0]), E5M2)
    assert math.isnan(scale.item())
    assert all(b & 0x7F == 0x7F for b in q.tolist())


def test_cast_axiswise_hand_worked():
    x = torch.tensor([[1.0, 2.0], [448.0, -4.0]])
    q, scale = ds.cast_axiswise(x, E4M3, -1)
    assert scale.tolist() == [[224.0], [1.0]]
    assert q.tolist() == [[0x76, 0x7E], [0x7E, 0xC8]]   # 224, 448 | 448, -4
    q, scale = ds.cast_axiswise(x, E4M3, 0)
    assert scale.tolist() == [[1.0, 112.0]]
    assert q.tolist() == [[0x38, 0x76], [0x7E, 0xFE]]   # 1, 224 | 448, -448


def test_cast_keeps_strides_of_a_transposed_view():
    w = torch.randn(6, 4)
    q, _ = ds.cast_tensorwise(w.t(), E4M3)
    assert q.shape == (4, 6) and q.stride() == (1, 4)


def test_dequantize_divides_by_the_scale():
    # 5.0 / 3.0 in float32 is 0x3FD55555; 5.0 * float32(1/3) would be 0x3FD55556
    q = torch.tensor([5.0]).to(torch.float8_e4m3fn).view(torch.uint8)
    out = ds.dequantize(q, torch.tensor(3.0), E4M3)
    assert f32_bits(out) == 0x3FD55555
    assert f32_bits(torch.tensor([5.0]) * torch.tensor(3.0).reciprocal()) == 0x3FD55556


def test_emulated_mm_hand_worked():
    a = torch.tensor([[1.0, 2.0]]).to(torch.float8_e4m3fn).view(torch.uint8)
    b = torch.tensor([[2.0], [4.0]]).to(torch.float8_e4m3fn).view(torch.uint8)
    out = ds.emulated_mm(a, torch.tensor(2.0), E4M3, b, torch.tensor(4.0), E4M3, torch.bfloat16)
    assert out.dtype == torch.bfloat16 and out.tolist() == [[1.25]]   # 0.5*0.5 + 1*1


def test_linear_reference_cast_order_and_formats():
    x, w, b = torch.randn(4, 8), torch.randn(3, 8), torch.randn(3)
    out, fwd = ds.linear_forward(x, w, b, ds.TENSORWISE)
    assert out.shape == (4, 3)
    assert [(c.name, c.fmt) for c in fwd] == [("input", E4M3), ("weight", E4M3)]
    gi, gw, gb, bwd = ds.linear_backward(torch.randn(4, 3), x, w, True, ds.TENSORWISE)
    assert gi.shape == x.shape and gw.shape == w.shape and gb.shape == b.shape
    assert [(c.name, c.fmt) for c in bwd] == [
        ("grad_output", E5M2), ("weight_for_grad_input", E4M3),
        ("grad_output_for_grad_weight", E5M2), ("input_for_grad_weight", E4M3)]
    # tensorwise: the repeated casts of one tensor are the same bytes
    assert torch.equal(bwd[0].data, bwd[2].data) and torch.equal(fwd[0].data, bwd[3].data)
    _, _, _, hp = ds.linear_backward(torch.randn(4, 3), x, w, False, ds.ROWWISE_WITH_GW_HP)
    assert [c.name for c in hp] == ["grad_output", "weight_for_grad_input"]
    assert hp[0].scale.shape == (4, 1) and hp[1].scale.dim() == 0


# --------------------------------------------------------------------------- against torchao


def _edge_inputs(dtype: torch.dtype) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    base = torch.randn(16, 24, generator=gen)
    cases = {
        "normal": base,
        "zeros": torch.zeros(16, 24),
        "tiny": base * 1e-30,
        "subnormal": base * 1e-40,
        "huge": base * 1e36,
        "mixed": base * torch.logspace(-30, 30, 24),
        "at fp8 max": torch.where(base > 0, torch.tensor(448.0), torch.tensor(-57344.0)),
        "with inf": base.index_put((torch.tensor([2]), torch.tensor([5])), torch.tensor(float("inf"))),
        "with nan": base.index_put((torch.tensor([7]), torch.tensor([1])), torch.tensor(float("nan"))),
        "zero row": base.index_put((torch.tensor([4]),), torch.tensor(0.0)),
    }
    for k in range(8):
        cases[f"random {k}"] = torch.randn(16, 24, generator=gen) * math.exp(k * 6 - 20)
    return {k: v.to(dtype) for k, v in cases.items()}


FORMATS = [E4M3, E5M2]
GRANULARITIES = [(ds.Granularity.TENSORWISE, None), (ds.Granularity.AXISWISE, -1), (ds.Granularity.AXISWISE, 0)]


@pytest.fixture(scope="module")
def torchao_float8():
    """torchao's float8 package; the test is skipped where torchao is absent or cannot be imported."""
    try:
        import torchao.float8
    except ImportError as exc:   # ModuleNotFoundError included
        pytest.skip(f"torchao is not importable: {exc}")
    return torchao.float8


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("round_pow2", [False, True])
def test_scales_and_casts_match_torchao(torchao_float8, dtype, round_pow2):
    from torchao.float8.config import ScalingGranularity
    from torchao.float8.float8_scaling_utils import hp_tensor_to_float8_dynamic
    from torchao.float8.float8_training_tensor import LinearMMConfig
    from torchao.float8.float8_utils import amax_to_scale, tensor_to_scale, to_fp8_saturated

    ao_gran = {ds.Granularity.TENSORWISE: ScalingGranularity.TENSORWISE,
               ds.Granularity.AXISWISE: ScalingGranularity.AXISWISE}
    for name, x in _edge_inputs(dtype).items():
        for fmt in FORMATS:
            f8 = torch_dtype(fmt)
            for gran, dim in GRANULARITIES:
                what = f"{name}/{fmt.name}/{gran.value}/{dim}/{dtype}/pow2={round_pow2}"
                ao_scale = tensor_to_scale(x, f8, scaling_granularity=ao_gran[gran], axiswise_dim=dim,
                                           round_scales_to_power_of_2=round_pow2)
                q, scale = ds.cast_dynamic(x, fmt, gran, dim, round_scales_to_power_of_2=round_pow2)
                assert_bits_equal(ao_scale, scale, what + " scale")
                ao = hp_tensor_to_float8_dynamic(x, f8, LinearMMConfig(), scaling_granularity=ao_gran[gran],
                                                 axiswise_dim=dim, round_scales_to_power_of_2=round_pow2)
                assert_bits_equal(ao._data.view(torch.uint8), q, what + " bytes")
                assert_bits_equal(ao._scale, scale, what + " cast scale")
                amax = ds.amax(x, dim)
                assert_bits_equal(amax_to_scale(amax, f8, round_pow2), ds.amax_to_scale(
                    amax, fmt, round_scales_to_power_of_2=round_pow2), what + " amax_to_scale")
                overflowing = x.float() * scale * 300.0
                assert_bits_equal(to_fp8_saturated(overflowing, f8).view(torch.uint8),
                                  ds.saturated_cast(overflowing, torch.tensor(1.0), fmt), what + " saturate")


def test_scale_sweep_matches_torchao(torchao_float8):
    from torchao.float8.float8_utils import amax_to_scale

    gen = torch.Generator().manual_seed(4)
    bits = torch.randint(0, 0x7F800000, (300_000,), dtype=torch.int32, generator=gen)
    amaxes = torch.cat([bits.view(torch.float32),
                        torch.tensor([0.0, float("inf"), float("nan"), torch.finfo(torch.float32).max])])
    for fmt in FORMATS:
        for pow2 in (False, True):
            assert_bits_equal(amax_to_scale(amaxes, torch_dtype(fmt), pow2),
                              ds.amax_to_scale(amaxes, fmt, round_scales_to_power_of_2=pow2),
                              f"{fmt.name} pow2={pow2}")


def _capture_casts(monkeypatch):
    """Wrap the cast entry point that Float8Linear calls; returns the list it fills."""
    import torchao.float8.float8_linear as f8lin

    seen = []
    original = f8lin.hp_tensor_to_float8_dynamic

    def spy(hp_tensor, float8_dtype, *args, **kwargs):
        out = original(hp_tensor, float8_dtype, *args, **kwargs)
        seen.append((kwargs["gemm_input_role"].value, float8_dtype,
                     out._data.view(torch.uint8).contiguous().clone(), out._scale.clone()))
        return out

    monkeypatch.setattr(f8lin, "hp_tensor_to_float8_dynamic", spy)
    return seen


@pytest.mark.parametrize("recipe_name", ["tensorwise", "rowwise", "rowwise_with_gw_hp"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_two_layer_model_matches_torchao(torchao_float8, monkeypatch, recipe_name, dtype):
    """Every cast's bytes and scale, the output and every gradient, bitwise, over two SGD steps."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    seen = _capture_casts(monkeypatch)
    torch.manual_seed(5)
    base = torch.nn.Sequential(torch.nn.Linear(24, 40), torch.nn.ReLU(), torch.nn.Linear(40, 8)).to(dtype)
    config = dataclasses.replace(Float8LinearConfig.from_recipe_name(recipe_name), emulate=True)
    model = convert_to_float8_training(base, config=config)
    recipe = ds.RECIPES[recipe_name]
    weights = [model[0].weight.detach().clone(), model[2].weight.detach().clone()]
    biases = [model[0].bias.detach().clone(), model[2].bias.detach().clone()]
    lr = 0.01
    for step in range(2):
        x = (torch.randn(2, 6, 24) * (1e3 if step else 1.0)).to(dtype)
        x[0, 0, :3] = torch.tensor([0.0, 1e-30, 448.0])
        x.requires_grad_(True)
        go = torch.randn(2, 6, 8).to(dtype)
        seen.clear()
        y = model(x)
        y.backward(go)

        y1, casts = ds.linear_forward(x.detach(), weights[0], biases[0], recipe)
        h = torch.relu(y1)
        y2, c = ds.linear_forward(h, weights[1], biases[1], recipe)
        casts += c
        gh, gw1, gb1, c = ds.linear_backward(go, h, weights[1], True, recipe)
        casts += c
        gy1 = torch.ops.aten.threshold_backward(gh, y1, 0)
        gx, gw0, gb0, c = ds.linear_backward(gy1, x.detach(), weights[0], True, recipe)
        casts += c

        assert len(casts) == len(seen)
        for i, (cast, (role, f8, data, scale)) in enumerate(zip(casts, seen)):
            assert torch_dtype(cast.fmt) == f8, cast.name
            assert_bits_equal(data, cast.data, f"step {step} cast {i} {cast.name} bytes")
            assert_bits_equal(scale, cast.scale, f"step {step} cast {i} {cast.name} scale")
        assert_bits_equal(y.detach(), y2, "output")
        assert_bits_equal(x.grad, gx, "grad_input")
        assert_bits_equal(model[0].weight.grad, gw0, "layer0 grad_weight")
        assert_bits_equal(model[2].weight.grad, gw1, "layer1 grad_weight")
        assert_bits_equal(model[0].bias.grad, gb0, "layer0 grad_bias")
        assert_bits_equal(model[2].bias.grad, gb1, "layer1 grad_bias")

        with torch.no_grad():
            for p, r, g in ((model[0].weight, weights[0], gw0), (model[2].weight, weights[1], gw1),
                            (model[0].bias, biases[0], gb0), (model[2].bias, biases[1], gb1)):
                p.add_(p.grad, alpha=-lr)
                r.add_(g, alpha=-lr)
                p.grad = None
