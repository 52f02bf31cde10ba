"""Stress draws from what the stack declares: every case runnable, the whole declared space drawn,
shrinking never leaving it. Plain Python (no TE, no torchao, no rank group)."""

from __future__ import annotations

import collections
import time

import pytest

from harness.errors import UsageError
from harness.stacks.capabilities import Capabilities, capabilities_of, declined_reason
from harness.stacks.emulated.stack import PATCHED, EmulatedStack
from harness.stacks.te.declaration import CAPABILITIES as TE
from harness.stacks.torchao.cases import CAPABILITIES as TORCHAO
from harness.stress import explore
from harness.stress.explore import draw, shrink_in_batch

STACKS = {"te": TE, "torchao": TORCHAO, "emulated": capabilities_of(PATCHED)}


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_every_drawn_case_is_accepted_and_the_declared_space_is_covered(stack):
    caps = STACKS[stack]
    batch = draw(20260101, 300, caps, 2)
    assert batch.draws == 300 and batch.declined == 0 and len(batch.cases) == 300
    seen = collections.defaultdict(set)
    for case in batch.cases:
        assert declined_reason(caps, case, 2) is None, case
        m = case.model
        seen["format"].add(m.recipe.fp8_format.value)
        seen["scaling"].add(m.scaling)
        seen["construction"].add(m.construction)
        seen["fp8_params"].add(m.fp8_params)
        seen["data_parallel"].add(m.data_parallel)
        assert all(d % caps.dim_multiple == 0 for d in m.dims) and case.batch % caps.batch_multiple == 0
        seen["userbuffers"].add(m.userbuffers)
        assert m.userbuffers in caps.userbuffers and (m.userbuffers or not m.bias), m
        assert m.recipe.reduce_amax == (True in caps.reduce_amax)
    assert seen["format"] == set(caps.formats)
    assert seen["scaling"] == set(caps.drawn_scalings())
    assert seen["construction"] == {c.value for c in caps.constructions}
    assert seen["fp8_params"] == set(caps.fp8_params)
    assert seen["data_parallel"] == set(caps.data_parallel)
    # Userbuffers layers where the declaration is the whole story (TE refuses most shapes itself)
    assert seen["userbuffers"] == (set(caps.userbuffers) if caps.declines is None else {False})


def test_te_cases_are_in_te_gemm_shapes():
    cases = draw(7, 200, TE, 1).cases
    assert {case.batch for case in cases} == {16}
    assert {d for case in cases for d in case.model.dims} == {16, 32, 48, 64}


def test_torchao_cases_leave_the_recipe_it_ignores_alone():
    recipes = {case.model.recipe for case in draw(7, 100, TORCHAO, 2).cases}
    assert len(recipes) == 1 and not next(iter(recipes)).reduce_amax


def test_a_te_failure_shrinks_to_the_simplest_case_te_runs():
    def fails(case):
        return case.models >= 2 and case.model.fp8_params

    batch = draw(5, 60, TE, 2).cases
    index = next(i for i, c in enumerate(batch) if fails(c))
    outcome = shrink_in_batch(5, index, batch[index], fails, time.monotonic() + 30, TE, 2)
    assert outcome.found and outcome.declined == 0
    m = outcome.minimal
    assert declined_reason(TE, m, 2) is None
    assert (m.models, m.steps, m.model.dims, m.batch, m.model.construction) == (2, 1, (16, 16), 16, "copy")


def test_declined_draws_are_counted_dropped_and_never_shrunk_to(monkeypatch):
    """A declaration the strategies cannot express is still honoured: such draws leave the batch,
    the replay counts the batch's own cases, and the shrinker does not land on them."""
    def one_step_declined(caps, case, world_size=None):
        return "one step is declined" if case.steps == 1 else declined_reason(caps, case, world_size)

    monkeypatch.setattr(explore, "declined_reason", one_step_declined)
    caps = capabilities_of(PATCHED)
    batch = draw(5, 80, caps, 2)
    assert batch.declined > 0 and batch.draws == len(batch.cases) + batch.declined
    assert batch.declined_reasons == {"one step is declined": batch.declined}
    assert all(case.steps > 1 for case in batch.cases)

    def fails(case):
        assert case.steps > 1, "a declined candidate was judged"
        return case.models >= 2

    index = next(i for i, c in enumerate(batch.cases) if fails(c))
    outcome = shrink_in_batch(5, index, batch.cases[index], fails, time.monotonic() + 30, caps, 2)
    assert outcome.found and outcome.declined > 0
    assert (outcome.minimal.models, outcome.minimal.steps) == (2, 2)


class _OneRank(EmulatedStack):
    capabilities = Capabilities(scalings=("delayed",), max_world_size=1, why={"world_size": "one process only"})


ONE_RANK = _OneRank(buggy=False)


def test_stress_refuses_a_world_size_the_stack_declines(tmp_path):
    from harness.runner.config import RunConfig
    from harness.stress.session import StressOptions, StressSession

    cfg = RunConfig(sut=f"{__name__}:ONE_RANK", world_size=2)
    with pytest.raises(UsageError, match="world size 2 \\(it runs 1 to 1 ranks\\): one process only"):
        StressSession(cfg, StressOptions(minutes=1, out_dir=str(tmp_path), seed=1))


def test_te_stress_cases_are_compared_only_where_te_must_match_bit_for_bit():
    """Stress runs TE through the same runner as ``run``, so the TE stack's reference applies:
    docs/gpu.md's compared roles, every other field left out."""
    from harness.stacks.te_common.compared import compared_roles
    from harness.stacks.te.stack import TEStack

    stack = TEStack()
    for case in draw(3, 3, TE, 2).cases:
        n_layers = len(case.model.dims) - 1
        expected = stack.expected_model(case.with_(name="stress/b000/c000"), 3, 2, 0, 0)
        assert expected.final == {} and len(expected.steps) == case.steps
        for t, states in enumerate(expected.steps):
            assert sorted(states) == sorted(compared_roles(n_layers, t))
            assert all(state.scale_inv is None for state in states.values())
