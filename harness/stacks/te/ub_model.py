"""A Userbuffers model: one tensor-parallel FP8 linear layer of TE's fusible ops, as in TE's test.

Building (:func:`build_model`), under TE's model-init context (FP8 weights)::

    column:  te.ops.Sequential(BasicLinear(H, H, tensor_parallel_mode="column",
                                           sequence_parallel=True, tensor_parallel_group=G,
                                           userbuffers_options={"comm_name": "qkv" | "fc1"}),
                               [Bias(H / tp)])
    row:     te.ops.Sequential(BasicLinear(H / tp, H, userbuffers_options={"comm_name": "proj"}),
                               [Bias(H)], ReduceScatter(G))

``G`` is the NCCL group over the harness's ranks (:mod:`.groups`), also TE's amax reduction
group; with overlap off, ``userbuffers_options`` is left out and TE runs plain NCCL
collectives. TE fuses each Sequential at its first forward into ``UserbuffersForwardLinear``
and ``UserbuffersBackwardLinear``; the model checks it did (:func:`check_fused`), so a case
never passes without the overlap it claims to test.

Weights: BasicLinear initialises its weight itself (Kaiming) and casts it to FP8, recording
that cast's amax in the weight's history. While it is built, the initialiser fills zeros
instead (an amax of 0 changes no history: TE's ``te.Linear`` path uses ``init_method`` for
the same); then this rank's shard of the case's initial weight is copied in (a high-precision
-> FP8 in-place cast recording its amax: the reference's ``copy`` construction).

Data: TE's Userbuffers add bf16 (its reduce-scatter kernels), so inputs, output gradients and
initial weights are rounded to bf16 first, and the reference rounds the seeded data the same
way (:mod:`.compared`): every amax TE takes is then of the same values.

A step: forward under TE's autocast (recipe, NCCL group), backward, then a bounded wait for the
GPU (:mod:`.gpu_wait`); SGD updates the fp32 master of this rank's shard and re-casts the FP8
weight in place (``quantize_``), when the weight is trained.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools

import torch

from harness.case.data import weight_shard
from harness.stacks.te.model import autocast, model_init
from harness.stacks.te_common.recipe import te_recipe
from harness.stacks.te.reuse import reuse_point_before_weight_casts
from harness.stacks.te.userbuffers import ACT_DTYPE, comm_name

_SERIAL = itertools.count()
FUSED_FORWARD = "UserbuffersForwardLinear"
FUSED_BACKWARD = "UserbuffersBackwardLinear"


class OpLayer:
    """A ``BasicLinear`` seen as :mod:`.snapshot` reads a ``te.Linear``: ``fp8_meta`` and ``weight``."""

    def __init__(self, op):
        self.op = op

    @property
    def weight(self):
        return self.op.weight

    @property
    def fp8_meta(self) -> dict:
        metas = self.op._fp8_metas or {}
        return {"scaling_fwd": (metas.get("forward") or {}).get("scaling_fwd"),
                "scaling_bwd": (metas.get("backward") or {}).get("scaling_bwd")}


@dataclasses.dataclass(eq=False)
class TEUbModel:
    module: torch.nn.Module          # te.ops.Sequential
    linear: object                   # its BasicLinear
    bias: object                     # its Bias, or None
    master: list                     # [fp32 shard of the weight, on the GPU]
    recipe: object
    amax_group: object
    harness_group: object            # the runner's group (Userbuffers are made per group)
    device: torch.device
    lr: float
    fp8_weights: bool
    weight_grad: bool
    layout: str
    overlap: bool
    comm: str | None
    dims: tuple
    rank: int
    world: int
    deadline_s: float
    weight_data: list = dataclasses.field(default_factory=list)
    serial: int = 0
    steps: int = 0
    fused_checked: bool = False

    @property
    def layers(self) -> list:
        return [OpLayer(self.linear)]

    def where(self, what: str, step: int | None = None) -> str:
        """``model #S, step T, WHAT``: S counts this process's Userbuffers models, T this model's steps."""
        return f"model #{self.serial}, step {self.steps if step is None else step}, {what}"


@contextlib.contextmanager
def zero_initialised_weights():
    """BasicLinear's Kaiming initialiser fills zeros for the duration (its construction cast then
    records an amax of 0)."""
    original = torch.nn.init.kaiming_uniform_

    def zeros(tensor, *args, **kwargs):
        with torch.no_grad():
            return tensor.zero_()

    torch.nn.init.kaiming_uniform_ = zeros
    try:
        yield
    finally:
        torch.nn.init.kaiming_uniform_ = original


def rounded(t: torch.Tensor) -> torch.Tensor:
    """``t`` rounded to the activation dtype (bf16), back in fp32: values TE sees exactly."""
    return t.to(ACT_DTYPE).float()


