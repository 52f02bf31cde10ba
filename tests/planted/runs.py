"""How the planted stacks' tests run them: a selection of the default cases on two spawned ranks,
and a failing case's printed repro, run as printed in a fresh process."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

from harness.case.catalog import builtin_cases, select_cases
from harness.runner.config import RunConfig
from harness.runner.session import run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def plain_selection(sut: str, expr: str, deadline_s: float = 5.0):
    """The default run's cases that ``expr`` selects, on two spawned ranks, no isolated re-runs."""
    cases = select_cases(builtin_cases(world_size=2), expr)
    return run(RunConfig(sut=sut, launcher="spawn", world_size=2, isolation=False, cases=cases, reuse="natural",
                         deadline_s=deadline_s))


def run_repro(repro: str, out, timeout_s: float = 300):
    """``repro`` (a printed ``python -m harness run ...``) run as printed with ``--json out``:
    the finished process and the one case it ran."""
    argv = shlex.split(repro)
    assert argv[:4] == ["python", "-m", "harness", "run"], repro
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p))
    again = subprocess.run([sys.executable] + argv[1:] + ["--json", str(out)], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=timeout_s)
    [ran] = json.loads(out.read_text())["cases"] if again.returncode in (0, 1) else [None]
    return again, ran
