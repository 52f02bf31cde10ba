"""Injected faults on a persistent rank group: each one reported, the group recycled, the next
case passing, nothing left behind.

    pytest -m faults                          # with the spawn launcher (part of ./scripts/test)
    pytest -m faults --launcher torchrun      # the same faults, ranks started by torchrun
    pytest -m "faults and slow"               # the torchrun and mpirun variants, in one selection

Each test sends one fault case (harness/faults/cases.py: the fault fires on rank 1 at model 0,
step 1) to the group, checks the report (oracle, rank, cause, stack), the time it took (within
the deadline + 30 s), how the group was recycled (in place, or stopped and respawned with no
process, shared-memory segment or run folder left), and then runs a normal case that must pass.

Processes are told apart by their environment (harness/faultmatrix/leaks.py): every group started
here carries this module's marker variable, and each group its own ``HARNESS_RUN_DIR``.
"""

from __future__ import annotations

import os
import secrets
import tempfile
import time

import pytest

from harness.faults.cases import EXPECT, check_fault_case, fault_case, normal_case
from harness.faultmatrix.leaks import describe_processes, group_leftovers, processes_with_env, shm_segments
from harness.pytest_plugin import config_from, failure_text
from harness.runner.cleanup import run_folders

pytestmark = pytest.mark.faults

DEADLINE_S = 3.0
WORLD = 2
VICTIM = WORLD - 1
MARKER = "FP8H_FAULT_TEST"
LAUNCHERS = ("spawn", "torchrun", "mpirun")
RESPAWN = {"exit", "kill", "segfault", "hang-buffer", "spin"}   # a rank is dead or stuck for good
IN_PLACE = {"raise", "thread"}                                  # every rank answered


def _primary_launcher(config) -> str:
    chosen = config.getoption("--launcher")
    return chosen if chosen in LAUNCHERS else "spawn"


def pytest_generate_tests(metafunc):
    if "fault_launcher" not in metafunc.fixturenames:
        return
    primary = _primary_launcher(metafunc.config)
    params = []
    for launcher in (primary,) + tuple(x for x in LAUNCHERS if x != primary):
        marks = () if launcher == primary else (pytest.mark.slow,)
        for kind in EXPECT:
            params.append(pytest.param(launcher, kind, id=f"{launcher}-{kind}", marks=marks))
    metafunc.parametrize("fault_launcher,kind", params)


@pytest.fixture(autouse=True)
def _slow_only_when_selected(request):
    """The other launchers' variants run only when asked for (``-m "faults and slow"``)."""
    if request.node.get_closest_marker("slow") and "slow" not in (request.config.option.markexpr or ""):
        pytest.skip('another launcher than --launcher: select with -m "faults and slow"')


class FaultGroups:
    """One persistent session per launcher, started with this module's marker in the environment
    and with run folders in a private temp folder, so that what they leave can be counted."""

    def __init__(self, config, tmp_root: str):
        self.config = config
        self.tmp_root = tmp_root
        self.token = secrets.token_hex(6)
        self.sessions = {}
        self.unfit = {}             # launcher -> why its stack cannot host the faults (a buggy stack)
        self.shm_before = set(shm_segments(f"fp8h-{os.getpid()}-"))

    def session(self, launcher: str):
        from harness.errors import SetupError
        from harness.runner.session import open_session
        from harness.runner.launchers import get_launcher

        if launcher in self.unfit:
            pytest.skip(self.unfit[launcher])
        if launcher not in self.sessions:
            try:
                get_launcher(launcher).check()
            except SetupError as exc:
                pytest.skip(str(exc))
            cfg = config_from(self.config, launcher=launcher, world_size=WORLD, deadline_s=DEADLINE_S)
            session = open_session(cfg)
            warm = session.run(normal_case("warm-up"))
            if warm.outcome != "passed" and (cfg.sut.endswith("-buggy") or cfg.inject):
                # The faults are the harness's to handle, and each is judged by the normal case after
                # it: a stack that fails a normal case on purpose cannot tell a fault handled from one not.
                session.close()
                first = (failure_text(warm).strip().splitlines() or [""])[0]
                self.unfit[launcher] = (f"--sut {cfg.sut} fails the normal case the faults are judged by "
                                        f"({first[:200]}): run the faults on a stack that passes it")
                pytest.skip(self.unfit[launcher])
            assert warm.outcome == "passed", failure_text(warm)
            self.sessions[launcher] = session
        return self.sessions[launcher]

    def close(self) -> None:
        while self.sessions:
            self.sessions.popitem()[1].close()


@pytest.fixture(scope="module")
def fault_groups(request, tmp_path_factory):
    tmp_root = str(tmp_path_factory.mktemp("fault-run-dirs"))
    groups = FaultGroups(request.config, tmp_root)
    saved_tempdir = tempfile.tempdir
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(MARKER, groups.token)
        tempfile.tempdir = tmp_root          # the controller's run folders (mkdtemp) land here
        try:
            yield groups
        finally:
            groups.close()
            tempfile.tempdir = saved_tempdir


def test_fault_is_reported_and_the_group_recycled(fault_launcher, kind, fault_groups):
    session = fault_groups.session(fault_launcher)
    old = session.backend.group
    assert old is not None
    run_dir, shm_prefix, generation = old.run_dir, old.shm_prefix, old.generation

    started = time.monotonic()
    report = session.run(fault_case(kind, VICTIM))
    elapsed = time.monotonic() - started

    assert check_fault_case(report, kind, VICTIM, WORLD) == [], report.detail
    # Liveness, the harness's own guarantee: reported within the deadline, with a margin load cannot break.
    assert elapsed < DEADLINE_S + 30, f"{kind} reported after {elapsed:.1f} s"
    if session.backend.group is old:
        assert kind not in RESPAWN, f"{kind}: the group was kept, but a rank is gone or stuck"
        assert old.generation == generation + 1, "the group was not recycled in place"
    else:
        assert kind not in IN_PLACE, f"{kind}: every rank answered, yet the group was respawned"
        assert session.backend.group is None
        left = group_leftovers(run_dir, shm_prefix)
        assert left == {"processes": [], "segments": [], "run_dir": []}, \
            f"{left}\n{describe_processes(left['processes'])}"
    if kind == "kill" and fault_launcher == "spawn":
        # The peer was inside the collective when the victim died: gloo saw the connection drop.
        peer = [f for f in report.failures if f.rank == 0]
        assert any("Connection closed by peer" in f.detail or "Connection reset" in f.detail for f in peer), \
            "\n".join(f.line() for f in peer)
        assert any(", in all_reduce" in f.detail for f in peer)

    after = session.run(normal_case(kind))
    assert after.outcome == "passed", failure_text(after)

    if kind == "thread":
        # The rank with the leftover thread still exits by itself when the group shuts down.
        group = session.backend.group
        session.close()
        assert group.procs.exit_codes() == [0] * len(group.procs.procs), group.procs.exit_codes()
        assert group_leftovers(group.run_dir, group.shm_prefix)["processes"] == []


def test_nothing_left_behind(fault_groups):
    """After every session here has closed: no process carries our marker (the /proc scan), no
    segment of ours is in /dev/shm, no run folder is left."""
    fault_groups.session(_primary_launcher(fault_groups.config))   # at least one group ran
    fault_groups.close()
    pids = processes_with_env(MARKER, fault_groups.token)
    assert pids == [], describe_processes(pids)
    new_segments = set(shm_segments(f"fp8h-{os.getpid()}-")) - fault_groups.shm_before
    assert new_segments == set()
    assert run_folders(fault_groups.tmp_root) == []
