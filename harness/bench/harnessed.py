"""The harness side of the benchmarks: a persistent rank group (``CaseSession``), timed per case.

:class:`TimedSession` is the controller's :class:`~harness.runner.controller.CaseSession`
(the code path of ``python -m harness run`` and of the pytest plugin) with two additions for
measuring only: the wall time of every case as the controller sees it (send the case, gather
every rank's result, judge), and every rank's :class:`RankResult` (its ``phase_s``), which the
controller would otherwise fold into the report.
"""

from __future__ import annotations

import os
import time

from harness.errors import HarnessError
from harness.runner.case_exec import RunOptions
from harness.runner.config import RunConfig
from harness.runner.controller import CaseSession


class BenchCaseFailed(HarnessError):
    """A bench case did not pass: its timings would not measure what the figure says."""


def expect_pass(report) -> None:
    if report.outcome != "passed":
        raise BenchCaseFailed(f"bench case {report.name} {report.outcome}: {report.detail[:500]}")


def bench_config(world_size: int = 2, *, isolation: bool = False, reset_between_cases: bool = False,
                 check_reference: bool = True, sut: str = "emulated-patched") -> RunConfig:
    """The benchmark's run configuration: spawn launcher, natural reuse, default deadline."""
    options = RunOptions(reset_between_cases=reset_between_cases, check_reference=check_reference)
    return RunConfig(sut=sut, launcher="spawn", world_size=world_size, options=options,
                     isolation=isolation).validate()


class TimedSession(CaseSession):
    def __init__(self, cfg: RunConfig):
        super().__init__(cfg)
        self.case_wall_s: list[float] = []
        self.rank_results: list[dict] = []     # per case: rank -> RankResult
        self.start_s: float | None = None

    def _ensure_group(self):
        fresh = self.group is None
        t0 = time.perf_counter()
        group = super()._ensure_group()
        if fresh:
            if self.start_s is None:
                self.start_s = time.perf_counter() - t0
            original = group.run_case

            def run_case(index, case, options):
                outcome = original(index, case, options)
                self.rank_results.append(dict(outcome.results))
                return outcome

            group.run_case = run_case
        return group

    def start(self) -> "TimedSession":
        self._ensure_group()
        return self

    def run(self, case):
        t0 = time.perf_counter()
        report = super().run(case)
        self.case_wall_s.append(time.perf_counter() - t0)
        return report

    def rank_pids(self) -> dict[int, int]:
        return dict(self.group.pids) if self.group is not None else {}

    def rss_kb(self) -> dict[int, int]:
        """Every rank's resident set size now (from /proc)."""
        return {r: proc_rss_kb(pid) for r, pid in self.rank_pids().items()}


def proc_rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
    except OSError:
        return 0
