"""``--sut torchao``: torchao's float8 training on CPU as a :class:`harness.stacks.protocol.Stack`.

``load()`` is what ``--sut torchao`` calls (``load(inject="id-hook")`` with ``--inject id-hook``).
torchao is imported there, and its absence is a :class:`SetupError` (exit 2, one line).

One step, as the harness calls it::

    forward_backward  output = model(x); output.backward(grad_output), with torchao's cast
                      function wrapped for the duration (harness.stacks.torchao.capture);
                      returns the output and each layer's weight gradient (compared bit for bit)
    snapshot          the step's casts, six per layer (three roles, three repeats)
    optimizer_step    gradient all-gather and rank-order sum (data-parallel), SGD written in place

The reference is :func:`harness.stacks.torchao.reference.expected_model` (dynamic scaling, not
TE's delayed scaling); the catalogue is :func:`harness.stacks.torchao.cases.builtin_cases`.
"""

from __future__ import annotations

import warnings

from harness.errors import SetupError, UsageError
from harness.stacks.protocol import BuildContext, ModelSpec, RoleState, StepOutputs
from harness.stacks.torchao import capture as _capture
from harness.stacks.torchao import cases as _cases
from harness.stacks.torchao import id_hook
from harness.stacks.torchao import model as _model
from harness.stacks.torchao import reference as _reference

INJECTIONS = ("id-hook",)


class TorchaoStack:
    """torchao's ``Float8Linear`` models; with ``inject="id-hook"``, plus :mod:`.id_hook`."""

    capabilities = _cases.CAPABILITIES
    # The process group it receives dies between cases (harness.runner.rank.group_death).
    renews_group = True

    def __init__(self, inject: str | None = None):
        if inject is not None and inject not in INJECTIONS:
            raise UsageError(f"--inject {inject!r}: --sut torchao knows {', '.join(INJECTIONS)}")
        self.inject = inject
        self.name = "torchao" if inject is None else f"torchao+{inject}"

    # --- building ---------------------------------------------------------------------------
    def build(self, spec: ModelSpec, ctx: BuildContext):
        post_write, setup = (), ()
        if self.inject == "id-hook":
            group = ctx.group if ctx.world_size > 1 else None
            key = id_hook.bookkeeping_key(("torchao", spec.scaling, "emulate"), group)
            post_write = (id_hook.after_weight_update,)
            setup = (lambda layer: id_hook.attach(layer, key, group),)
        return _model.build_model(spec, ctx, post_write_hooks=post_write, layer_setup=setup)

    # --- a step -----------------------------------------------------------------------------
    def forward_backward(self, model, inputs, grad_output):
        recorder = model.recorder
        recorder.begin_step()
        with _capture.intercepting(recorder), warnings.catch_warnings():
            # The full backward pre-hooks that attribute casts to layers fire on output gradients
            # alone (the input needs no gradient); torch warns about that on every backward.
            warnings.filterwarnings("ignore", message="Full backward hook is firing", category=UserWarning)
            output = model.module(inputs)
            output.backward(grad_output)
        recorder.end_step()
        # The input needs no gradient, so there is no grad_input; each layer's weight gradient
        # is this rank's own until optimizer_step sums them.
        grads = [layer.weight.grad for layer in model.module]
        return StepOutputs(output=output.detach(),
                           weight_grads=[None if g is None else g.detach() for g in grads])

    def snapshot(self, model) -> dict[str, RoleState]:
        return {key: RoleState(s.amax_history.clone(), s.scale.clone(), s.scale_inv.clone(), s.fp8_bytes.clone(),
                               s.fp8_scale_inv.clone())
                for key, s in model.recorder.casts.items()}

    def optimizer_step(self, model) -> None:
        _model.sgd_step(model)

    def final_weights(self, model) -> dict[str, RoleState]:
        import torch

        return {f"layer{i}.weight": RoleState(torch.zeros(0), torch.ones(()), torch.ones(()),
                                              layer.weight.detach().clone(), None)
                for i, layer in enumerate(model.module)}

    # --- reference and cases ----------------------------------------------------------------
    def expected_model(self, case, run_seed: int, world_size: int, rank: int, model_index: int):
        return _reference.expected_model(case, run_seed, world_size, rank, model_index)

    def builtin_cases(self) -> list:
        return _cases.builtin_cases()

    # --- lifetime and registries ------------------------------------------------------------
    def reuse_targets(self, model) -> list:
        """The weight Parameters: what the injected hook keys on (``id(layer.weight)``)."""
        return [layer.weight for layer in model.module]

    def model_objects(self, model) -> list:
        return [model, model.module, *model.module, *(layer.weight for layer in model.module)]

    def destroy(self, model) -> None:
        model.recorder.begin_step()     # drop the last step's casts; nothing else lives outside the model

    def registries(self) -> dict:
        from torchao.float8 import float8_ops, float8_utils

        regs = {
            "torchao.float8.float8_ops.FLOAT8_OPS_TABLE": float8_ops.FLOAT8_OPS_TABLE,
            "torchao.float8.float8_utils.FP8_TYPES": float8_utils.FP8_TYPES,
        }
        if self.inject == "id-hook":
            regs.update(id_hook.registries())
        return regs

    def reset(self) -> None:
        if self.inject == "id-hook":
            id_hook.reset()


def load(inject: str | None = None) -> TorchaoStack:
    """The torchao stack (``--sut torchao``), optionally with an injected bug (``--inject id-hook``)."""
    try:
        import torchao.float8  # noqa: F401
    except ImportError as exc:
        raise SetupError(f"--sut torchao needs torchao: pip install -e '.[torchao]' ({exc})") from None
    except Exception as exc:   # installed but broken (e.g. built for another torch)
        raise SetupError(f"--sut torchao: torchao is installed but does not import: "
                         f"{type(exc).__name__}: {exc}") from None
    _warm_imports()
    return TorchaoStack(inject)


def _warm_imports() -> None:
    """Import now what torchao's first ``convert_to_float8_training`` would import (inductor's
    Triton codegen, about 1 s), without running its patch.

    Runners load the stack before they fork the pristine process that isolated case runs start
    from; importing here means each isolated run does not pay the import again.
    """
    try:
        import torch._inductor.codegen.triton  # noqa: F401
    except Exception:
        pass
