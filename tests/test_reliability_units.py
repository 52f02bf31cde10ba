"""The pieces the fault handling rests on, one at a time and in process (no rank group)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

from harness.cli import main as cli_main
from harness.errors import UsageError
from harness.faults.cases import EXPECT, check_fault_run, fault_catalogue
from harness.faults.inject import parse
from harness.report.model import RunReport, verdict
from harness.runner.diagnostics import dump_complete
from harness.runner.rank.execute import leftover_threads
from harness.collectives.precheck import CollectiveMismatch, CollectivePrecheck, PeerLeftCase


# --- the leftover-thread check -----------------------------------------------------------------

def test_a_running_non_daemon_thread_is_reported_with_its_stack():
    before = set(threading.enumerate())
    release = threading.Event()
    t = threading.Thread(target=release.wait, name="still-here", daemon=False)
    t.start()
    try:
        text = leftover_threads(before)
    finally:
        release.set()
        t.join(timeout=10)
    assert "1 non-daemon thread(s)" in text and "'still-here'" in text
    assert "in wait" in text                       # its stack, down to the Event it blocks on
    assert leftover_threads(before) == ""          # joined: nothing left


def test_daemon_threads_and_threads_that_finish_are_not_reported():
    before = set(threading.enumerate())
    release = threading.Event()
    daemon = threading.Thread(target=release.wait, daemon=True)
    daemon.start()
    quick = threading.Thread(target=lambda: None, daemon=False)
    quick.start()
    try:
        assert leftover_threads(before) == ""
    finally:
        release.set()
        daemon.join(timeout=10)


# --- the stack dump's end is recognised ----------------------------------------------------------

def test_a_faulthandler_dump_is_complete_only_with_the_main_threads_outermost_frame():
    code = ("import faulthandler, sys, threading\n"
            "e = threading.Event()\n"
            "threading.Thread(target=e.wait, daemon=True).start()\n"
            "faulthandler.dump_traceback(sys.stdout, all_threads=True)\n")
    text = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    assert text.count("Thread 0x") + text.count("Current thread 0x") == 2
    assert dump_complete(text)
    assert not dump_complete(text.rstrip().rsplit("\n", 1)[0])     # the last line not yet written
    assert not dump_complete("")


# --- a peer that left the case on an error is not an "extra collective" ------------------------

def _entry(seq: int) -> dict:
    return {"seq": seq, "op": "all_reduce", "group": [0, 1], "reduce": "MAX", "shapes": [[4]],
            "dtypes": ["float32"], "sites": ["model.py:1 step"]}


@pytest.mark.parametrize("failed,error", [(True, PeerLeftCase), (False, CollectiveMismatch)])
def test_precheck_tells_a_peer_that_failed_from_one_that_has_fewer_collectives(failed, error):
    import torch.distributed as dist

    store = dist.HashStore()
    rank0, rank1 = CollectivePrecheck(store, 0, 5.0), CollectivePrecheck(store, 1, 5.0)
    rank0.begin_case("c")
    rank1.begin_case("c")
    rank1.end_case(3, failed=failed)
    with pytest.raises(error) as info:
        rank0(_entry(3))
    assert "rank 1" in str(info.value) and "3 collectives" in str(info.value)


# --- fault specs, the catalogue, and the CLI switch ----------------------------------------------

def test_fault_specs_parse_or_say_what_is_wrong():
    assert parse("kill@1") == ("kill", {1})
    assert parse("spin@0,1") == ("spin", {0, 1})
    assert parse("raise") == ("raise", {0})
    for bad, words in (("explode@1", "unknown fault kind 'explode'"), ("raise@x", "comma-separated integers"),
                       ("raise@-1", ">= 0")):
        with pytest.raises(UsageError, match=words):
            parse(bad)


def test_the_catalogue_pairs_each_fault_with_a_normal_case_on_the_last_rank():
    cases = fault_catalogue(3)
    assert [c.name for c in cases[0::2]] == [f"faults/{k}" for k in EXPECT]
    assert [c.name for c in cases[1::2]] == [f"faults/{k}/next" for k in EXPECT]
    assert {c.fault for c in cases[0::2]} == {f"{k}@2" for k in EXPECT}
    assert {c.fault for c in cases[1::2]} == {"none"}
    with pytest.raises(UsageError, match="world size >= 2"):
        fault_catalogue(1)


def test_a_fault_that_went_unreported_is_a_problem():
    report = RunReport("emulated-patched", "spawn", 2, 0, "natural")
    report.cases = [verdict("faults/raise", [], reuse_events=0, repro=""),
                    verdict("faults/raise/next", [], reuse_events=0, repro="")]
    problems = check_fault_run(report)
    assert problems == ["faults/raise: passed, but rank 1 had a raise fault"]


def test_faults_list_shows_the_catalogue(capsys):
    assert cli_main(["run", "--faults", "--list", "--cases", "faults/spin"]) == 0
    assert capsys.readouterr().out.split() == ["faults/spin", "faults/spin/next"]


@pytest.mark.parametrize("args,words", [
    (["--faults", "--launcher", "inproc"], "--faults needs a controller that outlives its ranks"),
    (["--faults", "--case-file", "x.json"], "--faults and --case-file both choose the cases"),
    (["--faults", "--cases", "no-such-fault"], "matches no fault case"),
])
def test_faults_switch_bad_input_is_one_line(args, words, capsys):
    assert cli_main(["run"] + args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err


def test_a_case_file_with_a_bad_fault_is_one_line(tmp_path, capsys):
    path = tmp_path / "cases.json"
    path.write_text(json.dumps({"name": "x", "model": {"dims": [4, 4]}, "fault": "explode@1"}))
    assert cli_main(["run", "--case-file", str(path), "--list"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown fault kind 'explode'" in err[0], err


# --- a signal during a clean-up waits for it -------------------------------------------------------

def test_a_first_signal_during_a_deferred_clean_up_is_raised_after_it_not_inside_it():
    import os
    import signal

    from harness.runner.interrupts import Interrupted, interruptible

    steps = []
    with pytest.raises(Interrupted, match="SIGTERM"):
        with interruptible() as signals:
            with signals.deferred():
                os.kill(os.getpid(), signal.SIGTERM)     # the handler runs before the next line
                steps.append("clean-up went on")
            steps.append("not reached")
    assert steps == ["clean-up went on"]


def test_outside_a_deferred_clean_up_the_first_signal_interrupts_at_once():
    import os
    import signal

    from harness.runner.interrupts import Interrupted, interruptible

    steps = []
    with pytest.raises(Interrupted, match="SIGTERM"):
        with interruptible():
            os.kill(os.getpid(), signal.SIGTERM)
            steps.append("not reached")
    assert steps == []


def test_a_crash_dump_holds_the_crashing_frame_and_reads_no_thread_that_runs_meanwhile(tmp_path):
    # What a rank installs; then a thread runs Python while the main thread crashes in C code
    # (ctypes releases the GIL), the case in which reading the running thread can cut the dump.
    path = tmp_path / "stacks.txt"
    code = ("import ctypes, sys, threading, time\n"
            "from harness.runner.rank.worker import install_stack_dumps\n"
            f"install_stack_dumps(open({str(path)!r}, 'a'))\n"
            "def busy():\n"
            "    while True:\n"
            "        sum(range(100))\n"
            "threading.Thread(target=busy, daemon=True).start()\n"
            "time.sleep(0.05)\n"
            "def crash_here():\n"
            "    ctypes.string_at(0)\n"
            "crash_here()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -11
    text = path.read_text()
    assert text.startswith("Fatal Python error: Segmentation fault")
    assert "in crash_here" in text and "in busy" not in text and "Thread 0x" not in text
    assert dump_complete(text)
