"""The plain run (``./scripts/run``, no flags) tests the id-reuse path by itself.

Known bad: ``tests/planted/init_cast_cache.py``, an unpruned ``id()``-keyed cache consulted on
``init_cast`` builds. With natural reuse alone it is caught only when the allocator happens to
hand a new weight a dead one's id; the default catalogue's cases with built-in forced reuse hand
it one in every run, so the reference oracle sees the stale cast every time.
"""

from __future__ import annotations

from harness.case.catalog import builtin_cases, userbuffers_cases
from harness.runner.cases import resolve_cases
from harness.runner.config import RunConfig
from harness.runner.session import run


def test_the_default_cases_force_reuse_with_both_constructions_and_run_the_userbuffers_family():
    plain = resolve_cases(None, None, None, world_size=2)
    # multi-layer, several models: a later model's weights take an earlier one's ids
    forced = {(c.model.construction, c.reuse) for c in plain if c.reuse and len(c.model.dims) > 2 and c.models >= 2}
    assert forced >= {(construction, mode) for construction in ("init_cast", "copy")
                      for mode in ("symmetric", "asymmetric")}
    assert {c.name for c in userbuffers_cases()} <= {c.name for c in plain}
    # one rank cannot run tensor-parallel cases: its plain run leaves them out
    assert not any(c.model.userbuffers for c in builtin_cases(world_size=1))


def test_an_id_keyed_cache_on_init_cast_builds_is_caught_by_the_plain_runs_forced_cases():
    cases = [c for c in builtin_cases(world_size=2) if c.reuse and c.model.construction == "init_cast"]
    assert len(cases) == 2
    report = run(RunConfig(sut="tests.planted.init_cast_cache:STACK", launcher="spawn", world_size=2,
                           isolation=False, cases=cases, reuse="natural"))
    for case in report.cases:
        assert case.outcome == "failed" and "reference" in case.oracles, (case.name, case.detail)
        assert case.reuse_events > 0, case.name
