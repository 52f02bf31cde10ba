"""``--sut te`` and ``--sut te-buggy``: Transformer Engine 2.x on CUDA as a :class:`~harness.stacks.protocol.Stack`.

``load()`` is what ``--sut te`` calls (``load(inject="id-hook")`` with ``--inject id-hook``);
``load_buggy()`` is ``--sut te-buggy``, the same as ``--sut te --inject id-hook``. Without TE
or without a CUDA device they raise :class:`SetupError` (exit 2, one line). TE itself is
imported at the first build (see :mod:`harness.stacks.te.availability` for why).

One step, as the harness calls it::

    forward_backward  on this rank's GPU: forward under TE's autocast (recipe, NCCL group),
                      autocast exit (forward amax reduction), backward (backward reduction)
    snapshot          every layer's input, weight and grad_output state (harness.stacks.te_common.snapshot)
    optimizer_step    gradient all-gather and rank-order sum over NCCL, SGD, FP8 re-cast in place

Two kinds of model: ``te.Linear`` layers (:mod:`.model`, the catalogue's cases) and, for the
``userbuffers/...`` family, one tensor-parallel layer of TE's fusible ops overlapping its
communication with its GEMMs through TE's Userbuffers (:mod:`.ub_model`, :mod:`.userbuffers`).
Every call that issues GPU work ends with a wait for the GPU bounded by the run's deadline
(:mod:`.gpu_wait`), so a collective or a Userbuffers chunk that never comes is a ``liveness``
failure naming what the rank waits for, not a process blocked for good.

The reference is :func:`harness.stacks.te_common.compared.expected_model`: the delayed-scaling
reference restricted to what TE must reproduce bit for bit; the catalogue is
:func:`harness.stacks.te.cases.builtin_cases` (a run without ``--cases``), and a selection may
also name the Userbuffers family (:meth:`TEStack.all_cases`).
"""

from __future__ import annotations

import os

import torch

from harness.errors import SetupError, UsageError
from harness.stacks.protocol import BuildContext, ModelSpec, RoleState
from harness.stacks.te import availability
from harness.stacks.te import cases as _cases
from harness.stacks.te_common import compared as _compared
from harness.stacks.te.declaration import CAPABILITIES
from harness.stacks.te import global_state, id_hook, ub_cases, ub_progress
from harness.stacks.te_common import gpu_wait, gpus
from harness.stacks.te import model as _model
from harness.stacks.te_common import snapshot as _snapshot
from harness.stacks.te import ub_model as _ub_model
from harness.stacks.te_common.groups import AmaxGroups, placement, select_device
from harness.stacks.te.userbuffers import ACT_DTYPE, UbCommunicators

INJECTIONS = ("id-hook",)
RESET_WAIT_S = 5.0     # reset(): every rank has ended its case; GPU work pending longer waits for a peer gone


