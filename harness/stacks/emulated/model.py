"""A model of FP8 Linear layers and its SGD optimizer with fp32 master weights.

Data-parallel gradient sync all-gathers every rank's wgrad and sums them in rank order, so the
sum is the same on every rank and bit-reproducible (an all-reduce SUM over 4 ranks may add in
any order). The optimizer step is ``w <- w + (-lr) * grad`` via ``torch.add(alpha=...)``, as
``torch.optim.SGD`` computes it, then the FP8 weight is re-cast in place.
"""

from __future__ import annotations

import torch

from harness.stacks.data_parallel import sum_in_rank_order
from harness.stacks.emulated.autocast import fp8_autocast, reduce_backward
from harness.stacks.emulated.linear import Linear
from harness.stacks.protocol import StepOutputs


class Model:
    def __init__(self, layers: list[Linear], recipe, group, lr: float, data_parallel: bool):
        self.layers = layers
        self.recipe = recipe
        self.group = group
        self.lr = lr
        self.data_parallel = data_parallel
        self.master = [layer.weight.dequantize().clone() if layer.fp8_weight else None for layer in layers]

    def forward_backward(self, x: torch.Tensor, dy: torch.Tensor) -> StepOutputs:
        with fp8_autocast(self.recipe, self.group):
            for layer in self.layers:
                x = layer.forward(x)
        out = x
        g = dy
        for layer in reversed(self.layers):
            g = layer.backward(g)
        reduce_backward()
        return StepOutputs(output=out, grad_input=g, weight_grads=[layer.wgrad for layer in self.layers])


def sync_gradients(model: Model) -> list[torch.Tensor]:
    """Every rank's wgrad summed in rank order (data-parallel), or the local wgrad."""
    grads = [layer.wgrad for layer in model.layers]
    if not model.data_parallel:
        return grads
    return sum_in_rank_order(grads, model.group)


def sgd_step(model: Model, master_weights: list[torch.Tensor]) -> None:
    for layer in model.layers:
        bias, bgrad = getattr(layer, "bias", None), getattr(layer, "bgrad", None)
        if bias is not None and bgrad is not None:
            layer.bias = torch.add(bias, bgrad, alpha=-model.lr)
    grads = sync_gradients(model)
    for i, (layer, grad) in enumerate(zip(model.layers, grads)):
        if grad is None:          # a frozen weight (weight_grad=False)
            continue
        master_weights[i] = torch.add(master_weights[i], grad, alpha=-model.lr)
        if layer.fp8_weight:
            layer.weight.quantize_(master_weights[i])
        else:
            layer.weight = master_weights[i]
