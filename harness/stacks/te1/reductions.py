"""Every call of TE 1.x's amax reduction, recorded: in the rank's collective ledger, and for the
live model's FP8 weights, with their state before and after (the records :mod:`.moments` checks).

:func:`install` wraps ``FP8GlobalStateManager.reduce_and_update_fp8_tensors`` (a classmethod,
read at tags v1.12 and v1.13: ``(forward=True, fp8_weights=False)`` in v1.12, ``(forward=True)``
in v1.13), which every reduction goes through: ``fp8_autocast_exit`` calls it as
``cls.reduce_and_update_fp8_tensors``, the modules' backward and v1.12's
``post_optimizer_step_fwd_amax_reduction`` as ``FP8GlobalStateManager.reduce_and_update_fp8_tensors``;
both look the attribute up at each call. Each call

* goes into the rank's collective ledger (:meth:`harness.collectives.ledger.Ledger.record_call`)
  as ``te.reduce_and_update_fp8_tensors(forward=..., fp8_weights=...) model M, step T, <phase>``
  (or ``while model M was built``) with its call sites, even
  at world size 1 where TE issues no ``all_reduce``: an extra reduction fired by a reused id is a
  reduction point the isolated run has not, and the isolation oracle names it;
* for a forward reduction while a model with FP8 weights is live, records each weight's history
  and scale (``fp8_meta["scaling_fwd"]``, slot 1) before and after, with the moment
  (:func:`harness.stacks.te1.moments.classify`: the calling function, and the phase the stack
  said it was in), and, where the ranks reduced, the weight's amax as the reduction returned it.

The reduced amax: TE concatenates the first history row of every module registered under a
buffer key (``torch.cat(amax_buffer)``) and hands the result to the static
``FP8GlobalStateManager.reduce_tensor_across_group_op_max(tensor, group)``, an in-place
``all_reduce(MAX)`` (tags v1.12 and v1.13). :meth:`ReductionRecorder.install` wraps that too;
during a recorded forward reduction each call's rows (the caller's ``amax_buffer``, read from its
frame) and the reduced tensor are kept, and a weight's value is found at its module's row (by
storage address: the row is a view of the module's history) plus the weight's slot.

This module is the harness's machinery (``__harness_hidden__``): its frame is never a call site.
"""

from __future__ import annotations

import sys

import torch

from harness.collectives.ledger import LEDGER
from harness.stacks.te1.moments import Moment, Phase, WeightRecord, WeightState, classify

__harness_hidden__ = True

WEIGHT_SLOT = 1          # tex.FP8FwdTensors.GEMM1_WEIGHT
METHOD = "reduce_and_update_fp8_tensors"
REDUCE = "reduce_tensor_across_group_op_max"
ROWS_LOCAL = "amax_buffer"      # the caller's list of history rows, concatenated into the reduced tensor


def reduced_amax(layer, reductions) -> "torch.Tensor | None":
    """The weight's amax in the reductions ``[(rows, reduced tensor), ...]`` of one call, or None
    when its module's row was in none of them."""
    address = layer.fp8_meta["scaling_fwd"].amax_history.data_ptr()
    for rows, reduced in reductions:
        offset = 0
        for row in rows:
            if row.data_ptr() == address:
                return reduced.reshape(-1)[offset + WEIGHT_SLOT].detach().to("cpu", copy=True).reshape(())
            offset += row.numel()
    return None


def weight_state(layer) -> WeightState:
    """A layer's weight slot: history (1-D) and scale (0-dim), copied to the CPU."""
    meta = layer.fp8_meta["scaling_fwd"]
    return WeightState(meta.amax_history[:, WEIGHT_SLOT].detach().to("cpu", copy=True),
                       meta.scale[WEIGHT_SLOT].detach().to("cpu", copy=True).reshape(()))


