"""A case the stack declines is skipped with the stack's reason: in the terminal, the JSON, JUnit,
pytest and the stress reports; never an error, never sent to a rank, never a failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

import pytest

from harness.case.spec import CaseSpec
from harness.fp8.recipe import DelayedScalingRecipe
from harness.report.model import CaseReport, skipped
from harness.stacks.protocol import ModelSpec

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH", "")) if p)
    return env


def _spec(name: str, **model) -> dict:
    fields = {"dims": [8, 8], **model}
    return {"name": name, "model": fields, "steps": 1, "models": 1}


# The emulated stacks run TE's delayed scaling only, and tensor parallelism needs two ranks.
RUNS = _spec("probe/runs")
TENSORWISE = _spec("probe/tensorwise", scaling="tensorwise")
USERBUFFERS = _spec("probe/userbuffers", dims=[32, 32], userbuffers=True, data_parallel=False)


def test_declined_cases_are_skipped_in_the_terminal_json_and_junit(tmp_path):
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps([RUNS, USERBUFFERS, TENSORWISE]))
    report, junit = tmp_path / "run.json", tmp_path / "run.xml"
    proc = subprocess.run([sys.executable, "-m", "harness", "run", "--launcher", "inproc", "--case-file", str(cases),
                           "--json", str(report), "--junit", str(junit)], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SKIP  probe/userbuffers  (emulated-patched declines this case: userbuffers=true at world size 1" \
        in proc.stdout
    assert "1 passed, 0 failed, 0 errors, 2 skipped" in proc.stdout
    assert "skipped: 1 case: emulated-patched declines this case: scaling='tensorwise'" in proc.stdout

    data = json.loads(report.read_text())
    by_name = {c["name"]: c for c in data["cases"]}
    assert data["summary"] == {"passed": 1, "failed": 0, "errors": 0, "skipped": 2}
    assert by_name["probe/runs"]["outcome"] == "passed" and by_name["probe/runs"]["skip_reason"] == ""
    ub = by_name["probe/userbuffers"]
    assert ub["outcome"] == "skipped" and ub["oracle"] is None and ub["models_built"] == 0
    assert "needs at least 2 ranks" in ub["skip_reason"]
    assert by_name["probe/tensorwise"]["skip_reason"] == (
        "emulated-patched declines this case: scaling='tensorwise' (it runs delayed): "
        "the emulated stacks implement TE's delayed scaling only")

    suite = ET.parse(junit).getroot()
    assert (suite.get("tests"), suite.get("skipped"), suite.get("errors"), suite.get("failures")) == ("3", "2", "0", "0")
    skips = {tc.get("name"): tc.find("skipped") for tc in suite.iter("testcase")}
    assert skips["probe/runs"] is None
    assert skips["probe/tensorwise"].get("message") == by_name["probe/tensorwise"]["skip_reason"]
    assert skips["probe/userbuffers"].get("message") == ub["skip_reason"]


def test_the_controller_decides_before_any_rank_starts():
    from harness.runner.config import RunConfig
    from harness.runner.session import open_session

    session = open_session(RunConfig(launcher="spawn", world_size=2))
    try:
        report = session.run(CaseSpec.from_dict(TENSORWISE))
        assert report.outcome == "skipped" and "scaling='tensorwise'" in report.skip_reason
        assert report.repro.startswith("python -m harness run --sut emulated-patched --launcher spawn")
        assert session.backend.group is None and session.backend.groups_started == 0
    finally:
        session.close()


def test_every_spmd_rank_skips_the_declined_case_and_runs_the_next(tmp_path):
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    if not os.path.exists(torchrun):
        pytest.skip("no torchrun beside this Python")
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps([TENSORWISE, RUNS, USERBUFFERS]))
    report = tmp_path / "run.json"
    proc = subprocess.run([torchrun, "--standalone", "--nproc-per-node", "2", "--log-dir", str(tmp_path / "agent"),
                           "-m", "harness", "run", "--case-file", str(cases), "--json", str(report)],
                          cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads(report.read_text())
    assert [(c["name"], c["outcome"]) for c in data["cases"]] == [
        ("probe/tensorwise", "skipped"), ("probe/runs", "passed"), ("probe/userbuffers", "passed")]
    assert data["complete"] and data["summary"]["skipped"] == 1


def test_pytest_skips_a_declined_case_with_the_reason(tmp_path):
    (tmp_path / "conftest.py").write_text(textwrap.dedent('''
        pytest_plugins = ["harness.pytest_plugin"]

        def pytest_addoption(parser):
            from harness.pytest_plugin import add_options

            add_options(parser)
    '''))
    (tmp_path / "test_declined.py").write_text(textwrap.dedent(f'''
        from harness.case.spec import CaseSpec
        from harness.pytest_plugin import check_case

        def test_declined(run_case):
            check_case(run_case(CaseSpec.from_dict({USERBUFFERS!r})))
    '''))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-rs", "-p", "no:cacheprovider", "--launcher", "inproc",
                           "--no-isolation", str(tmp_path)], cwd=tmp_path, env=_env(), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 skipped" in proc.stdout and "failed" not in proc.stdout and "error" not in proc.stdout
    assert "SKIPPED [1] test_declined.py:6: emulated-patched declines this case" in proc.stdout
    assert "emulated-patched declines this case: userbuffers=true at world size 1" in proc.stdout


def test_check_case_skips_with_the_reason_and_a_skipped_report_needs_one():
    from harness.pytest_plugin import check_case

    with pytest.raises(pytest.skip.Exception, match="not exercised: no id was reused"):
        check_case(skipped("c", "not exercised: no id was reused"))
    with pytest.raises(ValueError):
        skipped("c", "")


def test_check_case_warns_each_retention_finding_once_worded_as_the_report_words_it():
    from harness.pytest_plugin import HarnessRetentionWarning, check_case

    report = CaseReport("c", "passed", warnings=["retention: 48 tensors stay alive", "retention: 2 more"])
    with pytest.warns(HarnessRetentionWarning) as caught:
        check_case(report)
    assert [str(w.message) for w in caught] == ["retention: 48 tensors stay alive", "retention: 2 more"]


def test_stress_reports_count_skipped_cases_and_never_as_failures(tmp_path):
    from harness.report.html import render_stress_html
    from harness.report.stress_model import StressConfig
    from harness.stress.record import StressRecord, declaration_lines

    config = StressConfig("s", "inproc", 1, 1, "natural", minutes=1,
                          capabilities={"formats": ["HYBRID"], "scalings": ["delayed"], "constructions": ["copy"]})
    record = StressRecord(config, str(tmp_path))
    spec = CaseSpec(name="c0", model=ModelSpec(dims=(8, 8), recipe=DelayedScalingRecipe()))
    record.add_case(0, 0, spec, CaseReport("c0", "passed", models_built=1), 0.0, None)
    record.add_case(0, 1, spec.with_(name="c1"), skipped("c1", "the stack declines it: why"), 0.0, None)
    t = record.totals()
    assert (t.passed, t.skipped, t.failing_cases, t.failures) == (1, 1, 0, 0)
    assert record.cases[1].skip_reason == "the stack declines it: why"
    assert declaration_lines(t)[0].startswith("1 cases skipped")
    record.write_junit()
    suite = ET.parse(tmp_path / "junit.xml").getroot()
    assert suite.get("skipped") == "1" and suite.find("testcase/skipped").get("message") == "the stack declines it: why"
    record.finish()
    page = render_stress_html(record.report(), {})
    assert "Skipped cases (1)" in page and "the stack declines it: why" in page and "1 skipped" in page
