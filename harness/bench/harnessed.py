"""The harness side of the benchmarks: a persistent rank group (the runner's session), timed per case.

:class:`TimedSession` is the session ``python -m harness run`` and the pytest plugin use (a
:class:`~harness.runner.pipeline.CasePipeline` over a controlled group), observed through the
runner's events: the wall time of every case as the controller sees it (send the case, gather
every rank's result, judge), and every rank's :class:`RankResult` (its ``phase_s``), which the
controller would otherwise fold into the report.
"""

from __future__ import annotations

import os
import time

from harness.errors import HarnessError
from harness.runner.config import RunConfig
from harness.runner.events import RunEvents
from harness.runner.session import open_session


class BenchCaseFailed(HarnessError):
    """A bench case did not pass: its timings would not measure what the figure says."""


def expect_pass(report) -> None:
    if report.outcome != "passed":
        raise BenchCaseFailed(f"bench case {report.name} {report.outcome}: {report.detail[:500]}")


def bench_config(world_size: int = 2, *, isolation: bool = False, reset_between_cases: bool = False,
                 check_reference: bool = True, sut: str = "emulated-patched") -> RunConfig:
    """The benchmark's run configuration: spawn launcher, natural reuse, default deadline."""
    return RunConfig(sut=sut, launcher="spawn", world_size=world_size, isolation=isolation,
                     reset_between_cases=reset_between_cases, check_reference=check_reference)


class _Recorder(RunEvents):
    def __init__(self):
        self.rank_results: list[dict] = []     # per case: rank -> RankResult
        self.pids: dict[int, int] = {}

    def ranks_ready(self, pids):
        self.pids = dict(pids)

    def case_ran(self, index, case, outcome):
        self.rank_results.append(dict(outcome.results))


class TimedSession:
    def __init__(self, cfg: RunConfig):
        self.recorder = _Recorder()
        self.session = open_session(cfg, events=self.recorder)
        self.case_wall_s: list[float] = []
        self.start_s: float | None = None

    @property
    def rank_results(self) -> list[dict]:
        return self.recorder.rank_results

    @property
    def group(self):
        return self.session.backend.group

    def start(self) -> "TimedSession":
        t0 = time.perf_counter()
        self.session.backend.ensure_group()
        self.start_s = time.perf_counter() - t0
        return self

    def run(self, case):
        t0 = time.perf_counter()
        report = self.session.run(case)
        self.case_wall_s.append(time.perf_counter() - t0)
        return report

    def close(self) -> None:
        self.session.close()

    def rank_pids(self) -> dict[int, int]:
        return dict(self.recorder.pids) if self.group is not None else {}

    def rss_kb(self) -> dict[int, int]:
        """Every rank's resident set size now (from /proc)."""
        return {r: proc_rss_kb(pid) for r, pid in self.rank_pids().items()}


def proc_rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
    except OSError:
        return 0
