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
* bias (but on Userbuffers layers) and scalings other than delayed scaling: the delayed-scaling
  reference has neither.

The Userbuffers family (``userbuffers=true``) is built from TE's fusible ops, in its own shapes
(:mod:`harness.stacks.te.ub_cases`). All of it is one declaration
(:data:`harness.stacks.te.declaration.CAPABILITIES`, from :data:`FIELDS` here), which the runners
and stress read: a case file that asks for anything else gets the case ``skipped`` with the
reason, and the build refuses the same.
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

LINEAR_BIAS = ("bias=true without userbuffers: te.Linear layers are built without bias (the delayed-scaling "
               "reference has none)")


# What --sut te and --sut te-buggy run, field by field; harness.stacks.te.declaration adds what
# fields cannot say (bias only on Userbuffers layers, the Userbuffers shapes) and is what the
# runners and stress read. The build refuses the same (one place to change).
FIELDS = Capabilities(
    formats=(Format.HYBRID, Format.E4M3),
    scalings=("delayed",),
    constructions=(Construction.COPY,),
    dim_multiple=GEMM_MULTIPLE,
    batch_multiple=GEMM_MULTIPLE,
    why={
        "scaling": "this adapter runs TE's DelayedScaling recipe, the one the reference models",
        "format": "TE's DelayedScaling refuses the E5M2 format (no pure E5M2 training)",
        "construction": ("te.Linear, and TE 2.x's operation-based BasicLinear of the Userbuffers cases, record "
                         "their construction cast's amax in the weight's history; the init_cast path is a cast "
                         "with a dummy amax, which neither takes: use construction=copy"),
        "dims": "TE's FP8 GEMMs (cuBLASLt) need every leading dimension a multiple of 16",
        "batch": "the weight-gradient GEMM's inner dimension is the batch, and TE's FP8 GEMMs need it a multiple of 16",
    },
)


class DeclinedCase(ValueError):
    """A case this adapter does not run, with the reason."""


def decline_reason(spec: ModelSpec) -> str | None:
    """Why ``--sut te`` does not build this spec as ``te.Linear`` layers (shapes aside), or None."""
    reason = model_declined_reason(FIELDS, spec) or (LINEAR_BIAS if spec.bias else None)
    return PREFIX + reason if reason else None


def shape_reason(dims, batch: int | None = None) -> str | None:
    """Why TE's FP8 GEMMs would refuse these widths (or this batch), or None."""
    reason = shape_declined_reason(FIELDS, dims, batch)
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


def _linear_cases() -> list[CaseSpec]:
    """The catalogue's cases of ``te.Linear`` layers: every built-in case but the emulated
    Userbuffers family, whose TE counterpart (:mod:`.ub_cases`) has shapes of its own."""
    return [case for case in catalogue_cases() if not case.model.userbuffers]


def declined_cases() -> dict[str, str]:
    """Catalogue case name -> why ``--sut te`` leaves it out (Userbuffers: ``ub_cases.declined_cases``)."""
    return {case.name: reason for case in _linear_cases() if (reason := decline_reason(case.model)) is not None}


def builtin_cases() -> list[CaseSpec]:
    """The cases ``--sut te`` runs: the catalogue less what it declines, shapes fitted to TE. The
    Userbuffers family (two GPUs at least) is chosen with ``--cases userbuffers``."""
    return [fit_shapes(case) for case in _linear_cases() if decline_reason(case.model) is None]
