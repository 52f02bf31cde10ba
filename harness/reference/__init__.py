"""The stateless reference: what every FP8 tensor must hold after every step.

:func:`expected_model` (one rank) and :func:`expected_models` (every rank at once) are the entry
points: a Userbuffers case's tensor-parallel layer
(:mod:`harness.reference.tensor_parallel`) or a data-parallel stack of layers
(:mod:`harness.reference.delayed`), both on the per-role metas of :mod:`harness.reference.meta`.
"""

from __future__ import annotations

from harness.case.spec import CaseSpec
from harness.reference.delayed import expected_dp_model, expected_dp_models
from harness.reference.meta import ExpectedModel
from harness.reference.tensor_parallel import expected_tp_model


def expected_model(case: CaseSpec, run_seed: int, world_size: int, rank: int, model_index: int) -> ExpectedModel:
    """Rank ``rank``'s expected FP8 states of model ``model_index`` of ``case``, after every step."""
    build = expected_tp_model if case.model.userbuffers else expected_dp_model
    return build(case, run_seed, world_size, rank, model_index)


def expected_models(case: CaseSpec, run_seed: int, world_size: int, model_index: int) -> list[ExpectedModel]:
    """Every rank's expected FP8 states of model ``model_index`` of ``case``, by rank: one simulation
    of the group for a data-parallel model (what the judge checks every rank against)."""
    if case.model.userbuffers:
        return [expected_tp_model(case, run_seed, world_size, r, model_index) for r in range(world_size)]
    return expected_dp_models(case, run_seed, world_size, model_index)


__all__ = ["ExpectedModel", "expected_model", "expected_models"]
