"""What ``--sut te`` and ``--sut te-buggy`` run: one declaration for the runners, stress and the build.

:data:`CAPABILITIES` is :data:`harness.stacks.te.cases.FIELDS` (formats, scaling, construction,
multiples of 16) plus what fields cannot say, :func:`joint_reason`: bias only on Userbuffers
layers, the Userbuffers family in its own shapes (:mod:`harness.stacks.te.ub_cases`), and not
where ranks share a GPU (:mod:`harness.stacks.te_common.placement`: TE's Userbuffers and its NCCL
tensor-parallel collectives need a GPU per rank). The build (:meth:`harness.stacks.te.stack.TEStack.build`) refuses a model through the same
functions. Plain Python: nothing here imports TE.
"""

from __future__ import annotations

import dataclasses

from harness.stacks.te import ub_cases
from harness.stacks.te.cases import FIELDS, LINEAR_BIAS
from harness.stacks.te_common.gpus import host_placement


def joint_reason(case, world_size: int | None) -> str | None:
    """Why TE declines ``case`` for a combination of fields, or None (``world_size`` None: unknown)."""
    model = case.model
    if not model.userbuffers:
        return LINEAR_BIAS if model.bias else None
    reason = ub_cases.decline_reason(model)
    if reason is None and world_size is not None:
        reason = ub_cases.shape_reason(model.dims, world_size, model.overlap)
    if reason is None and world_size is not None:
        reason = ub_cases.shared_gpu_reason(host_placement(world_size), model.overlap)
    return reason


CAPABILITIES = dataclasses.replace(FIELDS, declines=joint_reason)
