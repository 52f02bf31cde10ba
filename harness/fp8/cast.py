"""The saturating FP8 cast, its amax, and dequantization.

Bytes are carried as ``torch.uint8`` (bit patterns), the way TE stores ``Float8Tensor._data``.
"""

from __future__ import annotations

import torch

from harness.fp8.formats import NAN_BYTE, Fp8Format, fp8_max, torch_dtype


def amax_fmaxf(hp_tensor: torch.Tensor) -> torch.Tensor:
    """``max(|x|)`` with C ``fmaxf`` semantics, starting from 0, as a 0-dim float32 tensor.

    ``fmaxf(acc, NaN) == acc``: NaN elements are ignored, so an all-NaN (or empty) tensor has
    amax 0; infinities are kept. This is what TE's cast kernels accumulate.
    """
    x = hp_tensor.detach().float().abs()
    x = torch.where(torch.isnan(x), torch.zeros((), dtype=torch.float32), x)
    if x.numel() == 0:
        return torch.zeros((), dtype=torch.float32)
    return x.max().clamp_min(0.0)


def cast_to_fp8(hp_tensor: torch.Tensor, scale: torch.Tensor, fmt: Fp8Format) -> torch.Tensor:
    """``q = clamp(float32(x * scale), -fp8_max, fp8_max).to(fmt)``, returned as uint8 bit patterns.

    Round to nearest even, saturating. The clamp comes first because what ``.to()`` does on
    overflow depends on torch's version, device and format (torch 2.13 on CPU turns E5M2
    values from 61440 up into inf). A NaN input becomes byte 0x7F whatever its sign, as TE's
    kernels write it (torch would keep the sign bit).
    """
    limit = fp8_max(fmt)
    scaled = hp_tensor.float() * scale.float()
    clamped = scaled.clamp(-limit, limit)
    q = clamped.to(torch_dtype(fmt)).view(torch.uint8)
    nan = torch.isnan(scaled)
    if bool(nan.any()):
        q = torch.where(nan, torch.full_like(q, NAN_BYTE[fmt]), q)
    return q


def dequantize(fp8_bytes: torch.Tensor, scale_inv: torch.Tensor, fmt: Fp8Format) -> torch.Tensor:
    """``float32(q) * scale_inv``: the high-precision value an FP8 GEMM input stands for."""
    return fp8_bytes.view(torch_dtype(fmt)).float() * scale_inv.float()
