"""Tensor-parallel FP8 Linear with Userbuffers-style comm-GEMM overlap (TE's fused UB linear ops).

One layer ``k -> n`` split over the group (the fp8 group is the tensor-parallel group):

* column-parallel, sequence-parallel input: each rank holds ``m/tp`` rows of the input and
  ``n/tp`` rows of the weight. Forward: the FP8 input is cast straight into this rank's chunk
  of the ``qkv`` buffer, then ring all-gather + GEMM; every rank dequantizes every gathered
  chunk with its *own* input scale_inv (TE assumes scales agree, which they do when amaxes are
  reduced in lock step). Backward: dgrad GEMM + pipelined reduce-scatter on ``proj``; wgrad
  from the all-gathered FP8 input.
* row-parallel: each rank holds a ``k/tp`` slice of the input and weight. Forward: GEMM +
  pipelined reduce-scatter on ``fc2``. Backward: ring all-gather of the FP8 output gradient +
  dgrad GEMM on ``fc1``; wgrad from the all-gathered FP8 gradient.

With ``overlap=False`` the same chunks travel through plain torch.distributed collectives and
are multiplied and summed in the same order, so both paths give the same bits. The wgrad
all-gathers are plain collectives in both modes (TE runs them as bulk overlaps).

Summation order, which the reference follows: output row-block ``c`` of an all-gather GEMM is
``dq(chunk_c) @ W^T`` on its own; a reduce-scatter chunk is ``((p_0 + p_1) + ...)`` over ranks,
each ``p_j`` a GEMM of that chunk's rows only.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from harness.case.data import weight_shard
from harness.fp8.formats import Fp8Format
from harness.stacks.emulated.autocast import AUTOCAST, fp8_autocast, fp8_model_init, fp8_params_requested, reduce_backward
from harness.stacks.emulated.float8_param import Float8Param
from harness.stacks.emulated.meta import Fp8Meta
from harness.stacks.emulated.userbuffers import communicators
from harness.stacks.protocol import StepOutputs


def _fmt(dtype: torch.dtype) -> Fp8Format:
    return Fp8Format.E4M3 if dtype == torch.float8_e4m3fn else Fp8Format.E5M2


def _dq(data: torch.Tensor, dtype: torch.dtype, scale_inv: torch.Tensor) -> torch.Tensor:
    return data.view(dtype).float() * scale_inv


def _gather(local: torch.Tensor, group) -> list[torch.Tensor]:
    parts = [torch.empty_like(local) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, local.contiguous(), group=group)
    return parts


class TPLinear:
    def __init__(self, w_shard: torch.Tensor, recipe, registrar, hooks, layout: str, group, overlap: bool,
                 weight_grad: bool, bias: bool, deadline_s: float):
        self.recipe, self.layout, self.group, self.overlap = recipe, layout, group, overlap
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        self.weight_grad, self.deadline_s = weight_grad, deadline_s
        self.meta_fwd = Fp8Meta(recipe, forward=True)
        self.meta_bwd = Fp8Meta(recipe, forward=False)
        self.fp8_weight = fp8_params_requested()
        if self.fp8_weight:
            self.weight = Float8Param(w_shard, self.meta_fwd, self.meta_fwd.slot("weight"), hooks)
        else:
            self.weight = w_shard.clone()
        self.bias = torch.zeros(w_shard.shape[0]) if bias else None   # one per output column of this rank
        self._registrar, self._registered = registrar, False
        self.last_casts: dict[str, tuple] = {}
        self.wgrad = None
        self.bgrad = None

    def _weight_hp(self):
        if self.fp8_weight:
            q, sinv = self.weight._data, self.weight._scale_inv
        else:
            q, sinv = self.meta_fwd.cast("weight", self.weight)
        self.last_casts["weight"] = (q.clone(), sinv.clone())
        return _dq(q, self.meta_fwd.dtype, sinv)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if AUTOCAST.depth == 0:
            raise RuntimeError("the emulated TP Linear runs only inside fp8_autocast")
        if not self._registered:
            self._registrar(self)
            self._registered = True
        meta, dtype = self.meta_fwd, self.meta_fwd.dtype
        slot = meta.slot("input")
        scale_x = meta.scale[slot].clone()      # the scale the cast below uses, for the buffer cast
        qx, sinv_x = meta.cast("input", x)
        self.last_casts["input"] = (qx, sinv_x)
        w_hp = self._weight_hp()
        comms = communicators(self.group, self.deadline_s) if self.overlap else None
        if self.layout == "column":
            if self.overlap:
                from harness.comm import cast_into_buffer, ring_allgather_gemm

                staged = cast_into_buffer(comms["qkv"], x.float(), scale_x, _fmt(dtype), scale_inv=sinv_x)
                y = ring_allgather_gemm(comms["qkv"], staged, None, None, w_hp)
            else:
                chunks = _gather(qx, self.group)
                y = torch.cat([torch.matmul(_dq(c, dtype, sinv_x), w_hp.t()) for c in chunks])
        else:
            x_hp = _dq(qx, dtype, sinv_x)
            if self.overlap:
                from harness.comm import gemm_reduce_scatter

                y = gemm_reduce_scatter(comms["fc2"], x_hp, w_hp)
            else:
                y = _reduce_scatter_in_rank_order(x_hp, w_hp, self.group)
        return y + self.bias if self.bias is not None else y

    def backward(self, grad_out: torch.Tensor) -> torch.Tensor:
        meta = self.meta_bwd
        qg, sinv_g = meta.cast("grad_output", grad_out)
        self.last_casts["grad_output"] = (qg, sinv_g)
        fdt, bdt = self.meta_fwd.dtype, meta.dtype
        qx, sinv_x = self.last_casts["input"]
        qw, sinv_w = self.last_casts["weight"]
        w_hp = _dq(qw, fdt, sinv_w)
        g_hp = _dq(qg, bdt, sinv_g)
        comms = communicators(self.group, self.deadline_s) if self.overlap else None
        self.bgrad = grad_out.sum(0) if self.bias is not None else None
        if self.layout == "column":
            if self.overlap:
                from harness.comm import gemm_reduce_scatter

                dgrad = gemm_reduce_scatter(comms["proj"], g_hp, w_hp.t().contiguous())
            else:
                dgrad = _reduce_scatter_in_rank_order(g_hp, w_hp.t().contiguous(), self.group)
            if self.weight_grad:
                x_full = torch.cat(_gather(qx, self.group))
                self.wgrad = torch.matmul(g_hp.t(), _dq(x_full, fdt, sinv_x))
        else:
            if self.overlap:
                from harness.comm import ring_allgather_gemm

                dgrad = ring_allgather_gemm(comms["fc1"], qg, sinv_g, _fmt(bdt), w_hp.t().contiguous())
            else:
                chunks = _gather(qg, self.group)
                dgrad = torch.cat([torch.matmul(_dq(c, bdt, sinv_g), w_hp) for c in chunks])
            if self.weight_grad:
                g_full = torch.cat(_gather(qg, self.group))
                self.wgrad = torch.matmul(_dq(g_full, bdt, sinv_g).t(), _dq(qx, fdt, sinv_x))
        return dgrad


def _reduce_scatter_in_rank_order(inp: torch.Tensor, weight: torch.Tensor, group) -> torch.Tensor:
    """``inp @ weight^T`` reduce-scattered by rows: chunk GEMMs, summed in rank order 0..tp-1."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    mc = inp.shape[0] // world
    partials = torch.stack([torch.matmul(inp[j * mc:(j + 1) * mc], weight.t()) for j in range(world)])
    gathered = _gather(partials, group)          # every rank's partials for every chunk
    total = gathered[0][rank]
    for p in gathered[1:]:
        total = total + p[rank]
    return total


