"""Userbuffers counters that wrap after many operations, on spawned ranks.

Known bad: ``tests/planted/ub_counter_wraps.py`` keeps each communicator's release counter
modulo 64, 128 or 256 operations. The Userbuffers cases alone take a communicator through a few
dozen operations; the long-process case of the default run takes one through at least 512, so
the plain run meets the wrap whatever its width, and the printed repro (the long case, which
replays the operations the failure needed) fails the same way in a fresh process.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest

from harness.case.catalog import builtin_cases, select_cases
from harness.runner.config import RunConfig
from harness.runner.session import run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WRAPS = {64: "WRAPS_AT_64", 128: "WRAPS_AT_128", 256: "WRAPS_AT_256"}


def _run(sut: str):
    cases = select_cases(builtin_cases(world_size=2), "userbuffers")
    return run(RunConfig(sut=sut, launcher="spawn", world_size=2, isolation=False, cases=cases, reuse="natural",
                         deadline_s=3.0))


def _wrapped(report, wrap: int):
    failed = [c for c in report.cases if c.outcome == "failed"]
    assert failed, [(c.name, c.outcome) for c in report.cases]
    hits = [c for c in failed if f"after operation #{wrap - 1} (counter 0, expected {wrap})" in c.detail]
    assert hits, [(c.name, c.oracle, c.detail[:400]) for c in failed]
    return hits[0]


@pytest.mark.parametrize("wrap", sorted(WRAPS))
def test_a_counter_that_wraps_is_met_by_the_plain_run(wrap):
    _wrapped(_run(f"tests.planted.ub_counter_wraps:{WRAPS[wrap]}"), wrap)


def test_the_wrapping_counters_repro_fails_in_a_fresh_process(tmp_path):
    case = _wrapped(_run("tests.planted.ub_counter_wraps:WRAPS_AT_256"), 256)
    argv = shlex.split(case.repro)
    assert argv[:4] == ["python", "-m", "harness", "run"], case.repro
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p))
    out = tmp_path / "repro.json"
    again = subprocess.run([sys.executable] + argv[1:] + ["--json", str(out)], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 1, again.stdout + again.stderr
    [ran] = json.loads(out.read_text())["cases"]
    assert ran["outcome"] == "failed" and "(counter 0, expected 256)" in ran["detail"], ran


def test_the_patched_stack_passes_the_long_cases():
    report = _run("emulated-patched")
    assert all(c.outcome == "passed" for c in report.cases), [(c.name, c.detail[:300]) for c in report.cases]
