"""The bias gradient is compared at every step, and hidden state is named beside the symptom.

Known bad: ``tests/planted/late_bias_grad.py`` hands the optimizer the step before's bias gradient
at a model's last step only (nothing after it shows the wrong bias): the reference names
``layer0.bias_grad`` at that step. ``tests/planted/reset_arena.py`` keeps a per-group arena of
master weights that survives ``reset()``: the reference failure it causes names the arena.
"""

from __future__ import annotations

from harness.case.catalog import builtin_cases, userbuffers_cases
from harness.runner.config import RunConfig
from harness.runner.session import run
from tests.planted import late_bias_grad

UB = {c.name: c for c in userbuffers_cases()}
CASES = {c.name: c for c in builtin_cases()}


def test_a_bias_gradient_late_at_the_last_step_fails_the_reference_on_the_bias_gradient():
    cases = [UB["userbuffers/column-bias"], UB["userbuffers/row-bias-frozen"]]
    assert all(c.steps == late_bias_grad.STEPS for c in cases)
    report = run(RunConfig(sut="tests.planted.late_bias_grad:STACK", launcher="spawn", world_size=2,
                           isolation=False, cases=cases))
    for case in report.cases:
        assert case.outcome == "failed" and case.oracle == "reference", (case.name, case.detail)
        line = case.detail.splitlines()[0]
        assert line.startswith(f"[reference] rank 0, model 0, step {late_bias_grad.STEPS - 1}: layer0.bias_grad["), line
        assert line.count("(0x") == 2, line


def test_an_arena_that_survives_reset_is_named_beside_the_reference_failure():
    report = run(RunConfig(sut="tests.planted.reset_arena:STACK", launcher="spawn", world_size=2,
                           cases=[CASES["repro/prelude"], CASES["repro/reference"]]))
    failed = [c for c in report.cases if c.outcome == "failed"]
    assert [c.name for c in failed] == ["repro/reference"], [(c.name, c.detail) for c in report.cases]
    [case] = failed
    assert case.oracle == "reference", case.detail
    assert "tests.planted.reset_arena.ARENAS" in case.detail, case.detail


def test_hidden_state_names_containers_that_differ_and_skips_one_only_one_run_has():
    from harness.oracles.hidden_state import hidden_state_line
    from harness.runner.rank.result import RankResult

    empty, full = [0, 0, "a"], [1, 1, "b"]
    shared = RankResult(case="c", rank=0, start_containers={"m.ARENA": full, "m.LAZY": full, "m.SAME": empty},
                        model_containers=[{"m.ARENA": full, "m.LAZY": full, "m.SAME": full}])
    alone = RankResult(case="c", rank=0, start_containers={"m.ARENA": empty, "m.SAME": empty})
    assert hidden_state_line(shared, alone, 0) == (
        "hidden state, containers whose contents differ: as the case began, alone and after other cases: "
        "m.ARENA (0 keys alone, 1 after other cases); from the case's beginning to model 0's end: m.SAME (0 -> 1 keys)")
    assert hidden_state_line(alone, alone, None) == ""
