"""A stack method that raises, or returns what the harness cannot use, fails the case naming the
method, the exception or the value, and where in the stack's own code; the run goes on to the
next case. Under every launcher: the rank's executor is the same everywhere, but how its result
reaches the report is not."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join("tests", "stacks", "broken_stack.py")
CASES = "delayed/wide,delayed/deep-narrow"
LAUNCHERS = ["spawn", "torchrun", "mpirun", "inproc"]


def run_harness(args, tmp_path, timeout=300):
    """``python -m harness run ARGS --json`` in a plain process from the repository root; the exit
    status, stderr and the JSON report."""
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")   # torchrun, mpirun
    env["PYTHONPATH"] = REPO
    report = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "harness", "run", *args, "--json", str(report)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    return proc, (json.loads(report.read_text()) if report.exists() else None)


def failure_text(case: dict) -> str:
    return "\n".join(f["detail"] for f in case["failures"])


# stack -> what each case's failure must say: the method and what it raised (with the stack's own
# frame), or the method, the value it returned and where the stack defines it.
BROKEN = {
    "SNAPSHOT_RAISES": ("SnapshotRaises.snapshot() raised ValueError: the state of this model cannot be read",
                        HERE, "in _read_state"),
    "REGISTRIES_NONE": ("registries() returned None (NoneType); expected a dict", f"RegistriesNone.registries at {HERE}:"),
}


@pytest.mark.slow
@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("stack", sorted(BROKEN))
def test_a_broken_method_fails_each_case_naming_it_and_the_run_goes_on(stack, launcher, tmp_path):
    proc, report = run_harness(["--sut", f"tests.stacks.broken_stack:{stack}", "--launcher", launcher,
                                "--cases", CASES, "--no-isolation"], tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert [c["name"] for c in report["cases"]] == CASES.split(","), "the run stopped before its last case"
    for case in report["cases"]:
        assert case["outcome"] == "error", case
        text = failure_text(case)
        for words in BROKEN[stack]:
            assert words in text, text


def test_the_readme_skeleton_fails_every_case_at_its_first_unwritten_method(tmp_path):
    """The README's skeleton, pasted as it stands into mystack.py: every case of the catalogue
    fails, naming the first method the harness calls that is not written yet and its line there."""
    from tests.test_readme import readme_files

    text = readme_files()["mystack.py"]
    (tmp_path / "mystack.py").write_text(text)
    line = next(n for n, src in enumerate(text.splitlines(), 1) if "def registries(" in src)
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    report = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "harness", "run", "--sut", "mystack:STACK", "--json", str(report)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    cases = json.loads(report.read_text())["cases"]
    assert len(cases) > 1
    for case in cases:
        text = failure_text(case)
        assert case["outcome"] == "error" and "registries() returned None" in text, case
        assert f"MyStack.registries at mystack.py:{line}" in text, text
