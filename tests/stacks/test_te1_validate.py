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


def test_bad_input_is_one_line_and_exit_2():
    for args, out, message in ((("bogus",), "/tmp/x", "unknown step 'bogus'"),
                               (("--frobnicate",), "/tmp/x", "unknown option --frobnicate"),
                               (("probe",), None, "set OUT"),
                               (("--world-size", "0"), "/tmp/x", "--world-size needs a whole number >= 1"),
                               (("--world-size",), "/tmp/x", "--world-size needs a whole number >= 1")):
        done = run(*args, out=out)
        assert done.returncode == 2 and message in done.stderr and done.stderr.count("\n") == 1, done.stderr
