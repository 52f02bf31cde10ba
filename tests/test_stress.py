"""The stress runner: generation, shrinking, reports, repro commands, interruption.

The end-to-end runs use ``--launcher inproc`` (no rank group to start), each a few seconds.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH", "")) if p)
    return env


def _stress_cmd(out, *args) -> list[str]:
    return [sys.executable, "-m", "harness", "stress", "--launcher", "inproc", "--out", str(out), *args]


class _Run:
    """A stress run started in the background; ``result()`` waits for it."""

    def __init__(self, out, *args):
        self.out = out
        self.proc = subprocess.Popen(_stress_cmd(out, *args), cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self._done = None

    def result(self, timeout=120) -> subprocess.CompletedProcess:
        if self._done is None:
            try:
                out, err = self.proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                out, err = self.proc.communicate()
            self._done = subprocess.CompletedProcess(self.proc.args, self.proc.returncode, out, err)
        return self._done


def _load(out) -> dict:
    with open(os.path.join(out, "stress.json")) as fh:
        return json.load(fh)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Both end-to-end runs, started at once in the background; the first tests of this file ask
    for them only so that they run meanwhile."""
    patched = _Run(tmp_path_factory.mktemp("stress-patched"), "--sut", "emulated-patched", "--minutes", "0.05",
                   "--seed", "3")
    buggy = _Run(tmp_path_factory.mktemp("stress-buggy"), "--sut", "emulated-buggy", "--minutes", "0.5", "--seed",
                 "2", "--max-failures", "1", "--shrink-seconds", "5")
    yield {"patched": patched, "buggy": buggy}
    for run in (patched, buggy):
        run.result()


# --- generation and shrinking, in this process ------------------------------------------------
@pytest.mark.usefixtures("runs")
def test_batches_are_drawn_deterministically_from_the_seed():
    from harness.stress.explore import canonical, draw_batch

    a = [canonical(c) for c in draw_batch(11, 25)]
    assert a == [canonical(c) for c in draw_batch(11, 25)]
    assert a != [canonical(c) for c in draw_batch(12, 25)]
    for case in draw_batch(11, 25):
        assert case.model.recipe.reduce_amax is True
        assert 1 <= len(case.model.dims) - 1 <= 3 and all(8 <= d <= 64 for d in case.model.dims)
        assert 1 <= case.steps <= 6 and 1 <= case.models <= 4
        assert case.reuse in ("", "natural", "symmetric", "asymmetric")


@pytest.mark.usefixtures("runs")
def test_hypothesis_shrinks_a_failing_case_of_a_batch_to_the_simplest_one():
    from harness.stress.explore import draw_batch, shrink_in_batch

    def fails(case):
        return case.model.fp8_params and case.models >= 2

    batch = draw_batch(5, 60)
    index = next(i for i, c in enumerate(batch) if fails(c))
    outcome = shrink_in_batch(5, index, batch[index], fails, deadline=time.monotonic() + 30)
    assert outcome.found
    m = outcome.minimal
    assert fails(m)
    assert (m.models, m.steps, m.model.dims, m.special, m.reuse) == (2, 1, (8, 8), "none", "")
    assert m.model.recipe.short() == "hybrid-h1-max-m0"


# --- end to end --------------------------------------------------------------------------------
def _assert_passed_or_not_exercised(cases):
    """Every case passed, or was skipped as not exercised, with its reason (a forced reuse that
    found no dead id: where the allocator put things, so which cases a time budget reaches
    decides whether one is among them). A skip is never a failure; at least one case passed."""
    outcomes = {c["name"]: (c["outcome"], c.get("skip_reason") or "") for c in cases}
    assert all(o == "passed" or (o == "skipped" and why.startswith("not exercised"))
               for o, why in outcomes.values()), outcomes
    assert any(o == "passed" for o, _ in outcomes.values()), outcomes


