"""One case, checked the same way in every kind of session: run, isolated re-run, judge, verdict.

:class:`CasePipeline` is the only place that sequence is written. What differs between the
in-process runner, a controller with its rank group and an SPMD launch is how a case reaches
the ranks and how their results come back; each is a :class:`Backend`:

* :class:`harness.runner.inproc.InprocBackend` -- this process is the only rank;
* :class:`harness.runner.controlled.GroupBackend` -- a controller sends the case to a persistent
  group of worker processes and collects their results;
* :class:`harness.runner.spmd.SpmdBackend` -- under torchrun or mpirun every rank runs the
  pipeline; rank 0 (the *leader*) judges, and every decision the ranks must take together goes
  through :meth:`Backend.agree`.
"""

from __future__ import annotations

from typing import Callable, Protocol

from harness.errors import HarnessError
from harness.oracles.findings import BROKE_GROUP, Failure, Oracle
from harness.oracles.recorded import CaseExpectation, judge_checks_reference
from harness.phases import mark
from harness.report.model import CaseReport
from harness.runner.judge import (GroupOutcome, Recycle, case_report, judge, recycle_plan, should_isolate,
                                  skipped_report)
from harness.stacks.capabilities import declined_by

__harness_hidden__ = True


class GroupLost(HarnessError):
    """A rank of a group that cannot be replaced (an SPMD launch) stopped responding.

    ``report`` is the report of the case that lost it (None on a rank that does not judge):
    the run ends, but that case is a result like any other and is written with the rest."""

    report: CaseReport | None = None


class Backend(Protocol):
    leader: bool            # this process judges and reports (False only on SPMD ranks other than 0)
    world_size: int
    stack: object           # the stack under test (on a controller, for its declarations only)

    def run_shared(self, index: int, case, meanwhile: Callable[[], None] | None = None) -> GroupOutcome:
        """Run ``case`` on every rank, after whatever ran there before. ``meanwhile``: work of the
        judge's that a backend whose ranks run elsewhere does while it waits for them."""

    def run_isolated(self, index: int, case) -> GroupOutcome:
        """Run ``case`` alone, in a fresh process per rank (the isolation oracle's other half)."""

    def agree(self, key: str, decide: Callable[[], str]) -> str:
        """The leader calls ``decide``; every rank gets its answer."""

    def recycle(self, plan: Recycle) -> None:
        """Carry out ``plan`` (see :func:`harness.runner.judge.recycle_plan`) on every rank."""

    def skip_reason(self, case) -> str | None:
        """Why this run cannot run ``case`` at all (None: it can), beyond what the stack declines."""

    def close(self) -> None:
        ...


class CasePipeline:
    """A session: cases one by one through a backend, each judged into a :class:`CaseReport`.

    ``run(case)`` returns the report, or None on an SPMD rank that is not the leader.
    """

    def __init__(self, cfg, backend: Backend, events=None):
        self.cfg = cfg
        self.backend = backend
        self.events = events
        self.index = 0
        self.previous = None       # the last case, while nothing since recycled the group

    def run(self, case) -> CaseReport | None:
        backend = self.backend
        index = self.index
        self.index += 1
        # Decided once, before the case reaches any rank: the stack's declaration, then the run's own.
        reason = declined_by(backend.stack, case, backend.world_size) or backend.skip_reason(case)
        if reason:
            return skipped_report(self.cfg, case, reason) if backend.leader else None
        # The reference of every rank, simulated once by the judge where the ranks record their
        # state for it (a controlled group), while they run the case.
        expectation = CaseExpectation(case, self.cfg.seed, backend.world_size)
        early = self.cfg.check_reference and judge_checks_reference(getattr(backend, "reference_by_judge", False),
                                                                    backend.stack)
        shared = backend.run_shared(index, case, meanwhile=expectation.compute if early else None)
        if self.events is not None and backend.leader:
            mark(f"controller: case {case.name} ran (shared run)")
            self.events.case_ran(index, case, shared)
        isolate = backend.agree(f"isolate/{index}", lambda: "yes" if should_isolate(self.cfg, case, shared) else "no")
        isolated = None
        if isolate == "yes":
            iso = backend.run_isolated(index, case)
            if iso.broken:
                shared.failures.append(Failure(Oracle.ISOLATION, "the isolated run of this case broke its group:\n"
                                               + "\n".join(f.line() for f in iso.failures), kind=BROKE_GROUP))
                shared.broken = True
            else:
                shared.failures += iso.failures      # an isolated run that gave no result, say
            isolated = iso.results
        report = failures = None
        if backend.leader:
            failures = judge(case, shared, isolated, backend.world_size, expectation, self.previous)
            report = case_report(self.cfg, case, shared, failures, self.previous)
        plan = Recycle(backend.agree(f"recycle/{index}", lambda: recycle_plan(shared, failures).value))
        self.previous = case if plan is Recycle.KEEP else None    # a recycled group remembers nothing
        try:
            backend.recycle(plan)
        except GroupLost as exc:
            exc.report = report
            raise
        return report

    def close(self) -> None:
        self.backend.close()
