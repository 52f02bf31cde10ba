"""The saturating FP8 cast, its amax, and dequantization.

Bytes are carried as ``torch.uint8`` (bit patterns), the way TE stores ``Float8Tensor._data``.
"""

from __future__ import annotations

import math

import torch

from harness.fp8.formats import NAN_BYTE, Fp8Format, fp8_max, torch_dtype


def amax_fmaxf(hp_tensor: torch.Tensor) -> torch.Tensor:
    """``max(|x|)`` with C ``fmaxf`` semantics, starting from 0, as a 0-dim float32 tensor.

    ``fmaxf(acc, NaN) == acc``: NaN elements are ignored, so an all-NaN (or empty) tensor has
    amax 0; infinities are kept. This is what TE's cast kernels accumulate.
    """
    x = hp_tensor.detach().float().abs()       # a new tensor: changed in place below
    if x.numel() == 0:
        return torch.zeros((), dtype=torch.float32)
    return x.nan_to_num_(nan=0.0, posinf=math.inf).max().clamp_min(0.0)


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
    # Whether any element is NaN, in one reduction: the clamped values are finite or NaN, and a
    # float32 sum of finite values this small cannot overflow, so the sum is NaN exactly when one is.
    if bool(torch.isnan(clamped.sum())):
        q = torch.where(torch.isnan(scaled), torch.full_like(q, NAN_BYTE[fmt]), q)
    return q


def dequantize(fp8_bytes: torch.Tensor, scale_inv: torch.Tensor, fmt: Fp8Format) -> torch.Tensor:
    """``float32(q) * scale_inv``: the high-precision value an FP8 GEMM input stands for.

    From :data:`TABLE_FROM` elements on, ``float32(q)`` is read from :func:`float_table`, torch's
    own conversion of each of the 256 bit patterns, so the bits are those of
    ``q.view(fp8).float()`` either way; on the CPU the look-up is about four times faster for a
    large E4M3 operand (a reference simulating a group converts every operand of every GEMM) and
    slower for a small one (more calls).
    """
    if fp8_bytes.numel() < TABLE_FROM:
        return fp8_bytes.view(torch_dtype(fmt)).float() * scale_inv.float()
    table = float_table(fmt, fp8_bytes.device)
    index = fp8_bytes.view(torch.uint8).reshape(-1).int()
    return table.index_select(0, index).reshape(fp8_bytes.shape) * scale_inv.float()


TABLE_FROM = 2048      # elements; measured on one CPU thread: conversion faster at 1024, the table at 4096


_TABLES: dict = {}


def float_table(fmt: Fp8Format, device: torch.device | str = "cpu") -> torch.Tensor:
    """The float32 value of each bit pattern of ``fmt`` (256 entries, NaN patterns included), as
    torch converts them: every FP8 value is exact in float32, so the conversion is a table."""
    key = (fmt, str(device))
    table = _TABLES.get(key)
    if table is None:
        # converted where it is used: a device's own conversion decides its bits (NaN payloads)
        patterns = torch.arange(256, dtype=torch.uint8, device=device)
        table = _TABLES[key] = patterns.view(torch_dtype(fmt)).float()
    return table
