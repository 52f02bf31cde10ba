"""A rank that hangs in an SPMD launch: rank 0 reports it with its stacks and its flight recorder."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from harness.faults.cases import fault_case
from harness.runner.launchers.torchrun import torchrun_path

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.skipif(torchrun_path() is None, reason="no torchrun")


def test_a_spinning_rank_is_reported_by_rank_0_with_its_stack_and_flight_recorder(tmp_path):
    case_file = tmp_path / "cases.json"
    case_file.write_text(json.dumps([fault_case("spin", 1).to_dict()]))
    report = tmp_path / "r.json"
    torchrun = torchrun_path()
    proc = subprocess.Popen([torchrun, "--standalone", "--nproc-per-node", "2", "--max-restarts", "0",
                             "--log-dir", str(tmp_path / "agent"), "-m", "harness", "run", "--case-file",
                             str(case_file), "--deadline", "3", "--no-isolation", "--json", str(report)],
                            cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO, OMP_NUM_THREADS="1"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out = proc.communicate(timeout=150)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    data = json.loads(report.read_text())
    [case] = data["cases"]
    assert case["outcome"] == "failed" and case["oracle"] == "liveness", out[-3000:]
    detail = case["detail"]
    assert "rank 1 made no progress for" in detail, detail       # its watchdog spoke for it
    assert "in trigger" in detail, detail                       # the spinning rank's own Python stack
    assert "--- flight recorder ---" in detail and "gloo" in detail, detail
    assert "the launch cannot go on" in (data["interrupted"] or "")
