"""Reference for one tensor-parallel (Userbuffers) layer: every rank's FP8 state after every step.

Follows the summation order of the overlapped operations (harness/stacks/emulated/tp_model.py):
an all-gather GEMM multiplies each gathered chunk on its own, dequantized with the *consumer's*
scale_inv; a reduce-scatter sums per-chunk GEMMs in rank order. Only what reaches FP8 state or
the weights is computed: casts (input, weight, output gradient), amax reductions, and wgrad.
Every rank's data come from seeds, so all ranks are simulated here without communicating.
"""

from __future__ import annotations

import torch

from harness.case.data import initial_weights, tp_shapes, tp_tensor, weight_shard
from harness.case.spec import CaseSpec
from harness.fp8.cast import cast_to_fp8, dequantize
from harness.fp8.state import RoleState
from harness.reference.meta import BWD_ROLES, FWD_ROLES, ExpectedModel, Meta, reduce_and_update, role_state


def expected_tp_model(case: CaseSpec, run_seed: int, world_size: int, rank: int, model_index: int) -> ExpectedModel:
    spec = case.model
    recipe = spec.recipe
    fwd_fmt, bwd_fmt = recipe.fp8_format.forward(), recipe.fp8_format.backward()
    ranks = range(world_size)
    shapes = tp_shapes(case, world_size)
    full = initial_weights(case, model_index, run_seed)[0]
    metas = [{role: Meta.fresh(recipe.amax_history_len) for role in FWD_ROLES + BWD_ROLES} for _ in ranks]
    master = [weight_shard(full, spec.tp_layout, r, world_size) for r in ranks]
    w_bytes, w_sinv = [None] * world_size, [None] * world_size
    if spec.fp8_params:
        for r in ranks:
            meta = metas[r]["weight"]
            w_bytes[r] = cast_to_fp8(master[r], meta.scale, fwd_fmt)
            w_sinv[r] = meta.scale_inv.clone()
            if spec.construction == "copy":
                meta.record(master[r])

    def update(roles):
        fmt = fwd_fmt if roles is FWD_ROLES else bwd_fmt
        slots = [[metas[r][role] for r in ranks] for role in roles]
        reduce_and_update(slots, recipe, fmt, recipe.reduce_amax and world_size > 1)

    steps, outputs = [], []
    for t in range(case.steps):
        casts = [{} for _ in ranks]
        for r in ranks:
            x = tp_tensor(case, model_index, "x", t, r, run_seed, shapes["x"], std=1.0)
            m = metas[r]
            qx = cast_to_fp8(x, m["input"].scale, fwd_fmt)
            m["input"].record(x)
            casts[r]["input"] = (qx, m["input"].scale_inv.clone())
            if spec.fp8_params:
                casts[r]["weight"] = (w_bytes[r], w_sinv[r])
            else:
                qw = cast_to_fp8(master[r], m["weight"].scale, fwd_fmt)
                m["weight"].record(master[r])
                casts[r]["weight"] = (qw, m["weight"].scale_inv.clone())
        update(FWD_ROLES)
        for r in ranks:
            dy = tp_tensor(case, model_index, "dy", t, r, run_seed, shapes["dy"], std=0.01)
            m = metas[r]["grad_output"]
            casts[r]["grad_output"] = (cast_to_fp8(dy, m.scale, bwd_fmt), m.scale_inv.clone())
            m.record(dy)
        update(BWD_ROLES)
        steps.append({f"layer0.{role}": role_state(metas[rank][role], *casts[rank][role])
                      for role in ("input", "weight", "grad_output")})
        if not spec.weight_grad:
            continue
        wgrads = []
        for r in ranks:
            qx, sinv_x = casts[r]["input"]
            qg, sinv_g = casts[r]["grad_output"]
            if spec.tp_layout == "column":
                x_full = torch.cat([casts[c]["input"][0] for c in ranks])
                wgrads.append(torch.matmul(dequantize(qg, sinv_g, bwd_fmt).t(), dequantize(x_full, sinv_x, fwd_fmt)))
            else:
                g_full = torch.cat([casts[c]["grad_output"][0] for c in ranks])
                wgrads.append(torch.matmul(dequantize(g_full, sinv_g, bwd_fmt).t(), dequantize(qx, sinv_x, fwd_fmt)))
        for r in ranks:
            master[r] = torch.add(master[r], wgrads[r], alpha=-spec.lr)
            if spec.fp8_params:
                meta = metas[r]["weight"]
                w_bytes[r] = cast_to_fp8(master[r], meta.scale, fwd_fmt)
                meta.record(master[r])
                w_sinv[r] = meta.scale_inv.clone()
    meta = metas[rank]["weight"]
    if spec.fp8_params:
        final = {"layer0.weight": RoleState(meta.history.clone(), meta.scale.clone(), meta.scale_inv.clone(),
                                            w_bytes[rank].clone(), w_sinv[rank].clone())}
    else:
        final = {"layer0.weight": RoleState(torch.zeros(0), torch.ones(()), torch.ones(()), master[rank].clone(), None)}
    return ExpectedModel(steps, final, outputs)
