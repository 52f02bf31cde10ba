"""The stateless reference: what every FP8 tensor must hold after every step.

:func:`expected_model` is the entry point: a Userbuffers case's tensor-parallel layer
(:mod:`harness.reference.tensor_parallel`) or a data-parallel stack of layers
(:mod:`harness.reference.delayed`), both on the per-role metas of :mod:`harness.reference.meta`.
"""

from __future__ import annotations

from harness.case.spec import CaseSpec
from harness.reference.delayed import expected_dp_model
from harness.reference.meta import ExpectedModel
from harness.reference.tensor_parallel import expected_tp_model


def expected_model(case: CaseSpec, run_seed: int, world_size: int, rank: int, model_index: int) -> ExpectedModel:
    """Rank ``rank``'s expected FP8 states of model ``model_index`` of ``case``, after every step."""
    build = expected_tp_model if case.model.userbuffers else expected_dp_model
    return build(case, run_seed, world_size, rank, model_index)


__all__ = ["ExpectedModel", "expected_model"]
