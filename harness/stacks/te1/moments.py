"""When a TE 1.x release may update an FP8 weight's scale, and the check that it updated it only then.

Pure functions and plain data: nothing here imports Transformer Engine. The stack
(:mod:`.reductions`) records, at every call of ``FP8GlobalStateManager.reduce_and_update_fp8_tensors``
and at the end of every optimizer step, each live FP8 weight's amax history and scale;
:func:`check_weight_updates` replays those records and is what the ``reference`` oracle reports.

The moments, read in the releases' sources (``transformer_engine/pytorch/fp8.py`` and
``transformer_engine/pytorch/tensor/float8_tensor.py``, tags v1.12 and v1.13):

* v1.12 and v1.13: ``fp8_autocast_exit`` reduces and updates every forward amax buffer at the
  exit of the outermost autocast (v1.12 passes ``fp8_weights=False``, which skips no buffer);
  the weight's slot (``scaling_fwd``, index 1) is updated there from the amax its last cast wrote
  into row 0 of its history;
* v1.12 only (TE PR #575): ``Float8Tensor.quantize_`` ends with
  ``post_optimizer_step_fwd_amax_reduction``, which adds ``id(param._data)`` to
  ``updated_fp8_params[autocast key]`` and, once that set equals
  ``FP8GlobalStateManager.autocast_to_fp8_params[autocast key]``, calls
  ``reduce_and_update_fp8_tensors(forward=True, fp8_weights=True)``. Its purpose is a weight
  update right after the optimizer step, once every weight registered under the key was
  re-cast: that is the moment the release defines (:attr:`Moment.AFTER_OPTIMIZER_STEP`). v1.13
  (TE PR #1326) deleted the hook and the two maps.

The same hook firing while a model is built (its construction cast or a copy into its weight),
or in the middle of an optimizer step before every weight of the model was re-cast, completes a
set that holds dead weights' ids: a moment neither release defines. So does any forward
reduction outside these calls. Backward reductions never touch a weight's slot.

:func:`check_weight_updates` folds the records of one model, weight by weight: between two
records only row 0 of a history may change (a cast records its amax there) and its length (TE
truncates or zero-pads a history when the autocast's recipe has another length,
``adjust_amax_history_length``); at a defined moment the weight's history and scale must equal
the delayed-scaling update (:func:`harness.fp8.scaling.delayed_scaling_update`) of what it held
before, with the reduced amax as the amax: what the ranks' ``all_reduce(MAX)`` gave for that weight
(:attr:`WeightRecord.reduced`, captured by the stack), or the recorded row 0 where no reduction
over ranks ran (world size 1, or a recipe with ``reduce_amax`` off); at any other moment they
must not change. The first difference is returned, naming the tensor, the step
and the moment, with the first differing element's index, values and bit patterns.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Optional, Sequence

import torch

from harness.fp8.bits import first_bit_mismatch
from harness.fp8.formats import Fp8Format
from harness.fp8.recipe import DelayedScalingRecipe
from harness.fp8.scaling import delayed_scaling_update


class Phase(enum.Enum):
    """Where in a model's life the stack is when a reduction runs (set by the stack)."""

    BUILD = "while the model was built"
    STEP = "in forward and backward"
    OPTIMIZER = "in the optimizer step"
    IDLE = "outside the model's calls"


class Moment(enum.Enum):
    """Why a forward reduction ran, as the stack saw it."""

    AUTOCAST_EXIT = "autocast exit"
    AFTER_OPTIMIZER_STEP = "post-cast hook after every weight of the model was re-cast in the optimizer step"
    HOOK_DURING_OPTIMIZER_STEP = "post-cast hook before every weight of the model was re-cast in the optimizer step"
    HOOK_DURING_BUILD = "post-cast hook while the model was built"
    HOOK_ELSEWHERE = "post-cast hook outside the model's calls"
    OTHER = "forward reduction from an unexpected caller"
    OBSERVED = "end of the optimizer step"         # a record without a reduction


HOOK_CALLER = "post_optimizer_step_fwd_amax_reduction"
EXIT_CALLER = "fp8_autocast_exit"


def classify(caller: str, phase: Phase, recast: int, weights: int) -> Moment:
    """The moment of a forward reduction called from function ``caller`` during ``phase``.

    ``recast``: how many of the model's ``weights`` the optimizer step had re-cast when the call
    came (the cast under way included); only meaningful in :attr:`Phase.OPTIMIZER`.
    """
    if caller == EXIT_CALLER:
        return Moment.AUTOCAST_EXIT if phase is Phase.STEP else Moment.OTHER
    if caller == HOOK_CALLER:
        if phase is Phase.OPTIMIZER:
            return Moment.AFTER_OPTIMIZER_STEP if recast >= weights else Moment.HOOK_DURING_OPTIMIZER_STEP
        if phase is Phase.BUILD:
            return Moment.HOOK_DURING_BUILD
        return Moment.HOOK_ELSEWHERE
    return Moment.OTHER


