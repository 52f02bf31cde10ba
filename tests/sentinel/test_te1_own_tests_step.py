"""The own-tests steps of scripts/te1-validate without a GPU: their dry run, their refusal of bad
input, and the line the summary makes of a run's log."""

from __future__ import annotations

import os
import pathlib
import subprocess

from harness.sentinel.outcome import outcome

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "te1-validate"


def run(*args, **env):
    base = {k: v for k, v in os.environ.items() if k not in ("OUT", "SENTINEL_REGISTRIES")}
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=60,
                          env={**base, "OUT": "/nonexistent/te1-out", **env})


def test_dry_run_names_the_zero_set_up_form_and_the_listed_form():
    done = run("--dry-run", "own-tests,own-tests-list", SENTINEL_REGISTRIES="te.fp8:M.a,te.fp8:M.b")
    assert done.returncode == 0, done.stderr
    scan, listed = done.stdout.splitlines()
    for line in (scan, listed):
        assert line.startswith("timeout -k 10 1200 env -C ")
        assert "-m pytest -p harness.sentinel --te1-onnx-standins" in line
        assert line.endswith("tests/pytorch/test_fusible_ops.py")
    assert "--sentinel-scan transformer_engine" in scan and "--sentinel-registry" not in scan
    assert "--sentinel-registry te.fp8:M.a --sentinel-registry te.fp8:M.b" in listed
    assert "--sentinel-scan" not in listed


def test_the_listed_form_without_a_list_is_one_line_and_exit_2():
    done = run("--dry-run", "own-tests-list")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "own-tests-list needs SENTINEL_REGISTRIES" in done.stderr


LOG = """\
    0.51 sentinel: scanned transformer_engine (/x/transformer_engine, 300 files, 2.0 s): 2 registries to watch
    0.51 sentinel: watching 2 registries: te.fp8:M.a, te.fp8:M.b
  100.20 ============ sentinel: 2 registry entries outlived their objects ============
  100.20 watched: te.fp8:M.a, te.fp8:M.b
  100.20 t.py::test_one: te.fp8:M.a key 0x7f00 -> a torch.Tensor (key made by id() at f.py:79 (hook))
  100.20 t.py::test_two: te.fp8:M.b key 0x7f10 -> a torch.Tensor (key made by id() at f.py:79 (hook))
  100.21 ERROR t.py::test_one - Failed: sentinel: 1 registry entry outlived its object:
  100.21 ERROR t.py::test_two - Failed: sentinel: 1 registry entry outlived its object:
  100.22 ============ 7 passed, 3 skipped, 2 errors in 99.70s ============
"""


def test_the_summary_line_counts_outcomes_and_names_the_registries():
    text = outcome("own-tests", LOG.splitlines(keepends=True))
    first = text.splitlines()[0]
    assert first == ("own-tests: 7 passed, 3 skipped, 2 errors; 2 test(s) failed by the sentinel, "
                     "2 finding(s) naming te.fp8:M.a, te.fp8:M.b; watched: te.fp8:M.a, te.fp8:M.b")
    assert "scanned transformer_engine" in text and "first: t.py::test_one: te.fp8:M.a" in text


def test_a_log_without_an_outcome_says_so():
    assert "no outcome line (did pytest finish?)" in outcome("own-tests", ["  1.00 collecting ...\n"])
