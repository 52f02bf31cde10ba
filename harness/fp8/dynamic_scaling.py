"""Dynamic FP8 scaling (a fresh scale from each tensor's own amax), bit for bit as torchao does it.

This is an independent reference for the numerics of torchao's float8 training
(``convert_to_float8_training`` with ``Float8LinearConfig(emulate=True)``), checked against
torchao 0.18.0 on torch 2.13.0 (CPU). It does not import torchao. ``docs/torchao-numerics.md``
explains where each formula comes from; in short, for a high-precision tensor ``x`` and a
format with largest finite value ``M`` (448 for E4M3, 57344 for E5M2)::

    amax  = max(|x|)                       in x's dtype; NaN propagates, inf is kept
    a64   = max(float64(amax), 1e-12)      clamp in float64 (NaN stays NaN)
    s64   = float64(1 / a64) * M           a reciprocal, then a multiply, both float64
    scale = float32(s64)                   one rounding to float32
    scale = exp2(floor(log2(scale)))       only with round_scales_to_power_of_2 (float32 ops)
    q     = fp8(clamp(float32(x) * scale, -M, M))     round to nearest even
    x~    = float32(q) / scale             dequantization divides (it does not multiply by 1/scale)

Bytes are returned as ``torch.uint8`` bit patterns, scales as float32 tensors: tensorwise
scales are 0-dim, axiswise ("rowwise") scales keep the reduced dimension with size 1.

The power-of-two rounding is called "round down" by torchao, but it takes ``log2`` in
float32: a scale a few ulps below ``2**k`` has a float32 ``log2`` that rounds to ``k``, so it
becomes ``2**k``, slightly *above* the exact scale (the clamp then saturates the few values
that overflow). The reference reproduces this by using the same float32 operations.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Optional

import torch

from harness.fp8.formats import Fp8Format, fp8_max, torch_dtype

EPS = 1e-12
"""Lower clamp on the amax (in float64) before the division, so an all-zero tensor gets a finite scale."""


class Granularity(enum.Enum):
    """How many scales a cast uses."""

    TENSORWISE = "tensorwise"   # one 0-dim scale
    AXISWISE = "axiswise"       # one scale per slice, reducing along one dim (torchao's "rowwise")


# --------------------------------------------------------------------------- scales


def amax(hp_tensor: torch.Tensor, dim: Optional[int] = None) -> torch.Tensor:
    """``max(|x|)`` in the tensor's own dtype, NaN-propagating (one NaN makes the amax NaN).

    ``dim=None``: over the whole tensor, a 0-dim tensor. Otherwise along ``dim`` with the
    dimension kept (size 1), as an axiswise scale needs it.
    """
    x = hp_tensor.detach()
    if dim is None:
        return torch.max(torch.abs(x))
    return torch.amax(torch.abs(x), dim=dim, keepdim=True)


def round_scale_down_to_power_of_2(scale: torch.Tensor) -> torch.Tensor:
    """``exp2(floor(log2(scale)))``, every step in float32.

    For an exact power of two this is the identity; otherwise the largest power of two not
    above the scale, except for scales within a few float32 ulps below ``2**k`` (how many grows
    with ``|k|``: 0 for k = 1, 5 for k = 10, 22 for k = 40), whose float32 ``log2`` rounds up
    to ``k``: those become ``2**k``. A zero scale gives 0, inf gives inf, NaN gives NaN.
    """
    if scale.dtype != torch.float32:
        raise TypeError(f"scale must be float32, got {scale.dtype}")
    return torch.exp2(torch.floor(torch.log2(scale)))


def amax_to_scale(amax_tensor: torch.Tensor, fmt: Fp8Format, *,
                  round_scales_to_power_of_2: bool = False) -> torch.Tensor:
    """``float32(float64(1 / max(float64(amax), 1e-12)) * M)``, optionally rounded to a power of two.

    The division is a float64 reciprocal followed by a float64 multiply by ``M`` (two roundings
    in float64), then one rounding to float32. That equals the correctly rounded float32 of
    ``M / amax`` except when ``M / amax`` lies within about 2**-28 relative of a float32
    rounding boundary. Special amaxes: 0 (and anything below 1e-12) gives
    ``float32(M * 1e12)``; inf gives scale 0; NaN gives NaN.
    """
    a64 = torch.clamp(amax_tensor.detach().to(torch.float64), min=EPS)
    scale = (a64.reciprocal() * fp8_max(fmt)).to(torch.float32)
    if round_scales_to_power_of_2:
        scale = round_scale_down_to_power_of_2(scale)
    return scale


def tensorwise_scale(hp_tensor: torch.Tensor, fmt: Fp8Format, *,
                     round_scales_to_power_of_2: bool = False) -> torch.Tensor:
    """One 0-dim float32 scale for the whole tensor: ``amax_to_scale(max(|x|), fmt)``."""
    return amax_to_scale(amax(hp_tensor), fmt, round_scales_to_power_of_2=round_scales_to_power_of_2)


def axiswise_scale(hp_tensor: torch.Tensor, fmt: Fp8Format, dim: int, *,
                   round_scales_to_power_of_2: bool = False) -> torch.Tensor:
    """One float32 scale per slice: ``amax_to_scale(amax(|x|, dim, keepdim), fmt)``.

    ``dim=-1`` gives one scale per row (shape ``[..., 1]``), ``dim=0`` one per column
    (shape ``[1, ...]``).
    """
    return amax_to_scale(amax(hp_tensor, dim), fmt, round_scales_to_power_of_2=round_scales_to_power_of_2)


# --------------------------------------------------------------------------- casts


def saturated_cast(hp_tensor: torch.Tensor, scale: torch.Tensor, fmt: Fp8Format) -> torch.Tensor:
    """``fp8(clamp(float32(x) * scale, -M, M))`` as uint8 bit patterns.

    The product is one float32 multiply (the input is upcast first, whatever its dtype); the
    clamp keeps NaN, so a NaN product becomes the format's NaN with its sign bit kept
    (0x7F/0xFF); the conversion rounds to nearest even. The result keeps the input's
    strides (a transposed view gives transposed bytes).
    """
    limit = fp8_max(fmt)
    scaled = hp_tensor.detach().to(torch.float32) * scale
    return scaled.clamp(min=-limit, max=limit).to(torch_dtype(fmt)).view(torch.uint8)


def cast_tensorwise(hp_tensor: torch.Tensor, fmt: Fp8Format, *,
                    round_scales_to_power_of_2: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``(bytes, scale)`` of a tensorwise dynamic cast; ``scale`` is 0-dim float32 (not its inverse)."""
    scale = tensorwise_scale(hp_tensor, fmt, round_scales_to_power_of_2=round_scales_to_power_of_2)
    return saturated_cast(hp_tensor, scale, fmt), scale