def build_model(spec, ctx, te_mods, amax_group, device, layer_setup=None) -> TEUbModel:
    """Build this rank's layer; ``layer_setup(module, weight=...)`` gets the Sequential before any
    weight is written (the buggy stack attaches its hook there)."""
    te, ops = te_mods.te, te_mods.ops
    recipe = te_recipe(spec.recipe, te_mods.recipe)
    world, hidden = ctx.world_size, spec.dims[0]
    shard = rounded(weight_shard(ctx.initial_weights[0], spec.tp_layout, ctx.rank, world)).to(device)
    comm = comm_name(spec.tp_layout, spec.weight_grad) if spec.overlap else None
    options = {"comm_name": comm} if comm else None
    with model_init(te, spec.fp8_params, recipe), reuse_point_before_weight_casts(te_mods.Float8Quantizer), \
            zero_initialised_weights():
        if spec.tp_layout == "column":
            linear = ops.BasicLinear(hidden, hidden, device=device, dtype=ACT_DTYPE, tensor_parallel_mode="column",
                                     tensor_parallel_group=amax_group, sequence_parallel=True,
                                     userbuffers_options=options)
            bias = ops.Bias(hidden // world, device=device, dtype=ACT_DTYPE) if spec.bias else None
            parts = [linear] + ([bias] if bias is not None else [])
        else:
            linear = ops.BasicLinear(hidden // world, hidden, device=device, dtype=ACT_DTYPE,
                                     userbuffers_options=options)
            bias = ops.Bias(hidden, device=device, dtype=ACT_DTYPE) if spec.bias else None
            parts = [linear] + ([bias] if bias is not None else []) + [ops.ReduceScatter(amax_group)]
        module = ops.Sequential(*parts)
    if layer_setup is not None:
        layer_setup(module, weight=lambda: linear.weight)
    with torch.no_grad():
        linear.weight.copy_(shard)
    linear.weight.requires_grad_(spec.weight_grad)
    weight_data = [linear.weight._data] if spec.fp8_params else []
    return TEUbModel(module, linear, bias, [shard.clone()], recipe, amax_group, ctx.group, device, spec.lr,
                     spec.fp8_params, spec.weight_grad, spec.tp_layout, spec.overlap, comm, tuple(spec.dims),
                     ctx.rank, world, ctx.deadline_s, weight_data, serial=next(_SERIAL))


def fused_names(model: TEUbModel) -> tuple[list[str], list[str]]:
    """The class names of the operations TE fused the Sequential into (forward, backward)."""
    groups = getattr(model.module, "_module_groups", None) or []
    fuser = groups[0] if groups else None
    fwd = [type(op).__name__ for op, _ in getattr(fuser, "_forward_ops", [])]
    bwd = [type(op).__name__ for op, _ in getattr(fuser, "_backward_ops", [])]
    return fwd, bwd


def check_fused(model: TEUbModel) -> None:
    """Raise when TE did not fuse the layer as the case asks (Userbuffers on, or off)."""
    fwd, bwd = fused_names(model)
    if model.overlap and (fwd != [FUSED_FORWARD] or bwd != [FUSED_BACKWARD]):
        raise RuntimeError(f"TE did not fuse the Userbuffers linear layer: forward ops {fwd}, backward ops {bwd} "
                           f"(expected [{FUSED_FORWARD}], [{FUSED_BACKWARD}])")
    if not model.overlap and any(name.startswith("Userbuffers") for name in fwd + bwd):
        raise RuntimeError(f"TE fused a Userbuffers operation into a case with overlap off: {fwd}, {bwd}")
    model.fused_checked = True


def global_rows(model: TEUbModel, inputs: torch.Tensor) -> int:
    """Rows of the global input: what the Userbuffers buffer must hold."""
    return inputs.shape[0] * (model.world if model.layout == "column" else 1)


def forward_backward(model: TEUbModel, te_mods, inputs: torch.Tensor, grad_output: torch.Tensor,
                     progress) -> torch.Tensor:
    """Forward under TE's autocast, backward; the caller waits for the GPU afterwards."""
    x = inputs.to(ACT_DTYPE).to(model.device).requires_grad_()
    dy = grad_output.to(ACT_DTYPE).to(model.device)
    with progress.at(model.where("forward"), model.rank, model.world):
        with autocast(te_mods.te, model.recipe, model.amax_group):
            out = model.module(x)
    if not model.fused_checked:
        check_fused(model)
    with progress.at(model.where("backward"), model.rank, model.world):
        out.backward(dy)
    return out


def sgd_step(model: TEUbModel) -> None:
    """SGD on the fp32 master of this rank's shard, re-cast into the weight (when it is trained)."""
    weight = model.linear.weight
    with torch.no_grad():
        if model.weight_grad:
            if weight.grad is None:
                raise RuntimeError("the Userbuffers layer has no weight gradient: was backward run?")
            model.master[0] = torch.add(model.master[0], weight.grad.detach().float(), alpha=-model.lr)
            if model.fp8_weights:
                weight.quantize_(model.master[0])
            else:
                weight.copy_(model.master[0])
        weight.grad = None
        if model.bias is not None:
            model.bias.bias.grad = None
