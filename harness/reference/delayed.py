"""Reference for delayed scaling: a pure function from a case to every rank's FP8 state.

Given a case, the run seed, the world size and a model index, :func:`expected_dp_models`
simulates every rank of the group once (all data come from seeds, so nothing is communicated)
and returns, for every rank, the state of every FP8 tensor role after every step and the final
weights (:func:`expected_dp_model`: one rank's). No global state, no caches: two calls give the
same answer.

The schedule it follows (the patched design; docs/design.md, "Numerics")::

    construction  weight bytes = cast(w_0, scale 1) with a dummy amax (never recorded);
                  "copy" construction then copies w_0 in from high precision, which casts
                  with the current scale (1) and records max|w_0| in the weight's H[0]
    step t        forward: per layer, cast input x with sX (record max|x| in H[0]);
                    FP8 weights are used as stored (bytes + private scale_inv);
                    high-precision weights are cast with sW (record max|w|)
                  autocast exit: MAX-reduce H[0] of every forward slot over the group, update
                  backward: per layer (last first), cast grad_output with sG (record), then
                    dgrad = dq(G) @ dq(W),  wgrad = dq(G)^T @ dq(X)
                  after backward: MAX-reduce and update every backward slot
                  -- snapshot --
                  optimizer: grad = sum of every rank's wgrad in rank order (data-parallel),
                    w <- w + (-lr) * grad (torch.add with alpha, as torch.optim.SGD does);
                    FP8 weights: re-cast with the current sW, record max|w| in H[0] (reduced
                    at the next autocast exit), keep scale_inv = 1/sW privately

GEMMs: ``dequantize(a) @ dequantize(b).t()`` in fp32, the same expression the emulated stacks
evaluate, so bit equality of outputs is meaningful on one machine: each step's output, input
gradient and per-layer weight gradients are compared with what the stack's ``forward_backward``
returns (:func:`harness.oracles.reference.compare_outputs`).
"""

from __future__ import annotations

import torch

from harness.case.data import initial_weights, step_grad_output, step_inputs
from harness.case.spec import CaseSpec
from harness.fp8.cast import cast_to_fp8, dequantize
from harness.fp8.state import RoleState
from harness.reference.meta import BWD_ROLES, FWD_ROLES, ExpectedModel, Meta, reduce_and_update, role_state


def expected_dp_model(case: CaseSpec, run_seed: int, world_size: int, rank: int, model_index: int) -> ExpectedModel:
    """Simulate every rank of the (data-parallel) group; return rank ``rank``'s expected states."""
    return expected_dp_models(case, run_seed, world_size, model_index)[rank]


