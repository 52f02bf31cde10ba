"""TE 1.x's case catalogue and declaration: the TE catalogue's cases TE 1.x runs, and why it declines the rest.

The TE 2.x catalogue's shapes hold for TE 1.x (cuBLASLt's FP8 GEMMs want every leading dimension,
and the batch, a multiple of 16): :func:`builtin_cases` is the built-in catalogue's cases of
``te.Linear`` layers with their shapes fitted by :func:`harness.stacks.te.cases.fit_shapes`. What
differs from TE 2.x (:data:`harness.stacks.te.cases.FIELDS`):

* ``construction="init_cast"`` runs: TE 1.x's construction cast passes a dummy amax
  (``reset_parameters``, tags v1.12 and v1.13), so it records nothing in the weight's history,
  which is what the reference's init-cast path models;
* no Userbuffers: the TE 1.x stack has not been built for TE 1.x's Userbuffers
  (``initialize_ub`` with ``te.Linear``'s ``ub_overlap_*``), so those cases are declined with the
  reason; the E5M2 format, scalings other than delayed, and bias are declined as for TE 2.x. Any
  world size runs: ranks beyond the GPUs share them and TE reduces over gloo
  (:mod:`harness.stacks.te_common.placement`).

:data:`CAPABILITIES` is what the runners and stress read; the build refuses the same through
:func:`decline_reason` (one declaration). Plain Python: nothing here imports TE.
"""

from __future__ import annotations

import dataclasses

from harness.case.catalog import builtin_cases as catalogue_cases
from harness.case.spec import CaseSpec
from harness.stacks.capabilities import Construction, model_declined_reason, shape_declined_reason
from harness.stacks.te import cases as te_cases
from harness.stacks.te import ub_cases as te_ub_cases

PREFIX = "--sut te1 declines this case: "
LINEAR_BIAS = "bias=true: te.Linear layers are built without bias (the delayed-scaling reference has none)"

FIELDS = dataclasses.replace(
    te_cases.FIELDS,
    constructions=(Construction.COPY, Construction.INIT_CAST),
    userbuffers=(False,),
    why={**{check: text for check, text in te_cases.FIELDS.why.items() if check != "construction"},
         "userbuffers": ("the TE 1.x stack does not run TE 1.x's Userbuffers (comm-GEMM overlap of "
                         "te.Linear's ub_overlap_* with initialize_ub); --sut te runs them on TE 2.x")},
)


def joint_reason(case, world_size: int | None) -> str | None:
    """What the fields cannot say: bias on ``te.Linear`` layers."""
    return LINEAR_BIAS if case.model.bias else None


CAPABILITIES = dataclasses.replace(FIELDS, declines=joint_reason)


def decline_reason(spec) -> str | None:
    """Why ``--sut te1`` does not build this model spec (shapes aside), or None."""
    reason = model_declined_reason(FIELDS, spec) or (LINEAR_BIAS if spec.bias else None)
    return PREFIX + reason if reason else None


def shape_reason(dims, batch: int | None = None) -> str | None:
    """Why TE's FP8 GEMMs would refuse these widths (or this batch), or None."""
    reason = shape_declined_reason(FIELDS, dims, batch)
    return PREFIX + reason if reason else None


def _linear_cases() -> list[CaseSpec]:
    return [case for case in catalogue_cases() if not case.model.userbuffers]


def declined_cases() -> dict[str, str]:
    """Catalogue case name -> why ``--sut te1`` leaves it out."""
    return {case.name: reason for case in _linear_cases() if (reason := decline_reason(case.model)) is not None}


def builtin_cases() -> list[CaseSpec]:
    """The cases ``--sut te1`` runs: the catalogue's ``te.Linear`` cases it does not decline, shapes fitted."""
    return [te_cases.fit_shapes(case) for case in _linear_cases() if decline_reason(case.model) is None]


def all_cases() -> list[CaseSpec]:
    """What a ``--cases`` selection chooses from: also the Userbuffers family, which is declined
    with its reason (so a selection naming it reports it skipped rather than unknown)."""
    return builtin_cases() + te_ub_cases.builtin_cases()
