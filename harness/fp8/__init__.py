"""FP8 numerics as small pure functions: formats, cast, amax, delayed scaling, bit comparison."""

from harness.fp8.formats import Fp8Format, E4M3, E5M2, fp8_max, torch_dtype
from harness.fp8.recipe import DelayedScalingRecipe, Format, AmaxComputeAlgo
from harness.fp8.cast import amax_fmaxf, cast_to_fp8, dequantize
from harness.fp8.scaling import delayed_scaling_update, delayed_scaling_update_rows, scaled_max
from harness.fp8.bits import bit_view, first_bit_mismatch, BitMismatch

__all__ = [
    "Fp8Format", "E4M3", "E5M2", "fp8_max", "torch_dtype",
    "DelayedScalingRecipe", "Format", "AmaxComputeAlgo",
    "amax_fmaxf", "cast_to_fp8", "dequantize",
    "delayed_scaling_update", "delayed_scaling_update_rows", "scaled_max",
    "bit_view", "first_bit_mismatch", "BitMismatch",
]
