"""CPU stand-in of te.Linear (TE 1.x): FP8 metas, FP8 weights under fp8_model_init, amaxes recorded
where TE 1.x records them, the first module's backward reducing the backward amaxes."""

import types

import torch
import torch.nn.functional as F

from transformer_engine.pytorch.fp8 import FP8GlobalStateManager, get_default_fp8_recipe
from transformer_engine.pytorch.tensor.float8_tensor import Float8Tensor


def _meta(length: int, slots: int):
    return types.SimpleNamespace(amax_history=torch.zeros(length, slots), scale=torch.ones(slots),
                                 scale_inv=torch.ones(slots))


class Linear(torch.nn.Module):
    def __init__(self, in_features, out_features, bias=True, init_method=None, params_dtype=None,
                 device="cuda"):
        super().__init__()
        self.registered = False
        self.first = False
        recipe = get_default_fp8_recipe()
        self.fp8_meta = {"recipe": recipe, "fp8_group": None,
                         "scaling_fwd": _meta(recipe.amax_history_len, 3),
                         "scaling_bwd": _meta(recipe.amax_history_len, 2)}
        weight = torch.empty(out_features, in_features, dtype=torch.float32)
        init_method(weight)
        if FP8GlobalStateManager.with_fp8_parameters():
            dummy = torch.empty(1, 1)
            self.weight = Float8Tensor.to_float8(weight, fp8_meta=self.fp8_meta, fp8_meta_index=1, amax=dummy)
        else:
            self.weight = torch.nn.Parameter(weight)

    def _fp8_params(self):
        return [self.weight] if isinstance(self.weight, Float8Tensor) else None

    def _init_fp8(self):
        recipe = FP8GlobalStateManager.FP8_RECIPE
        self.fp8_meta["recipe"], self.fp8_meta["fp8_group"] = recipe, FP8GlobalStateManager.FP8_DISTRIBUTED_GROUP
        for key in ("scaling_fwd", "scaling_bwd"):
            meta = self.fp8_meta[key]
            length = recipe.amax_history_len
            if meta.amax_history.shape[0] > length:
                meta.amax_history = meta.amax_history[:length].clone()
            elif meta.amax_history.shape[0] < length:
                meta.amax_history = F.pad(meta.amax_history, (0, 0, 0, length - meta.amax_history.shape[0]))
        FP8GlobalStateManager.add_fp8_tensors_to_global_buffer(self, fp8_weights=self._fp8_params())

    def forward(self, x):
        if not FP8GlobalStateManager.FP8_ENABLED:
            return x @ self.weight.t()
        self._init_fp8()
        self.first = FP8GlobalStateManager.IS_FIRST_FP8_MODULE
        FP8GlobalStateManager.IS_FIRST_FP8_MODULE = False
        fwd = self.fp8_meta["scaling_fwd"]
        fwd.amax_history[0, 0] = torch.maximum(fwd.amax_history[0, 0], x.detach().abs().nan_to_num(nan=0.0).max())
        if not isinstance(self.weight, Float8Tensor):
            fwd.amax_history[0, 1] = torch.maximum(fwd.amax_history[0, 1], self.weight.detach().abs().nan_to_num(nan=0.0).max())
        out = x @ self.weight.t()
        if out.requires_grad:
            out.register_hook(self._grad_output)
        return out

    def _grad_output(self, grad):
        bwd = self.fp8_meta["scaling_bwd"]
        bwd.amax_history[0, 0] = torch.maximum(bwd.amax_history[0, 0], grad.detach().abs().nan_to_num(nan=0.0).max())
        if self.first:
            FP8GlobalStateManager.reduce_and_update_fp8_tensors(forward=False)
        return grad