def expected_dp_models(case: CaseSpec, run_seed: int, world_size: int, model_index: int) -> list[ExpectedModel]:
    """Simulate every rank of the (data-parallel) group once; every rank's expected states, by rank."""
    spec = case.model
    recipe = spec.recipe
    fwd_fmt, bwd_fmt = recipe.fp8_format.forward(), recipe.fp8_format.backward()
    n_layers = len(spec.dims) - 1
    length = recipe.amax_history_len
    ranks = range(world_size)
    reduce_over_group = recipe.reduce_amax and world_size > 1

    # Per rank, per layer: metas by role; weights (master fp32, FP8 bytes, private scale_inv).
    metas = [[{role: Meta.fresh(length) for role in FWD_ROLES + BWD_ROLES} for _ in range(n_layers)] for _ in ranks]
    w0 = initial_weights(case, model_index, run_seed)
    master = [[w.clone() for w in w0] for _ in ranks]
    w_bytes = [[None] * n_layers for _ in ranks]
    w_sinv = [[None] * n_layers for _ in ranks]
    if spec.fp8_params:
        for r in ranks:
            for i in range(n_layers):
                meta = metas[r][i]["weight"]
                w_bytes[r][i] = cast_to_fp8(master[r][i], meta.scale, fwd_fmt)   # dummy amax: not recorded
                w_sinv[r][i] = meta.scale_inv.clone()
                if spec.construction == "copy":
                    w_bytes[r][i] = cast_to_fp8(master[r][i], meta.scale, fwd_fmt)
                    meta.record(master[r][i])
                    w_sinv[r][i] = meta.scale_inv.clone()

    def update(roles) -> None:
        fmt = fwd_fmt if roles is FWD_ROLES else bwd_fmt
        slots = [[metas[r][i][role] for r in ranks] for i in range(n_layers) for role in roles]
        reduce_and_update(slots, recipe, fmt, reduce_over_group)

    steps: list[list[dict[str, RoleState]]] = [[] for _ in ranks]
    outputs: list[list[torch.Tensor]] = [[] for _ in ranks]
    grad_inputs: list[list[torch.Tensor]] = [[] for _ in ranks]
    weight_grads: list[list[list[torch.Tensor]]] = [[] for _ in ranks]
    for t in range(case.steps):
        saved = [[None] * n_layers for _ in ranks]
        casts = [[{} for _ in range(n_layers)] for _ in ranks]
        for r in ranks:
            x = step_inputs(case, model_index, t, r, run_seed)
            for i in range(n_layers):
                m = metas[r][i]
                qx = cast_to_fp8(x, m["input"].scale, fwd_fmt)
                m["input"].record(x)
                sinv_x = m["input"].scale_inv.clone()
                if spec.fp8_params:
                    qw, sinv_w = w_bytes[r][i], w_sinv[r][i]
                else:
                    qw = cast_to_fp8(master[r][i], m["weight"].scale, fwd_fmt)
                    m["weight"].record(master[r][i])
                    sinv_w = m["weight"].scale_inv.clone()
                x = torch.matmul(dequantize(qx, sinv_x, fwd_fmt), dequantize(qw, sinv_w, fwd_fmt).t())
                saved[r][i] = (qx, sinv_x, qw, sinv_w)
                casts[r][i]["input"] = (qx, sinv_x)
                casts[r][i]["weight"] = (qw, sinv_w)
            outputs[r].append(x)
        update(FWD_ROLES)
        wgrads = [[None] * n_layers for _ in ranks]
        for r in ranks:
            g = step_grad_output(case, model_index, t, r, run_seed)
            for i in reversed(range(n_layers)):
                m = metas[r][i]
                qx, sinv_x, qw, sinv_w = saved[r][i]
                qg = cast_to_fp8(g, m["grad_output"].scale, bwd_fmt)
                m["grad_output"].record(g)
                sinv_g = m["grad_output"].scale_inv.clone()
                casts[r][i]["grad_output"] = (qg, sinv_g)
                g_hp = dequantize(qg, sinv_g, bwd_fmt)
                wgrads[r][i] = torch.matmul(g_hp.t(), dequantize(qx, sinv_x, fwd_fmt))
                g = torch.matmul(g_hp, dequantize(qw, sinv_w, fwd_fmt))
            grad_inputs[r].append(g)
            weight_grads[r].append(list(wgrads[r]))
        update(BWD_ROLES)
        for r in ranks:
            steps[r].append({
                f"layer{i}.{role}": role_state(metas[r][i][role], *casts[r][i][role])
                for i in range(n_layers) for role in ("input", "weight", "grad_output")
            })
        for r in ranks:
            for i in range(n_layers):
                if spec.data_parallel and world_size > 1:
                    grad = wgrads[0][i]
                    for q in range(1, world_size):
                        grad = grad + wgrads[q][i]
                else:
                    grad = wgrads[r][i]
                master[r][i] = torch.add(master[r][i], grad, alpha=-spec.lr)
                if spec.fp8_params:
                    meta = metas[r][i]["weight"]
                    w_bytes[r][i] = cast_to_fp8(master[r][i], meta.scale, fwd_fmt)
                    meta.record(master[r][i])
                    w_sinv[r][i] = meta.scale_inv.clone()
    models = []
    for r in ranks:
        final = {}
        for i in range(n_layers):
            if spec.fp8_params:
                meta = metas[r][i]["weight"]
                final[f"layer{i}.weight"] = RoleState(meta.history.clone(), meta.scale.clone(),
                                                     meta.scale_inv.clone(), w_bytes[r][i].clone(), w_sinv[r][i].clone())
            else:
                final[f"layer{i}.weight"] = RoleState(torch.zeros(0), torch.ones(()), torch.ones(()),
                                                     master[r][i].clone(), None)
        models.append(ExpectedModel(steps[r], final, outputs[r], grad_inputs[r], weight_grads[r]))
    return models
