"""A TE model: ``te.Linear`` layers with FP8 weights, a step under TE's autocast, and SGD.

Building (:func:`build_model`)::

    under TE's model-init context (FP8 parameters, our recipe as TE's DelayedScaling):
      per layer: te.Linear(in, out, bias=False, params_dtype=float32) on this rank's GPU,
                 its weight initialised to zeros by our init_method; TE's construction cast
                 then allocates the FP8 weight's _data, the object whose id the pre-fix hook
                 keyed on, right after harness.idreuse.reuse_point() (see .reuse)
    "copy": the harness's initial weight is copied in (weight.copy_, a high-precision -> FP8
             in-place cast): bytes = cast(w_0, scale 1), max|w_0| recorded in the weight's
             history row 0, reduced at the first forward's autocast exit

The zero initial value makes the construction cast record an amax of 0, which changes no
history; the reference's "copy" path then holds exactly. High-precision weights (``fp8_params``
false) are initialised with w_0 directly and cast by TE at every forward.

A step: forward under ``autocast(recipe, NCCL group)``, whose exit reduces and updates the
forward amaxes; backward, at whose end TE's first layer reduces and updates the backward
amaxes; then :func:`sgd_step`: weight gradients summed over ranks in rank order
(data-parallel), ``w <- w + (-lr) * grad`` on fp32 master weights, and the FP8 weight re-cast
in place (``quantize_``) with the meta's current scale.
"""

from __future__ import annotations


import torch

from harness.stacks.te_common.layers import TEModel, copy_init, weight_gradients, zeros_init
from harness.stacks.te_common.recipe import te_recipe
from harness.stacks.te.reuse import reuse_point_before_weight_casts


def model_init(te, enabled: bool, recipe):
    """TE's model-init context (``quantized_model_init``, ``fp8_model_init`` before it was renamed)."""
    if hasattr(te, "quantized_model_init"):
        return te.quantized_model_init(enabled=enabled, recipe=recipe)
    return te.fp8_model_init(enabled=enabled, recipe=recipe)


def autocast(te, recipe, group):
    """TE's autocast context (``autocast``, ``fp8_autocast`` before it was renamed)."""
    if hasattr(te, "autocast"):
        return te.autocast(enabled=True, recipe=recipe, amax_reduction_group=group)
    return te.fp8_autocast(enabled=True, fp8_recipe=recipe, fp8_group=group)


def build_model(spec, ctx, te_mods, amax_group, device, layer_setup=None) -> TEModel:
    """Build the layers under TE's model-init context and, for "copy", copy the initial weights in.

    ``layer_setup`` gets each layer before anything is written into its weight (the buggy
    stack attaches its hook there).
    """
    te = te_mods.te
    recipe = te_recipe(spec.recipe, te_mods.recipe)
    initial = [w.to(device=device, dtype=torch.float32) for w in ctx.initial_weights]
    layers = []
    with model_init(te, spec.fp8_params, recipe), reuse_point_before_weight_casts(te_mods.Float8Quantizer):
        for w0 in initial:
            init = zeros_init if spec.fp8_params else copy_init(w0)
            layers.append(te.Linear(w0.shape[1], w0.shape[0], bias=False, params_dtype=torch.float32,
                                    device=device, init_method=init))
    module = torch.nn.Sequential(*layers)
    if layer_setup is not None:
        for layer in layers:
            layer_setup(layer)
    if spec.fp8_params:
        master = [w0.clone() for w0 in initial]
        with torch.no_grad():
            for layer, w0 in zip(layers, initial):
                layer.weight.copy_(w0)
    else:
        master = [layer.weight.detach() for layer in layers]
    weight_data = [layer.weight._data for layer in layers] if spec.fp8_params else []
    return TEModel(module, master, recipe, amax_group, device, spec.lr, spec.data_parallel, spec.fp8_params,
                   tuple(spec.dims), weight_data)


def forward_backward(model: TEModel, te_mods, inputs: torch.Tensor, grad_output: torch.Tensor) -> torch.Tensor:
    """The step's output, still on the GPU: the caller waits for it with a deadline (:mod:`.gpu_wait`)."""
    x = inputs.to(model.device)
    dy = grad_output.to(model.device)
    with autocast(te_mods.te, model.recipe, model.amax_group):
        out = model.module(x)
    out.backward(dy)
    return out.detach()


def sgd_step(model: TEModel) -> None:
    """SGD on the fp32 masters, then each weight written back in place (an FP8 re-cast for FP8 weights)."""
    grads = weight_gradients(model)
    with torch.no_grad():
        for i, (layer, grad) in enumerate(zip(model.layers, grads)):
            layer.weight.grad = None
            model.master[i] = torch.add(model.master[i], grad, alpha=-model.lr)
            if model.fp8_weights:
                layer.weight.quantize_(model.master[i])
            else:
                layer.weight.copy_(model.master[i])
                model.master[i] = layer.weight.detach()
