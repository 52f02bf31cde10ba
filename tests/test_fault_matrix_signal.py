"""The fault matrix itself, stopped by SIGINT half way: it writes what it counted, exits 130, and
leaves neither its private folder nor a process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from harness.faultmatrix.leaks import processes_with_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_an_interrupted_fault_matrix_writes_its_rows_and_leaves_nothing(tmp_path):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    out = tmp_path / "matrix.json"
    env = dict(os.environ, TMPDIR=str(tmpdir), PYTHONUNBUFFERED="1", FP8H_TEST_MARK=tmp_path.name)
    proc = subprocess.Popen([sys.executable, "-m", "harness.faultmatrix", "--repeat", "20", "--launchers", "spawn",
                             "--kinds", "raise", "--signal-runs", "0", "--json", str(out)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:
            if line.startswith("spawn: repetition 1 of 20 done"):
                break
        else:
            raise AssertionError("the matrix ended before its first repetition: " + proc.stdout.read())
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGINT, stderr
    assert "interrupted (SIGINT)" in stderr
    report = json.loads(out.read_text())
    assert report["interrupted"] == "SIGINT"
    (row,) = report["rows"]
    assert row["fault"] == "raise" and row["reported"] >= 1, row
    assert "raise" in stdout                        # the table of what was counted
    assert os.listdir(tmpdir) == []                 # its folder (and every run folder in it) is gone
    assert processes_with_env("FP8H_TEST_MARK", tmp_path.name) == []
