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
from harness.runner.rank.zygote import CANCEL, IsolatedRuns, Zygote, _send, isolated_request
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
    """A stack whose build never returns (a hang inside the stack under test); the process that
    hangs writes its pid to ``pid_file`` first."""

    def __init__(self, inner, pid_file):
        self.inner = inner
        self.pid_file = pid_file
        self.never = threading.Event()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def build(self, spec, ctx):
        self.pid_file.write_text(str(os.getpid()))
        self.never.wait()


def test_a_child_that_does_not_answer_in_time_is_killed(tmp_path):
    stack = BlockingStack(load_stack("emulated-patched"), tmp_path / "hung.pid")
    zygote = Zygote(RankState(SETTINGS, 0, stack)).start()
    try:
        answer = zygote.run(isolated_request(CASE, "t", None), timeout=1.0)
        assert answer == {"error": "isolated run did not answer: no answer in time"}
        hung = int((tmp_path / "hung.pid").read_text())
        assert hung not in children_of(zygote.pid)       # the hung child is gone, reaped
        assert not os.path.exists(f"/proc/{hung}")
        assert len(children_of(zygote.pid)) <= 1         # at most the next spare waits
    finally:
        pid = zygote.pid
        zygote.close()
    assert zygote.pid is None and not os.path.exists(f"/proc/{pid}/status") or \
        open(f"/proc/{pid}/status").read().find("State:\tZ") >= 0


class PreloadingStack(CountingStack):
    """Counts its preloads; the runner calls ``preload`` once, before the zygote forks."""

    def __init__(self):
        super().__init__()
        self.preloads = []

    def preload(self):
        self.preloads.append(os.getpid())


PRELOADING = PreloadingStack()


def test_a_stack_is_preloaded_once_before_the_zygote_forks(monkeypatch):
    settings = RunConfig(launcher="inproc", sut=f"{__name__}:PRELOADING",
                         check_reference=False).rank_settings()
    PRELOADING.preloads.clear()
    state = RankState.load(settings, 0)
    assert state.stack is PRELOADING and PRELOADING.preloads == [os.getpid()]


def test_te_refuses_a_preload_that_initialised_cuda(monkeypatch):
    from types import SimpleNamespace

    from harness.errors import SetupError
    from harness.stacks.te import availability, stack as te_stack

    monkeypatch.setattr(availability, "te_modules", lambda: SimpleNamespace())
    monkeypatch.setattr(te_stack.TEStack, "ub_mods", lambda self: None)
    stack = te_stack.TEStack()
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    stack.preload()
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.raises(SetupError, match="initialised CUDA"):
        te_stack.TEStack().preload()


class WarmingStack(CountingStack):
    """Writes which process warmed up (``warm_child``) and which built a model, one line each."""

    def __init__(self, log, fail=False):
        super().__init__()
        self.log, self.fail = log, fail

    def warm_child(self, rank):
        if self.fail:
            raise RuntimeError("no device")
        with open(self.log, "a") as fh:
            fh.write(f"warm {os.getpid()} {rank}\n")

    def build(self, spec, ctx):
        with open(self.log, "a") as fh:
            fh.write(f"build {os.getpid()}\n")
        return super().build(spec, ctx)


def test_each_isolated_run_is_a_spare_that_warmed_up_first_and_ran_nothing_else(tmp_path):
    log = tmp_path / "log"
    stack = WarmingStack(log)
    stack.reset()
    zygote = Zygote(RankState(SETTINGS, 3, stack)).start()
    try:
        answers = [zygote.run(isolated_request(CASE, f"t{i}", None), timeout=60) for i in range(2)]
    finally:
        zygote.close()
    assert all("ok" in a for a in answers), answers
    events = [line.split() for line in log.read_text().splitlines()]
    builders = [pid for what, pid, *_ in events if what == "build"]
    warmed = {pid: rank for what, pid, *rank in events if what == "warm"}
    assert len(set(builders)) == 2                       # two cases, two fresh processes
    for pid in set(builders):
        assert warmed.get(pid) == ["3"]                  # each warmed up, for its rank, ...
        first = next(i for i, e in enumerate(events) if e[1] == pid)
        assert events[first][0] == "warm"                # ... before its case
    assert answers[0]["ok"]["digest"] == answers[1]["ok"]["digest"]   # and both ran the case alone


