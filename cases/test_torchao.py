"""torchao's catalogue through the harness: real float8 training on CPU, compared bit for bit.

    pytest cases/test_torchao.py

The whole catalogue runs once in this process (``harness.runner.inproc``, world size 1, every
case also re-run alone in a fresh process for the isolation oracle); each test then checks one
case's verdict. The injected id-hook must fail hygiene in process, and diverge across ranks on a
two-rank group with asymmetric forced id reuse. Skipped where torchao cannot be imported.
"""

from __future__ import annotations

import pytest

from harness.stacks.torchao.cases import builtin_cases   # plain data: no torchao import


def _torchao_missing() -> str | None:
    try:
        import torchao.float8  # noqa: F401
    except Exception as exc:
        return f"torchao is not importable ({type(exc).__name__}): pip install -e '.[torchao]'"
    return None


pytestmark = pytest.mark.skipif(_torchao_missing() is not None, reason=_torchao_missing() or "")

CASE_NAMES = [c.name for c in builtin_cases()]
REPRO_CASES = [c for c in builtin_cases() if c.name.startswith("torchao/repro-")]


def _config(cases, *, inject=None, launcher="inproc", world_size=1, reuse="natural", isolation=True):
    from harness.runner.config import RunConfig

    return RunConfig(sut="torchao", inject=inject, launcher=launcher, world_size=world_size, reuse=reuse,
                     cases=cases, isolation=isolation)


@pytest.fixture(scope="module")
def catalogue_report():
    from harness.runner.session import run

    report = run(_config(builtin_cases()))
    return {c.name: c for c in report.cases}


@pytest.mark.parametrize("name", CASE_NAMES)
def test_case_passes_bitwise(catalogue_report, name):
    from harness.pytest_plugin import failure_text

    report = catalogue_report[name]
    assert report.outcome == "passed", failure_text(report)
    assert report.steps_compared > 0
    assert not report.warnings            # torchao keeps no per-model state in its registries


def test_injected_id_hook_fails_hygiene():
    from harness.runner.session import run

    report = run(_config(REPRO_CASES + builtin_cases()[:2], inject="id-hook", isolation=False))
    for case in report.cases:
        assert case.outcome == "failed" and "hygiene" in case.oracles, case.name
        assert "id_hook.REGISTERED_WEIGHTS" in case.detail and "of dead model.module" in case.detail


@pytest.mark.slow
def test_injected_id_hook_diverges_across_ranks_with_asymmetric_reuse():
    from harness.runner.session import run

    cases = [c for c in REPRO_CASES if c.name in ("torchao/repro-build", "torchao/repro-update")]
    report = run(_config(cases, inject="id-hook", launcher="spawn", world_size=2, reuse="asymmetric",
                                    isolation=False))
    assert [c.name for c in report.cases] == [c.name for c in cases]
    # Every forced reuse landed (the weights are allocated through reuse_alloc), so in every case
    # the reusing rank's id maps stop growing where the peer's grow: the registries differ at the
    # first collective after the reused weights registered, before the hook's extra all-reduce.
    # The registries are not reset between the cases, as in TE's tests: a miss in the first case
    # would leave a stale id that keeps the second from diverging too.
    for case in report.cases:
        assert case.outcome == "failed" and case.reuse_misses == 0, (case.name, case.reuse_misses, case.detail)
        assert case.oracle == "cross-rank" and case.reuse_events > 0, (case.name, case.detail)
        assert "CollectiveMismatch: registries differ between ranks before collective #" in case.detail, case.detail
        assert "id_hook.WEIGHT_TO_KEY: rank 0: " in case.detail, case.detail
