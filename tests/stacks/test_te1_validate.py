"""scripts/te1-validate without a GPU: its syntax, its dry run, and its refusals of bad input."""

from __future__ import annotations

import os
import pathlib
import subprocess

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "te1-validate"


def run(*args, out="/nonexistent/te1-out"):
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    if out is not None:
        env["OUT"] = out
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=60, env=env)


def test_syntax():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], timeout=60).returncode == 0


def test_dry_run_prints_every_step_under_timeout_and_writes_nothing(tmp_path):
    out = tmp_path / "out"
    done = run("--dry-run", out=str(out))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 6 and all(line.startswith("timeout -k 10 ") for line in lines)
    assert "-m harness.stacks.te1.probe --cycles 6" in lines[0]
    assert [line.count("--sut te1 --world-size 1") for line in lines[1:]] == [1] * 5
    assert "--reuse symmetric" in lines[4] and "--reuse off --seed 0" in lines[5]
    assert not out.exists()


def test_steps_can_be_chosen():
    done = run("--dry-run", "reuse,off")
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 2


def test_world_size_goes_to_every_run_and_the_cross_rank_steps_run_three_times():
    done = run("--dry-run", "--world-size", "2", "plain,asymmetric,no-precheck,phases")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 12 and all("--sut te1 --world-size 2 --deadline 60" in line for line in lines), lines
    assert sum("--reuse asymmetric" in line and "--no-precheck" not in line for line in lines) == 3
    assert sum("--reuse asymmetric --no-precheck" in line for line in lines) == 3
    assert sum("-m harness.bench.phases" in line for line in lines) == 3


def test_te_2x_runs_the_catalogue_userbuffers_and_the_cross_rank_repro_by_default():
    done = run("--dry-run", "--sut", "te", "--world-size", "2")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 9, lines
    assert all("--sut te --world-size 2 --deadline 60" in line for line in lines[:4])
    assert "--cases userbuffers" in lines[3]
    assert all("--sut te-buggy --world-size 2 --deadline 60 --reuse asymmetric --cases repro/cross-rank" in line
               for line in lines[4:])


def test_stress_runs_at_the_world_size_and_at_one_side_by_side():
    lines = run("--dry-run", "--sut", "te", "--world-size", "2", "stress").stdout.splitlines()
    assert [line.split("--world-size ")[1].split()[0] for line in lines] == ["2", "1"], lines
    assert len(run("--dry-run", "--sut", "te", "stress").stdout.splitlines()) == 1   # world size 1: once


def test_a_spent_budget_skips_the_runs_and_still_writes_the_summary(tmp_path):
    out = tmp_path / "out"
    done = run("--sut", "te", "--budget", "1", "plain", out=str(out))
    assert done.returncode == 0, done.stderr
    summary = (out / "summary.txt").read_text()
    assert summary.count("not run: the budget of 1 s is spent") == 3, summary
    assert (out / "logs.tar.gz").exists() and (out / "reports.tar.gz").exists()
    assert not list(out.glob(".logs.*")) and not list(out.glob(".reports.*"))


def test_bad_input_is_one_line_and_exit_2():
    for args, out, message in ((("bogus",), "/tmp/x", "unknown step 'bogus'"),
                               (("--frobnicate",), "/tmp/x", "unknown option --frobnicate"),
                               (("probe",), None, "set OUT"),
                               (("--world-size", "0"), "/tmp/x", "--world-size needs a whole number >= 1"),
                               (("--world-size",), "/tmp/x", "--world-size needs a whole number >= 1"),
                               (("--sut", "te2"), "/tmp/x", "--sut is te1 or te"),
                               (("--budget", "-3"), "/tmp/x", "--budget needs a whole number of seconds >= 1"),
                               (("--sut", "te", "probe"), "/tmp/x", "step 'probe' is for --sut te1"),
                               (("--sut", "te", "own-tests"), "/tmp/x", "step 'own-tests' is for --sut te1"),
                               (("userbuffers",), "/tmp/x", "step 'userbuffers' is for --sut te"),
                               (("cross-rank",), "/tmp/x", "step 'cross-rank' is for --sut te")):
        done = run(*args, out=out)
        assert done.returncode == 2 and message in done.stderr and done.stderr.count("\n") == 1, done.stderr
