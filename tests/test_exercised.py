"""A case that needs id reuse and got none is named, so that the verdict can report it as skipped."""

from __future__ import annotations

from harness.case.catalog import builtin_cases
from harness.idreuse.morgue import ReusePolicy
from harness.oracles.exercised import needs_reuse, not_exercised
from harness.runner.inproc import execute_here
from harness.stacks import load_stack

CASES = {c.name: c for c in builtin_cases()}
NATURAL, SYMMETRIC = ReusePolicy.parse("natural"), ReusePolicy.parse("symmetric")


def test_a_case_needs_reuse_when_it_or_the_run_forces_it():
    assert needs_reuse(CASES["reuse/init-cast-asymmetric"], NATURAL)
    assert needs_reuse(CASES["reuse/copy-symmetric"], ReusePolicy.parse("off"))     # the case's own wins
    assert not needs_reuse(CASES["delayed/wide"], NATURAL)
    assert needs_reuse(CASES["delayed/wide"], SYMMETRIC)
    assert needs_reuse(CASES["delayed/wide"], ReusePolicy.parse("asymmetric:1"))
    assert not needs_reuse(CASES["delayed/wide"], ReusePolicy.parse("off"))


def test_a_pass_without_reuse_where_reuse_was_forced_is_not_exercised():
    case = CASES["reuse/copy-symmetric"]
    reason = not_exercised(case, NATURAL, "passed", reuse_events=0, reuse_misses=2)
    assert reason == ("not exercised: the case forces --reuse symmetric but no object took a dead object's id "
                      "on any rank, 2 forced reuse(s) did not land")
    assert not_exercised(CASES["delayed/wide"], SYMMETRIC, "passed", 0).startswith(
        "not exercised: the run forces --reuse symmetric")
    # exercised, not forced, or not a pass: nothing to say
    assert not_exercised(case, NATURAL, "passed", reuse_events=1) is None
    assert not_exercised(CASES["delayed/wide"], NATURAL, "passed", 0) is None
    assert not_exercised(case, NATURAL, "failed", 0) is None


def test_the_built_in_forced_reuse_cases_are_exercised_on_one_rank():
    stack = load_stack("emulated-patched")
    stack.reset()
    try:
        for name in ("reuse/init-cast-symmetric", "reuse/copy-asymmetric"):
            result = execute_here(CASES[name], stack)
            assert result.failures == [] and result.reuse_misses == 0, name
            # every model after the first took its predecessor's three weight ids, at least
            assert result.reuse_events >= 3 * (CASES[name].models - 1), name
            assert not_exercised(CASES[name], NATURAL, "passed", result.reuse_events) is None
    finally:
        stack.reset()


def test_a_pass_whose_module_shell_did_not_land_is_not_forced_and_the_report_names_it():
    import io

    from harness.report.model import RunReport, verdict
    from harness.report.terminal import case_line, print_summary

    case = CASES["reuse/copy-symmetric"]
    line = "rank 0: model 0: no shell landed on dead model.layers[0] (Linear) at 0x10 (20000 tries): ..."
    reason = not_exercised(case, NATURAL, "passed", reuse_events=9, shell_misses=[line, line])
    assert reason == f"not forced: the case forces --reuse symmetric but {line} (and 1 more)"
    assert not_exercised(case, NATURAL, "failed", reuse_events=9, shell_misses=[line]) is None   # a failure stands
    report = RunReport("emulated", "inproc", 1, 0, "natural",
                       [verdict(case.name, [], reuse_events=9, repro="", shell_misses=[line])])
    assert report.to_dict()["totals"]["shell_misses"] == 1 and report.to_dict()["cases"][0]["shell_misses"] == [line]
    out = io.StringIO()
    print_summary(report, out)
    assert "shell-missed=1" in case_line(report.cases[0]) and f"  {case.name}: {line}" in out.getvalue(), out.getvalue()
