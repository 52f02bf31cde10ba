"""Reference for one tensor-parallel (Userbuffers) layer: every rank's FP8 state after every step.

Follows the summation order of the overlapped operations (harness/stacks/emulated/tp_model.py):
an all-gather GEMM multiplies each gathered chunk on its own, dequantized with the *consumer's*
scale_inv; a reduce-scatter sums per-chunk GEMMs in rank order. Computed: the casts (input,
weight, output gradient), the amax reductions, and what each step returns -- the layer's output
(its bias added), its input gradient (dgrad), its weight gradient and its bias gradient (at every
step, the last included, where no later output would show a wrong one) -- as well as the bias's own
SGD update (``b <- b + (-lr) * sum of the rows of dy``, starting from zeros), so a bias added
twice, or left stale, shows in the output from the first step after an update on. Every rank's
data come from seeds, so all ranks are simulated here without communicating.

``data_dtype``: a stack that feeds the layer its inputs, output gradients and initial weights
in a narrower dtype (TE's Userbuffers run in bf16) gets them rounded to it here first, then
computed with in fp32 as always; every amax is then of the values the stack saw.
"""

from __future__ import annotations

import torch

from harness.case.data import initial_weights, tp_shapes, tp_tensor, weight_shard
from harness.case.spec import CaseSpec
from harness.fp8.cast import cast_to_fp8, dequantize
from harness.fp8.state import RoleState
from harness.reference.meta import BWD_ROLES, FWD_ROLES, ExpectedModel, Meta, reduce_and_update, role_state


def _dq(q: torch.Tensor, scale_inv: torch.Tensor, fmt) -> torch.Tensor:
    return dequantize(q, scale_inv, fmt)


def _allgather_gemm(chunks: list[torch.Tensor], weight_view: torch.Tensor) -> torch.Tensor:
    """A ring all-gather GEMM's output: every gathered chunk (already dequantized with the consumer's
    scale_inv) multiplied on its own by ``weight_view``, row blocks in rank order."""
    return torch.cat([torch.mm(c, weight_view) for c in chunks])


def _gemm_reduce_scatter(inputs: list[torch.Tensor], weight_views: list[torch.Tensor], rank: int) -> torch.Tensor:
    """A pipelined reduce-scatter's chunk on ``rank``: each rank's partial of these rows alone,
    ``inputs[j][rows of rank] @ weight_views[j]``, folded in rank order ``((p_0 + p_1) + ...)``."""
    mc = inputs[0].shape[0] // len(inputs)
    rows = slice(rank * mc, (rank + 1) * mc)
    total = torch.mm(inputs[0][rows], weight_views[0])
    for inp, w in zip(inputs[1:], weight_views[1:]):
        total = total + torch.mm(inp[rows], w)
    return total


def expected_tp_model(case: CaseSpec, run_seed: int, world_size: int, rank: int, model_index: int,
                      data_dtype: torch.dtype | None = None) -> ExpectedModel:
    spec = case.model
    recipe = spec.recipe
    fwd_fmt, bwd_fmt = recipe.fp8_format.forward(), recipe.fp8_format.backward()
    ranks = range(world_size)
    shapes = tp_shapes(case, world_size)

    def data(t: torch.Tensor) -> torch.Tensor:
        return t if data_dtype is None else t.to(data_dtype).float()

    full = data(initial_weights(case, model_index, run_seed)[0])
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

    # The bias: one per output column of a rank, zeros at construction (as TE initialises it).
    n_out = shapes["dy"][1]
    bias = [torch.zeros(n_out) for _ in ranks] if spec.bias else None
    steps, outputs, grad_inputs, weight_grads, bias_grads = [], [], [], [], []
    for t in range(case.steps):
        casts = [{} for _ in ranks]
        for r in ranks:
            x = data(tp_tensor(case, model_index, "x", t, r, run_seed, shapes["x"], std=1.0))
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
        outputs.append(_forward(spec.tp_layout, casts, rank, fwd_fmt, bias))
        update(FWD_ROLES)
        dys = []
        for r in ranks:
            dy = data(tp_tensor(case, model_index, "dy", t, r, run_seed, shapes["dy"], std=0.01))
            m = metas[r]["grad_output"]
            casts[r]["grad_output"] = (cast_to_fp8(dy, m.scale, bwd_fmt), m.scale_inv.clone())
            m.record(dy)
            dys.append(dy)
        grad_inputs.append(_dgrad(spec.tp_layout, casts, rank, fwd_fmt, bwd_fmt))
        update(BWD_ROLES)
        steps.append({f"layer0.{role}": role_state(metas[rank][role], *casts[rank][role])
                      for role in ("input", "weight", "grad_output")})
        if bias is not None:
            bgrads = [dys[r].sum(0) for r in ranks]
            bias_grads.append([bgrads[rank]])
            bias = [torch.add(bias[r], bgrads[r], alpha=-spec.lr) for r in ranks]
        if not spec.weight_grad:
            weight_grads.append([None])
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
        weight_grads.append([wgrads[rank]])
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
    return ExpectedModel(steps, final, outputs, grad_inputs, weight_grads, bias_grads)


def _forward(layout: str, casts: list[dict], rank: int, fmt, bias) -> torch.Tensor:
    """Rank ``rank``'s output of one step: column-parallel, every rank's input chunk dequantized with
    this rank's scale_inv times this rank's weight rows; row-parallel, this rank's rows of every
    rank's partial product, reduce-scattered; then this rank's bias, once."""
    ranks = range(len(casts))
    w_hp = [_dq(*casts[r]["weight"], fmt) for r in ranks]
    if layout == "column":
        sinv_x = casts[rank]["input"][1]
        y = _allgather_gemm([_dq(casts[c]["input"][0], sinv_x, fmt) for c in ranks], w_hp[rank].t())
    else:
        x_hp = [_dq(*casts[r]["input"], fmt) for r in ranks]
        y = _gemm_reduce_scatter(x_hp, [w.t() for w in w_hp], rank)
    return y + bias[rank] if bias is not None else y


def _dgrad(layout: str, casts: list[dict], rank: int, fwd_fmt, bwd_fmt) -> torch.Tensor:
    """Rank ``rank``'s input gradient: column-parallel, its rows of every rank's ``dq(G) @ dq(W)``,
    reduce-scattered; row-parallel, every rank's FP8 output gradient chunk dequantized with this
    rank's scale_inv times this rank's weight columns. The weight operand is the transposed copy
    the layer hands the overlapped operation (``W^T`` made contiguous, then viewed as ``W``), whose
    memory layout the GEMM's rounding may depend on."""
    ranks = range(len(casts))
    w_view = [_dq(*casts[r]["weight"], fwd_fmt).t().contiguous().t() for r in ranks]
    if layout == "column":
        g_hp = [_dq(*casts[r]["grad_output"], bwd_fmt) for r in ranks]
        return _gemm_reduce_scatter(g_hp, w_view, rank)
    sinv_g = casts[rank]["grad_output"][1]
    return _allgather_gemm([_dq(casts[c]["grad_output"][0], sinv_g, bwd_fmt) for c in ranks], w_view[rank])
