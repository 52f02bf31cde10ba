"""Delayed scaling: the amax-history roll and scale update, one tensor at a time.

This is the formula of TE's fused update kernel (fp32 throughout, IEEE division; docs/design.md,
"Numerics")::

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

:func:`delayed_scaling_update_rows` is the formula over ``N`` independent histories at once
(one per row), for callers that update many tensors after one reduction;
:func:`delayed_scaling_update` is its one-tensor form.

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
    history, new_scale, new_scale_inv = delayed_scaling_update_rows(
        amax_history.detach().reshape(1, -1), scale.detach().reshape(1), reduced_amax.detach().reshape(1),
        recipe, fmt)
    return history[0].clone(), new_scale[0].clone(), new_scale_inv[0].clone()


def delayed_scaling_update_rows(
    amax_histories: torch.Tensor,
    scales: torch.Tensor,
    reduced_amaxes: torch.Tensor,
    recipe: DelayedScalingRecipe,
    fmt: Fp8Format,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The update of the module docstring on ``N`` tensors at once, each row on its own.

    ``amax_histories`` is ``[N, L]`` (row ``n`` is tensor ``n``'s ``H``), ``scales`` and
    ``reduced_amaxes`` are ``[N]``. Returns new ``([N, L], [N], [N])`` tensors; inputs are not
    modified. Every branch of the one-tensor formula becomes a per-row ``where``::

        last  = where(reduced != 0, reduced, H[:, 0])          # NaN != 0, so NaN rolls
        rolls = last != 0
        amax  = where(rolls, max over window ignoring NaN (NaN if all NaN) | last, 0)
        H'    = where(rolls, [0, H[:, 2:], last], H)
        scale'     = where(isfinite(amax) & amax > 0, scaled_max / amax, scale)
        scale'     = where(isinf(scale'), FLT_MAX, scale')
        scale_inv' = 1 / scale'
    """
    history = amax_histories.detach().float().reshape(amax_histories.shape[0], -1)
    scales = scales.detach().float().reshape(-1)
    reduced = reduced_amaxes.detach().float().reshape(-1)
    rows, length = history.shape
    last = torch.where(reduced != 0, reduced, history[:, 0])
    rolls = last != 0
    if length == 1:
        rolled_amax = last
        rolled_history = torch.zeros_like(history)
    else:
        window = torch.cat([history[:, 1:], last[:, None]], dim=1)
        if recipe.amax_compute_algo is AmaxComputeAlgo.MAX:
            nan = torch.isnan(window)
            # NaN is ignored like fmaxf; -inf stands in for it, and an all-NaN window stays NaN.
            rolled_amax = torch.where(nan, float("-inf"), window).amax(dim=1)
            rolled_amax = torch.where(nan.all(dim=1), float("nan"), rolled_amax)
        else:
            rolled_amax = last
        rolled_history = torch.cat([torch.zeros(rows, 1), history[:, 2:], last[:, None]], dim=1)
    amax = torch.where(rolls, rolled_amax, torch.zeros(()))
    new_history = torch.where(rolls[:, None], rolled_history, history)
    usable = torch.isfinite(amax) & (amax > 0)
    new_scale = torch.where(usable, scaled_max(fmt, recipe.margin) / amax, scales)
    new_scale = torch.where(torch.isinf(new_scale), torch.tensor(FLT_MAX, dtype=torch.float32), new_scale)
    new_scale_inv = torch.ones((), dtype=torch.float32) / new_scale
    return new_history.clone(), new_scale, new_scale_inv
