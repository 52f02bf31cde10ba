"""The hang report's parts: native stacks, the rank's answer to the controller, Userbuffers timeout
lines, and the whole of it in a real hang of a controlled run."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading

import pytest

from harness.hangs import report as hang_report, native_stacks


def _tool(folder, name: str, body: str) -> str:
    path = os.path.join(folder, name)
    with open(path, "w") as fh:
        fh.write("#!/bin/sh\n" + body + "\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)
    return str(folder)


@pytest.fixture
def sleeper():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait(timeout=10)


def test_native_stacks_use_the_first_allowed_tool_and_bound_it(tmp_path, sleeper):
    path = _tool(tmp_path, "py-spy", 'echo "Thread 1 (idle): MainThread"; echo "args: $*"')
    out = native_stacks.take({1: sleeper.pid}, path=path, env={})
    assert out[1].startswith("native stacks (py-spy, exit 0):"), out
    assert f"args: dump --native --pid {sleeper.pid}" in out[1], out

    slow = _tool(tmp_path / "..", "eu-stack", "exec sleep 30")
    out = native_stacks.take({1: sleeper.pid}, timeout_s=0.5, path=slow, env={})
    assert "native stacks (eu-stack): no answer within 0.5 s, stopped" in out[1], out


def test_native_stacks_say_why_there_are_none(tmp_path, sleeper):
    empty = str(tmp_path)
    assert native_stacks.take({0: sleeper.pid}, path=empty, env={})[0] == \
        "native stacks: none (no py-spy or eu-stack on PATH)"
    assert native_stacks.take({0: sleeper.pid}, path=empty, env={"HARNESS_NATIVE_STACKS": "off"})[0] == \
        "native stacks: none (HARNESS_NATIVE_STACKS=off)"
    assert "is not one of" in native_stacks.take({0: 1}, path=empty, env={"HARNESS_NATIVE_STACKS": "pstack"})[0]
    gdb = _tool(tmp_path, "gdb", "echo gdb")
    assert native_stacks.available_tool(gdb, env={}) is None             # gdb only when asked for
    assert native_stacks.available_tool(gdb, env={"HARNESS_NATIVE_STACKS": "gdb"}) == "gdb"


UB_LINES = """\
!!! [UB] Number of TP domains: 1
[userbuffers.cu:kuserbuffers_pushrecv:2073] pushrecv [grank dst:1 global src:0][nvrank(GPU) dst: 1 src: 0]: expecting 3, observed 2
[userbuffers.cu:userbuffers_fp16_sum_inplace_gpu_rr_rs_oop_fp8:798] [1] Reduce-scatter: SM 0 [1]: expecting 7 got 6
plain output expecting nothing
"""


def test_userbuffers_timeout_lines_are_picked_out_of_a_rank_log():
    lines = hang_report.ub_timeout_lines(UB_LINES)
    assert len(lines) == 2 and "pushrecv [grank dst:1 global src:0]" in lines[0] and "Reduce-scatter" in lines[1]
    assert hang_report.ub_timeout_lines("!!! [UB] Number of TP domains: 1\n") == []


def test_a_rank_answers_each_request_once_with_its_recorder_and_progress(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_NATIVE_STACKS", "off")
    release = threading.Event()
    providers = [lambda: ["userbuffers 'qkv_fprop' ring-exchange all-gather in progress: rank 0 waiting for chunk 1"],
                 lambda: 1 / 0,
                 lambda: (release.wait(), [])[1]]
    for p in providers:
        hang_report.register_progress(p)
    try:
        state = hang_report.ServeState()
        assert not hang_report.serve(str(tmp_path), 0, state)          # nothing asked yet
        req = hang_report.request(str(tmp_path))
        token = req.token
        assert hang_report.serve(str(tmp_path), 0, state)
        assert not hang_report.serve(str(tmp_path), 0, state)          # answered already
        with open(tmp_path / f"diagnostics-r0-{token}.json") as fh:
            body = json.load(fh)
        assert body["pid"] == os.getpid() and "flight_recorder" in body
        log = tmp_path / "rank0.log"
        log.write_text(UB_LINES)
        texts = hang_report.collect(str(tmp_path), req, {0: os.getpid(), 1: os.getpid()}, [str(log), "none"],
                                    wait_s=0.2)
    finally:
        release.set()
        for p in providers:
            hang_report.unregister_progress(p)
    assert "rank 0 waiting for chunk 1" in texts[0], texts[0]
    assert "progress record failed: ZeroDivisionError" in texts[0], texts[0]
    assert "progress record gave no answer within 2 s" in texts[0], texts[0]
    assert "Userbuffers timeouts in the rank's output:\n  [userbuffers.cu:kuserbuffers_pushrecv" in texts[0], texts[0]
    assert "native stacks: none (HARNESS_NATIVE_STACKS=off)" in texts[0]
    assert texts[1].startswith("flight recorder and progress: none (no answer within 0.2 s)"), texts[1]


def test_a_hung_case_reports_every_ranks_flight_recorder(monkeypatch):
    """A rank that spins forever (fault hang-buffer): the liveness report carries, for each rank,
    the gloo collectives its flight recorder holds, the last of the case among them."""
    from harness.faults.cases import fault_case
    from harness.runner.config import RunConfig
    from harness.runner.session import run

    monkeypatch.setenv("HARNESS_NATIVE_STACKS", "off")
    cfg = RunConfig(sut="emulated-patched", launcher="spawn", world_size=2, isolation=False,
                    cases=(fault_case("hang-buffer", 1),), reuse="off", deadline_s=3.0)
    report = run(cfg)
    case = report.cases[0]
    assert case.outcome == "failed" and case.oracle == "liveness", case.detail
    text = "\n".join(f.detail for f in case.failures)
    for rank in (0, 1):
        section = text.split(f"--- rank {rank} diagnostics ---", 1)[1]
        assert "gloo flight recorder: last" in section and "gloo:all_" in section, section[:2000]
        assert "native stacks: none (HARNESS_NATIVE_STACKS=off)" in section
