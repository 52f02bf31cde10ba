"""The stack protocol: what the harness needs from an FP8 training stack under test.

The harness drives a stack through one model's life (build, steps, destroy) and reads its
FP8 state; the stack owns everything else. One step, in the order the harness calls it::

    stack.forward_backward(model, inputs, grad_output)  # forward under the stack's autocast,
                                                       # autocast exit (forward amax reduction),
                                                       # backward (backward amax reduction);
                                                       # returns what it computed (StepOutputs)
    stack.snapshot(model)                               # FP8 state, compared with the reference
    stack.optimizer_step(model)                         # gradient sync, SGD, FP8 weight re-cast

What ``forward_backward`` returns is compared with the reference bit for bit: a
:class:`StepOutputs` (the output and the gradients), or, as before, the output tensor alone (then
only the output is compared), or None (nothing is). Snapshot keys are ``"layer{i}.{role}"`` with role ``input``, ``weight`` or ``grad_output``.
A stack that wants the harness to force id reuse allocates each object returned by
:meth:`Stack.reuse_targets` through :func:`harness.idreuse.reuse_alloc` (``reuse_alloc(lambda:
torch.empty(shape))``), or, where a library it calls does the allocating, calls
:func:`harness.idreuse.reuse_point` right before that allocation (see
:mod:`harness.idreuse.morgue` for why the first is exact and the second nearly so).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Protocol, Sequence, runtime_checkable

import torch

from harness.case.model import ModelSpec
from harness.fp8.state import RoleState, Snapshot
from harness.stacks.hooks import OPTIONAL, method_location

__harness_hidden__ = True

__all__ = ["BuildContext", "ModelSpec", "RoleState", "Snapshot", "Stack", "StepOutputs", "REQUIRED", "OPTIONAL"]


@dataclasses.dataclass
class BuildContext:
    """Where the model lives: the fp8 group and this process's place in it."""

    rank: int
    world_size: int
    group: Any                      # torch.distributed ProcessGroup, or None when world_size == 1
    device: torch.device
    initial_weights: Sequence[torch.Tensor]   # one fp32 [out, in] tensor per layer, from seeds
    deadline_s: float                         # the run's --deadline, for the stack's own waits (Userbuffers flags)


@dataclasses.dataclass
class StepOutputs:
    """What one step computed on this rank, compared with the reference bit for bit after the step.

    ``output``: the last layer's forward output; ``grad_input``: the gradient with respect to the
    step's input (the first layer's dgrad); ``weight_grads``: this rank's own weight gradient per
    layer, before any data-parallel sum (None for a layer without one); ``bias_grads``: the
    gradient of each layer's bias, as handed to the optimizer (None for a layer without a bias;
    a stack without biases leaves the field None). A field left None is not compared.
    """

    output: Optional[torch.Tensor] = None
    grad_input: Optional[torch.Tensor] = None
    weight_grads: Optional[Sequence[Optional[torch.Tensor]]] = None
    bias_grads: Optional[Sequence[Optional[torch.Tensor]]] = None

    @classmethod
    def of(cls, returned: Any) -> "StepOutputs":
        """What ``forward_backward`` returned, as StepOutputs: a tensor is the output alone."""
        if returned is None:
            return cls()
        if isinstance(returned, StepOutputs):
            return returned
        if isinstance(returned, torch.Tensor):
            return cls(output=returned)
        raise TypeError(f"forward_backward returned a {type(returned).__name__}; expected StepOutputs, "
                        f"the output tensor or None")

    def named(self) -> dict[str, torch.Tensor]:
        """The returned tensors by name: ``output``, ``grad_input``, ``layer{i}.weight_grad``,
        ``layer{i}.bias_grad``."""
        out = {}
        if self.output is not None:
            out["output"] = self.output
        if self.grad_input is not None:
            out["grad_input"] = self.grad_input
        for i, g in enumerate(self.weight_grads or ()):
            if g is not None:
                out[f"layer{i}.weight_grad"] = g
        for i, g in enumerate(self.bias_grads or ()):
            if g is not None:
                out[f"layer{i}.bias_grad"] = g
        return out


@runtime_checkable
class Stack(Protocol):
    """An FP8 stack under test. Load one with ``--sut NAME`` or ``--sut package.module:attr``."""

    name: str

    def build(self, spec: ModelSpec, ctx: BuildContext) -> Any:
        """Build a model under the stack's model-init context (FP8 parameters when asked)."""

    def forward_backward(self, model: Any, inputs: torch.Tensor, grad_output: torch.Tensor) -> "StepOutputs | torch.Tensor | None":
        """Forward under autocast (recipe, group), autocast exit, backward; returns what it computed:
        :class:`StepOutputs`, or the output tensor alone (then only the output is compared)."""

    def snapshot(self, model: Any) -> Snapshot:
        """Every FP8 role's state, detached copies, keyed ``layer{i}.{role}``."""

    def optimizer_step(self, model: Any) -> None:
        """Gradient sync (data-parallel), SGD on master weights, in-place FP8 re-cast of weights."""

    def final_weights(self, model: Any) -> Snapshot:
        """After the last step: each layer's weight bytes and private scale_inv (``layer{i}.weight``)."""

    def reuse_targets(self, model: Any) -> list:
        """Objects whose ``id()`` the stack may key state on (e.g. every FP8 weight's ``_data``)."""

    # The optional hooks (capabilities, expected_model, ...) are declared in harness.stacks.hooks.

    def destroy(self, model: Any) -> None:
        """Release what the model holds outside itself (communicators, hooks). Called before del."""

    def registries(self) -> Mapping[str, Any]:
        """The process-global containers to scan for stale ids and retention, by name."""

    def reset(self) -> None:
        """Clear every process-global registry (TE's ``FP8GlobalStateManager.reset()``)."""


# Every member the harness needs of a stack, derived from the protocol above: its name, then its methods.
REQUIRED = ("name",) + tuple(n for n, v in vars(Stack).items() if callable(v) and not n.startswith("_"))

# What each required method must return, where the harness reads it (what the message says it expected).
_RETURNS = {
    "snapshot": (Mapping, "a dict of RoleState keyed 'layer{i}.{role}'"),
    "final_weights": (Mapping, "a dict of RoleState keyed 'layer{i}.weight'"),
    "reuse_targets": ((list, tuple), "a list of the objects whose id() the stack keys state on"),
    "registries": (Mapping, "a dict of the stack's global containers by name ({} for none)"),
    "forward_backward": ((StepOutputs, torch.Tensor, type(None)), "StepOutputs, the output tensor or None"),
}


class StackReturnError(TypeError):
    """A protocol method returned what the harness cannot use (``registries()`` returning None)."""


def checked_return(stack, method: str, returned):
    """``returned`` when it has the type ``method`` must return; else :class:`StackReturnError`
    naming the method, the value and where the stack defines the method."""
    expected = _RETURNS.get(method)
    if expected is None or isinstance(returned, expected[0]):
        return returned
    text = repr(returned)
    text = text if len(text) <= 80 else text[:77] + "..."
    raise StackReturnError(f"{method}() returned {text} ({type(returned).__name__}); expected {expected[1]} "
                           f"[{method_location(stack, method)}]")
