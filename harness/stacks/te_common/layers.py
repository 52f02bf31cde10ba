"""What every TE release's model is made of, beside TE itself: the adapter's record of a model of
``te.Linear`` layers, the initialisers handed to TE as ``init_method``, and the weight gradients
summed over the ranks. Used by the TE 2.x stack (:mod:`harness.stacks.te.model`) and the TE 1.x
stack (:mod:`harness.stacks.te1.model`) alike; nothing here imports TE."""

from __future__ import annotations

import dataclasses

import torch

from harness.stacks.data_parallel import sum_in_rank_order


@dataclasses.dataclass(eq=False)
class TEModel:
    """The TE module and what the adapter keeps beside it (nothing of it is global)."""

    module: torch.nn.Sequential
    master: list
    recipe: object            # TE's DelayedScaling
    amax_group: object        # the NCCL group, or None on one rank
    device: torch.device
    lr: float
    data_parallel: bool
    fp8_weights: bool
    dims: tuple
    # The FP8 weights' _data, listed so that the harness's object walk, which does not look
    # inside tensors, sees them: they are what the pre-fix hook keyed on.
    weight_data: list = dataclasses.field(default_factory=list)

    @property
    def layers(self) -> list:
        return list(self.module)



def zeros_init(weight: torch.Tensor) -> None:
    """init_method for FP8 weights: zeros, so the construction cast records an amax of 0."""
    with torch.no_grad():       # TE hands its leaf Parameter in, with grad enabled
        weight.zero_()


def copy_init(value: torch.Tensor):
    """init_method that writes ``value`` into the weight (high-precision weights, and TE 1.x's
    init_cast construction)."""
    def init(weight: torch.Tensor) -> None:
        with torch.no_grad():
            weight.copy_(value)
    return init



def weight_gradients(model: TEModel) -> list[torch.Tensor]:
    """Every layer's weight gradient: summed over ranks in rank order when data-parallel, else local."""
    grads = []
    for i, layer in enumerate(model.layers):
        if layer.weight.grad is None:
            raise RuntimeError(f"layer {i} has no weight gradient: was backward run?")
        grads.append(layer.weight.grad.detach().float().contiguous())
    if not model.data_parallel:
        return grads
    return sum_in_rank_order(grads, model.amax_group)

