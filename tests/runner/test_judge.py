"""Judging a case from every rank's results, and the pipeline that runs, re-runs and judges."""

from __future__ import annotations

import dataclasses

import pytest

from harness.case.catalog import builtin_cases
from harness.oracles.findings import Failure, Oracle
from harness.runner.config import RunConfig
from harness.runner.judge import (GroupOutcome, Recycle, case_report, judge, recycle_plan, repro_argv,
                                  repro_command_for, should_isolate)
from harness.runner.pipeline import CasePipeline
from harness.runner.rank.result import RankResult
from harness.stacks.emulated.stack import PATCHED

CASE = next(c for c in builtin_cases() if c.name == "repro/cross-rank")


def entry(seq, op="all_reduce", shapes=((2,),), site="stack.py:10 f"):
    return {"seq": seq, "op": op, "group": [0, 1], "reduce": "MAX", "shapes": [list(s) for s in shapes],
            "dtypes": ["float32"], "sites": [site]}


def result(rank, ledger, fingerprints=("a",), failures=(), digest="d", **kw):
    return RankResult(case=CASE.name, rank=rank, collectives=list(ledger), meta_fingerprints=list(fingerprints),
                      failures=list(failures), digest=digest, **kw)


def test_agreeing_ranks_pass():
    shared = GroupOutcome({0: result(0, [entry(0)]), 1: result(1, [entry(0)])}, [])
    assert judge(CASE, shared, None, 2) == []


def test_a_divergent_ledger_is_cross_rank_and_names_both_call_sites():
    shared = GroupOutcome({0: result(0, [entry(0, site="hook.py:5 after_cast")]),
                           1: result(1, [entry(0, site="autocast.py:9 exit")])}, [])
    [failure] = judge(CASE, shared, None, 2)
    assert failure.oracle == Oracle.CROSS_RANK
    assert "first divergent collective is #0" in failure.detail
    assert "hook.py:5 after_cast" in failure.detail and "autocast.py:9 exit" in failure.detail


def test_a_ledger_that_stops_early_belongs_to_the_rank_that_failed():
    shared = GroupOutcome({0: result(0, [entry(0), entry(1)]),
                           1: result(1, [entry(0)], failures=[Failure(Oracle.ERROR, "boom", rank=1)])}, [])
    assert [f.oracle for f in judge(CASE, shared, None, 2)] == [Oracle.ERROR]
    shared.results[1].failures = []
    assert [f.oracle for f in judge(CASE, shared, None, 2)] == [Oracle.LIVENESS]


def test_scales_that_differ_after_a_reduction_are_cross_rank():
    shared = GroupOutcome({0: result(0, [entry(0)], fingerprints=["a", "b"]),
                           1: result(1, [entry(0)], fingerprints=["a", "c"])}, [])
    [failure] = judge(CASE, shared, None, 2)
    assert failure.oracle == Oracle.CROSS_RANK and "after step 1" in failure.detail


def test_isolation_compares_each_rank_with_its_run_alone():
    shared = GroupOutcome({0: result(0, [entry(0)], digest="x" * 32), 1: result(1, [entry(0)], digest="y" * 32)}, [])
    alone = {0: result(0, [entry(0)], digest="x" * 32), 1: result(1, [entry(0)], digest="z" * 32)}
    [failure] = judge(CASE, shared, alone, 2)
    assert failure.oracle == Oracle.ISOLATION and failure.rank == 1 and "result digest" in failure.detail


@pytest.mark.parametrize("group_failures, rank_failures, broken, plan", [
    ([], [], False, Recycle.KEEP),
    ([], [Failure(Oracle.HYGIENE, "stale id", rank=0)], False, Recycle.KEEP),
    ([], [Failure(Oracle.CROSS_RANK, "CollectiveMismatch: collective #3 differs", rank=0)], False,
     Recycle.REGISTRIES),
    ([], [Failure(Oracle.ERROR, "ValueError", rank=0)], False, Recycle.GROUP),
    ([], [Failure(Oracle.CROSS_RANK, "first divergent collective is #2")], False, Recycle.REGISTRIES),
    ([Failure(Oracle.LIVENESS, "rank 1 hung", rank=1)], [], True, Recycle.RESPAWN),
])
def test_recycle_plan(group_failures, rank_failures, broken, plan):
    shared = GroupOutcome({}, group_failures, broken=broken)
    assert recycle_plan(shared, group_failures + rank_failures) is plan