class TEStack:
    """``te.Linear`` models with FP8 weights; with ``inject="id-hook"``, plus :mod:`.id_hook`."""

    capabilities = CAPABILITIES     # what it runs; build() refuses the rest with the same reasons

    def __init__(self, inject: str | None = None):
        if inject is not None and inject not in INJECTIONS:
            raise UsageError(f"--inject {inject!r}: --sut te knows {', '.join(INJECTIONS)}")
        self.inject = inject
        self.name = "te" if inject is None else "te-buggy"
        self._groups = AmaxGroups()
        self._te = None
        self._ub_mods = None
        self._ub = UbCommunicators()
        self._device: torch.device | None = None     # set once a model was built: CUDA is in use
        self._deadline_s = 10.0

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

    def ub_mods(self):
        """TE's fusible ops and Userbuffers, imported at the first Userbuffers model; the progress
        record is installed on TE's fused modules then (:mod:`.ub_progress`)."""
        if self._ub_mods is None:
            from harness.hangs import report as hang_report

            mods = availability.ub_modules()
            ub_progress.install(mods.fused, lambda comm: self._ub.name_of(mods.base, comm))
            hang_report.register_progress(ub_progress.PROGRESS.pending)
            self._ub_mods = mods
        return self._ub_mods

    def preload(self) -> None:
        """TE's modules, imported on a rank before it forks its zygote: every isolated run's fresh
        child then starts with TE imported (6 s each otherwise, measured on one H200 with TE
        2.20.2) and CUDA not yet initialised, which importing TE leaves alone (also measured).
        A TE that did initialise CUDA here would make every forked child unable to use it: that
        is refused in one line rather than left to fail case by case."""
        self.te_mods()
        self.ub_mods()
        if torch.cuda.is_initialized():
            raise SetupError("--sut te: importing Transformer Engine initialised CUDA, so the zygote the "
                             "isolated runs fork from cannot use it; run with --no-isolation")

    def warm_child(self, rank: int) -> None:
        """In the zygote's spare child, before its isolated case arrives: the rank's GPU made
        current and its CUDA context created (0.35 s per fresh process on one H200), while the
        rank runs its next case. The case would do both first thing; nothing of a case is run."""
        device = select_device(rank)
        torch.zeros(1, device=device)

    def check_world_size(self, world_size: int) -> None:
        """Called before any rank starts: SetupError (one line, exit 2) when this machine cannot
        run ``world_size`` ranks of TE (no GPU, a GPU without FP8; more ranks than GPUs share them)."""
        reason = gpus.world_refusal(world_size, gpus.visible_gpus(), self.name)
        if reason is not None:
            raise SetupError(reason)

    def gpu_count(self) -> int:
        """The GPUs this process's ranks may use (NVML; ``CUDA_VISIBLE_DEVICES`` honoured). Read by
        ``stress --groups``, which places each rank group on GPUs of its own."""
        return len(gpus.visible_gpus())

    def _wait(self, device: torch.device, what: str) -> None:
        gpu_wait.wait_for_gpu(device, self._deadline_s, what, ub_progress.PROGRESS.pending)

    # --- building ---------------------------------------------------------------------------
    def build(self, spec: ModelSpec, ctx: BuildContext):
        placed = placement(ctx.world_size)
        if spec.userbuffers:
            reason = (ub_cases.decline_reason(spec) or ub_cases.shape_reason(spec.dims, ctx.world_size, spec.overlap)
                      or ub_cases.shared_gpu_reason(placed, spec.overlap))
        else:
            reason = _cases.decline_reason(spec) or _cases.shape_reason(spec.dims)
        if reason is not None:
            raise _cases.DeclinedCase(reason)
        mods = self.te_mods()
        device = select_device(ctx.rank)
        self._device, self._deadline_s = device, ctx.deadline_s
        group = self._groups.for_group(ctx.group if ctx.world_size > 1 else None, placed.transport)
        # The buggy stack: each layer registers its weight's id at its first forward under
        # autocast (where pre-fix TE did); the cast hook is process-wide, so the construction
        # copy already runs it, and a reused id that a dead model registered completes a stale
        # set right there.
        if spec.userbuffers:
            ub = self.ub_mods()
            both = type(mods)(**vars(mods), ops=ub.ops)
            setup = ((lambda module, weight: id_hook.attach(module, mods.state_manager, weight=weight))
                     if self.buggy else None)
            model = _ub_model.build_model(spec, ctx, both, group, device, layer_setup=setup)
        else:
            setup = (lambda layer: id_hook.attach(layer, mods.state_manager)) if self.buggy else None
            model = _model.build_model(spec, ctx, mods, group, device, layer_setup=setup)
        self._wait(device, f"rank {ctx.rank}, building a model")
        return model

    # --- a step -----------------------------------------------------------------------------
    def forward_backward(self, model, inputs: torch.Tensor, grad_output: torch.Tensor) -> torch.Tensor:
        if isinstance(model, _ub_model.TEUbModel):
            return self._ub_forward_backward(model, inputs, grad_output)
        _cases.check_batch(model.dims, inputs.shape[0])
        out = _model.forward_backward(model, self.te_mods(), inputs, grad_output)
        self._wait(model.device, "a step (forward and backward)")
        return out.cpu()

    def _ub_forward_backward(self, model, inputs: torch.Tensor, grad_output: torch.Tensor) -> torch.Tensor:
        rows = model.world * inputs.shape[0] if model.layout == "column" else inputs.shape[0]
        reason = ub_cases.shape_reason(model.dims, model.world, model.overlap, batch=rows // model.world)
        if reason is not None:
            raise _cases.DeclinedCase(reason)
        if model.overlap:
            # Every rank reaches its model's first step together: initialize_ub is collective.
            self._ub.ensure(self.ub_mods().base, model.harness_group, (rows, model.dims[0]), model.world,
                            model.deadline_s)
        out = _ub_model.forward_backward(model, self.te_mods(), inputs, grad_output, ub_progress.PROGRESS)
        self._wait(model.device, f"rank {model.rank}, {model.where('forward and backward')}")
        model.steps += 1
        return out.detach().float().cpu()

    def snapshot(self, model) -> dict[str, RoleState]:
        return _snapshot.snapshot(model.layers, model.fp8_weights)

    def optimizer_step(self, model) -> None:
        if isinstance(model, _ub_model.TEUbModel):
            _ub_model.sgd_step(model)
            self._wait(model.device, f"rank {model.rank}, {model.where('optimizer step', model.steps - 1)}")
            return
        _model.sgd_step(model)
        self._wait(model.device, "an optimizer step")

    def final_weights(self, model) -> dict[str, RoleState]:
        return _snapshot.final_weights(model.layers, model.master, model.fp8_weights)

    # --- reference and cases ----------------------------------------------------------------
    def expected_model(self, case, run_seed: int, world_size: int, rank: int, model_index: int):
        return expected_model(case, run_seed, world_size, rank, model_index)

    def builtin_cases(self) -> list:
        return _cases.builtin_cases()

    def all_cases(self) -> list:
        """What a ``--cases`` selection chooses from: the catalogue and the Userbuffers family."""
        return _cases.builtin_cases() + ub_cases.builtin_cases()

    # --- lifetime and registries ------------------------------------------------------------
    def reuse_targets(self, model) -> list:
        """Every FP8 weight's ``_data``: what the pre-fix hook keys on (``id(weight._data)``)."""
        return list(model.weight_data)

    def model_objects(self, model) -> list:
        if isinstance(model, _ub_model.TEUbModel):
            ops = [model.linear] + ([model.bias] if model.bias is not None else [])
            return [model, model.module, *ops, model.linear.weight, *model.weight_data]
        return [model, model.module, *model.layers, *(layer.weight for layer in model.layers), *model.weight_data]

    def destroy(self, model) -> None:
        # TE's kernels run asynchronously: an error of this model's last kernels surfaces here,
        # inside its case, not in the next one. The Userbuffers communicators are the process's
        # (shared by every model, as in TE's test): reset() releases them.
        self._wait(model.device, "destroying a model")

    def registries(self) -> dict:
        regs = global_state.registries(self.te_mods().state_manager)
        if self.buggy:
            regs.update(id_hook.registries())
        return regs

    def reset(self) -> None:
        """TE's global FP8 state, the buggy hook's maps, and the Userbuffers communicators.

        The communicators are released only with the GPU idle: their counters may be out of step
        after a failed case, and freeing buffers under a running kernel faults the GPU. A rank
        whose GPU still waits :data:`RESET_WAIT_S` after its case ended waits for a peer that
        moved on: it cannot continue, and says so (the runner starts new processes).
        """
        if self._device is not None:
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(self._device))
            if not gpu_wait.idle_within(event, RESET_WAIT_S):
                pending = "; ".join(ub_progress.PROGRESS.pending()) or "a collective (no Userbuffers exchange pending)"
                raise SetupError(f"--sut {self.name}: rank's GPU still busy {RESET_WAIT_S:g} s after its case ended "
                                 f"({pending}); its communicators cannot be released in this process")
            if self._ub.live:
                self._ub.destroy(self.ub_mods().base)
        global_state.reset(self.te_mods().state_manager)
        if self.buggy:
            id_hook.reset()


