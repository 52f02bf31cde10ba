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
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

import torch

from harness.case.model import ModelSpec
from harness.fp8.state import RoleState, Snapshot

__all__ = ["BuildContext", "ModelSpec", "RoleState", "Snapshot", "Stack"]


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
    layer, before any data-parallel sum (None for a layer without one). A field left None is not
    compared.
    """

    output: Optional[torch.Tensor] = None
    grad_input: Optional[torch.Tensor] = None
    weight_grads: Optional[Sequence[Optional[torch.Tensor]]] = None

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
        """The returned tensors by name: ``output``, ``grad_input``, ``layer{i}.weight_grad``."""
        out = {}
        if self.output is not None:
            out["output"] = self.output
        if self.grad_input is not None:
            out["grad_input"] = self.grad_input
        for i, g in enumerate(self.weight_grads or ()):
            if g is not None:
                out[f"layer{i}.weight_grad"] = g
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

    # Optional: def expected_model(self, case, run_seed, world_size, rank, model_index)
    # -> harness.reference.ExpectedModel -- the stack's own reference when its scaling is not
    # TE's delayed scaling (the default reference).
    # Optional: def builtin_cases(self) -> list[CaseSpec] -- the cases `run` selects from for
    # this stack when no --case-file is given (default: harness.case.catalog.builtin_cases()).
    # Optional: capabilities = harness.stacks.capabilities.Capabilities(...) -- the cases the stack
    # runs (formats, scalings, constructions, shapes, world sizes, ...): a case outside it is
    # reported skipped with the reason, and stress draws only from it. Default: every case.
    # Optional: def all_cases(self) -> list[CaseSpec] -- what a --cases selection chooses from,
    # when it differs from builtin_cases() (cases a plain run leaves out, like TE's Userbuffers family).
    # Optional: def check_world_size(self, world_size) -> None -- raise harness.errors.SetupError
    # (one line) when this machine cannot run that many ranks of the stack; called before any rank starts.
    # Optional: def gpu_count(self) -> int -- the GPUs its ranks may use; `stress --groups` then
    # gives each group GPUs of its own (world size >= 2) or spreads the groups over them (1).
    # Optional: def preload(self) -> None -- import what the stack's models need, once per rank,
    # before the rank forks the zygote its isolated runs start from, so that no isolated run pays
    # the import again. It must not initialise CUDA (a CUDA context does not survive a fork).
    # Optional: def warm_child(self, rank: int) -> None -- in the fresh child an isolated run will
    # use, before its case arrives and while the rank runs other cases: what every case starts
    # with anyway (TE: the rank's GPU and CUDA context). It must not run anything of a case.
    # Optional: def check_optimizer_step(self, model, step) -> str | None -- after each optimizer
    # step, what the stack checks of its own state against the reference it knows (TE 1.x: each
    # FP8 weight's scale updated only at the moments its release defines); a line is a
    # ``reference`` failure at that step, None passes.
    # Optional: renews_group = True -- the process group the stack receives is one made for it,
    # destroyed and made anew at the end of every case (harness.runner.rank.group_death); the
    # stack must take each model's group from its BuildContext. Default: the default group, for life.
    # Optional: def model_objects(self, model) -> list -- objects that must die with the model
    # (layers, parameters); the hygiene oracle checks them with weak references. Without it,
    # the model root and every torch.nn.Module reachable from it are checked.

    def destroy(self, model: Any) -> None:
        """Release what the model holds outside itself (communicators, hooks). Called before del."""

    def registries(self) -> Mapping[str, Any]:
        """The process-global containers to scan for stale ids and retention, by name."""

    def reset(self) -> None:
        """Clear every process-global registry (TE's ``FP8GlobalStateManager.reset()``)."""
