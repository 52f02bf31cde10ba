"""Each role's state, read from TE: the module's ``fp8_meta`` and its FP8 weight.

A ``te.Linear`` keeps delayed-scaling state per direction: ``fp8_meta["scaling_fwd"]`` holds
the input, weight and output slots (0, 1, 2) and ``fp8_meta["scaling_bwd"]`` the grad_output
and grad_input slots (0, 1); each has an ``amax_history`` of shape ``[history length, slots]``
(row 0 the amaxes since the last reduction) and a ``scale`` per slot. TE 2.x keeps no
scale_inv there: an FP8 tensor carries its own (``Float8Tensor._scale_inv``, written by the
cast kernel). An FP8 weight's bytes are its ``_data``.

Every tensor is copied to the CPU: the reference and the oracles work there.
"""

from __future__ import annotations

import torch

from harness.stacks.protocol import RoleState

# role -> (fp8_meta key, slot)
ROLE_SLOTS = {
    "input": ("scaling_fwd", 0),
    "weight": ("scaling_fwd", 1),
    "grad_output": ("scaling_bwd", 0),
}


def _cpu(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu", copy=True)


def fp8_weight_bytes(weight) -> tuple[torch.Tensor, torch.Tensor]:
    """An FP8 weight's bytes (uint8 bit patterns) and the scale_inv they were written with."""
    return _cpu(weight._data.view(torch.uint8)), _cpu(weight._scale_inv.reshape(()))


def role_state(layer, role: str, fp8_weight: bool) -> RoleState:
    """One role of one layer: history and scale of its meta slot, and for an FP8 weight its bytes."""
    key, slot = ROLE_SLOTS[role]
    meta = layer.fp8_meta[key]
    data = scale_inv = None
    if role == "weight" and fp8_weight:
        data, scale_inv = fp8_weight_bytes(layer.weight)
    return RoleState(_cpu(meta.amax_history[:, slot]), _cpu(meta.scale[slot]), None, data, scale_inv)


def snapshot(layers, fp8_weights: bool) -> dict[str, RoleState]:
    """Every role of every layer, keyed ``layer{i}.{role}``."""
    return {f"layer{i}.{role}": role_state(layer, role, fp8_weights)
            for i, layer in enumerate(layers) for role in ROLE_SLOTS}


def final_weights(layers, master, fp8_weights: bool) -> dict[str, RoleState]:
    """After the last step: each weight's bytes and private scale_inv (the master for high precision)."""
    out = {}
    for i, layer in enumerate(layers):
        meta = layer.fp8_meta["scaling_fwd"]
        history, scale = _cpu(meta.amax_history[:, 1]), _cpu(meta.scale[1])
        if fp8_weights:
            data, scale_inv = fp8_weight_bytes(layer.weight)
            out[f"layer{i}.weight"] = RoleState(history, scale, None, data, scale_inv)
        else:
            out[f"layer{i}.weight"] = RoleState(history, scale, None, _cpu(master[i]), None)
    return out
