"""Process groups that die: a registry keyed by a dead group's id, on spawned ranks.

Known bad: ``tests/planted/group_id_registry.py`` files a per-group arena under ``id(group)``
and never prunes it. The plain run destroys the process group the stack receives and builds a
new one between cases, on a schedule; once a group is dead, an entry keyed by its id is stale
like one keyed by a dead tensor's, and the hygiene oracle says so, naming the group.
"""

from __future__ import annotations

from harness.case.catalog import builtin_cases, select_cases
from harness.runner.config import RunConfig
from harness.runner.session import run


def _run(sut: str):
    cases = select_cases(builtin_cases(world_size=2), "delayed/hybrid-h1 or repro/prelude or repro/hygiene")
    return run(RunConfig(sut=sut, launcher="spawn", world_size=2, isolation=False, cases=cases, reuse="natural",
                         deadline_s=5.0))


def test_a_registry_keyed_by_a_dead_groups_id_fails_hygiene():
    report = _run("tests.planted.group_id_registry:STACK")
    failed = [c for c in report.cases if c.outcome == "failed"]
    assert failed and all(c.oracle == "hygiene" for c in failed), [(c.name, c.oracle, c.detail[:300]) for c in failed]
    assert any("group_arena.ARENAS" in c.detail and "process group" in c.detail for c in failed), \
        [c.detail[:400] for c in failed]


def test_the_patched_stack_passes_while_its_groups_die():
    report = _run("emulated-patched")
    assert all(c.outcome == "passed" for c in report.cases), [(c.name, c.detail[:300]) for c in report.cases]
