"""Stress end to end with shards and groups: the same shard gives the same cases, groups run side
by side and shrink a failure once, and every bad input is one line, exit 2, nothing written over.

The runs use ``--launcher inproc`` (no rank group to start) and ``--max-cases``, so the cases
they run do not depend on the machine's speed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from harness.cli import main as harness_main
from harness.stress.claims import FolderClaims

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env(**extra) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


def _start(out, *args, **env) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "harness", "stress", "--launcher", "inproc", "--out", str(out), *args]
    return subprocess.Popen(cmd, cwd=ROOT, env=_env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen, timeout=240) -> subprocess.CompletedProcess:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _load(out) -> dict:
    with open(os.path.join(out, "stress.json")) as fh:
        return json.load(fh)


def test_the_same_shard_twice_runs_the_same_cases(tmp_path):
    args = ("--sut", "emulated-patched", "--shard", "1/4", "--seed", "11", "--max-cases", "6", "--minutes", "5",
            "--batch-seconds", "600")
    runs = [_start(tmp_path / f"r{k}", *args) for k in range(2)]
    for proc in runs:
        result = _finish(proc)
        assert result.returncode == 0, result.stderr[-2000:]
    a, b = (_load(tmp_path / f"r{k}") for k in range(2))
    assert [(c["name"], c["spec"]) for c in a["cases"]] == [(c["name"], c["spec"]) for c in b["cases"]]
    assert len(a["cases"]) == 6 and all(c["name"].startswith("stress/b001/") for c in a["cases"])
    assert a["config"]["shard"] == "1/4" and a["config"]["stream"] == {"index": 1, "count": 4}


def test_two_groups_run_side_by_side_and_shrink_a_failure_once(tmp_path):
    out = tmp_path / "g"
    # Seed 10: the first five cases of batch 0 (group 0) and of batch 1 (group 1) each hold a case with
    # FP8 parameters and several models, which the buggy stack's bookkeeping fails the same way. A
    # seed's cases change when stress learns to draw more (then pick a seed that has such a pair).
    result = _finish(_start(out, "--sut", "emulated-buggy", "--groups", "2", "--seed", "10", "--max-cases", "10",
                            "--minutes", "5", "--batch-seconds", "600", "--shrink-seconds", "3"), timeout=400)
    assert result.returncode == 1, result.stderr[-3000:]
    merged = _load(out)
    assert merged["totals"]["parts"] == 2 and merged["config"]["groups"] == 2
    assert merged["totals"]["cases"] == 10
    groups = [_load(out / f"group-{g}") for g in range(2)]
    assert [g["config"]["stream"] for g in groups] == [{"index": 0, "count": 2}, {"index": 1, "count": 2}]
    assert {c["name"].split("/")[1] for c in groups[0]["cases"]} <= {"b000", "b002", "b004"}
    assert {c["name"].split("/")[1] for c in groups[1]["cases"]} <= {"b001", "b003", "b005"}
    # Each signature was shrunk and checked by one group at most; the other counted its cases.
    for failure in merged["failures"]:
        checked = [g for g in groups for f in g["failures"]
                   if f["signature"] == failure["signature"] and (f.get("repro") or {}).get("verification")]
        assert len(checked) <= 1, failure["signature"]
        others = [f for g in groups for f in g["failures"] if f["signature"] == failure["signature"]
                  and f.get("shrunk_by_group") is not None]
        assert all(f.get("repro") is None for f in others)
    assert any(len(f["parts"]) == 2 for f in merged["failures"]), "no failure was found by both groups"
    assert "[group 0]" in result.stderr and "[group 1]" in result.stderr
    assert os.path.isfile(out / "index.html") and os.path.isfile(out / "junit.xml")


def test_claims_give_a_signature_to_the_first_group(tmp_path):
    a, b = FolderClaims(str(tmp_path), 0), FolderClaims(str(tmp_path), 1)
    assert a.claim("hygiene: X holds a dead id") is None
    assert b.claim("hygiene: X holds a dead id") == 0
    assert a.claim("hygiene: X holds a dead id") == 0          # claimed once, for good
    assert b.claim("cross-rank: Y") is None and a.count() == b.count() == 2


# --- bad input: one line, exit 2, nothing written over --------------------------------------------
@pytest.mark.parametrize("args,words", [
    (["--shard", "4/4"], "I must be 0 to 3"),
    (["--shard", "x"], "--shard must be I/N"),
    (["--groups", "0"], "--groups must be a whole number >= 1"),
    (["--groups", "many"], "--groups must be a whole number >= 1"),
    (["--sut", "tests.stacks.fake_gpus:STACK", "--world-size", "2", "--groups", "3"], "needs 6 GPUs"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, monkeypatch, args, words):
    monkeypatch.setenv("FAKE_GPU_COUNT", "4")
    out = tmp_path / "out"
    out.mkdir()
    (out / "stress.json").write_text("an earlier night\n")
    code = harness_main(["stress", "--out", str(out), "--minutes", "0.1", *args])
    err = capsys.readouterr().err
    assert code == 2 and words in err and err.count("\n") == 1, err
    assert sorted(os.listdir(out)) == ["stress.json"] and (out / "stress.json").read_text() == "an earlier night\n"


def test_gpu_groups_that_fit_are_planned_on_gpus_of_their_own(monkeypatch, capsys):
    from harness.stress.cli import _plan_groups, build_parser
    from harness.runner.options import Front, config_from_values, options_for
    from harness.stacks import load_stack

    monkeypatch.setenv("FAKE_GPU_COUNT", "4")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    args = build_parser().parse_args(["--out", "x", "--sut", "tests.stacks.fake_gpus:STACK", "--world-size", "2",
                                      "--groups", "2", "--oversubscribe"])
    cfg = config_from_values({o.field: getattr(args, o.field) for o in options_for(Front.STRESS)}, Front.STRESS)
    plan = _plan_groups(args, cfg, load_stack(cfg.sut, cfg.sut_options()))
    assert plan.groups == 2 and plan.devices == ["0,1", "2,3"]
    args.groups = "auto"
    capsys.readouterr()
    plan = _plan_groups(args, cfg, load_stack(cfg.sut, cfg.sut_options()))
    assert plan.devices[0] == "0,1"
    said = capsys.readouterr().out
    assert f"--groups auto: {plan.groups} group(s) of 2 rank(s)" in said and "4 GPU(s)" in said, said


def _alive_with(text: str) -> list[int]:
    """Pids of processes whose command line mentions ``text``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if text.encode() in fh.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


def test_sigint_stops_every_group_and_merges_what_they_finished(tmp_path):
    out = tmp_path / "interrupted"
    proc = _start(out, "--sut", "emulated-patched", "--groups", "2", "--seed", "4", "--minutes", "3")
    try:
        deadline = time.monotonic() + 180
        done = [0, 0]
        while time.monotonic() < deadline and proc.poll() is None and min(done) < 1:
            for g in range(2):
                try:
                    done[g] = len(_load(out / f"group-{g}")["cases"])
                except (OSError, ValueError):
                    done[g] = 0
            time.sleep(0.2)
        assert min(done) >= 1, f"the groups finished no case in time: {done}"
        proc.send_signal(signal.SIGINT)
        result = _finish(proc, timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert result.returncode == 130, result.stderr[-2000:]
    merged = _load(out)
    assert merged["complete"] is False and "SIGINT" in (merged["interrupted"] or "")
    assert merged["totals"]["cases"] >= sum(done) and merged["totals"]["parts"] == 2
    assert _alive_with(str(out)) == []          # no group, rank or zygote left behind
