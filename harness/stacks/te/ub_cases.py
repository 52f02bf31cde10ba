"""TE's Userbuffers cases: the ``userbuffers/...`` family in shapes TE's Userbuffers accept.

The family is :func:`harness.case.catalog.userbuffers_cases`, TE's own Userbuffers test in
cases: column- and row-parallel with sequence parallelism, with and without bias, weight
trained or frozen, FP8 weights made under TE's model-init context, two models built and
destroyed per case on the launch's shared communicators; plus one with overlap off (TE's
plain NCCL collectives). Names are kept, so ``--cases userbuffers`` selects them on
``--sut te`` as on the emulated stacks. Shapes are TE's:

* one square layer ``[H, H]`` (TE's Userbuffers buffer has one width for every communicator:
  its test uses ``in = out = hidden``), ``H`` = :data:`HIDDEN` = 128;
* :data:`BATCH` = 32 rows per rank, so the buffer is ``[32 * tp, 128]``.

TE's FP8 GEMMs need every dimension a multiple of 16, and the GEMMs TE cuts for the overlap
must be too: the ring exchange multiplies ``batch`` rows at a time, the pipelined
reduce-scatter splits the output features in 4, and each rank holds ``H / tp`` features of
the weight. 128 and 32 keep all of them at 16 or more up to 8 ranks.

Declined (the build says why when a case file asks for them):

* ``construction="init_cast"`` (``userbuffers/init-cast-margin3``): TE 2.x's ``BasicLinear``
  records its construction cast's amax (its weight quantizer's amax is row 0 of the weight's
  history), while the reference's init_cast path is a cast with a dummy amax;
* what :func:`harness.stacks.te.cases.decline_reason` declines for every TE case (E5M2, other
  scalings), and a group of one rank (no tensor parallelism to overlap);
* every case of the family where ranks share a GPU (:func:`shared_gpu_reason`).
"""

from __future__ import annotations

import dataclasses

from harness.case.catalog import userbuffers_cases as catalogue_ub_cases
from harness.case.model import TP_LAYOUTS
from harness.case.spec import CaseSpec
from harness.stacks.protocol import ModelSpec
from harness.stacks.te_common import placement as _placement

HIDDEN = 128
BATCH = 32
GEMM_MULTIPLE = 16
PIPELINE_SPLITS = 4          # TE's default num_splits for its pipelined reduce-scatter


def decline_reason(spec: ModelSpec) -> str | None:
    """Why ``--sut te`` does not run this Userbuffers model (shapes aside), or None."""
    from harness.stacks.te.cases import decline_reason as te_decline_reason

    if spec.construction == "init_cast":
        return ("--sut te builds Userbuffers layers with TE's BasicLinear, which records its construction "
                "cast's amax in the weight's history; the init_cast path (a dummy amax) is not what it does: "
                "use construction=copy")
    reason = te_decline_reason(dataclasses.replace(spec, userbuffers=False, bias=False))
    if reason is not None:
        return reason
    if spec.tp_layout not in TP_LAYOUTS:
        return f"--sut te: tp_layout {spec.tp_layout!r} is not column or row"
    return None


def shape_reason(dims, world_size: int, overlap: bool = True, batch: int | None = None) -> str | None:
    """Why TE's Userbuffers (or, overlap off, its FP8 GEMMs) refuse these shapes, or None.

    ``batch`` is the rows per rank of a step's input (unknown when the model is built).
    """
    if world_size < 2:
        return "--sut te: Userbuffers cases need a group of at least 2 ranks (tensor parallelism)"
    dims = list(dims)
    if len(dims) != 2 or dims[0] != dims[1]:
        return (f"--sut te: a Userbuffers case is one square layer, dims [H, H] (TE's buffer has one width "
                f"for every communicator); got dims {dims}")
    hidden = dims[0]
    checks = [(hidden % world_size == 0 and (hidden // world_size) % GEMM_MULTIPLE == 0,
               f"each rank's share of hidden {hidden} over {world_size} ranks")]
    if overlap:
        checks.append((hidden % (PIPELINE_SPLITS * GEMM_MULTIPLE) == 0,
                       f"hidden {hidden} in the {PIPELINE_SPLITS} splits of the pipelined reduce-scatter"))
    if batch is not None:
        checks.append((batch % GEMM_MULTIPLE == 0, f"batch {batch} per rank"))
    for ok, what in checks:
        if not ok:
            return (f"--sut te: TE's FP8 GEMMs (and the chunks its Userbuffers overlap cuts) need multiples of "
                    f"{GEMM_MULTIPLE}: {what} is not one")
    return None


def fit(case: CaseSpec) -> CaseSpec:
    """The case in TE's Userbuffers shapes (name kept)."""
    return dataclasses.replace(case, batch=BATCH, model=dataclasses.replace(case.model, dims=(HIDDEN, HIDDEN)))


def declined_cases() -> dict[str, str]:
    """Userbuffers case name -> why ``--sut te`` leaves it out."""
    return {c.name: reason for c in catalogue_ub_cases() if (reason := decline_reason(c.model)) is not None}


def builtin_cases() -> list[CaseSpec]:
    """The Userbuffers cases ``--sut te`` runs (selected with ``--cases userbuffers``)."""
    return [fit(c) for c in catalogue_ub_cases() if decline_reason(c.model) is None]


def shared_gpu_reason(placed, overlap: bool = True) -> str | None:
    """Why the family does not run where ranks share a GPU (``placed``: a
    :class:`~harness.stacks.te_common.placement.Placement`, None when unknown), or None."""
    if placed is None or not placed.shared:
        return None
    return (f"--sut te: {placed.local_ranks} ranks share {placed.gpus} GPU{'s' * (placed.gpus > 1)} here; "
            + _placement.shared_gpu_reason(overlap))
