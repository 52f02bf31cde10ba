"""``--sut te1``: Transformer Engine 1.x (1.12, 1.13) on CUDA GPUs, as a :class:`~harness.stacks.protocol.Stack`.

``load()`` is what ``--sut te1`` calls: without TE, with TE 2.x, or without a CUDA device it
raises :class:`SetupError` (exit 2, one line); otherwise it installs the ONNX stand-ins
(:mod:`.onnx_standins`) and returns the stack. TE is imported by :meth:`TE1Stack.preload`, on
each rank before it forks the zygote its isolated runs start from, with CUDA left alone
(:mod:`.availability` says why that needs care on TE 1.x).

One step, as the harness calls it::

    forward_backward  forward under te.fp8_autocast(recipe, group), its exit (forward amax
                      reduction), backward (backward reduction)
    snapshot          every layer's input, weight and grad_output state (harness.stacks.te_common.snapshot)
    optimizer_step    SGD on fp32 masters, each FP8 weight re-cast in place (v1.12: PR #575's hook
                      may reduce the weights' amaxes there)
    check_optimizer_step   the weights' scale updates so far, against the moments the release
                      defines (:mod:`.moments`); a difference is a ``reference`` failure

The reference is the TE 2.x stack's (:func:`harness.stacks.te_common.compared.expected_model`: the
first layer's input and the last layer's output gradient at every step, the weights at step 0),
plus :meth:`TE1Stack.check_optimizer_step` for every weight at every step. Every call of TE's
amax reduction is also in the rank's collective ledger (:mod:`.reductions`).
"""

from __future__ import annotations

import os

import torch

from harness.errors import SetupError
from harness.stacks.protocol import BuildContext, ModelSpec, RoleState
from harness.stacks.te_common import compared as te_compared
from harness.stacks.te_common import gpu_wait, gpus
from harness.stacks.te_common import snapshot as te_snapshot
from harness.stacks.te.cases import DeclinedCase, check_batch
from harness.stacks.te_common.groups import AmaxGroups, placement, select_device
from harness.stacks.te_common import release
from harness.stacks.te1 import availability, global_state, onnx_standins, package_check
from harness.stacks.te1 import cases as _cases
from harness.stacks.te1 import model as _model
from harness.stacks.te1.moments import ReleaseLine, check_weight_updates
from harness.stacks.te1.reductions import ReductionRecorder


