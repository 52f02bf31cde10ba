"""Running candidate case sequences for the shrinker, fast, each from a fresh state.

The shrinker asks many small questions ("does this sequence still fail the same way?"). A
rank group takes seconds to start and a soft recycle takes milliseconds, so every candidate
runs on one persistent group: recycle (new process group, the stack's ``reset()``, no parked
objects), then the sequence, case by case, judged exactly as :func:`run_controlled` judges
it (same oracles, isolated re-run included, same recycling after a broken case). With
``--launcher inproc`` the candidates run in this process after the same reset.

A recycled group is close to, not the same as, a fresh process (the allocator remembers),
so the shrinker verifies its final answer with the real command in a fresh process.
"""

from __future__ import annotations

import dataclasses
import time

from harness.errors import SetupError
from harness.oracles.findings import Failure
from harness.report.model import CaseReport, verdict
from harness.runner.config import RunConfig


def reset_process_state(cfg: RunConfig) -> None:
    """In this process: empty the stack's registries, the morgue and the graveyard (a soft recycle)."""
    from harness.idreuse.morgue import MORGUE
    from harness.runner.case_exec import GRAVEYARD
    from harness.stacks import load_stack

    load_stack(cfg.sut, cfg.sut_options or None).reset()
    MORGUE.clear()
    GRAVEYARD.dead.clear()


class CandidateRunner:
    """Runs case sequences; ``run(cases)`` returns one CaseReport per case, fresh state each call."""

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg
        self.runs = 0
        self.group_starts = 0
        self.start_s = 0.0        # time spent starting groups (not charged to the shrink budget)

    def run(self, cases: list) -> list[CaseReport]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class InprocCandidates(CandidateRunner):
    def run(self, cases: list) -> list[CaseReport]:
        from harness.runner.inproc import run_inproc

        self.runs += 1
        reset_process_state(self.cfg)
        report = run_inproc(dataclasses.replace(self.cfg, cases=list(cases), json_path=None, junit_path=None))
        return report.cases


class GroupCandidates(CandidateRunner):
    """One persistent rank group for every candidate (spawn, torchrun or mpirun)."""

    def __init__(self, cfg: RunConfig):
        super().__init__(cfg)
        self.group = None
        self.dirty = False
        self.index = 0

    def _start(self):
        from harness.runner.controller import RankGroup

        t0 = time.monotonic()
        for attempt in range(3):
            try:
                self.group = RankGroup(self.cfg, generation=attempt).start()
                break
            except SetupError:
                if attempt == 2:
                    raise
        self.group_starts += 1
        self.start_s += time.monotonic() - t0
        self.dirty = False
        return self.group

    def _fresh(self):
        if self.group is None:
            return self._start()
        if self.dirty and not self.group.recycle():
            self.group.stop()
            self.group = None
            return self._start()
        return self.group

    def run(self, cases: list) -> list[CaseReport]:
        from harness.runner.controller import judge

        self.runs += 1
        group = self._fresh()
        self.dirty = True
        reports = []
        options = self.cfg.options
        for case in cases:
            self.index += 1
            # As run_controlled does: the case, its isolated re-run, the verdict, and a new
            # group when this one broke.
            outcome = group.run_case(self.index, case, options)
            isolated = None
            if self.cfg.isolation and not outcome.broken:
                iso = group.run_isolated(self.index, case, options)
                if iso.broken:
                    outcome.failures.append(Failure("isolation", "the isolated run of this case broke its group:\n"
                                                    + "\n".join(f.line() for f in iso.failures)))
                    outcome.broken = True
                isolated = iso.results
            failures = judge(case, outcome.results, outcome.failures, isolated, self.cfg.world_size)
            res = list(outcome.results.values())
            reports.append(verdict(case.name, failures, reuse_events=sum(r.reuse_events for r in res), repro="",
                                   models_built=max([r.models_built for r in res] or [0]),
                                   duration_s=max([r.duration_s for r in res] or [0.0])))
            communication_failed = any(f.oracle in ("cross-rank", "liveness", "error") for f in failures)
            if outcome.broken or (communication_failed and not group.recycle()):
                group.stop()
                group = self._start()
                self.dirty = True
        return reports

    def close(self) -> None:
        if self.group is not None:
            self.group.stop()
            self.group = None


def candidate_runner(cfg: RunConfig) -> CandidateRunner:
    return InprocCandidates(cfg) if cfg.launcher == "inproc" else GroupCandidates(cfg)