class TPModel:
    def __init__(self, layer: TPLinear, recipe, group, lr: float):
        self.layers = [layer]
        self.recipe, self.group, self.lr = recipe, group, lr
        self.data_parallel = False
        self.master = None

    def forward_backward(self, x: torch.Tensor, dy: torch.Tensor) -> StepOutputs:
        with fp8_autocast(self.recipe, self.group):
            out = self.layers[0].forward(x)
        grad_input = self.layers[0].backward(dy)
        reduce_backward()
        return StepOutputs(output=out, grad_input=grad_input, weight_grads=[self.layers[0].wgrad],
                           bias_grads=[self.layers[0].bgrad])


def build_tp_model(stack, spec, ctx) -> TPModel:
    if ctx.world_size < 2 or ctx.group is None:
        from harness.errors import UsageError
        raise UsageError("userbuffers cases need a group of at least 2 ranks (tensor parallelism)")
    register = stack._registrar(spec.recipe, ctx.group)
    shard = weight_shard(ctx.initial_weights[0], spec.tp_layout, ctx.rank, ctx.world_size)
    with fp8_model_init(enabled=spec.fp8_params):
        layer = TPLinear(shard, spec.recipe, register, stack.post_quantize_hooks, spec.tp_layout, ctx.group,
                         spec.overlap, spec.weight_grad, spec.bias, ctx.deadline_s)
    model = TPModel(layer, spec.recipe, ctx.group, spec.lr)
    if spec.fp8_params and spec.construction == "copy":
        with torch.no_grad():
            layer.weight.quantize_(shard)
    model.master = [shard.clone()] if spec.fp8_params else [layer.weight]
    return model