class TE1Stack:
    """``te.Linear`` models with FP8 weights on TE 1.x, one rank or more (sharing GPUs where there
    are more ranks than GPUs: :mod:`harness.stacks.te_common.placement`)."""

    capabilities = _cases.CAPABILITIES
    name = "te1"

    def __init__(self, version: str | None = None):
        self.version = version
        self.line = ReleaseLine.of_version(version) if version else None
        self._te = None
        self._device: torch.device | None = None
        self._deadline_s = 10.0
        self.recorder = ReductionRecorder()
        self._groups = AmaxGroups()

    def te_mods(self):
        """TE's modules, imported on first use; the reduction recorder is installed then."""
        if self._te is None:
            self._te = availability.te_modules()
            self.recorder.install(self._te.state_manager)
            if self.line is None:
                self.line = ReleaseLine.of_version(release.installed_version() or "1.13")
        return self._te

    def preload(self) -> None:
        """TE imported before the rank forks its zygote (see :mod:`.availability`: TE 1.x's
        import would start CUDA without the care taken there); refused in one line if CUDA
        started anyway."""
        self.te_mods()
        if torch.cuda.is_initialized():
            raise SetupError("--sut te1: importing Transformer Engine initialised CUDA, so the zygote the "
                             "isolated runs fork from cannot use it; run with --no-isolation")

    def warm_child(self, rank: int) -> None:
        """The rank's GPU made current and its CUDA context created, in the zygote's spare child."""
        device = select_device(rank)
        torch.zeros(1, device=device)

    def check_world_size(self, world_size: int) -> None:
        """SetupError (one line) when this machine's GPUs cannot run ``world_size`` ranks (no GPU,
        a GPU without FP8; more ranks than GPUs share them)."""
        reason = gpus.world_refusal(world_size, gpus.visible_gpus(), self.name)
        if reason is not None:
            raise SetupError(reason)

    def _wait(self, device: torch.device, what: str) -> None:
        gpu_wait.wait_for_gpu(device, self._deadline_s, what, lambda: [])

    # --- building and steps ---------------------------------------------------------------
    def build(self, spec: ModelSpec, ctx: BuildContext):
        reason = _cases.decline_reason(spec) or _cases.shape_reason(spec.dims)
        if reason is not None:
            raise DeclinedCase(reason)
        mods = self.te_mods()
        device = select_device(ctx.rank)
        self._device, self._deadline_s = device, ctx.deadline_s
        group = self._groups.for_group(ctx.group if ctx.world_size > 1 else None, placement(ctx.world_size).transport)
        model = _model.build_model(spec, ctx, mods, group, device, self.recorder)
        model.spec_recipe = spec.recipe
        self._wait(device, f"rank {ctx.rank}, building a model")
        return model

    def forward_backward(self, model, inputs: torch.Tensor, grad_output: torch.Tensor) -> torch.Tensor:
        check_batch(model.dims, inputs.shape[0])
        out = _model.forward_backward(model, self.te_mods(), inputs, grad_output, self.recorder)
        self._wait(model.device, "a step (forward and backward)")
        return out.cpu()

    def snapshot(self, model) -> dict[str, RoleState]:
        return te_snapshot.snapshot(model.layers, model.fp8_weights)

    def optimizer_step(self, model) -> None:
        _model.sgd_step(model, self.recorder)
        self._wait(model.device, "an optimizer step")

    def check_optimizer_step(self, model, step: int) -> str | None:
        """After optimizer step ``step``: the first weight whose history or scale changed other
        than the release's own moments allow, or None (:func:`.moments.check_weight_updates`)."""
        if not model.fp8_weights:
            return None
        fmt = model.spec_recipe.fp8_format.forward()
        return check_weight_updates(model.records, model.spec_recipe, fmt, self.line.defined_moments())

    def final_weights(self, model) -> dict[str, RoleState]:
        return te_snapshot.final_weights(model.layers, model.master, model.fp8_weights)

    # --- reference and cases ----------------------------------------------------------------
    def expected_model(self, case, run_seed: int, world_size: int, rank: int, model_index: int):
        return te_compared.expected_model(case, run_seed, world_size, rank, model_index)

    def builtin_cases(self) -> list:
        return _cases.builtin_cases()

    def all_cases(self) -> list:
        return _cases.all_cases()

    # --- lifetime and registries ------------------------------------------------------------
    def reuse_targets(self, model) -> list:
        """Every FP8 weight's ``_data``: what TE 1.12 keys its maps on (``id(weight._data)``)."""
        return list(model.weight_data)

    def model_objects(self, model) -> list:
        return [model, model.module, *model.layers, *(layer.weight for layer in model.layers), *model.weight_data]

    def destroy(self, model) -> None:
        # TE's kernels run asynchronously: an error of this model's last kernels surfaces here.
        if self.recorder.model is model:
            self.recorder.model = None
        self._wait(model.device, "destroying a model")

    def registries(self) -> dict:
        mods = self.te_mods()
        return global_state.registries(mods.state_manager, mods.float8)

    def reset(self) -> None:
        """TE 1.x's global FP8 state and the float8_tensor module's updated set; the recorder
        forgets a model a failed case left behind."""
        self.recorder.model = None
        mods = self.te_mods()
        global_state.reset(mods.state_manager, mods.float8)


def load() -> TE1Stack:
    """The TE 1.x stack (``--sut te1``): SetupError without TE 1.x or a CUDA device; the ONNX
    stand-ins and the package checks' answer are installed here, before anything imports TE."""
    availability.require()
    onnx_standins.install()
    package_check.install()
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    return TE1Stack(release.installed_version())
