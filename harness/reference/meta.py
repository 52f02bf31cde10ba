"""What the reference simulates per tensor role: its meta, the reduction and update, the result.

Shared by the data-parallel model (:mod:`harness.reference.delayed`) and the tensor-parallel
Userbuffers layer (:mod:`harness.reference.tensor_parallel`).
"""

from __future__ import annotations

import dataclasses

import torch

from harness.fp8.cast import amax_fmaxf
from harness.fp8.scaling import delayed_scaling_update_rows
from harness.fp8.state import RoleState

FWD_ROLES = ("input", "weight")
BWD_ROLES = ("grad_output", "grad_input")   # grad_input is never cast: its slot keeps the buffer shapes TE has


@dataclasses.dataclass
class Meta:
    """One tensor role's meta on one rank."""

    history: torch.Tensor
    scale: torch.Tensor
    scale_inv: torch.Tensor

    @classmethod
    def fresh(cls, length: int) -> "Meta":
        return cls(torch.zeros(length), torch.ones(()), torch.ones(()))

    def record(self, hp_tensor: torch.Tensor) -> None:
        self.history[0] = torch.fmax(self.history[0], amax_fmaxf(hp_tensor))


def reduce_and_update(slots: list[list[Meta]], recipe, fmt, reduce_over_group: bool) -> None:
    """The reduction and update after a backward or an autocast exit, for many metas at once.

    ``slots[k][r]`` is slot ``k``'s meta on rank ``r``. With ``reduce_over_group`` each slot's
    ``H[0]`` is MAX-reduced over the ranks, else each meta uses its own ``H[0]``; then every
    meta gets :func:`delayed_scaling_update_rows` (one call for all: the formula is per row).
    """
    flat = [meta for slot in slots for meta in slot]
    if not flat:
        return
    histories = torch.stack([meta.history for meta in flat])
    scales = torch.stack([meta.scale.reshape(()) for meta in flat])
    if reduce_over_group:
        per_rank = len(slots[0])
        reduced = histories[:, 0].reshape(len(slots), per_rank).amax(1).repeat_interleave(per_rank)
    else:
        reduced = histories[:, 0]
    new_histories, new_scales, new_scale_invs = delayed_scaling_update_rows(histories, scales, reduced, recipe, fmt)
    for k, meta in enumerate(flat):
        meta.history, meta.scale, meta.scale_inv = new_histories[k], new_scales[k], new_scale_invs[k]


@dataclasses.dataclass
class ExpectedModel:
    """Expected state of one model on one rank: ``steps[t][key]`` and ``final[key]``.

    What each step computes, where the reference knows it bit for bit: ``outputs[t]`` (the
    last layer's output), ``grad_inputs[t]`` (the first layer's dgrad) and ``weight_grads[t][i]``
    (layer ``i``'s own weight gradient, before the data-parallel sum), ``bias_grads[t][i]``
    (layer ``i``'s bias gradient, where it has a bias). An empty list means
    "not compared" (a stack whose GEMMs the reference cannot reproduce leaves them empty).
    """

    steps: list[dict[str, RoleState]]
    final: dict[str, RoleState]
    outputs: list[torch.Tensor]
    grad_inputs: list[torch.Tensor] = dataclasses.field(default_factory=list)
    weight_grads: list[list[torch.Tensor]] = dataclasses.field(default_factory=list)
    bias_grads: list[list[torch.Tensor]] = dataclasses.field(default_factory=list)

    def step_outputs(self, step: int) -> dict[str, torch.Tensor]:
        """Step ``step``'s expected tensors by the names ``StepOutputs.named`` gives them."""
        out = {}
        if step < len(self.outputs):
            out["output"] = self.outputs[step]
        if step < len(self.grad_inputs):
            out["grad_input"] = self.grad_inputs[step]
        for field, grads in (("weight_grad", self.weight_grads), ("bias_grad", self.bias_grads)):
            for i, g in enumerate(grads[step] if step < len(grads) else ()):
                if g is not None:
                    out[f"layer{i}.{field}"] = g
        return out


def role_state(meta: Meta, fp8_bytes=None, fp8_scale_inv=None) -> RoleState:
    return RoleState(meta.history.clone(), meta.scale.clone(), meta.scale_inv.clone(),
                     None if fp8_bytes is None else fp8_bytes.clone(),
                     None if fp8_scale_inv is None else fp8_scale_inv.clone())


