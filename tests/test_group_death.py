"""Process groups that die: a registry keyed by a dead group's id, on spawned ranks.

Known bad: ``tests/planted/group_id_registry.py`` files a per-group arena under ``id(group)``
and never prunes it. The plain run destroys the process group the stack receives and builds a
new one between cases, on a schedule; once a group is dead, an entry keyed by its id is stale
like one keyed by a dead tensor's, and the hygiene oracle says so, naming the group.

A group dies at the end of a case and its successor is made before the next one: a rank whose
peer died in the case still reports the peer's death (its collective's connection closed), not a
hang of its own in the successor's ``new_group`` waiting for the dead peer (the known bad: the
successor made right after the case, before the case's result went out).
"""

from __future__ import annotations

from harness.faults.cases import fault_case, normal_case
from harness.runner.config import RunConfig
from harness.runner.session import run
from tests.planted.runs import plain_selection


def _run(sut: str):
    return plain_selection(sut, "delayed/hybrid-h1 or repro/prelude or repro/hygiene")


def test_a_registry_keyed_by_a_dead_groups_id_fails_hygiene():
    # Every failing case has the hygiene finding. Where one rank's new group is born on the dead
    # group's address and the other's is not, the ranks' arenas also differ (3 keys against 4),
    # and the cross-rank oracle names that first, before the case's first collective: the same
    # stale key seen across ranks, which depends on where each rank's allocator puts the group.
    report = _run("tests.planted.group_id_registry:STACK")
    failed = [c for c in report.cases if c.outcome == "failed"]
    found = [(c.name, c.oracles, c.detail[:300]) for c in failed]
    assert failed and all("hygiene" in c.oracles for c in failed), found
    assert all(set(c.oracles) <= {"hygiene", "cross-rank"} for c in failed), found
    assert any("group_arena.ARENAS" in c.detail and "the id of a process group" in c.detail for c in failed), \
        [c.detail[:400] for c in failed]


def test_the_patched_stack_passes_while_its_groups_die():
    report = _run("emulated-patched")
    assert all(c.outcome == "passed" for c in report.cases), [(c.name, c.detail[:300]) for c in report.cases]


def test_a_peers_death_is_reported_by_the_survivor_and_the_groups_go_on_dying():
    cases = [fault_case("kill", 1), normal_case("kill"), normal_case("kill-again")]
    report = run(RunConfig(sut="tests.planted.group_id_registry:STACK", launcher="spawn", world_size=2,
                           isolation=False, cases=cases, deadline_s=3.0))
    fault, *after = report.cases
    survivor = [f for f in fault.failures if f.rank == 0]
    # the fault kills rank 1 while rank 0 is inside a collective with it (harness.faults.inject)
    assert any("Connection closed by peer" in f.detail or "Connection reset" in f.detail for f in survivor), \
        "\n".join(f.detail[-1500:] for f in survivor)
    assert not any("hung" in f.detail for f in survivor), [f.line() for f in survivor]
    # the respawned ranks' groups die too: each case after ends with the planted arena holding a dead group's id
    for case in after:
        assert case.outcome == "failed" and case.oracle == "hygiene", (case.name, case.detail[:300])
        assert "group_arena.ARENAS" in case.detail and "process group" in case.detail, case.detail[:400]
