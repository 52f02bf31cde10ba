"""CPU stand-in of transformer_engine.pytorch.tensor.float8_tensor (TE 1.x).

``Float8Tensor`` here is an ``nn.Parameter`` whose value is its dequantized bytes (so autograd
gives it a gradient), with ``_data`` (uint8 bytes), ``_scale_inv``, ``_fp8_meta`` and
``_fp8_meta_index``; ``quantize_`` and ``copy_`` from high precision cast with the meta's scale and
record the amax in row 0 of the meta's history, as TE 1.x's do; 1.12 then runs PR #575's hook.
"""

import torch

from transformer_engine.pytorch import fp8 as _fp8
from transformer_engine.pytorch.fp8 import FP8GlobalStateManager

updated_fp8_params = {}


def _cast(src: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return torch.clamp(src.float() * scale, -448.0, 448.0).to(torch.float8_e4m3fn)


def post_optimizer_step_fwd_amax_reduction(param) -> None:
    """1.12's hook: once every registered id of the key was re-cast, a forward weight reduction
    (with the fault "hook_everywhere": a forward reduction at every cast, whatever the release)."""
    if _fp8.FAULTS["hook_everywhere"]:
        FP8GlobalStateManager.reduce_and_update_fp8_tensors(forward=True)
        return
    param_id = id(param._data)
    if param_id not in FP8GlobalStateManager.fp8_param_to_autocast:
        return
    key = FP8GlobalStateManager.fp8_param_to_autocast[param_id]
    if key not in FP8GlobalStateManager.autocast_to_fp8_params:
        return
    updated_fp8_params.setdefault(key, set()).add(param_id)
    if updated_fp8_params[key] == FP8GlobalStateManager.autocast_to_fp8_params[key]:
        FP8GlobalStateManager.reduce_and_update_fp8_tensors(forward=True, fp8_weights=True)
        del updated_fp8_params[key]


class Float8Tensor(torch.nn.Parameter):
    def __new__(cls, value, data, fp8_meta, fp8_meta_index):
        self = torch.nn.Parameter.__new__(cls, value, requires_grad=True)
        self._data = data
        self._scale_inv = torch.ones(1)
        self._fp8_meta = fp8_meta
        self._fp8_meta_index = fp8_meta_index
        return self

    @classmethod
    def to_float8(cls, tensor, *, fp8_meta=None, fp8_meta_index=None, amax=None, with_transpose_cache=False):
        return _ToFloat8Func.forward(None, tensor, fp8_meta, True, fp8_meta_index, amax)

    def quantize_(self, tensor, *, scale=None, amax=None, noop_flag=None):
        meta = self._fp8_meta["scaling_fwd"]
        index = self._fp8_meta_index
        scale = meta.scale[index]
        src = tensor.detach().float()
        if amax is None:
            meta.amax_history[0, index] = torch.maximum(meta.amax_history[0, index], src.abs().nan_to_num(nan=0.0).max())
        q = _cast(src, scale)
        self._data.copy_(q.view(torch.uint8))
        self._scale_inv.copy_(torch.ones(()) / scale)
        with torch.no_grad():
            torch.Tensor.copy_(self, q.float() * self._scale_inv)
        if _fp8.HOOK or _fp8.FAULTS["hook_everywhere"]:
            post_optimizer_step_fwd_amax_reduction(self)
        return self

    def copy_(self, src, non_blocking=False):
        return self.quantize_(src)


class _ToFloat8Func:
    @staticmethod
    def forward(_ctx, tensor, fp8_meta=None, fp8_meta_forward=True, fp8_meta_index=None, amax=None):
        data = torch.empty(tensor.size(), dtype=torch.uint8, device=tensor.device)   # as TE 1.x
        out = Float8Tensor(torch.zeros(tensor.size()), data, fp8_meta, fp8_meta_index)
        out.quantize_(tensor, amax=amax)
        return out
