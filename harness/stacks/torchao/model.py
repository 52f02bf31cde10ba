"""A torchao float8 model: ``nn.Sequential`` of ``Float8Linear(bias=False)``, its gradient sync and SGD.

Building (:func:`build_model`)::

    nn.Sequential of nn.Linear(dims[i], dims[i+1], bias=False) on the meta device
    convert_to_float8_training(..., config=Float8LinearConfig(emulate=True) or the named recipe)
    per layer: a fresh fp32 Parameter, allocated through harness.idreuse.reuse_alloc()
               ("copy": torch.empty, then the harness's initial weight is written in through
               the weight-write path, like loading a checkpoint; "init_cast": a copy of the
               initial weight from the start, nothing written afterwards)

torchao keeps the weight in high precision and casts it at every use, so there are no FP8
parameters and no construction cast; the two construction paths differ only in whether the
build writes into the weight (which an injected weight-write hook sees).

Data-parallel gradient sync all-gathers every rank's weight gradient and sums them in rank order
(``((g0 + g1) + g2) + ...``): the same sum on every rank, bit-reproducible, and what the
reference computes (an all-reduce SUM may add in any order). The SGD step writes
``torch.add(w, grad, alpha=-lr)`` into the Parameter in place, under ``torch.no_grad``, as
``torch.optim.SGD`` (without momentum) computes it.
"""

from __future__ import annotations

import dataclasses

import torch

from harness.stacks.data_parallel import sum_in_rank_order
from torch import nn

from harness.idreuse import reuse_alloc
from harness.stacks.capabilities import model_declined_reason
from harness.stacks.protocol import BuildContext, ModelSpec
from harness.stacks.torchao.cases import CAPABILITIES
from harness.stacks.torchao.capture import CastRecorder, attach

RECIPES = CAPABILITIES.scalings


def float8_config(scaling: str):
    """torchao's config for a recipe name, with emulated GEMMs (the only float8 GEMM on CPU we compare)."""
    from torchao.float8 import Float8LinearConfig

    if scaling not in RECIPES:
        raise ValueError(f"--sut torchao runs the recipes {', '.join(RECIPES)}; this case asks for "
                         f"scaling={scaling!r}")
    return dataclasses.replace(Float8LinearConfig.from_recipe_name(scaling), emulate=True)


@dataclasses.dataclass(eq=False)
class TorchaoModel:
    """The converted module and what the adapter needs beside it (nothing of it is global)."""

    module: nn.Sequential
    recorder: CastRecorder
    group: object
    lr: float
    data_parallel: bool
    scaling: str
    post_write_hooks: tuple = ()

    @property
    def layers(self) -> list:
        return list(self.module)


def check_spec(spec: ModelSpec) -> None:
    """What this stack cannot build (what :data:`CAPABILITIES` declines), said before anything is built."""
    reason = model_declined_reason(CAPABILITIES, spec)
    if reason is not None:
        raise ValueError(f"--sut torchao declines this model: {reason}")


def build_model(spec: ModelSpec, ctx: BuildContext, post_write_hooks=(), layer_setup=()) -> TorchaoModel:
    """Build, convert, allocate fresh weights, and (``copy``) write the initial weights in.

    ``layer_setup`` callables get each converted layer, with its weight, before anything is
    written (``--inject`` attaches its hooks there); ``post_write_hooks`` run after every
    in-place write of a weight, with ``(layer, weight)``.
    """
    from torchao.float8 import convert_to_float8_training

    check_spec(spec)
    config = float8_config(spec.scaling)
    dims = spec.dims
    with torch.device("meta"):
        module = nn.Sequential(*[nn.Linear(dims[i], dims[i + 1], bias=False) for i in range(len(dims) - 1)])
    module = convert_to_float8_training(module, config=config)
    copy = spec.construction == "copy"
    for layer, w0 in zip(module, ctx.initial_weights):
        data = torch.empty(tuple(w0.shape), dtype=torch.float32) if copy else w0.detach().to(torch.float32).clone()
        # The harness may hand a dead weight's address to this Parameter.
        layer.weight = reuse_alloc(lambda value=data: nn.Parameter(value), "torchao_weight")
        del data
    recorder = CastRecorder()
    for index, layer in enumerate(module):
        attach(layer, recorder, index)
        for setup in layer_setup:
            setup(layer)
    group = ctx.group if ctx.world_size > 1 else None
    model = TorchaoModel(module, recorder, group, spec.lr, spec.data_parallel, spec.scaling, tuple(post_write_hooks))
    if copy:
        for index, w0 in enumerate(ctx.initial_weights):
            write_weight(model, index, w0)
    return model


def write_weight(model: TorchaoModel, index: int, value: torch.Tensor) -> None:
    """Write ``value`` into layer ``index``'s weight in place (high precision), then the write hooks."""
    layer = model.module[index]
    with torch.no_grad():
        layer.weight.copy_(value)
    for hook in model.post_write_hooks:
        hook(layer, layer.weight)


def weight_gradients(model: TorchaoModel) -> list[torch.Tensor]:
    """Every layer's weight gradient: summed over ranks in rank order when data-parallel, else local."""
    grads = []
    for i, layer in enumerate(model.module):
        if layer.weight.grad is None:
            raise RuntimeError(f"layer {i} has no weight gradient: was backward run?")
        grads.append(layer.weight.grad.detach().contiguous())
    if not model.data_parallel:
        return grads
    return sum_in_rank_order(grads, model.group)


def sgd_step(model: TorchaoModel) -> None:
    grads = weight_gradients(model)
    for i, (layer, grad) in enumerate(zip(model.module, grads)):
        with torch.no_grad():
            updated = torch.add(layer.weight.detach(), grad, alpha=-model.lr)
        layer.weight.grad = None
        write_weight(model, i, updated)
