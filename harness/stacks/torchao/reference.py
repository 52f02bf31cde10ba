"""Reference for ``--sut torchao``: every cast of every step, and the final weights, from seeds alone.

A pure function (no torchao, no global state) built on :mod:`harness.fp8.dynamic_scaling`, whose
numerics were checked bit for bit against torchao 0.18 (docs/torchao-numerics.md). Like the
delayed-scaling reference it simulates every rank of the group, since the data-parallel update
needs every rank's weight gradient::

    step t, per rank r:  h_0 = x_t(r)
                         layer i forward:  h_{i+1} = mm(dq(cast(h_i)), dq(cast(w_i.t())))
                         layer i backward (last first), g = dy_t(r):
                             grad_input  = mm(dq(cast(g)), dq(cast(w_i.t())).t())
                             grad_weight = mm(dq(cast(g)).t(), dq(cast(h_i)))
                         (six casts per layer: input, weight, grad_output, then the repeats
                         weight_for_grad_input, grad_output_for_grad_weight, input_for_grad_weight)
    optimizer:           grad_i = grad_weight_i(0) + grad_weight_i(1) + ...  (data-parallel,
                         rank order) or the rank's own; w_i <- torch.add(w_i, grad_i, alpha=-lr)

``steps[t]`` holds, for the requested rank, one :class:`RoleState` per cast (see
:mod:`harness.stacks.torchao.capture` for the layout); ``final`` holds ``layer{i}.weight`` with
``fp8_bytes`` = the fp32 weight after the last step (torchao keeps no FP8 weight) and no
``fp8_scale_inv``.
"""

from __future__ import annotations

import torch

from harness.case.data import initial_weights, step_grad_output, step_inputs
from harness.case.spec import CaseSpec
from harness.fp8 import dynamic_scaling as ds
from harness.reference.meta import ExpectedModel
from harness.stacks.protocol import RoleState

# The dim torchao reduces an axiswise amax along, per cast (the first argument of its
# get_maybe_axiswise_dim calls in matmul_with_hp_or_float8_args).
AXIS = {"input": -1, "weight": 0, "grad_output": -1, "weight_for_grad_input": -1,
        "grad_output_for_grad_weight": 0, "input_for_grad_weight": 0}
FORWARD_CASTS = ("input", "weight")
BACKWARD_CASTS = ("grad_output", "weight_for_grad_input", "grad_output_for_grad_weight", "input_for_grad_weight")


def scale_inverse(scale: torch.Tensor) -> torch.Tensor:
    """``1 / scale``, an IEEE float32 tensor division (the stack adapter's convention)."""
    return torch.ones_like(scale, dtype=torch.float32) / scale.to(torch.float32)


def _state(cast: ds.Fp8Cast, hp_operand: torch.Tensor, how: ds.OperandCast) -> RoleState:
    dim = AXIS[cast.name] if how.granularity is ds.Granularity.AXISWISE else None
    amax = ds.amax(hp_operand, dim)
    inv = scale_inverse(cast.scale)
    return RoleState(amax_history=amax.reshape(-1).clone(), scale=cast.scale.clone(), scale_inv=inv,
                     fp8_bytes=cast.data.contiguous().clone(), fp8_scale_inv=inv.clone())


def _operands(name: str, x2: torch.Tensor, w: torch.Tensor, g2: torch.Tensor) -> torch.Tensor:
    """The high-precision tensor each cast reads: the input (2-D), ``weight.t()`` or the gradient."""
    if name.startswith("input"):
        return x2
    if name.startswith("weight"):
        return w.t()
    return g2


def expected_model(case: CaseSpec, run_seed: int, world_size: int, rank: int, model_index: int) -> ExpectedModel:
    """Simulate every rank of the group; return rank ``rank``'s expected casts and final weights."""
    spec = case.model
    recipe = ds.RECIPES[spec.scaling]
    n_layers = len(spec.dims) - 1
    ranks = range(world_size)
    w0 = initial_weights(case, model_index, run_seed)
    weights = [[w.clone() for w in w0] for _ in ranks]
    synced = spec.data_parallel and world_size > 1
    steps: list[dict[str, RoleState]] = []
    outputs: list[torch.Tensor] = []
    weight_grads: list[list[torch.Tensor]] = []
    for t in range(case.steps):
        wgrads = [[None] * n_layers for _ in ranks]
        for r in ranks:
            states: dict[str, RoleState] = {}
            h = step_inputs(case, model_index, t, r, run_seed)
            layer_inputs = []
            for i in range(n_layers):
                layer_inputs.append(h)
                w = weights[r][i]
                out, casts = ds.linear_forward(h, w, None, recipe)
                for cast in casts:
                    operand = _operands(cast.name, h.reshape(-1, h.shape[-1]), w, None)
                    states[f"layer{i}.{cast.name}"] = _state(cast, operand, getattr(recipe, cast.name))
                h = out
            if r == rank:
                outputs.append(h.clone())
            g = step_grad_output(case, model_index, t, r, run_seed)
            for i in reversed(range(n_layers)):
                x, w = layer_inputs[i], weights[r][i]
                grad_input, grad_weight, _, casts = ds.linear_backward(g, x, w, False, recipe)
                g2 = g.reshape(-1, g.shape[-1])
                for cast in casts:
                    operand = _operands(cast.name, x.reshape(-1, x.shape[-1]), w, g2)
                    states[f"layer{i}.{cast.name}"] = _state(cast, operand, getattr(recipe, cast.name))
                wgrads[r][i] = grad_weight.contiguous()
                g = grad_input
            if r == rank:
                steps.append(states)
                weight_grads.append(list(wgrads[r]))
        for r in ranks:
            for i in range(n_layers):
                if synced:
                    grad = wgrads[0][i]
                    for q in range(1, world_size):
                        grad = grad + wgrads[q][i]
                else:
                    grad = wgrads[r][i]
                weights[r][i] = torch.add(weights[r][i], grad, alpha=-spec.lr)
    final = {f"layer{i}.weight": RoleState(torch.zeros(0), torch.ones(()), torch.ones(()),
                                           weights[rank][i].clone(), None)
             for i in range(n_layers)}
    return ExpectedModel(steps, final, outputs, weight_grads=weight_grads)
