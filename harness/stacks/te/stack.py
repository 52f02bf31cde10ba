"""``--sut te`` and ``--sut te-buggy``: Transformer Engine 2.x on CUDA as a :class:`~harness.stacks.protocol.Stack`.

``load()`` is what ``--sut te`` calls (``load(inject="id-hook")`` with ``--inject id-hook``);
``load_buggy()`` is ``--sut te-buggy``, the same as ``--sut te --inject id-hook``. Without TE
or without a CUDA device they raise :class:`SetupError` (exit 2, one line). TE itself is
imported at the first build (see :mod:`harness.stacks.te.availability` for why).

One step, as the harness calls it::

    forward_backward  on this rank's GPU: forward under TE's autocast (recipe, NCCL group),
                      autocast exit (forward amax reduction), backward (backward reduction)
    snapshot          every layer's input, weight and grad_output state (harness.stacks.te.snapshot)
    optimizer_step    gradient all-gather and rank-order sum over NCCL, SGD, FP8 re-cast in place

The reference is :func:`harness.stacks.te.compared.expected_model`: the delayed-scaling
reference restricted to what TE must reproduce bit for bit; the catalogue is
:func:`harness.stacks.te.cases.builtin_cases`.
"""

from __future__ import annotations

import torch

from harness.errors import UsageError
from harness.stacks.protocol import BuildContext, ModelSpec, RoleState
from harness.stacks.te import availability
from harness.stacks.te import cases as _cases
from harness.stacks.te import compared as _compared
from harness.stacks.te import global_state, id_hook
from harness.stacks.te import model as _model
from harness.stacks.te import snapshot as _snapshot
from harness.stacks.te.groups import AmaxGroups, select_device

INJECTIONS = ("id-hook",)


class TEStack:
    """``te.Linear`` models with FP8 weights; with ``inject="id-hook"``, plus :mod:`.id_hook`."""

    capabilities = _cases.CAPABILITIES     # what it runs; build() refuses the rest with the same reasons

    def __init__(self, inject: str | None = None):
        if inject is not None and inject not in INJECTIONS:
            raise UsageError(f"--inject {inject!r}: --sut te knows {', '.join(INJECTIONS)}")
        self.inject = inject
        self.name = "te" if inject is None else "te-buggy"
        self._groups = AmaxGroups()
        self._te = None

    @property
    def buggy(self) -> bool:
        return self.inject == "id-hook"

    def te_mods(self):
        """TE's modules, imported on first use; the buggy stack installs its hook then."""
        if self._te is None:
            self._te = availability.te_modules()
            if self.buggy:
                id_hook.install(self._te)
        return self._te

    # --- building ---------------------------------------------------------------------------
    def build(self, spec: ModelSpec, ctx: BuildContext) -> _model.TEModel:
        _cases.check_model(spec)
        mods = self.te_mods()
        device = select_device(ctx.rank)
        group = self._groups.for_group(ctx.group if ctx.world_size > 1 else None)
        if not self.buggy:
            return _model.build_model(spec, ctx, mods, group, device)
        # Each layer registers its weight's id at its first forward under autocast (where pre-fix
        # TE did); the cast hook is process-wide, so the construction copy already runs it, and a
        # reused id that a dead model registered completes a stale set right there.
        return _model.build_model(spec, ctx, mods, group, device,
                                  layer_setup=lambda layer: id_hook.attach(layer, mods.state_manager))

    # --- a step -----------------------------------------------------------------------------
    def forward_backward(self, model, inputs: torch.Tensor, grad_output: torch.Tensor) -> torch.Tensor:
        _cases.check_batch(model.dims, inputs.shape[0])
        return _model.forward_backward(model, self.te_mods(), inputs, grad_output)

    def snapshot(self, model) -> dict[str, RoleState]:
        return _snapshot.snapshot(model.layers, model.fp8_weights)

    def optimizer_step(self, model) -> None:
        _model.sgd_step(model)

    def final_weights(self, model) -> dict[str, RoleState]:
        return _snapshot.final_weights(model.layers, model.master, model.fp8_weights)

    # --- reference and cases ----------------------------------------------------------------
    def expected_model(self, case, run_seed: int, world_size: int, rank: int, model_index: int):
        return _compared.expected_model(case, run_seed, world_size, rank, model_index)

    def builtin_cases(self) -> list:
        return _cases.builtin_cases()

    # --- lifetime and registries ------------------------------------------------------------
    def reuse_targets(self, model) -> list:
        """Every FP8 weight's ``_data``: what the pre-fix hook keys on (``id(weight._data)``)."""
        return list(model.weight_data)

    def model_objects(self, model) -> list:
        return [model, model.module, *model.layers, *(layer.weight for layer in model.layers), *model.weight_data]

    def destroy(self, model) -> None:
        # TE's kernels run asynchronously: an error of this model's last kernels surfaces here,
        # inside its case, not in the next one.
        torch.cuda.synchronize(model.device)

    def registries(self) -> dict:
        regs = global_state.registries(self.te_mods().state_manager)
        if self.buggy:
            regs.update(id_hook.registries())
        return regs

    def reset(self) -> None:
        global_state.reset(self.te_mods().state_manager)
        if self.buggy:
            id_hook.reset()


def load(inject: str | None = None) -> TEStack:
    """The TE stack (``--sut te``), optionally with the pre-fix hook (``--inject id-hook``)."""
    availability.require()
    return TEStack(inject)


def load_buggy(inject: str | None = None) -> TEStack:
    """``--sut te-buggy``: the TE stack with the pre-fix id-keyed post-cast hook put back
    (``--inject id-hook`` says the same; any other injection is refused)."""
    return load(inject=inject or "id-hook")
