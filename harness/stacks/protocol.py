"""The stack protocol: what the harness needs from an FP8 training stack under test.

The harness drives a stack through one model's life (build, steps, destroy) and reads its
FP8 state; the stack owns everything else. One step, in the order the harness calls it::

    stack.forward_backward(model, inputs, grad_output)  # forward under the stack's autocast,
                                                       # autocast exit (forward amax reduction),
                                                       # backward (backward amax reduction)
    stack.snapshot(model)                               # FP8 state, compared with the reference
    stack.optimizer_step(model)                         # gradient sync, SGD, FP8 weight re-cast

Snapshot keys are ``"layer{i}.{role}"`` with role ``input``, ``weight`` or ``grad_output``.
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




@runtime_checkable
class Stack(Protocol):
    """An FP8 stack under test. Load one with ``--sut NAME`` or ``--sut package.module:attr``."""

    name: str

    def build(self, spec: ModelSpec, ctx: BuildContext) -> Any:
        """Build a model under the stack's model-init context (FP8 parameters when asked)."""

    def forward_backward(self, model: Any, inputs: torch.Tensor, grad_output: torch.Tensor) -> torch.Tensor:
        """Forward under autocast (recipe, group), autocast exit, backward; returns the output."""

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
    # Optional: def preload(self) -> None -- import what the stack's models need, once per rank,
    # before the rank forks the zygote its isolated runs start from, so that no isolated run pays
    # the import again. It must not initialise CUDA (a CUDA context does not survive a fork).
    # Optional: def model_objects(self, model) -> list -- objects that must die with the model
    # (layers, parameters); the hygiene oracle checks them with weak references. Without it,
    # the model root and every torch.nn.Module reachable from it are checked.

    def destroy(self, model: Any) -> None:
        """Release what the model holds outside itself (communicators, hooks). Called before del."""

    def registries(self) -> Mapping[str, Any]:
        """The process-global containers to scan for stale ids and retention, by name."""

    def reset(self) -> None:
        """Clear every process-global registry (TE's ``FP8GlobalStateManager.reset()``)."""