def test_patched_stack_has_no_failure_and_readable_reports(runs):
    out, proc = runs["patched"].out, runs["patched"].result()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = _load(out)
    t = data["totals"]
    assert data["complete"] and data["format"] == "harness-stress/2"
    assert t["cases"] >= 1 and t["failures"] == 0 and t["failing_cases"] == 0
    assert t["models_built"] >= t["cases"]
    assert len(data["cases"]) == t["cases"]
    assert all(c["spec"]["name"] == c["name"] for c in data["cases"])
    _assert_passed_or_not_exercised(data["cases"])
    with open(os.path.join(out, "index.html")) as fh:
        page = fh.read()
    assert page.count("data:image/png;base64,") == 4
    for name in ("cases_per_s", "reuse_events", "failures_by_oracle", "case_durations"):
        with open(os.path.join(out, "plots", f"{name}.png"), "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    suite = ET.parse(os.path.join(out, "junit.xml")).getroot()
    assert int(suite.get("tests")) == t["cases"] and int(suite.get("failures")) == 0
    assert "cases" in proc.stderr and "cases/s" in proc.stderr     # the progress line


def _fake_run(tmp_path, failure) -> list:
    """A command that writes a one-case run report (its one failure ``failure``) to the path
    after ``--json`` and exits 1."""
    case = {"name": "my/case", "outcome": "failed", "oracle": failure.oracle, "detail": failure.line(),
            "failures": [failure.to_dict()]}
    script = tmp_path / "fake_run.py"
    script.write_text("import json, sys\n"
                      f"json.dump({{'cases': [{case!r}]}}, open(sys.argv[sys.argv.index('--json') + 1], 'w'))\n"
                      "sys.exit(1)\n")
    return ["python", str(script)]


def test_the_repro_check_wants_the_same_failure_not_only_the_same_oracle(tmp_path):
    from harness.oracles.findings import Failure
    from harness.stress.repro import verify
    from harness.stress.signature import signature

    found = Failure("cross-rank", "registries differ before collective #5", rank=0,
                    kind="CollectiveMismatch: registries differ between ranks before a collective",
                    site="harness/stacks/emulated/amax_buffers.py reduce_and_update", collective="all_reduce")
    wanted = signature(found)
    again = dataclasses.replace(found, detail="registries differ before collective #9", rank=1)
    assert verify(_fake_run(tmp_path, again), "my/case", "cross-rank", 30, wanted).reproduced
    other = dataclasses.replace(found, site="harness/stacks/ub.py exchange")
    check = verify(_fake_run(tmp_path, other), "my/case", "cross-rank", 30, wanted)
    assert check.reproduced is False and check.exit_code == 1 and check.oracle == "cross-rank"
    # found in the run alone, reproduced in a shared run: one failure
    alone = dataclasses.replace(found, oracle="isolation", passed_on="cross-rank", detail="failed by itself: ...")
    assert verify(_fake_run(tmp_path, found), "my/case", "isolation", 30, signature(alone)).reproduced


def test_buggy_stack_failure_is_shrunk_and_its_command_reproduces_it(runs, tmp_path):
    out, proc = runs["buggy"].out, runs["buggy"].result()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = _load(out)
    failure = data["failures"][0]
    repro = failure["repro"]
    assert repro["verified"] is True, repro
    assert repro["command"] in proc.stdout
    with open(os.path.join(out, "repro-1.json")) as fh:
        cases = json.load(fh)
    assert cases[-1]["name"] == repro["target"]
    # Shrunk: no bigger than the case found, in every dimension the shrinker reduces.
    assert repro["steps"] <= failure["original"]["steps"] and repro["models"] <= failure["original"]["models"]
    assert repro["layers"] <= failure["original"]["layers"]
    # The printed command, run the way a user would: exit 1, the same oracle on the same case.
    argv = shlex.split(repro["command"])
    assert argv[:4] == ["python", "-m", "harness", "run"] and "--case-file" in argv
    report = tmp_path / "repro.json"
    again = subprocess.run([sys.executable] + argv[1:] + ["--json", str(report)], cwd=ROOT, env=_env(),
                           capture_output=True, text=True, timeout=90)
    assert again.returncode == 1, again.stdout + again.stderr
    with open(report) as fh:
        ran = json.load(fh)
    assert [c["oracle"] for c in ran["cases"] if c["name"] == repro["target"]] == [failure["oracle"]]


def test_sigint_leaves_a_readable_report_with_the_cases_finished(tmp_path):
    out = tmp_path / "stress-interrupted"
    cmd = _stress_cmd(out, "--sut", "emulated-patched", "--minutes", "2", "--seed", "4")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        cases = 0
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                cases = len(_load(out)["cases"])
            except (OSError, ValueError):
                cases = 0
            if cases >= 2:
                break
            time.sleep(0.1)
        assert cases >= 2, "the run finished no case in time"
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130
    data = _load(out)
    assert data["interrupted"] and "SIGINT" in data["interrupted"] and not data["complete"]
    assert len(data["cases"]) >= cases and data["totals"]["cases"] == len(data["cases"])
    _assert_passed_or_not_exercised(data["cases"])


def test_trend_over_several_runs(runs, tmp_path, capsys):
    from harness.report.trend import main

    out = runs["patched"].out
    assert runs["patched"].result().returncode == 0
    older = tmp_path / "older"
    older.mkdir()
    data = _load(out)
    data["started_at"] = "2001-01-01T02:00:00+00:00"
    data["totals"]["failures_by_oracle"] = {"hygiene": 3}
    (older / "stress.json").write_text(json.dumps(data))
    page = tmp_path / "trend.html"
    assert main([str(out), str(older), "--html", str(page)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["date", "stack", "cases"]
    assert lines[2].startswith("2001-01-01") and "hygiene:3" in lines[2]
    assert "emulated-patched" in lines[3]
    assert page.read_text().count("data:image/png;base64,") == 3


def test_trend_rejects_folders_without_a_report(tmp_path, capsys):
    from harness.errors import UsageError
    from harness.report.trend import main

    with pytest.raises(UsageError):
        main([str(tmp_path)])
    assert "skipped" in capsys.readouterr().err


def test_a_repro_that_does_not_reproduce_is_retried_with_a_later_case(tmp_path):
    import io

    from harness.case.spec import CaseSpec
    from harness.fp8.recipe import DelayedScalingRecipe
    from harness.runner.config import RunConfig
    from harness.stacks.protocol import ModelSpec
    from harness.stress.progress import Progress
    from harness.stress.session import StressOptions, StressSession
    from harness.report.stress_failure import Check, Repro, Status
    from harness.report.stress_model import Batch
    from harness.stress.shrink import FailureContext

    cfg = RunConfig(sut="emulated-buggy", launcher="inproc", world_size=1)
    session = StressSession(cfg, StressOptions(minutes=1, out_dir=str(tmp_path), seed=1),
                            Progress(60, stream=io.StringIO()))
    model = ModelSpec(dims=(8, 8), recipe=DelayedScalingRecipe())
    cases = [CaseSpec(name=f"stress/b000/c00{i}", model=model, steps=1, models=1) for i in range(3)]
    record = session.record
    entry = record.add_case(0, 0, cases[0], _report(cases[0].name), 0.0, 1)
    failure = record.new_failure("hygiene", entry, cases[0], 0, "hygiene: R holds a dead id")
    outcomes = iter([False, True])

    def reproduce(ctx, path):
        with open(path, "w") as fh:
            fh.write("[]")
        return Repro(file=path, command="python -m harness run ...", kind="minimal", cases=1,
                     verified=next(outcomes), target=ctx.batch_cases[ctx.index].name,
                     verification=Check(reproduced=False, exit_code=1, oracle="hygiene"))

    session.shrinker.reproduce = reproduce
    batch = Batch(index=0, seed=1, size=3, started_s=0.0, file="b.json", replay="python -m harness run ...")
    session.provisional(FailureContext(failure, cases, 1, 3, 0, 0), batch)
    session._reproduce(FailureContext(failure, cases, 1, 3, 0, 0), batch)
    assert failure.status is Status.NOT_REPRODUCED and failure.tries == 1
    session._reproduce(FailureContext(failure, cases, 1, 3, 2, 0), batch)
    assert failure.status is Status.REPRODUCED and failure.tries == 2
    assert failure.repro.target == "stress/b000/c002"
    assert failure.repro.file.endswith("repro-1.json") and os.path.exists(tmp_path / "repro-1.json")
    assert not os.path.exists(tmp_path / "repro-1.retry.json")
    assert [t.target for t in failure.other_tries] == ["stress/b000/c000"]


def _report(name):
    from harness.report.model import CaseReport

    return CaseReport(name, "failed", "hygiene", ["hygiene"], [0], 0, "stale id")


def test_an_out_folder_that_cannot_be_made_is_one_line_and_exit_2(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    proc = subprocess.run(_stress_cmd(blocker / "out", "--minutes", "1"), cwd=ROOT, env=_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: --out {str(blocker / 'out')!r} cannot be created"), lines


def test_no_isolation_reaches_every_group_and_every_replay_command(runs, tmp_path):
    # isolation is on by default ...
    assert runs["patched"].result().returncode == 0
    assert _load(runs["patched"].out)["config"]["isolation"] is True
    # ... and --no-isolation turns it off in each group, and in the commands that replay a batch
    out = tmp_path / "noiso"
    done = subprocess.run(_stress_cmd(out, "--sut", "emulated-patched", "--world-size", "1", "--no-isolation",
                                      "--groups", "2", "--max-cases", "4", "--minutes", "0.5"),
                          cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    reports = [_load(out)] + [_load(out / f"group-{g}") for g in (0, 1)]
    assert [r["config"]["isolation"] for r in reports] == [False, False, False]
    assert reports[0]["totals"]["cases"] == 4
    assert all(shlex.split(b["replay"])[-1] == "--no-isolation" for b in reports[0]["batches"])
