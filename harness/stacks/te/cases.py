"""TE's case catalogue: the built-in cases in shapes TE's FP8 GEMMs accept, and what it declines.

TE runs its GEMMs through cuBLASLt, whose FP8 GEMMs need every leading dimension a multiple of
16 (TE checks and raises "Caller must pad"); the weight-gradient GEMM's inner dimension is the
batch. So the catalogue is :func:`harness.case.catalog.builtin_cases` with the batch and every
layer width rounded up to a multiple of 16, names unchanged (``reproduce:`` lines replay the
same shapes, since ``--sut te`` selects from this catalogue), less what this adapter declines:

* ``construction="init_cast"``: ``te.Linear`` records the amax of its construction cast in
  the weight's history, and so does TE 2.x's operation-based ``BasicLinear`` (its weight
  quantizer's amax is row 0 of that history); the reference's init-cast path is a cast with
  a dummy amax, which neither takes;
* the E5M2 format: TE's ``DelayedScaling`` refuses pure E5M2 training;
* bias and scalings other than delayed scaling: the delayed-scaling reference has neither.

A case file may still ask for any of these; the build then fails with the reason. The
Userbuffers family (``userbuffers=true``) is built from TE's fusible ops, in its own shapes
(:mod:`harness.stacks.te.ub_cases`).
"""

from __future__ import annotations

import dataclasses

from harness.case.catalog import builtin_cases as catalogue_cases
from harness.case.spec import CaseSpec
from harness.fp8.recipe import Format
from harness.stacks.protocol import ModelSpec

GEMM_MULTIPLE = 16


class DeclinedCase(ValueError):
    """A case this adapter does not run, with the reason."""


def decline_reason(spec: ModelSpec) -> str | None:
    """Why ``--sut te`` does not build this spec as ``te.Linear`` layers (shapes aside), or None."""
    if spec.construction == "init_cast":
        return ("--sut te builds te.Linear, which records its construction cast's amax; the init_cast path "
                "(a cast with a dummy amax) is not what TE 2.x's layers do: use construction=copy")
    if spec.recipe.fp8_format is Format.E5M2:
        return "--sut te: TE's DelayedScaling refuses the E5M2 format (no pure E5M2 training)"
    if spec.bias:
        return "--sut te builds layers without bias (the delayed-scaling reference has none)"
    if spec.scaling != "delayed":
        return f"--sut te runs delayed scaling only, not scaling={spec.scaling!r}"
    return None


def shape_reason(dims, batch: int | None = None) -> str | None:
    """Why TE's FP8 GEMMs would refuse these widths (or this batch), or None."""
    sizes = list(dims) + ([batch] if batch is not None else [])
    if any(d % GEMM_MULTIPLE for d in sizes):
        what = f"dims {list(dims)}" + (f", batch {batch}" if batch is not None else "")
        return (f"--sut te: TE's FP8 GEMMs need the batch and every width a multiple of {GEMM_MULTIPLE} "
                f"(cuBLASLt leading dimensions); got {what}")
    return None


def check_model(spec: ModelSpec) -> None:
    """Raise :class:`DeclinedCase` for a model this adapter does not build."""
    reason = decline_reason(spec) or shape_reason(spec.dims)
    if reason is not None:
        raise DeclinedCase(reason)


def check_batch(dims, batch: int) -> None:
    """Raise :class:`DeclinedCase` for a step whose batch TE's FP8 GEMMs refuse."""
    reason = shape_reason(dims, batch)
    if reason is not None:
        raise DeclinedCase(reason)


def _round_up(n: int) -> int:
    return -(-n // GEMM_MULTIPLE) * GEMM_MULTIPLE


def fit_shapes(case: CaseSpec) -> CaseSpec:
    """The case with its batch and widths rounded up to multiples of 16 (itself when they are)."""
    dims = tuple(_round_up(d) for d in case.model.dims)
    batch = _round_up(case.batch)
    if dims == case.model.dims and batch == case.batch:
        return case
    return dataclasses.replace(case, batch=batch, model=dataclasses.replace(case.model, dims=dims))


def declined_cases() -> dict[str, str]:
    """Catalogue case name -> why ``--sut te`` leaves it out (Userbuffers: ``ub_cases.declined_cases``)."""
    return {case.name: reason for case in catalogue_cases()
            if (reason := decline_reason(case.model)) is not None}


def builtin_cases() -> list[CaseSpec]:
    """The cases ``--sut te`` runs: the catalogue less what it declines, shapes fitted to TE."""
    return [fit_shapes(case) for case in catalogue_cases() if decline_reason(case.model) is None]