def test_a_shared_runs_buffer_integrity_failure_empties_the_registries_an_isolated_runs_does_not():
    chunk = Failure(Oracle.BUFFER_INTEGRITY, "userbuffers 'qkv' chunk 0 mis-scaled", rank=1)
    shared = GroupOutcome({0: result(0, [entry(0)]), 1: result(1, [entry(0)], failures=[chunk])}, [])
    assert recycle_plan(shared, [chunk]) is Recycle.REGISTRIES
    # the same finding from the run alone (a child process of its own) leaves the group as it is
    clean = GroupOutcome({0: result(0, [entry(0)]), 1: result(1, [entry(0)])}, [])
    assert recycle_plan(clean, [chunk]) is Recycle.KEEP


def test_isolation_only_for_a_case_whose_communication_held_and_not_for_a_long_lived_process():
    case = CASE
    ok = GroupOutcome({0: result(0, [])}, [])
    failed = GroupOutcome({0: result(0, [], failures=[Failure(Oracle.CROSS_RANK, "x", rank=0)])}, [])
    assert should_isolate(RunConfig(), case, ok) and not should_isolate(RunConfig(), case, failed)
    assert not should_isolate(RunConfig(isolation=False), case, ok)
    assert not should_isolate(RunConfig(), case, GroupOutcome({}, [], broken=True))
    assert not should_isolate(RunConfig(), dataclasses.replace(case, cycles=300), ok)


def test_the_repro_command_repeats_every_setting_that_is_not_the_default():
    cfg = RunConfig(sut="emulated-buggy", reuse="asymmetric", deadline_s=3.0, strict=True, precheck=False,
                    ub_link_gbps=0.5, isolation=False, inject=None)
    argv = repro_argv(cfg, cases="repro/cross-rank")
    assert argv[:14] == ["python", "-m", "harness", "run", "--sut", "emulated-buggy", "--launcher", "spawn",
                         "--world-size", "2", "--reuse", "asymmetric:0", "--seed", "0"]
    for flag in ("--deadline", "--strict", "--no-precheck", "--no-isolation", "--ub-link-gbps"):
        assert flag in argv
    assert "--deadline" not in repro_argv(RunConfig(), cases="x")


def test_an_isolation_failure_is_reproduced_after_the_case_before_it():
    previous = builtin_cases()[0]
    iso = [Failure(Oracle.ISOLATION, "differs", rank=0)]
    assert f"--cases {previous.name},{CASE.name}" in repro_command_for(RunConfig(), CASE, previous, iso)
    assert f"--cases {CASE.name}" in repro_command_for(RunConfig(), CASE, previous, [])


def test_the_verdict_sums_counters_over_ranks():
    shared = GroupOutcome({0: result(0, [], reuse_events=2, steps_compared=3, models_built=2, duration_s=0.5),
                           1: result(1, [], reuse_events=1, steps_compared=3, models_built=2, duration_s=0.7)}, [])
    report = case_report(RunConfig(), CASE, shared, [])
    assert (report.outcome, report.reuse_events, report.steps_compared, report.models_built, report.duration_s) == \
        ("passed", 3, 6, 2, 0.7)


# --- the pipeline, over a backend that records what it is asked ----------------------------------

