"""The zygote: a pristine fork of a rank that runs each isolated case in a fresh child."""

from __future__ import annotations

import os
import threading

import pytest
import torch

from harness.case.catalog import builtin_cases
from harness.runner.config import RunConfig
from harness.runner.rank.execute import execute_case
from harness.runner.rank.state import RankState
from harness.runner.rank.zygote import Zygote, isolated_request
from harness.stacks import load_stack

CASE = next(c for c in builtin_cases() if c.name == "repro/isolation")
SETTINGS = RunConfig(launcher="inproc", check_reference=False).rank_settings()


class CountingStack:
    """The patched emulated stack, plus one snapshot entry: how many models it built since its
    last reset. What a case leaves behind for the next one is then in every digest."""

    def __init__(self):
        self.inner = load_stack("emulated-patched")
        self.builds = 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def build(self, spec, ctx):
        self.builds += 1
        return self.inner.build(spec, ctx)

    def snapshot(self, model):
        from harness.fp8.state import RoleState

        count = torch.tensor([float(self.builds)])
        return {**self.inner.snapshot(model), "builds": RoleState(count, torch.ones(()), torch.ones(()))}

    def reset(self):
        self.builds = 0
        self.inner.reset()


def children_of(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(p) for p in fh.read().split()]
    except OSError:
        return []


@pytest.fixture
def state():
    stack = CountingStack()
    stack.reset()
    yield RankState(SETTINGS, 0, stack)
    stack.reset()


def test_an_isolated_run_starts_from_what_the_rank_had_before_any_case(state):
    zygote = Zygote(state).start()
    try:
        first_here = execute_case(CASE, state)            # the parent goes on and keeps what it ran
        after_others = execute_case(CASE, state)
        alone = zygote.run(isolated_request(CASE, "t", None), timeout=60)["ok"]
        again = zygote.run(isolated_request(CASE, "t", None), timeout=60)["ok"]
    finally:
        zygote.close()
    # Alone (every time) is the first run here, not the run after others: the parent's stack had
    # built models before, the zygote's children start from the state before any case.
    assert alone["digest"] == first_here.digest == again["digest"]
    assert after_others.digest != first_here.digest
    assert alone["models_built"] == CASE.models


def test_a_request_that_cannot_run_comes_back_as_an_error_with_its_traceback(state):
    zygote = Zygote(state).start()
    try:
        answer = zygote.run({"case": {"name": "broken"}, "token": "t", "store": None}, timeout=30)
    finally:
        zygote.close()
    assert "error" in answer and "UsageError" in answer["error"] and "Traceback" in answer["error"]


class BlockingStack:
    """A stack whose build never returns (a hang inside the stack under test)."""

    def __init__(self, inner):
        self.inner = inner
        self.never = threading.Event()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def build(self, spec, ctx):
        self.never.wait()


def test_a_child_that_does_not_answer_in_time_is_killed():
    stack = BlockingStack(load_stack("emulated-patched"))
    zygote = Zygote(RankState(SETTINGS, 0, stack)).start()
    try:
        answer = zygote.run(isolated_request(CASE, "t", None), timeout=1.0)
        assert answer == {"error": "isolated run did not answer: no answer in time"}
        assert children_of(zygote.pid) == []          # the hung child is gone, reaped
    finally:
        pid = zygote.pid
        zygote.close()
    assert zygote.pid is None and not os.path.exists(f"/proc/{pid}/status") or \
        open(f"/proc/{pid}/status").read().find("State:\tZ") >= 0
