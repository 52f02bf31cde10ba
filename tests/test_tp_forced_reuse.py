"""Forced id reuse in the tensor-parallel (Userbuffers) family of the plain run.

Known bad: ``tests/planted/tp_gemm_id_cache.py`` memoises the weight the TP layer's GEMMs
multiply by on the weight storage's id (and version), in an ``lru_cache`` no scan sees. Models
built in turn rarely take a dead weight's id by themselves; the Userbuffers cases that force
reuse (``userbuffers/reuse-*``) put every later model's weight on a dead one's address, so the
GEMM reads a dead model's weight and every such case fails, in every run.
"""

from __future__ import annotations

from tests.planted.runs import plain_selection


def _run(sut: str):
    return plain_selection(sut, "userbuffers")


def test_a_weight_cache_read_only_by_the_tp_gemm_is_caught_by_the_plain_run():
    report = _run("tests.planted.tp_gemm_id_cache:STACK")
    forced = {c.name: c for c in report.cases if c.name.startswith("userbuffers/reuse-")}
    # every forced case fails; the symmetric one (every model's weight where a dead one of its own
    # shape was) on the GEMM's output, the asymmetric one on whatever a dead weight of another
    # case's shape does to its GEMM (a shape error on one rank, its peer left waiting)
    assert forced and all(c.outcome == "failed" for c in forced.values()), \
        [(c.name, c.outcome, c.detail[:300]) for c in report.cases]
    symmetric = forced["userbuffers/reuse-column-symmetric"]
    assert symmetric.oracle == "reference" and "model 1, step 0: output[" in symmetric.detail, symmetric.detail


def test_the_patched_stack_passes_the_tp_cases_that_force_reuse():
    report = _run("emulated-patched")
    forced = [c for c in report.cases if c.name.startswith("userbuffers/reuse-")]
    assert forced and all(c.outcome == "passed" for c in forced), [(c.name, c.detail[:300]) for c in forced]
    assert all(c.reuse_events > 0 for c in forced), [(c.name, c.reuse_events) for c in forced]