class FakeBackend:
    leader = True
    world_size = 2
    stack = PATCHED          # its declaration only (delayed scaling)

    def __init__(self, shared_failures=(), iso_broken=False, skip=None):
        self.calls = []
        self.shared_failures, self.iso_broken, self.skip = list(shared_failures), iso_broken, skip

    def run_shared(self, index, case, meanwhile=None):
        self.calls.append(("shared", index))
        return GroupOutcome({0: result(0, [entry(0)], failures=self.shared_failures), 1: result(1, [entry(0)])}, [])

    def run_isolated(self, index, case):
        self.calls.append(("isolated", index))
        if self.iso_broken:
            return GroupOutcome({}, [Failure(Oracle.LIVENESS, "rank 1 died", rank=1)], broken=True)
        return GroupOutcome({0: result(0, [entry(0)]), 1: result(1, [entry(0)])}, [])

    def agree(self, key, decide):
        value = decide()
        self.calls.append(("agree", key, value))
        return value

    def recycle(self, plan):
        self.calls.append(("recycle", plan))

    def skip_reason(self, case):
        return self.skip

    def close(self):
        self.calls.append(("close",))


def test_the_pipeline_runs_re_runs_judges_and_keeps_the_group():
    backend = FakeBackend()
    pipeline = CasePipeline(RunConfig(), backend)
    report = pipeline.run(CASE)
    assert report.outcome == "passed"
    assert backend.calls == [("shared", 0), ("agree", "isolate/0", "yes"), ("isolated", 0),
                             ("agree", "recycle/0", "keep"), ("recycle", Recycle.KEEP)]
    assert pipeline.previous is CASE


def test_a_case_whose_communication_failed_is_not_re_run_and_recycles_the_group():
    backend = FakeBackend(shared_failures=[Failure(Oracle.ERROR, "boom", rank=0)])
    pipeline = CasePipeline(RunConfig(), backend)
    report = pipeline.run(CASE)
    assert report.outcome == "error" and ("isolated", 0) not in backend.calls
    assert ("recycle", Recycle.GROUP) in backend.calls and pipeline.previous is None


def test_an_isolated_run_that_breaks_its_group_fails_isolation_and_respawns():
    backend = FakeBackend(iso_broken=True)
    report = CasePipeline(RunConfig(), backend).run(CASE)
    assert report.oracle == "isolation" and "broke its group" in report.detail
    assert ("recycle", Recycle.RESPAWN) in backend.calls


def test_a_case_the_run_cannot_run_is_skipped_with_its_reason_and_never_sent():
    backend = FakeBackend(skip="needs every rank on one host")
    report = CasePipeline(RunConfig(), backend).run(CASE)
    assert report.outcome == "skipped" and report.skip_reason == "needs every rank on one host"
    assert backend.calls == []


def test_a_case_the_stack_declines_is_skipped_with_the_stacks_reason_and_never_sent():
    backend = FakeBackend()
    declined = CASE.with_(model=dataclasses.replace(CASE.model, scaling="tensorwise"))
    report = CasePipeline(RunConfig(), backend).run(declined)
    assert report.outcome == "skipped" and backend.calls == []
    assert report.skip_reason.startswith("emulated-patched declines this case: scaling='tensorwise'")


def test_a_case_that_needed_reuse_and_got_none_is_skipped_or_under_strict_fails():
    quiet = GroupOutcome({0: result(0, [], reuse_events=0), 1: result(1, [], reuse_events=0)}, [])
    report = case_report(RunConfig(reuse="symmetric"), CASE, quiet, [])
    assert report.outcome == "skipped" and report.skip_reason.startswith("not exercised: the run forces --reuse")
    assert report.steps_compared == 0 and report.repro
    strict = case_report(RunConfig(reuse="symmetric", strict=True), CASE, quiet, [])
    assert strict.outcome == "failed" and strict.oracle == "exercised"
    # Reuse seen, or nothing forced: the pass stands.
    busy = GroupOutcome({0: result(0, [], reuse_events=3), 1: result(1, [], reuse_events=0)}, [])
    assert case_report(RunConfig(reuse="symmetric"), CASE, busy, []).outcome == "passed"
    assert case_report(RunConfig(), CASE, quiet, []).outcome == "passed"
    # A failure stands whatever reuse it saw.
    failing = case_report(RunConfig(reuse="symmetric"), CASE, quiet, [Failure(Oracle.HYGIENE, "stale", rank=0)])
    assert failing.outcome == "failed" and failing.oracle == "hygiene"
