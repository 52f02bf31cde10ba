"""Delayed scaling: the amax-history roll and scale update, one tensor at a time.

This is the formula of TE's fused update kernel (fp32 throughout, IEEE division)::

    scaled_max = float32(fp8_max * 2**-margin)
    last       = reduced_amax if reduced_amax != 0 else H[0]
    if last != 0:                       # a zero amax rolls nothing
        window = H[1:] + [last]
        amax   = max(window) ('max', NaN ignored like fmaxf)  or  last ('most_recent')
        H      = [0] + H[2:] + [last]    (length 1: H = [0], amax = last)
    else:
        amax   = 0
    scale'     = scaled_max / amax  if amax is finite and > 0  else scale
    scale'     = FLT_MAX            if scale' is inf
    scale_inv' = 1 / scale'

Both divisions are float32 tensor/tensor divisions, which are correctly rounded. A Python
scalar over a tensor (``448.0 / amax``) goes through a reciprocal and differs from IEEE
division in about a quarter of random amaxes, so it must not be used here.
"""

from __future__ import annotations

import math

import torch

from harness.fp8.formats import Fp8Format, fp8_max
from harness.fp8.recipe import AmaxComputeAlgo, DelayedScalingRecipe

FLT_MAX = torch.finfo(torch.float32).max


def scaled_max(fmt: Fp8Format, margin: int) -> torch.Tensor:
    """``float32(fp8_max * 2**-margin)`` as a 0-dim tensor (exact: a power-of-two scaling)."""
    return torch.tensor(fp8_max(fmt) * math.ldexp(1.0, -margin), dtype=torch.float32)


def _fmax_reduce(values: torch.Tensor) -> torch.Tensor:
    """Maximum ignoring NaN (``fmaxf`` folded over the values); NaN only if all are NaN."""
    finite_or_inf = values[~torch.isnan(values)]
    if finite_or_inf.numel() == 0:
        return torch.tensor(float("nan"), dtype=torch.float32)
    return finite_or_inf.max()


def delayed_scaling_update(
    amax_history: torch.Tensor,
    scale: torch.Tensor,
    reduced_amax: torch.Tensor,
    recipe: DelayedScalingRecipe,
    fmt: Fp8Format,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One tensor's update after a reduction: returns ``(amax_history', scale', scale_inv')``.

    ``amax_history`` is the 1-D float32 history ``H`` (``H[0]`` holds the max over every cast
    since the last reduction); ``reduced_amax`` is ``H[0]`` MAX-reduced over the fp8 group
    (``H[0]`` itself when there is no reduction). Inputs are not modified.
    """
    history = amax_history.detach().float().clone()
    scale = scale.detach().float().reshape(())
    reduced = reduced_amax.detach().float().reshape(())
    length = history.numel()
    last = reduced if bool(reduced != 0) else history[0].clone()
    if bool(last != 0):
        if length == 1:
            amax = last
            history = torch.zeros(1, dtype=torch.float32)
        else:
            window = torch.cat([history[1:], last.reshape(1)])
            if recipe.amax_compute_algo is AmaxComputeAlgo.MAX:
                amax = _fmax_reduce(window)
            else:
                amax = last
            history = torch.cat([torch.zeros(1), history[2:], last.reshape(1)]).float()
    else:
        amax = torch.zeros((), dtype=torch.float32)
    if bool(torch.isfinite(amax)) and bool(amax > 0):
        new_scale = scaled_max(fmt, recipe.margin) / amax
    else:
        new_scale = scale.clone()
    if bool(torch.isinf(new_scale)):
        new_scale = torch.tensor(FLT_MAX, dtype=torch.float32)
    new_scale_inv = torch.ones((), dtype=torch.float32) / new_scale
    return history, new_scale.reshape(()), new_scale_inv.reshape(())
