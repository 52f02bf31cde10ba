"""The in-process backend: this process is the only rank (world size 1).

Each case runs here, after every case before it (that is the point: TE's tests share a process
across cases); its isolated re-run runs alone in a fresh child of a zygote forked from this
process before any case ran.
"""

from __future__ import annotations

from harness.oracles.findings import ISOLATED_RUN_FAILED, Failure, Oracle
from harness.oracles.recorded import CaseExpectation, check_recorded
from harness.runner.judge import GroupOutcome, Recycle
from harness.runner.rank.execute import execute_case
from harness.runner.rank.result import RankResult
from harness.runner.rank.state import RankState
from harness.runner.rank.zygote import IsolatedRuns, Zygote, isolated_request

__harness_hidden__ = True


class InprocBackend:
    leader = True
    world_size = 1

    def __init__(self, cfg, freeze: bool = True, stack=None):
        import torch

        from harness.idreuse.tracker import freeze_imports

        torch.set_num_threads(1)   # bit-reproducible GEMMs, and no OpenMP pool across the zygote's fork
        self.cfg = cfg
        self.state = RankState.load(cfg.rank_settings(), rank=0, stack=stack)
        self.state.reset()          # a new session starts from empty registries, as a new group does
        if freeze:
            freeze_imports()
        self.zygote = Zygote(self.state).start() if cfg.isolation else None
        self.isolated = (IsolatedRuns(self.zygote, self.state, lambda i, case: isolated_request(case, f"iso-{i}", None))
                         if self.zygote is not None else None)

    def run_shared(self, index: int, case, meanwhile=None) -> GroupOutcome:
        if self.state.settings.starts_isolated_with_shared(case):
            self.isolated.begin(index, case)     # nothing of it reaches this process (zygote.py)
        return GroupOutcome({0: execute_case(case, self.state)}, [])

    def run_isolated(self, index: int, case) -> GroupOutcome:
        answer = self.isolated.end(index, case)
        if "ok" in answer:
            return GroupOutcome({0: RankResult.from_dict(answer["ok"])}, [])
        return GroupOutcome({}, [Failure(Oracle.ISOLATION, f"the isolated run failed: {answer['error']}", rank=0,
                                         kind=ISOLATED_RUN_FAILED)])

    def agree(self, key: str, decide) -> str:
        return decide()

    def recycle(self, plan: Recycle) -> None:
        if self.isolated is not None:
            self.isolated.cancel()     # begun with a case whose isolated run was not wanted
        if plan is not Recycle.KEEP:
            self.state.reset()

    @property
    def stack(self):
        return self.state.stack

    def skip_reason(self, case) -> str | None:
        return None

    def close(self) -> None:
        if self.zygote is not None:
            self.isolated.cancel()
            self.zygote.close()
            self.zygote = None


def execute_here(case, stack, *, judged: bool = False, **config):
    """Run ``case`` on ``stack`` (a stack object) in this process, as rank 0 of a group of one,
    with the per-rank oracles; ``config`` are :class:`RunConfig` fields (``reuse``, ``strict``,
    ``seed``, ...). Returns the rank's :class:`RankResult`: for tests and callers that hold a
    stack object rather than a ``--sut`` name. ``judged``: the rank records its FP8 state and
    the reference is checked afterwards, as a controller's judge does
    (:mod:`harness.oracles.recorded`)."""
    from harness.runner.config import Launcher, RunConfig

    settings = RunConfig(launcher=Launcher.INPROC, **config).rank_settings(reference_by_judge=judged)
    result = execute_case(case, RankState(settings, 0, stack))
    if judged:
        check_recorded(result, CaseExpectation(case, settings.seed, 1))
    return result
