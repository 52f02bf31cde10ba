"""The command line under faults, signals and bad input: reports complete, nothing left behind.

Each test runs ``python -m harness run`` as a subprocess with a marker variable of its own in
the environment and a private TMPDIR, then looks for what it may have left: processes (a scan
of /proc/*/environ for the marker and for ``HARNESS_CONTROLLER_PID=<its pid>``), shared-memory
segments (``/dev/shm/fp8h-<its pid>-*``) and run folders (``fp8h-run-*`` in its TMPDIR).
Nothing here waits by sleeping: the tests read the controller's output line by line (a case's
line is printed only after the reports on disk hold that case) and wait for exits with bounds.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.faultmatrix.leaks import describe_processes, processes_with_env, shm_segments
from harness.faultmatrix.subproc import HarnessRun

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
MARK = "FP8H_RELIABILITY_TEST"


class Controller(HarnessRun):
    def assert_nothing_left(self) -> None:
        left = self.leftovers()
        assert left == {"processes": [], "segments": [], "run_dirs": []}, \
            f"{left}\n{describe_processes(left['processes'])}"


def launcher_args(config) -> list[str]:
    """The pytest ``--launcher`` for the controller under test (``-m faults --launcher torchrun``)."""
    chosen = config.getoption("--launcher")
    return ["--launcher", chosen] if chosen in ("torchrun", "mpirun") else []


def read_json(path) -> dict:
    with open(path) as fh:
        return json.load(fh)


def junit_cases(path) -> list[ET.Element]:
    return list(ET.parse(path).getroot().iter("testcase"))


# --- the helpers the leak checks rely on find what they must ----------------------------------

def test_proc_scan_finds_a_marked_process_and_then_not(tmp_path):
    token = secrets.token_hex(6)
    child = subprocess.Popen([PY, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                             env=dict(os.environ, **{MARK: token}))
    try:
        assert processes_with_env(MARK, token) == [child.pid]
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    assert processes_with_env(MARK, token) == []


def test_shm_scan_finds_a_segment_and_then_not():
    name = f"fp8h-{os.getpid()}-{secrets.token_hex(3)}-probe"
    path = os.path.join("/dev/shm", name)
    with open(path, "wb"):
        pass
    try:
        assert shm_segments(f"fp8h-{os.getpid()}-") == [name]
    finally:
        os.unlink(path)
    assert shm_segments(name) == []


# --- faults and signals through the command line ----------------------------------------------

@pytest.mark.faults
def test_fault_run_writes_both_reports_after_every_case(tmp_path, request):
    json_path, junit_path = tmp_path / "r.json", tmp_path / "r.xml"
    run = Controller(tmp_path, ["--faults", "--cases", "faults/exit", "--deadline", "3",
                                "--json", str(json_path), "--junit", str(junit_path)]
                     + launcher_args(request.config))
    seen = 0
    while run.next_case_line() is not None:
        seen += 1
        assert len(read_json(json_path)["cases"]) == seen
        assert len(junit_cases(junit_path)) == seen
    assert run.finish() == 0, run.stderr + "\n".join(run.lines)
    assert seen == 2
    report = read_json(json_path)
    assert report["complete"] is True and report["interrupted"] is None
    fault, after = report["cases"]
    assert (fault["name"], fault["outcome"], fault["oracle"]) == ("faults/exit", "failed", "liveness")
    # spawn: the controller is the rank's parent and knows its exit status
    cause = "died while running the case" if launcher_args(request.config) else "exited with code 3"
    assert any(f["rank"] == 1 and cause in f["detail"] for f in fault["failures"]), fault["detail"]
    assert (after["name"], after["outcome"]) == ("faults/exit/next", "passed")
    testcases = junit_cases(junit_path)
    assert [tc.get("name") for tc in testcases] == ["faults/exit", "faults/exit/next"]
    assert testcases[0].find("failure") is not None and testcases[1].find("failure") is None
    assert "faults: 1 injected, each reported" in "\n".join(run.lines)
    run.assert_nothing_left()


@pytest.mark.faults
def test_sigint_then_sigterm_keeps_every_finished_case(tmp_path, request):
    json_path, junit_path = tmp_path / "r.json", tmp_path / "r.xml"
    run = Controller(tmp_path, ["--cases", "delayed/hybrid-h[12]-*", "--deadline", "3",
                                "--json", str(json_path), "--junit", str(junit_path)]
                     + launcher_args(request.config))
    assert run.next_case_line() is not None
    run.proc.send_signal(signal.SIGINT)
    # Sent back to back, the two could reach the process's threads in either order; the
    # controller says when the clean-up begins, and the SIGTERM is sent during it.
    assert run.next_line_starting("SIGINT received: stopping the ranks") is not None
    run.proc.send_signal(signal.SIGTERM)
    assert run.finish(timeout=60) == 128 + signal.SIGINT, run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    report = read_json(json_path)
    assert report["interrupted"] == "controller received SIGINT"
    assert report["complete"] is False
    finished = [c["name"] for c in report["cases"]]
    assert 1 <= len(finished) < 8
    assert all(c["outcome"] == "passed" for c in report["cases"])
    assert [tc.get("name") for tc in junit_cases(junit_path)] == finished
    run.assert_nothing_left()


# --- nothing already gathered is lost --------------------------------------------------------

def test_report_folder_removed_mid_run_loses_nothing(tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    json_path, junit_path = reports / "r.json", tmp_path / "r.xml"
    run = Controller(tmp_path, ["--cases", "delayed/hybrid-h1-*", "--no-isolation", "--deadline", "3",
                                "--json", str(json_path), "--junit", str(junit_path)])
    assert run.next_case_line() is not None
    shutil.rmtree(reports)                   # the --json folder is gone from now on
    code = run.finish()
    assert code == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: cannot write --json {str(json_path)!r}"), run.stderr
    fallback = lines[0].rsplit(" saved to ", 1)[1]
    try:
        report = read_json(fallback)
    finally:
        os.unlink(fallback)
    assert report["complete"] is True
    names = [c["name"] for c in report["cases"]]
    assert len(names) == 4 and all(c["outcome"] == "passed" for c in report["cases"])
    assert [tc.get("name") for tc in junit_cases(junit_path)] == names
    run.assert_nothing_left()


# --- bad input in SPMD mode and a missing launcher --------------------------------------------

def test_spmd_world_size_mismatch_under_torchrun(tmp_path):
    torchrun = os.path.join(os.path.dirname(PY), "torchrun")
    if not os.path.exists(torchrun):
        pytest.skip("no torchrun beside this Python")
    logs = tmp_path / "logs"
    proc = subprocess.run([torchrun, "--standalone", "--nproc-per-node", "2", "--log-dir", str(logs),
                           "--redirects", "3", "-m", "harness", "run", "--world-size", "3"],
                          cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode != 0
    per_rank = sorted(logs.rglob("stderr.log"))
    assert len(per_rank) == 2
    for path in per_rank:
        assert path.read_text().splitlines() == ["error: --world-size 3 but torchrun started 2 ranks"]
    # torchrun's summary gives each rank's own exit status: 2 on both, none terminated by the agent
    statuses = [line.split(":", 1)[1].split()[0] for line in proc.stderr.splitlines()
                if line.strip().startswith("exitcode")]
    assert statuses == ["2", "2"], proc.stderr[-2000:]


def test_spmd_userbuffers_run_leaves_no_segment(tmp_path):
    """Under torchrun there is no controller to sweep shared memory: every segment the ranks and
    their isolated re-runs (forked children that leave by os._exit) created must be gone when
    the launch ends. Before the children released theirs, this run left 144 segments."""
    torchrun = os.path.join(os.path.dirname(PY), "torchrun")
    if not os.path.exists(torchrun):
        pytest.skip("no torchrun beside this Python")
    prefix = f"fp8h-{os.getpid()}-spmd{secrets.token_hex(3)}-"
    proc = subprocess.run([torchrun, "--standalone", "--nproc-per-node", "2", "--log-dir", str(tmp_path / "agent"),
                           "-m", "harness", "run", "--cases", "userbuffers/column*",
                           "--json", str(tmp_path / "r.json")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, HARNESS_SHM_PREFIX=prefix))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert read_json(tmp_path / "r.json")["summary"]["passed"] == 5
    assert shm_segments(prefix) == []


def test_spmd_world_size_mismatch_under_mpirun(tmp_path):
    mpirun = shutil.which("mpirun", path=os.path.dirname(PY) + os.pathsep + os.environ.get("PATH", ""))
    if mpirun is None:
        pytest.skip("no mpirun")
    pattern = str(tmp_path / "err.%r")
    proc = subprocess.run([mpirun, "-np", "2", "-errfile-pattern", pattern, "sh", "-c",
                           f'"{PY}" -m harness run --world-size 3; echo "exit status $?" >&2'],
                          cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr       # sh's exit: the status is in each rank's file
    for rank in (0, 1):
        assert (tmp_path / f"err.{rank}").read_text().splitlines() == [
            "error: --world-size 3 but mpirun started 2 ranks", "exit status 2"]


def test_mpirun_launcher_without_mpirun_on_path(tmp_path):
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    run = Controller(tmp_path, ["--launcher", "mpirun", "--json", str(tmp_path / "r.json")],
                     env_extra={"PATH": str(empty_bin), "HARNESS_MPIRUN": None})
    assert run.finish(timeout=120) == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --launcher mpirun: no mpirun on PATH"), run.stderr
    assert not (tmp_path / "r.json").exists()
    run.assert_nothing_left()


def test_sigterm_to_the_bench_stops_its_groups_and_keeps_the_figures_measured(tmp_path):
    json_path = tmp_path / "bench.json"
    run = Controller(tmp_path, ["--quick", "--only", "launch", "--json", str(json_path)], command="bench")
    # The first round's line: the bare group and the round's persistent groups are up by then.
    assert run.next_line_starting("  round 1/") is not None, run.stderr
    run.proc.send_signal(signal.SIGTERM)
    assert run.finish(timeout=120) == 130, run.stderr
    assert "interrupted (SIGTERM)" in run.stderr
    run.assert_nothing_left()
