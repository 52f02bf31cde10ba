"""TE's case catalogue: the built-in cases in shapes TE's FP8 GEMMs accept, and what it declines.

TE runs its GEMMs through cuBLASLt, whose FP8 GEMMs need every leading dimension a multiple of
16 (TE checks and raises "Caller must pad"); the weight-gradient GEMM's inner dimension is the
batch. So the catalogue is :func:`harness.case.catalog.builtin_cases` with the batch and every
layer width rounded up to a multiple of 16, names unchanged (``reproduce:`` lines replay the
same shapes, since ``--sut te`` selects from this catalogue), less what this adapter declines:

* ``construction="init_cast"``: ``te.Linear`` records the amax of its construction cast in
  the weight's history; the reference's init-cast path is TE's operation-based Linear, which
  casts with a dummy amax, and this adapter does not build that one;
* the E5M2 format: TE's ``DelayedScaling`` refuses pure E5M2 training;
* Userbuffers-style tensor parallelism (``userbuffers=true``): TE's Userbuffers
  (``te.ops`` with ``initialize_ub``) are not wired into this adapter;
* bias and scalings other than delayed scaling: the delayed-scaling reference has neither.

All of it is :data:`CAPABILITIES`, the declaration the runners and stress read: a case file that
asks for any of these gets the case ``skipped`` with the reason, and the build refuses the same.
"""

from __future__ import annotations

import dataclasses

from harness.case.catalog import builtin_cases as catalogue_cases
from harness.case.spec import CaseSpec
from harness.fp8.recipe import Format
from harness.stacks.capabilities import Capabilities, Construction, model_declined_reason, shape_declined_reason
from harness.stacks.protocol import ModelSpec

GEMM_MULTIPLE = 16
PREFIX = "--sut te declines this case: "

# What --sut te and --sut te-buggy run: stress draws from it, the runners skip what it declines,
# and the build below refuses the same (one place to change).
CAPABILITIES = Capabilities(
    formats=(Format.HYBRID, Format.E4M3),
    scalings=("delayed",),
    constructions=(Construction.COPY,),
    bias=(False,),
    userbuffers=(False,),
    dim_multiple=GEMM_MULTIPLE,
    batch_multiple=GEMM_MULTIPLE,
    why={
        "userbuffers": "TE's Userbuffers (te.ops with initialize_ub) are not wired into this adapter",
        "scaling": "this adapter runs TE's DelayedScaling recipe, the one the reference models",
        "format": "TE's DelayedScaling refuses the E5M2 format (no pure E5M2 training)",
        "construction": ("te.Linear records its construction cast's amax; the init_cast path (a dummy amax) is "
                         "TE's operation-based Linear, which this adapter does not build: use construction=copy"),
        "bias": "this adapter builds layers without bias (the delayed-scaling reference has none)",
        "dims": "TE's FP8 GEMMs (cuBLASLt) need every leading dimension a multiple of 16",
        "batch": "the weight-gradient GEMM's inner dimension is the batch, and TE's FP8 GEMMs need it a multiple of 16",
    },
)


class DeclinedCase(ValueError):
    """A case this adapter does not run, with the reason."""


def decline_reason(spec: ModelSpec) -> str | None:
    """Why ``--sut te`` does not run a model of this spec (shapes aside), or None."""
    reason = model_declined_reason(CAPABILITIES, spec)
    return PREFIX + reason if reason else None


def shape_reason(dims, batch: int | None = None) -> str | None:
    """Why TE's FP8 GEMMs would refuse these widths (or this batch), or None."""
    reason = shape_declined_reason(CAPABILITIES, dims, batch)
    return PREFIX + reason if reason else None


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
    """Catalogue case name -> why ``--sut te`` leaves it out."""
    return {case.name: reason for case in catalogue_cases()
            if (reason := decline_reason(case.model)) is not None}


def builtin_cases() -> list[CaseSpec]:
    """The cases ``--sut te`` runs: the catalogue less what it declines, shapes fitted to TE."""
    return [fit_shapes(case) for case in catalogue_cases() if decline_reason(case.model) is None]