def expected_model(case, run_seed: int, world_size: int, rank: int, model_index: int):
    """What TE 2.x must reproduce bit for bit: the ``te.Linear`` cases' restricted reference
    (:func:`harness.stacks.te_common.compared.expected_model`), and for the Userbuffers family the
    tensor-parallel reference on data rounded to TE's activation dtype, restricted alike."""
    if case.model.userbuffers:
        from harness.reference.tensor_parallel import expected_tp_model

        full = expected_tp_model(case, run_seed, world_size, rank, model_index, data_dtype=ACT_DTYPE)
        return _compared.restricted(full, case)
    return _compared.expected_model(case, run_seed, world_size, rank, model_index)


def load(inject: str | None = None) -> TEStack:
    """The TE stack (``--sut te``), optionally with the pre-fix hook (``--inject id-hook``).

    Sets ``CUDA_DEVICE_MAX_CONNECTIONS=1`` unless it is set: TE's Userbuffers test runs with it,
    and it must be in place before CUDA starts (ranks inherit it from the process that loads
    the stack first).
    """
    _require_and_configure("te")
    return TEStack(inject)


def _require_and_configure(sut: str) -> None:
    availability.require(sut)
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")


def load_buggy(inject: str | None = None) -> TEStack:
    """``--sut te-buggy``: the TE stack with the pre-fix id-keyed post-cast hook put back
    (``--inject id-hook`` says the same; any other injection is refused)."""
    _require_and_configure("te-buggy")
    return TEStack(inject or "id-hook")