class ReleaseLine(enum.Enum):
    """The two schedules of TE 1.x weight updates: before PR #1326 and after it."""

    HOOK = "1.12"        # TE 1.12 and earlier 1.x with PR #575's hook
    EXIT_ONLY = "1.13"   # TE 1.13 and later 1.x

    @classmethod
    def of_version(cls, version: str) -> "ReleaseLine":
        """The line of a version string such as ``1.12.0`` or ``1.13.0+abc``; ValueError otherwise."""
        parts = version.split("+")[0].split(".")
        try:
            major, minor = int(parts[0]), int(parts[1])
        except (IndexError, ValueError):
            raise ValueError(f"not a TE version: {version!r}") from None
        if major != 1:
            raise ValueError(f"TE {version} is not a 1.x release")
        return cls.HOOK if minor <= 12 else cls.EXIT_ONLY

    def defined_moments(self) -> frozenset:
        """The moments at which this line's own code updates a weight's scale."""
        if self is ReleaseLine.HOOK:
            return frozenset({Moment.AUTOCAST_EXIT, Moment.AFTER_OPTIMIZER_STEP})
        return frozenset({Moment.AUTOCAST_EXIT})


@dataclasses.dataclass(frozen=True)
class WeightState:
    """One weight slot's amax history (1-D float32) and scale (0-dim float32), on the CPU."""

    history: torch.Tensor
    scale: torch.Tensor


@dataclasses.dataclass(frozen=True)
class WeightRecord:
    """What the stack recorded of one FP8 weight at one moment.

    ``before`` is the state when the reduction was called (row 0: the amax its casts recorded),
    ``after`` the state when it returned; for :attr:`Moment.OBSERVED` both are the same state.
    ``reduced`` is this weight's amax as the ranks' MAX reduction returned it (0-dim), or None
    where no reduction over ranks ran.
    """

    tensor: str              # "layer{i}.weight"
    step: int                # the step whose forward, backward or optimizer step it was in (-1: build)
    moment: Moment
    before: WeightState
    after: WeightState
    reduced: Optional[torch.Tensor] = None


def resized(history: torch.Tensor, length: int) -> torch.Tensor:
    """TE's ``adjust_amax_history_length``: the first ``length`` rows, or zero rows appended."""
    if history.shape[0] >= length:
        return history[:length].clone()
    return torch.cat([history, torch.zeros(length - history.shape[0], dtype=history.dtype)])


def _where(record: WeightRecord) -> str:
    step = "while the model was built" if record.step < 0 else f"at step {record.step}"
    return f"{record.tensor} {step}, {record.moment.value}"


def _mismatch(expected: WeightState, actual: WeightState, what: str) -> Optional[str]:
    for field in ("history", "scale"):
        found = first_bit_mismatch(getattr(expected, field), getattr(actual, field), f"{what} {field}")
        if found is not None:
            return str(found)
    return None


def check_weight_updates(records: Sequence[WeightRecord], recipe: DelayedScalingRecipe, fmt: Fp8Format,
                         defined: frozenset) -> Optional[str]:
    """None when every recorded weight changed only as ``defined`` moments allow; else the first
    difference (tensor, step, moment, element). ``records`` are in the order they were taken."""
    expected: dict[str, WeightState] = {}
    for record in records:
        where = _where(record)
        before = record.before
        prior = expected.get(record.tensor)
        if prior is not None:
            history = resized(prior.history, before.history.shape[0])
            history[0] = before.history[0]          # the amax the casts recorded since: taken as given
            carried = WeightState(history, prior.scale)
            found = _mismatch(carried, before, "changed since the last record, before")
            if found is not None:
                return f"{where}: updated at a moment no record saw: {found}"
        state = before
        if record.moment is Moment.OBSERVED:
            expected[record.tensor] = state
            continue
        if record.moment in defined:
            amax = record.reduced if record.reduced is not None else state.history[0]
            history, scale, _ = delayed_scaling_update(state.history, state.scale, amax, recipe, fmt)
            want = WeightState(history, scale)
            found = _mismatch(want, record.after, "after")
            if found is not None:
                return f"{where} (a moment this release defines): not the delayed-scaling update: {found}"
        else:
            found = _mismatch(state, record.after, "after")
            if found is not None:
                return f"{where}: scale updated at a moment this release does not define: {found}"
            want = state
        expected[record.tensor] = want
    return None
