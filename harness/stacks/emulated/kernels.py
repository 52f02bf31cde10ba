"""The emulated stack's "kernels": cast-with-amax and the fused amax/scale update.

Written in the vectorised style of TE's kernels (one call over a whole meta or a whole
buffer), independently of :mod:`harness.fp8`, which the reference uses: the reference check
compares two implementations, not one with itself.
"""

from __future__ import annotations

import torch

FP8_LIMITS = {torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0}
_FLT_MAX = 3.4028234663852886e38


def cast_and_amax(hp: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Saturating cast to ``dtype`` (as uint8 bytes) and ``fmaxf``-accumulated ``max|hp|``.

    Saturation is explicit (clamp before converting) like TE's ``satfinite`` cast; NaN is
    written as 0x7F whatever its sign, as TE's kernels do.
    """
    limit = FP8_LIMITS[dtype]
    prod = hp.float() * scale
    out = torch.clamp(prod, min=-limit, max=limit).to(dtype).view(torch.uint8)
    isnan = prod.isnan()
    out = out.masked_fill(isnan, 0x7F)
    mag = hp.float().abs().masked_fill(hp.isnan(), 0.0)
    amax = mag.max() if mag.numel() else torch.zeros(())
    return out, amax


def fused_amax_and_scale_update(
    reduced_amax: torch.Tensor,   # [n]
    history: torch.Tensor,        # [L, n], updated in place
    scale: torch.Tensor,          # [n], updated in place
    scale_inv: torch.Tensor,      # [n], updated in place
    scaled_max: torch.Tensor,     # [n] fp8_max * 2**-margin per slot
    use_max: bool,
) -> None:
    """Roll every slot's history and recompute its scale, in place (TE's fused update)."""
    length = history.shape[0]
    last = torch.where(reduced_amax != 0, reduced_amax, history[0])
    rolls = last != 0                        # NaN != 0 is True: a NaN amax rolls too
    if length == 1:
        amax = torch.where(rolls, last, torch.zeros_like(last))
        new_history = torch.where(rolls.unsqueeze(0), torch.zeros_like(history), history)
    else:
        window = torch.cat([history[1:], last.unsqueeze(0)], dim=0)
        if use_max:
            nan = window.isnan()
            best = window.masked_fill(nan, float("-inf")).amax(dim=0)
            best = torch.where(nan.all(dim=0), torch.full_like(best, float("nan")), best)
        else:
            best = last
        amax = torch.where(rolls, best, torch.zeros_like(best))
        rolled = torch.cat([torch.zeros_like(history[:1]), history[2:], last.unsqueeze(0)], dim=0)
        new_history = torch.where(rolls.unsqueeze(0), rolled, history)
    usable = amax.isfinite() & (amax > 0)
    new_scale = torch.where(usable, scaled_max / amax, scale)
    new_scale = torch.where(new_scale.isinf(), torch.full_like(new_scale, _FLT_MAX), new_scale)
    history.copy_(new_history)
    scale.copy_(new_scale)
    scale_inv.copy_(torch.ones_like(new_scale) / new_scale)
