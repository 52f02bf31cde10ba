"""Registries left apart between ranks by one case are charged to that case, not the next.

Known bad: ``tests/planted/destroy_log_one_rank.py`` fills a declared registry on rank 1 only, when a
model dies. ``repro/hygiene`` (one model) ends with it apart, after its last collective, and passes;
``repro/prelude`` (one model) then meets the drift at its first collective. The finding names
``repro/hygiene`` as the case that left it, and the repro command runs both cases, in that order,
and fails the same way; each case alone passes.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

from harness.case.catalog import builtin_cases
from harness.runner.config import RunConfig
from harness.runner.session import run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUT = "tests.planted.destroy_log_one_rank:STACK"


def _cases(*names):
    by_name = {c.name: c for c in builtin_cases(world_size=2)}
    return [by_name[n] for n in names]


def test_drift_at_start_names_each_registry_apart_and_nothing_when_they_agree():
    from harness.oracles.crossrank import drift_at_start

    same = {"a.X": [1, 1, "d1"], "b.Y": [0, 0, "d0"]}
    assert drift_at_start({0: same, 1: dict(same)}) == []
    lines = drift_at_start({0: same, 1: {**same, "b.Y": [1, 1, "d2"]}})
    assert lines == ["b.Y: rank 0: 0 keys, 0 entries (shape digest d0); rank 1: 1 keys, 1 entries (shape digest d2)"]


def test_drift_left_by_a_case_is_charged_to_it_and_the_repro_runs_both_cases(tmp_path):
    report = run(RunConfig(sut=SUT, launcher="spawn", world_size=2, isolation=False, reuse="natural",
                           cases=_cases("repro/hygiene", "repro/prelude")))
    first, second = report.cases
    assert first.outcome == "passed", first.detail
    assert second.outcome == "failed" and second.oracle == "cross-rank", second.detail
    assert second.detail.startswith(
        "[cross-rank] drift left by repro/hygiene: the registries already differed between ranks when this case "
        "began, before it built anything, so the case before it, repro/hygiene, left them apart:\n  "
        "planted.DESTROYED: rank 0: 0 keys, 0 entries"), second.detail
    assert "registries differ between ranks before collective #0" in second.detail, second.detail
    argv = shlex.split(second.repro)
    assert argv[argv.index("--cases") + 1] == "repro/hygiene,repro/prelude", second.repro
    # the printed command, run as printed: the same failure, charged to the same case
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p))
    out = tmp_path / "repro.json"
    again = subprocess.run([sys.executable] + argv[1:] + ["--json", str(out)], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=180)
    assert again.returncode == 1, again.stdout + again.stderr
    ran = {c["name"]: c for c in json.loads(out.read_text())["cases"]}
    assert ran["repro/hygiene"]["outcome"] == "passed", ran
    assert ran["repro/prelude"]["oracle"] == "cross-rank", ran
    assert ran["repro/prelude"]["detail"].startswith("[cross-rank] drift left by repro/hygiene:"), ran
    # the second case alone does not fail: the drift is not its own
    [alone] = run(RunConfig(sut=SUT, launcher="spawn", world_size=2, isolation=False, reuse="natural",
                            cases=_cases("repro/prelude"))).cases
    assert alone.outcome == "passed", alone.detail
