"""Runs side by side: pytest-xdist workers with a rank group each, and two CLI runs in one folder.

    pytest -n 4 tests/test_parallel_runs.py       # 4 workers, each with its own group of 2 ranks

Each group rendezvouses through a Unix socket in its own fresh temp folder and a TCP store on a
port the OS picks, so concurrent groups cannot collide; these tests run cases that way and check
that the reports of concurrent runs stay whole and separate.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from harness.case.catalog import builtin_cases
from harness.faultmatrix.leaks import describe_processes
from harness.faultmatrix.subproc import HarnessRun
from harness.pytest_plugin import check_case, config_from

ROOT = Path(__file__).resolve().parents[1]
GROUP_LOG = "FP8H_PARALLEL_GROUP_LOG"    # set by the nested run below: where each test logs its group
CASES = ("delayed/hybrid-h1-max-m0", "delayed/hybrid-h2-recent-m2", "delayed/e4m3-h16", "delayed/e5m2-h16",
         "special/zero-amax", "special/tiny-amax", "delayed/deep-narrow", "delayed/local-grads")
BY_NAME = {c.name: c for c in builtin_cases()}


@pytest.fixture(scope="module")
def own_session(request):
    """A group of this module's own: the shared session of cases/ must not see these cases (what
    one case leaves for the next is what the harness measures)."""
    from harness.runner.session import open_session

    cfg = config_from(request.config)
    if cfg.launcher == "inproc":
        pytest.skip("needs a rank group")
    session = open_session(cfg)
    yield session
    session.close()


@pytest.mark.parametrize("name", CASES)
def test_case_on_this_workers_group(name, own_session):
    check_case(own_session.run(BY_NAME[name]))
    group = own_session.backend.group
    assert group is not None and group.world == own_session.cfg.world_size
    # The rendezvous is private: the control socket in the group's own fresh folder (mode 0700),
    # the store on a port the OS chose for this group.
    assert os.path.basename(group.run_dir).startswith("fp8h-run-")
    assert stat.S_IMODE(os.stat(group.run_dir).st_mode) == 0o700
    assert stat.S_ISSOCK(os.stat(os.path.join(group.run_dir, "ctl.sock")).st_mode)
    assert group.store.port > 0
    log = os.environ.get(GROUP_LOG)
    if log:
        entry = {"worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "pid": os.getpid(), "case": name,
                 "run_dir": group.run_dir, "port": group.store.port, "shm_prefix": group.shm_prefix}
        with open(log, "a") as fh:      # one short line per append: whole lines even with 4 writers
            fh.write(json.dumps(entry) + "\n")


@pytest.mark.slow
def test_pytest_n4_with_a_group_per_worker(tmp_path, request):
    """``pytest -n 4`` on the cases above: every test passes, four groups, no two sharing a
    rendezvous folder, store port or shared-memory prefix."""
    if "slow" not in (request.config.option.markexpr or ""):
        pytest.skip('runs pytest -n 4 (minutes on 2 cores): select with -m slow')
    log = tmp_path / "groups.jsonl"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-n", "4", "-q", str(Path(__file__)),
                           "-k", "test_case_on_this_workers_group"], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, **{GROUP_LOG: str(log)}), timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert f"{len(CASES)} passed" in proc.stdout
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert sorted(e["case"] for e in entries) == sorted(CASES)
    groups = {e["worker"]: (e["run_dir"], e["port"], e["shm_prefix"]) for e in entries}
    assert len(groups) == 4, groups
    for field in range(3):
        assert len({g[field] for g in groups.values()}) == 4, groups


def test_two_cli_runs_in_one_folder_at_once(tmp_path):
    """Two runs in the same working directory, reports side by side in one folder. Run A is held
    (SIGSTOP) after its first case until B has started its own group and finished a case, so
    the two groups certainly coexist; then both finish, each report whole and its own."""
    reports = tmp_path / "reports"
    reports.mkdir()
    a = HarnessRun(tmp_path, ["--cases", "delayed/hybrid-h1-*", "--json", str(reports / "a.json"),
                              "--junit", str(reports / "a.xml")], name="a")
    b = HarnessRun(tmp_path, ["--cases", "delayed/hybrid-h2-*", "--json", str(reports / "b.json"),
                              "--junit", str(reports / "b.xml")], name="b")
    try:
        assert a.next_case_line() is not None
        a.proc.send_signal(signal.SIGSTOP)
        try:
            assert b.next_case_line() is not None
        finally:
            a.proc.send_signal(signal.SIGCONT)
        assert a.finish() == 0, a.stderr
        assert b.finish() == 0, b.stderr
    finally:
        for run in (a, b):
            if run.proc.poll() is None:
                run.proc.kill()
                run.proc.wait(timeout=30)
    for run, name, tag in ((a, "a", "h1"), (b, "b", "h2")):
        report = json.loads((reports / f"{name}.json").read_text())
        assert report["complete"] is True and report["summary"]["passed"] == 4, report["summary"]
        assert all(f"hybrid-{tag}-" in c["name"] for c in report["cases"])
        assert (reports / f"{name}.xml").read_text().count("<testcase ") == 4
        left = run.leftovers()
        assert left == {"processes": [], "segments": [], "run_dirs": []}, describe_processes(left["processes"])
    assert sorted(p.name for p in reports.iterdir()) == ["a.json", "a.xml", "b.json", "b.xml"]
