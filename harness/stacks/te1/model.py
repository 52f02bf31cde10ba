"""A TE 1.x model: ``te.Linear`` layers with FP8 weights, a step under ``fp8_autocast``, and SGD.

The same model as the TE 2.x stack's (:mod:`harness.stacks.te.model`, whose
:class:`~harness.stacks.te_common.layers.TEModel`, gradient sync and initialisers it shares), built and
stepped through TE 1.x's API (read at tags v1.12 and v1.13):

* ``te.fp8_model_init(enabled)`` takes no recipe: a layer's meta is made with TE's default
  ``DelayedScaling()`` (history length 1024) and its history is cut to the autocast recipe's
  length at its first forward (``adjust_amax_history_length``: the first rows kept);
* ``te.Linear(in, out, bias=False, params_dtype=float32, device=..., init_method=...)``: with FP8
  parameters ``reset_parameters`` runs ``init_method`` on the fp32 weight, then wraps it with
  ``Float8Tensor.to_float8(param, fp8_meta=..., fp8_meta_index=1, amax=<a dummy>)``: a
  construction cast with the meta's scale (1) whose amax is never recorded, which is the
  reference's ``init_cast`` path; ``_data`` is allocated there, after the reuse point (:mod:`.reuse`);
* "copy": the weights are built from zeros and the harness's initial weight copied in
  (``weight.copy_``, which TE 1.x's ``__torch_dispatch__`` turns into ``quantize_``): bytes =
  cast(w_0, scale 1), max|w_0| recorded in row 0 of the weight's history;
* ``te.fp8_autocast(enabled=True, fp8_recipe=..., fp8_group=...)``: its exit reduces and updates
  every forward amax; the first layer's backward reduces the backward amaxes;
* the optimizer step: fp32 masters, ``w <- w + (-lr) * grad``, each FP8 weight re-cast in place
  with ``weight.quantize_(master)`` (the meta's current scale; in v1.12 followed by PR #575's hook).

What the stack's recorder needs (:mod:`.reductions`) is kept on the model: its step count and
the weight records, and the phase is set around each call (:class:`~harness.stacks.te1.moments.Phase`).
"""

from __future__ import annotations

import dataclasses

import torch

from harness.stacks.te_common.layers import TEModel, copy_init, weight_gradients, zeros_init
from harness.stacks.te_common.recipe import te_recipe
from harness.stacks.te1.moments import Phase
from harness.stacks.te1.reuse import reuse_point_before_weight_data


@dataclasses.dataclass(eq=False)
class TE1Model(TEModel):
    """:class:`TEModel` with what the weight-update check needs."""

    steps: int = 0
    construction: str = "copy"
    spec_recipe: object = None          # the case's DelayedScalingRecipe (the check's update rule)
    records: list = dataclasses.field(default_factory=list)      # moments.WeightRecord, in order


def build_model(spec, ctx, te_mods, amax_group, device, recorder) -> TE1Model:
    """Build the layers under ``fp8_model_init`` and, for "copy", copy the initial weights in;
    the recorder sees the build as :attr:`Phase.BUILD` (a hook reduction here is the bug's)."""
    te = te_mods.te
    recipe = te_recipe(spec.recipe, te_mods.recipe)
    initial = [w.to(device=device, dtype=torch.float32) for w in ctx.initial_weights]
    construction = getattr(spec.construction, "value", spec.construction)
    init_cast = spec.fp8_params and construction == "init_cast"
    model = TE1Model(torch.nn.Sequential(), [], recipe, amax_group, device, spec.lr, spec.data_parallel,
                     spec.fp8_params, tuple(spec.dims), construction=construction)
    if spec.fp8_params:
        recorder.model = model
    recorder.new_model()
    recorder.phase, recorder.step = Phase.BUILD, -1
    try:
        with te.fp8_model_init(enabled=spec.fp8_params), reuse_point_before_weight_data(te_mods.to_float8_func):
            for w0 in initial:
                init = zeros_init if spec.fp8_params and not init_cast else copy_init(w0)
                model.module.append(te.Linear(w0.shape[1], w0.shape[0], bias=False, params_dtype=torch.float32,
                                              device=device, init_method=init))
        if spec.fp8_params:
            model.master = [w0.clone() for w0 in initial]
            if not init_cast:
                with torch.no_grad():
                    for layer, w0 in zip(model.layers, initial):
                        layer.weight.copy_(w0)
            model.weight_data = [layer.weight._data for layer in model.layers]
            recorder.observe(model, -1)
        else:
            model.master = [layer.weight.detach() for layer in model.layers]
    finally:
        recorder.phase = Phase.IDLE
    return model


def forward_backward(model: TE1Model, te_mods, inputs: torch.Tensor, grad_output: torch.Tensor,
                     recorder) -> torch.Tensor:
    """The step's output, still on the GPU (the caller waits for it with a deadline)."""
    x = inputs.to(model.device)
    dy = grad_output.to(model.device)
    recorder.phase, recorder.step = Phase.STEP, model.steps
    try:
        with te_mods.te.fp8_autocast(enabled=True, fp8_recipe=model.recipe, fp8_group=model.amax_group):
            out = model.module(x)
        out.backward(dy)
    finally:
        recorder.phase = Phase.IDLE
    return out.detach()


def sgd_step(model: TE1Model, recorder) -> None:
    """SGD on the fp32 masters, then each weight written back in place (an FP8 re-cast for FP8
    weights, counted for the recorder before each cast); the weights are observed after it."""
    grads = weight_gradients(model)
    recorder.phase, recorder.step, recorder.recast = Phase.OPTIMIZER, model.steps, 0
    try:
        with torch.no_grad():
            for i, (layer, grad) in enumerate(zip(model.layers, grads)):
                layer.weight.grad = None
                model.master[i] = torch.add(model.master[i], grad, alpha=-model.lr)
                if model.fp8_weights:
                    recorder.recast = i + 1
                    layer.weight.quantize_(model.master[i])
                else:
                    layer.weight.copy_(model.master[i])
                    model.master[i] = layer.weight.detach()
    finally:
        recorder.phase = Phase.IDLE
    if model.fp8_weights:
        recorder.observe(model, model.steps)
    model.steps += 1
