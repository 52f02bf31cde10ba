"""Every float8 cast torchao makes in one step, read at the cast itself, per layer and per cast.

torchao's ``Float8Linear`` casts through the name
``torchao.float8.float8_linear.hp_tensor_to_float8_dynamic``: six calls per layer per step, each
with its ``gemm_input_role``, returning a ``Float8TrainingTensor`` (``_data``, ``_scale``). The
amax of each cast comes from ``torchao.float8.float8_utils.tensor_to_amax``, which
``tensor_to_scale`` looks up as a module global on every call. For the duration of one forward
and backward, :func:`intercepting` replaces both names with recording wrappers that call the
originals, and puts the originals back afterwards, whatever happens.

Which layer a cast belongs to: a forward pre-hook and a full backward pre-hook on each layer set
the recorder's current layer and phase right before that layer's casts (both fire there). No
state is keyed on ``id()``.

Naming (the order inside ``matmul_with_hp_or_float8_args``)::

    forward   input                        -> layer{i}.input
              weight (the view weight.t())  -> layer{i}.weight
    backward  grad_output                  -> layer{i}.grad_output
              weight (weight.t() again)     -> layer{i}.weight_for_grad_input
              grad_output (again)          -> layer{i}.grad_output_for_grad_weight
              input (again, as 2-D)        -> layer{i}.input_for_grad_weight

The first three are the protocol's roles (the first cast of each role in a step). The repeats are
recorded under their own keys and compared with the reference too: with tensorwise scaling they
must be byte-identical to the first casts (the reference's are), so a repeat that differs fails
the reference oracle under its own name; rowwise recipes reduce repeats along another axis, and
the reference computes those.

Each cast becomes a :class:`RoleState`: ``amax_history`` the amax torchao computed (flattened:
one element for tensorwise, one per row or column for axiswise), ``scale`` torchao's float32
multiplier, ``scale_inv = 1 / scale`` as a float32 tensor division (torchao itself dequantises
by dividing by ``scale``; ``scale_inv`` is the protocol's convention), ``fp8_bytes`` the uint8
bit patterns made contiguous in the logical shape of the tensor cast (the weight casts are of
``weight.t()``: ``[in, out]``, row-major), and ``fp8_scale_inv`` the same ``scale_inv``.
"""

from __future__ import annotations

import contextlib
import inspect

import torch

from harness.stacks.protocol import RoleState

# (phase, torchao role) -> the names of its casts in order of occurrence within one layer.
CAST_NAMES = {
    ("forward", "input"): ("input",),
    ("forward", "weight"): ("weight",),
    ("backward", "grad_output"): ("grad_output", "grad_output_for_grad_weight"),
    ("backward", "weight"): ("weight_for_grad_input",),
    ("backward", "input"): ("input_for_grad_weight",),
}


class UnexpectedCast(RuntimeError):
    """torchao made a cast the adapter cannot attribute (a new torchao, or a cast outside a layer)."""


def scale_inverse(scale: torch.Tensor) -> torch.Tensor:
    """``1 / scale`` as an IEEE float32 tensor division (not ``torch.reciprocal``, not a Python scalar)."""
    return torch.ones_like(scale, dtype=torch.float32) / scale.to(torch.float32)


def role_state(amax: torch.Tensor, fp8_data: torch.Tensor, scale: torch.Tensor) -> RoleState:
    scale = scale.detach().to(torch.float32).clone()
    inv = scale_inverse(scale)
    return RoleState(amax_history=amax.detach().reshape(-1).clone(), scale=scale, scale_inv=inv,
                     fp8_bytes=fp8_data.detach().view(torch.uint8).contiguous().clone(), fp8_scale_inv=inv.clone())


class CastRecorder:
    """One model's casts of the current step, by key. Lives on the model; holds no model object."""

    def __init__(self):
        self.layer: int | None = None
        self.phase: str | None = None
        self.casts: dict[str, RoleState] = {}
        self._seen: dict[tuple, int] = {}
        self.errors: list[str] = []

    def begin_step(self) -> None:
        self.layer, self.phase = None, None
        self.casts, self._seen, self.errors = {}, {}, []

    def enter(self, layer: int, phase: str) -> None:
        self.layer, self.phase = layer, phase

    def record(self, role: str, fp8_tensor, amax: torch.Tensor | None) -> None:
        if self.layer is None:
            self.errors.append(f"a {role} cast outside any Float8Linear")
            return
        names = CAST_NAMES.get((self.phase, role), ())
        slot = (self.layer, self.phase, role)
        n = self._seen.get(slot, 0)
        self._seen[slot] = n + 1
        if n >= len(names):
            self.errors.append(f"layer {self.layer}: {self.phase} cast #{n + 1} of role {role!r}; "
                               f"the adapter expects {len(names)}")
            return
        if amax is None:
            self.errors.append(f"layer {self.layer}: the {names[n]} cast computed no amax")
            return
        self.casts[f"layer{self.layer}.{names[n]}"] = role_state(amax, fp8_tensor._data, fp8_tensor._scale)

    def end_step(self) -> None:
        self.layer, self.phase = None, None
        if self.errors:
            raise UnexpectedCast("; ".join(self.errors[:4]))


def attach(module: torch.nn.Module, recorder: CastRecorder, index: int) -> None:
    """Hooks on one layer that tell the recorder whose casts come next."""

    def before_forward(mod, args):
        recorder.enter(index, "forward")

    def before_backward(mod, grad_output):
        recorder.enter(index, "backward")

    module.register_forward_pre_hook(before_forward)
    module.register_full_backward_pre_hook(before_backward)


@contextlib.contextmanager
def intercepting(recorder: CastRecorder):
    """Record every cast of ``Float8Linear`` into ``recorder`` while the block runs."""
    from torchao.float8 import float8_linear, float8_utils
    from torchao.float8.float8_training_tensor import GemmInputRole

    original_cast = float8_linear.hp_tensor_to_float8_dynamic
    original_amax = float8_utils.tensor_to_amax
    signature = inspect.signature(original_cast)
    amaxes: list[torch.Tensor] = []

    def recording_amax(*args, **kwargs):
        amax = original_amax(*args, **kwargs)
        amaxes.append(amax.detach().clone())
        return amax

    def recording_cast(*args, **kwargs):
        amaxes.clear()
        out = original_cast(*args, **kwargs)
        bound = signature.bind(*args, **kwargs)
        role = bound.arguments.get("gemm_input_role", GemmInputRole.INPUT)
        recorder.record(role.value, out, amaxes[-1] if len(amaxes) == 1 else None)
        return out

    float8_linear.hp_tensor_to_float8_dynamic = recording_cast
    float8_utils.tensor_to_amax = recording_amax
    try:
        yield recorder
    finally:
        float8_linear.hp_tensor_to_float8_dynamic = original_cast
        float8_utils.tensor_to_amax = original_amax
