"""Process groups that die: a registry keyed by a dead group's id, on spawned ranks.

Known bad: ``tests/planted/group_id_registry.py`` files a per-group arena under ``id(group)``
and never prunes it. The plain run destroys the process group the stack receives and builds a
new one between cases, on a schedule; once a group is dead, an entry keyed by its id is stale
like one keyed by a dead tensor's, and the hygiene oracle says so, naming the group.
"""

from __future__ import annotations

from tests.planted.runs import plain_selection


def _run(sut: str):
    return plain_selection(sut, "delayed/hybrid-h1 or repro/prelude or repro/hygiene")


def test_a_registry_keyed_by_a_dead_groups_id_fails_hygiene():
    report = _run("tests.planted.group_id_registry:STACK")
    failed = [c for c in report.cases if c.outcome == "failed"]
    assert failed and all(c.oracle == "hygiene" for c in failed), [(c.name, c.oracle, c.detail[:300]) for c in failed]
    assert any("group_arena.ARENAS" in c.detail and "process group" in c.detail for c in failed), \
        [c.detail[:400] for c in failed]


def test_the_patched_stack_passes_while_its_groups_die():
    report = _run("emulated-patched")
    assert all(c.outcome == "passed" for c in report.cases), [(c.name, c.detail[:300]) for c in report.cases]