class ReductionRecorder:
    """What the stack tells it (the live model, the phase, the step, the weights re-cast so far)
    and what it records. One per stack; the stack's calls set the fields."""

    def __init__(self):
        self.model = None            # the live model with FP8 weights, or None
        self.phase = Phase.IDLE
        self.step = -1
        self.recast = 0
        self.model_index = -1        # the case's model being built or stepped, counted from 0
        self._case_entries = None    # the ledger's entry list of the case the count belongs to
        self._installed = None       # (state manager, original classmethod, original staticmethod or None)
        self._reductions = None      # during a recorded forward reduction: [(rows, reduced tensor)]

    def new_model(self) -> None:
        """A model is being built: counted within the ledger's case (a new case starts at 0)."""
        if self._case_entries is not LEDGER.entries:
            self._case_entries, self.model_index = LEDGER.entries, -1
        self.model_index += 1

    def where(self) -> str:
        """The model, step and phase of a reduction, as its ledger entry names them."""
        if self.phase is Phase.IDLE:
            return "outside the model's calls"
        if self.phase is Phase.BUILD:
            return f"while model {self.model_index} was built"
        return f"model {self.model_index}, step {self.step}, {self.phase.value}"

    def install(self, state_manager) -> None:
        """Wrap the state manager's reduction (idempotent)."""
        if self._installed is not None:
            return
        original = state_manager.__dict__[METHOD]
        function = original.__func__ if isinstance(original, classmethod) else original
        recorder = self

        def reduce_and_update_fp8_tensors(cls, *args, **kwargs):
            caller = sys._getframe(1).f_code.co_name
            return recorder.on_call(caller, args, kwargs, lambda: function(cls, *args, **kwargs))

        setattr(state_manager, METHOD, classmethod(reduce_and_update_fp8_tensors))
        original_reduce = state_manager.__dict__.get(REDUCE)
        if original_reduce is not None:
            reduce = original_reduce.__func__ if isinstance(original_reduce, staticmethod) else original_reduce

            def reduce_tensor_across_group_op_max(tensor, group):
                rows = sys._getframe(1).f_locals.get(ROWS_LOCAL)
                reduce(tensor, group)
                recorder.on_reduced(rows, tensor)

            setattr(state_manager, REDUCE, staticmethod(reduce_tensor_across_group_op_max))
        self._installed = (state_manager, original, original_reduce)

    def uninstall(self) -> None:
        if self._installed is not None:
            state_manager, original, original_reduce = self._installed
            setattr(state_manager, METHOD, original)
            if original_reduce is not None:
                setattr(state_manager, REDUCE, original_reduce)
            self._installed = None

    def on_reduced(self, rows, reduced) -> None:
        """One reduction over the ranks inside a recorded call: its rows and the reduced tensor."""
        if self._reductions is not None and isinstance(rows, (list, tuple)):
            self._reductions.append((list(rows), reduced))

    def on_call(self, caller: str, args: tuple, kwargs: dict, call):
        forward = bool(kwargs.get("forward", args[0] if args else True))
        fp8_weights = kwargs.get("fp8_weights", args[1] if len(args) > 1 else None)
        flags = f"forward={forward}" + (f", fp8_weights={bool(fp8_weights)}" if fp8_weights is not None else "")
        what = f"te.{METHOD}({flags}) {self.where()}"
        LEDGER.record_call(what, reduce="MAX")
        with LEDGER.during(what):
            return self._recorded(forward, caller, call)

    def _recorded(self, forward: bool, caller: str, call):
        model = self.model
        if not forward or model is None:
            return call()
        moment = classify(caller, self.phase, self.recast, len(model.layers))
        before = [weight_state(layer) for layer in model.layers]
        self._reductions = []
        try:
            out = call()
            reductions = self._reductions
        finally:
            self._reductions = None
        for i, layer in enumerate(model.layers):
            model.records.append(WeightRecord(f"layer{i}.weight", self.step, moment, before[i], weight_state(layer),
                                              reduced_amax(layer, reductions)))
        return out

    def observe(self, model, step: int) -> None:
        """A record of every weight without a reduction (the end of an optimizer step)."""
        for i, layer in enumerate(model.layers):
            state = weight_state(layer)
            model.records.append(WeightRecord(f"layer{i}.weight", step, Moment.OBSERVED, state, state))
