"""SPMD across nodes: two torchrun agents with a static rendezvous, as on two hosts.

Both agents run on this host (``--nnodes 2 --node-rank 0|1 --master-addr 127.0.0.1``); each
rank says which host it is on through ``HARNESS_HOSTNAME``, so the runner sees the placement
a two-node job has. The README's section "More than one host" gives the commands.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess

import pytest

from harness.runner.launchers.torchrun import torchrun_path

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAUNCH_TIMEOUT_S = 180

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(torchrun_path() is None, reason="no torchrun")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_agents(tmp_path, run_args: list[str], hosts=("node-a", "node-b")) -> tuple[list[int], dict, str]:
    """Run ``python -m harness run RUN_ARGS`` as two one-rank torchrun agents; returns both exit
    statuses, rank 0's JSON report and the agents' output."""
    port = free_port()
    report = tmp_path / "report.json"
    torchrun = torchrun_path()
    procs = []
    for node, host in enumerate(hosts):
        env = dict(os.environ, PYTHONPATH=REPO, OMP_NUM_THREADS="1", HARNESS_HOSTNAME=host)
        cmd = [torchrun, "--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "1",
               "--master-addr", "127.0.0.1", "--master-port", str(port), "--max-restarts", "0",
               "--log-dir", str(tmp_path / f"agent{node}"), "-m", "harness", "run", *run_args,
               "--json", str(report)]
        procs.append(subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, start_new_session=True))
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=LAUNCH_TIMEOUT_S)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    text = "\n".join(f"--- agent {i} ---\n{o}" for i, o in enumerate(outputs))
    data = json.loads(report.read_text()) if report.exists() else {}
    return [p.returncode for p in procs], data, text


def test_patched_passes_and_a_one_host_case_is_skipped_with_its_reason(tmp_path):
    codes, report, text = two_agents(tmp_path, ["--cases", "repro/hygiene,userbuffers/column,repro/cross-rank"])
    assert codes == [0, 0], text
    outcomes = {c["name"]: c for c in report["cases"]}
    assert report["launcher"] == "torchrun" and report["world_size"] == 2 and report["complete"], text
    assert outcomes["repro/hygiene"]["outcome"] == outcomes["repro/cross-rank"]["outcome"] == "passed", text
    skipped = outcomes["userbuffers/column"]
    assert skipped["outcome"] == "skipped", text
    assert "needs every rank on one host" in skipped["skip_reason"], skipped["skip_reason"]
    assert "node-a: rank 0; node-b: rank 1" in skipped["skip_reason"], skipped["skip_reason"]
    assert report["summary"] == {"passed": 2, "failed": 0, "errors": 0, "skipped": 1}


def test_buggy_with_asymmetric_reuse_fails_cross_rank(tmp_path):
    codes, report, text = two_agents(tmp_path, ["--sut", "emulated-buggy", "--reuse", "asymmetric",
                                                "--cases", "repro/cross-rank"], hosts=("node-a", "node-a"))
    assert codes[0] == 1, text
    [case] = report["cases"]
    assert case["outcome"] == "failed" and case["oracle"] == "cross-rank", text
    assert "--launcher torchrun" in case["repro"]
