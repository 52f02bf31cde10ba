"""The FP8 Linear layer: FP8 GEMMs emulated as dequantize, then fp32 matmul.

``y = dq(cast(x, sX)) @ dq(W)^T``. Backward: ``dgrad = dq(G) @ dq(W)``,
``wgrad = dq(G)^T @ dq(X)`` with ``G = cast(dy, sG)``. Gradients are computed explicitly
(no autograd), so the layer keeps exactly what it needs and nothing else.
"""

from __future__ import annotations

import torch

from harness.stacks.emulated.autocast import AUTOCAST, fp8_params_requested
from harness.stacks.emulated.float8_param import Float8Param
from harness.stacks.emulated.meta import Fp8Meta


class Linear:
    def __init__(self, w_init: torch.Tensor, recipe, registrar, post_quantize_hooks=()):
        self.recipe = recipe
        self.meta_fwd = Fp8Meta(recipe, forward=True)
        self.meta_bwd = Fp8Meta(recipe, forward=False)
        self.fp8_weight = fp8_params_requested()
        if self.fp8_weight:
            self.weight = Float8Param(w_init, self.meta_fwd, self.meta_fwd.slot("weight"), post_quantize_hooks)
        else:
            self.weight = w_init.clone()
        self._registrar = registrar
        self._registered = False
        self.last_casts: dict[str, tuple] = {}
        self.wgrad = None

    def weight_fp8(self):
        if self.fp8_weight:
            return self.weight._data, self.weight._scale_inv
        return self.meta_fwd.cast("weight", self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if AUTOCAST.depth == 0:
            raise RuntimeError("the emulated Linear runs only inside fp8_autocast")
        if not self._registered:
            self._registrar(self)
            self._registered = True
        dtype = self.meta_fwd.dtype
        qx, sinv_x = self.meta_fwd.cast("input", x)
        qw, sinv_w = self.weight_fp8()
        self.last_casts = {"input": (qx, sinv_x), "weight": (qw.clone(), sinv_w.clone())}
        x_hp = qx.view(dtype).float() * sinv_x
        w_hp = qw.view(dtype).float() * sinv_w
        return torch.matmul(x_hp, w_hp.t())

    def backward(self, grad_out: torch.Tensor) -> torch.Tensor:
        meta = self.meta_bwd
        qg, sinv_g = meta.cast("grad_output", grad_out)
        self.last_casts["grad_output"] = (qg, sinv_g)
        qx, sinv_x = self.last_casts["input"]
        qw, sinv_w = self.last_casts["weight"]
        fdt = self.meta_fwd.dtype
        g_hp = qg.view(meta.dtype).float() * sinv_g
        self.wgrad = torch.matmul(g_hp.t(), qx.view(fdt).float() * sinv_x)
        return torch.matmul(g_hp, qw.view(fdt).float() * sinv_w)
