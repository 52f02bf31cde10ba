"""Running candidate case sequences for the shrinker, fast, each from a fresh state.

The shrinker asks many small questions ("does this sequence still fail the same way?"). A
rank group takes seconds to start and a soft recycle takes milliseconds, so every candidate
runs on one persistent group: recycle (new process group, the stack's ``reset()``, no parked
objects), then the sequence, case by case, through the same per-case session that
:func:`run_controlled` uses (same oracles, isolated re-run, recycling after a broken case).
With ``--launcher inproc`` the candidates run in this process, after the same reset, through
:func:`run_inproc`.

A recycled group is close to, not the same as, a fresh process (the allocator remembers),
so the shrinker verifies its final answer with the real command in a fresh process.
"""

from __future__ import annotations

import dataclasses
import time

from harness.report.model import CaseReport
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
        from harness.runner.controller import Interrupted
        from harness.runner.inproc import run_inproc

        self.runs += 1
        reset_process_state(self.cfg)
        report = run_inproc(dataclasses.replace(self.cfg, cases=list(cases), json_path=None, junit_path=None))
        if report.interrupted:
            raise Interrupted("SIGINT")
        return report.cases


class GroupCandidates(CandidateRunner):
    """One persistent rank group for every candidate (spawn, torchrun or mpirun).

    Cases go through :class:`harness.runner.controller.CaseSession`, the very code
    ``run_controlled`` uses, so a candidate is judged exactly as the repro command will judge it.
    """

    def __init__(self, cfg: RunConfig):
        from harness.runner.controller import CaseSession

        super().__init__(cfg)
        self.session = CaseSession(cfg)
        self.dirty = False

    def run(self, cases: list) -> list[CaseReport]:
        session = self.session
        self.runs += 1
        if session.group is not None and self.dirty and not session.group.recycle():
            session.restart()
        self.dirty = True
        reports = []
        for case in cases:
            started, t0 = session.groups_started, time.monotonic()
            reports.append(session.run(case))
            if session.groups_started != started:
                # A group started for this case: its start-up is roughly the wall time less the
                # case and its isolated re-run.
                self.group_starts += 1
                self.start_s += max(0.0, time.monotonic() - t0 - 2 * reports[-1].duration_s)
        return reports

    def close(self) -> None:
        self.session.close()


def candidate_runner(cfg: RunConfig) -> CandidateRunner:
    return InprocCandidates(cfg) if cfg.launcher == "inproc" else GroupCandidates(cfg)
