"""Forced id reuse lands, and a forced reuse that does not land is counted.

The id-reuse failures of the reproducers need the new model's objects to take the dead ones'
ids; ``reuse_misses`` says when that precondition did not hold. These tests run the emulated
stack in this process (world size 1, ``--reuse symmetric``).
"""

from __future__ import annotations

import pytest
import torch

from harness.case.spec import CaseSpec
from harness.fp8.recipe import DelayedScalingRecipe
from harness.idreuse import morgue
from harness.idreuse.morgue import MORGUE, ReusePolicy
from harness.report.model import verdict
from harness.report.terminal import case_line
from harness.runner.inproc import execute_here
from harness.stacks import load_stack
from harness.stacks.emulated import float8_param
from harness.stacks.protocol import ModelSpec


@pytest.fixture(autouse=True)
def clean_state():
    stack = load_stack("emulated-patched")
    stack.reset()
    yield
    stack.reset()
    MORGUE.configure(ReusePolicy.parse("natural"), 0)
    MORGUE.clear()


def chain_case(models=4, dims=(16, 32, 16)) -> CaseSpec:
    return CaseSpec(name="forced-reuse/chain", model=ModelSpec(dims=dims, recipe=DelayedScalingRecipe(amax_history_len=4),
                                                              fp8_params=True),
                    batch=8, steps=1, models=models)


def run_symmetric(case):
    return execute_here(case, load_stack("emulated-patched"), reuse="symmetric")


def forced_releases(case) -> int:
    """One per FP8 weight of every model after the first."""
    return (case.models - 1) * (len(case.model.dims) - 1)


def test_every_forced_reuse_lands_on_a_new_fp8_weight():
    case = chain_case(models=4)
    result = run_symmetric(case)
    releases = forced_releases(case)
    assert result.failures == [] and result.reuse_misses == 0, (result.failures, result.reuse_examples)
    assert result.reuse_events >= releases


def test_a_forced_reuse_taken_by_another_allocation_is_counted_as_a_miss(monkeypatch):
    """Known bad: a temporary of the same size class allocated between the release and the
    weight (what a library's own Python work can do after a bare reuse point) takes the block."""
    temporaries = []

    def reuse_point_then_a_temporary(make, kind=""):
        morgue.reuse_point(kind)
        temporaries.append(torch.empty(0))      # takes the released block
        return make()

    monkeypatch.setattr(float8_param, "reuse_alloc", reuse_point_then_a_temporary)
    case = chain_case(models=3)
    result = run_symmetric(case)
    releases = forced_releases(case)
    assert result.reuse_misses == releases, result.reuse_examples
    assert any("was not taken by a new target" in line for line in result.reuse_examples)
    report = verdict(case.name, [], reuse_events=result.reuse_events, reuse_misses=result.reuse_misses, repro="")
    assert f"reuse-missed={releases}" in case_line(report)


def test_a_bare_reuse_point_hands_the_next_tensor_the_dead_ones_address():
    """The TE stack's way (TE allocates ``_data`` itself): with nothing allocated between the
    reuse point and the tensor, the tensor takes the parked one's address, every time."""
    MORGUE.configure(ReusePolicy.parse("symmetric"), 0)
    alive, landed = [], 0
    for _ in range(50):
        dying = torch.empty(16, dtype=torch.uint8)
        dead_id = id(dying)
        MORGUE.park([dying])
        del dying
        with morgue.forcing_window():
            morgue.reuse_point("test")
            new = torch.empty(16, dtype=torch.uint8)
        MORGUE.settle()
        landed += id(new) == dead_id
        alive.append(new)
    assert landed == 50


def test_allocate_calls_make_once_where_this_rank_does_not_release():
    calls = []
    MORGUE.configure(ReusePolicy.parse("asymmetric:1"), 0)
    MORGUE.park([torch.empty(0)])
    obj = MORGUE.allocate(lambda: calls.append(1) or torch.empty(0))
    assert calls == [1] and MORGUE.released_ids == [] and isinstance(obj, torch.Tensor)


def test_allocate_returns_an_object_when_the_block_never_comes_back(monkeypatch):
    """An object of another size class can never land: after ALLOC_LIMIT tries the last one is
    returned, and the released id stays untaken (a miss for the case to count)."""
    monkeypatch.setattr(MORGUE, "ALLOC_LIMIT", 50)
    MORGUE.configure(ReusePolicy.parse("symmetric"), 0)
    MORGUE.park([torch.empty(0)])
    calls = []
    obj = MORGUE.allocate(lambda: calls.append(1) or [0.0] * 3)
    assert len(calls) == 50 and isinstance(obj, list)
    assert len(MORGUE.released_ids) == 1 and id(obj) != MORGUE.released_ids[0]