def cast_axiswise(hp_tensor: torch.Tensor, fmt: Fp8Format, dim: int, *,
                  round_scales_to_power_of_2: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``(bytes, scale)`` of an axiswise dynamic cast reducing along ``dim`` (scale keeps that dim as 1)."""
    scale = axiswise_scale(hp_tensor, fmt, dim, round_scales_to_power_of_2=round_scales_to_power_of_2)
    return saturated_cast(hp_tensor, scale, fmt), scale


def cast_dynamic(hp_tensor: torch.Tensor, fmt: Fp8Format, granularity: Granularity,
                 dim: Optional[int] = None, *,
                 round_scales_to_power_of_2: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Tensorwise or axiswise cast by ``granularity`` (``dim`` only matters for axiswise)."""
    if granularity is Granularity.TENSORWISE:
        return cast_tensorwise(hp_tensor, fmt, round_scales_to_power_of_2=round_scales_to_power_of_2)
    if dim is None:
        raise ValueError("an axiswise cast needs a dim")
    return cast_axiswise(hp_tensor, fmt, dim, round_scales_to_power_of_2=round_scales_to_power_of_2)


def dequantize(fp8_bytes: torch.Tensor, scale: torch.Tensor, fmt: Fp8Format) -> torch.Tensor:
    """``float32(q) / scale``: an IEEE float32 division (not a multiply by ``1/scale``).

    Keeps the strides of ``fp8_bytes``. An axiswise scale broadcasts along its size-1 dim.
    """
    return fp8_bytes.view(torch_dtype(fmt)).to(torch.float32) / scale


def emulated_mm(a_bytes: torch.Tensor, a_scale: torch.Tensor, a_fmt: Fp8Format,
                b_bytes: torch.Tensor, b_scale: torch.Tensor, b_fmt: Fp8Format,
                out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``mm(float32(a)/sa, float32(b)/sb)`` in float32, then cast to ``out_dtype``.

    Both operands are dequantized first (with their own strides, which a bitwise comparison
    of the float32 GEMM should keep the same as the stack under test), then multiplied with an
    ordinary float32 ``torch.mm``; there is no FP8 accumulation and no output scaling.
    """
    return torch.mm(dequantize(a_bytes, a_scale, a_fmt), dequantize(b_bytes, b_scale, b_fmt)).to(out_dtype)


# --------------------------------------------------------------------------- a linear layer


@dataclasses.dataclass(frozen=True)
class OperandCast:
    """How one GEMM operand is cast: its format and granularity, or ``fmt=None`` for no cast."""

    fmt: Optional[Fp8Format]
    granularity: Granularity = Granularity.TENSORWISE


_HP = OperandCast(None)


@dataclasses.dataclass(frozen=True)
class LinearRecipe:
    """The six operand casts of a linear layer's three GEMMs, as torchao's recipes set them.

    ``output = input @ weight.t()``, ``grad_input = grad_output @ weight``,
    ``grad_weight = grad_output.t() @ input``. Both operands of a GEMM are either cast or not.
    """

    input: OperandCast
    weight: OperandCast
    grad_output: OperandCast
    weight_for_grad_input: OperandCast
    grad_output_for_grad_weight: OperandCast
    input_for_grad_weight: OperandCast
    round_scales_to_power_of_2: bool = False


TENSORWISE = LinearRecipe(
    input=OperandCast(Fp8Format.E4M3), weight=OperandCast(Fp8Format.E4M3),
    grad_output=OperandCast(Fp8Format.E5M2), weight_for_grad_input=OperandCast(Fp8Format.E4M3),
    grad_output_for_grad_weight=OperandCast(Fp8Format.E5M2), input_for_grad_weight=OperandCast(Fp8Format.E4M3),
)
_E4M3_AXIS = OperandCast(Fp8Format.E4M3, Granularity.AXISWISE)
ROWWISE = LinearRecipe(
    input=_E4M3_AXIS, weight=_E4M3_AXIS, grad_output=_E4M3_AXIS, weight_for_grad_input=_E4M3_AXIS,
    grad_output_for_grad_weight=_E4M3_AXIS, input_for_grad_weight=_E4M3_AXIS,
    round_scales_to_power_of_2=True,
)
ROWWISE_WITH_GW_HP = LinearRecipe(
    input=_E4M3_AXIS, weight=_E4M3_AXIS, grad_output=_E4M3_AXIS,
    weight_for_grad_input=OperandCast(Fp8Format.E4M3), grad_output_for_grad_weight=_HP, input_for_grad_weight=_HP,
    round_scales_to_power_of_2=True,
)
RECIPES = {"tensorwise": TENSORWISE, "rowwise": ROWWISE, "rowwise_with_gw_hp": ROWWISE_WITH_GW_HP}


@dataclasses.dataclass
class Fp8Cast:
    """One cast: the bytes (uint8, with the strides the GEMM sees) and the float32 scale."""

    name: str
    fmt: Fp8Format
    data: torch.Tensor
    scale: torch.Tensor


# Which dim an axiswise cast reduces along, per cast (torchao picks these so that each scale
# runs along the GEMM's outer dimension, never along the summed one).
_AXIS_DIM = {"input": -1, "weight": 0, "grad_output": -1, "weight_for_grad_input": -1,
             "grad_output_for_grad_weight": 0, "input_for_grad_weight": 0}


def _operand(name: str, hp: torch.Tensor, how: OperandCast, round_pow2: bool,
             casts: list) -> tuple[torch.Tensor, Optional[Fp8Cast]]:
    """The GEMM operand in float32-dequantized form, or ``hp`` itself when not cast."""
    if how.fmt is None:
        return hp, None
    data, scale = cast_dynamic(hp, how.fmt, how.granularity, _AXIS_DIM[name],
                               round_scales_to_power_of_2=round_pow2)
    cast = Fp8Cast(name, how.fmt, data, scale)
    casts.append(cast)
    return dequantize(data, scale, how.fmt), cast


def linear_forward(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                   recipe: LinearRecipe = TENSORWISE) -> tuple[torch.Tensor, list[Fp8Cast]]:
    """torchao's emulated ``Float8Linear`` forward: ``(output, [input cast, weight cast])``.

    The input is cast in its own shape, the weight as the transposed view ``weight.t()``
    (``[in, out]``, strides ``(1, in)``); the emulated GEMM is on the input flattened to 2-D,
    its float32 result is cast to ``x.dtype`` and reshaped, then ``bias.to(x.dtype)`` is
    added in that dtype.
    """
    casts: list[Fp8Cast] = []
    rp = recipe.round_scales_to_power_of_2
    a, _ = _operand("input", x, recipe.input, rp, casts)
    b, _ = _operand("weight", weight.detach().t(), recipe.weight, rp, casts)
    out = torch.mm(a.reshape(-1, x.shape[-1]), b).to(x.dtype)
    out = out.reshape(*x.shape[:-1], out.shape[-1])
    if bias is not None:
        out = out + bias.detach().to(out.dtype)
    return out, casts


def linear_backward(grad_output: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                    has_bias: bool = False, recipe: LinearRecipe = TENSORWISE,
                    ) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor], list[Fp8Cast]]:
    """torchao's emulated ``Float8Linear`` backward: ``(grad_input, grad_weight, grad_bias, casts)``.

    Casts in torchao's order: grad_output (for grad_input), weight (again, from ``weight.t()``),
    grad_output (again, for grad_weight), input (again, flattened to 2-D). Tensorwise casts of
    the same tensor repeat identically; axiswise ones reduce along the other dim.
    ``grad_input = mm(go, w)`` and ``grad_weight = mm(go.t(), x)``, each float32 then cast to the
    operand dtype; ``grad_bias`` sums ``grad_output`` in its own dtype over all leading dims.
    """
    casts: list[Fp8Cast] = []
    rp = recipe.round_scales_to_power_of_2
    go2 = grad_output.detach().reshape(-1, grad_output.shape[-1])
    w_t = weight.detach().t()
    x2 = x.detach().reshape(-1, x.shape[-1])
    g, _ = _operand("grad_output", go2, recipe.grad_output, rp, casts)
    w, _ = _operand("weight_for_grad_input", w_t, recipe.weight_for_grad_input, rp, casts)
    grad_input = torch.mm(g, w.t())
    if recipe.grad_output.fmt is not None:
        grad_input = grad_input.to(grad_output.dtype)
    grad_input = grad_input.reshape(*grad_output.shape[:-1], grad_input.shape[-1])
    g1, _ = _operand("grad_output_for_grad_weight", go2, recipe.grad_output_for_grad_weight, rp, casts)
    xi, _ = _operand("input_for_grad_weight", x2, recipe.input_for_grad_weight, rp, casts)
    grad_weight = torch.mm(g1.t(), xi)
    if recipe.grad_output_for_grad_weight.fmt is not None:
        grad_weight = grad_weight.to(grad_output.dtype)
    grad_bias = None
    if has_bias:
        grad_bias = grad_output.detach().sum(dim=tuple(range(grad_output.dim() - 1)))
    return grad_input, grad_weight, grad_bias, casts