def test_a_warming_stack_keeps_two_spares_and_dismisses_them_at_close(tmp_path):
    from harness.runner.rank.zygote import spare_count

    assert spare_count(CountingStack()) == 1
    log = tmp_path / "log"
    stack = WarmingStack(log)
    assert spare_count(stack) == 2
    stack.reset()
    zygote = Zygote(RankState(SETTINGS, 1, stack)).start()
    try:
        answers = [zygote.run(isolated_request(CASE, f"t{i}", None), timeout=60) for i in range(3)]
    finally:
        zygote.close()      # returns once the zygote has dismissed and reaped its spares
    assert all("ok" in a for a in answers), answers
    events = [line.split() for line in log.read_text().splitlines()]
    warmed = [pid for what, pid, *_ in events if what == "warm"]
    builders = [pid for what, pid, *_ in events if what == "build"]
    # Three runs, each in a spare of its own; two more spares warmed and were dismissed unused.
    assert len(warmed) == len(set(warmed)) == 5
    assert len(set(builders)) == 3 and set(builders) < set(warmed)
    for pid in warmed:
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            continue
        raise AssertionError(f"spare {pid} outlived its zygote")


def test_a_warm_up_that_fails_is_the_isolated_runs_error(tmp_path):
    stack = WarmingStack(tmp_path / "log", fail=True)
    zygote = Zygote(RankState(SETTINGS, 0, stack)).start()
    try:
        answer = zygote.run(isolated_request(CASE, "t", None), timeout=60)
    finally:
        zygote.close()
    assert answer == {"error": "warming up the isolated run failed: RuntimeError: no device"}


def test_a_cancelled_run_is_killed_at_once_and_the_next_run_is_answered(tmp_path):
    stack = BlockingStack(load_stack("emulated-patched"), tmp_path / "hung.pid")
    zygote = Zygote(RankState(SETTINGS, 0, stack)).start()
    try:
        # A run timeout no test outlives: a cancel that waited for it would hang, not pass.
        zygote.begin(isolated_request(CASE, "t", None), timeout=24 * 3600)
        pid_file = tmp_path / "hung.pid"
        while not (pid_file.exists() and pid_file.read_text()):   # the child is inside the case
            assert zygote.running                                 # (the file is made, then written)
            os.sched_yield()
        hung = int(pid_file.read_text())
        zygote.cancel()                                  # returns: it did not wait for the run's timeout
        assert not zygote.running and not os.path.exists(f"/proc/{hung}")
        assert len(children_of(zygote.pid)) <= 1         # at most the next spare waits
    finally:
        pid = zygote.pid
        zygote.close()
    assert not os.path.exists(f"/proc/{pid}/status") or "State:\tZ" in open(f"/proc/{pid}/status").read()


def test_a_cancel_that_comes_after_the_answer_is_ignored(state):
    zygote = Zygote(state).start()
    try:
        zygote.begin(isolated_request(CASE, "t", None), timeout=60)
        answer = zygote.end()
        _send(zygote._to, CANCEL)          # what a rank's cancel sends when the answer raced it
        again = zygote.run(isolated_request(CASE, "t", None), timeout=60)
    finally:
        zygote.close()
    assert answer["ok"]["digest"] == again["ok"]["digest"]


class FakeZygote:
    def __init__(self):
        self.calls = []

    def begin(self, request, timeout):
        self.calls.append(("begin", request))

    def end(self):
        self.calls.append(("end",))
        return {"ok": {}}

    def cancel(self):
        self.calls.append(("cancel",))


def test_an_isolated_run_begun_with_its_case_is_the_one_answered_and_any_other_is_cancelled():
    zygote = FakeZygote()
    runs = IsolatedRuns(zygote, type("S", (), {"settings": SETTINGS})(), lambda index, case: index)
    runs.begin(1, CASE)                    # alongside case 1
    runs.end(1, CASE)                      # asked for: the run begun, not a second one
    assert zygote.calls == [("begin", 1), ("end",)]
    zygote.calls.clear()
    runs.begin(2, CASE)                    # case 2's isolated run was not wanted ...
    runs.cancel()                          # ... the next message cancels it
    runs.cancel()                          # (once)
    runs.end(3, CASE)                      # asked for without having begun: begun now
    assert zygote.calls == [("begin", 2), ("cancel",), ("begin", 3), ("end",)]
