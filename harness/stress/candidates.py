"""Running candidate case sequences for the shrinker, fast, each from a fresh state.

The shrinker asks many small questions ("does this sequence still fail the same way?"). A
rank group takes seconds to start and a soft recycle takes milliseconds, so every candidate
runs on one persistent session: recycle (new process group, the stack's ``reset()``, no parked
objects), then the sequence, case by case, through the same case pipeline a run uses (same
oracles, isolated re-run, recycling after a broken case). With ``--launcher inproc`` the
session is this process, reset the same way.

A recycled group is close to, not the same as, a fresh process (the allocator remembers),
so the shrinker verifies its final answer with the real command in a fresh process.
"""

from __future__ import annotations

import time

from harness.report.model import CaseReport
from harness.runner.config import RunConfig
from harness.runner.judge import Recycle
from harness.runner.session import open_session


class CandidateRunner:
    """Runs case sequences on one session; ``run(cases)`` returns one CaseReport per case, each
    call from a fresh state."""

    def __init__(self, cfg: RunConfig, stack=None):
        self.cfg = cfg
        self.session = open_session(cfg.replace(json_path=None, junit_path=None), stack=stack)
        self.runs = 0
        self.group_starts = 0
        self.start_s = 0.0        # time spent starting groups (not charged to the shrink budget)
        self.dirty = False

    def run(self, cases: list) -> list[CaseReport]:
        backend = self.session.backend
        self.runs += 1
        if self.dirty:
            backend.recycle(Recycle.GROUP)       # what the last candidate left behind, gone
            self.session.previous = None
        self.dirty = True
        reports = []
        for case in cases:
            started, t0 = getattr(backend, "groups_started", 0), time.monotonic()
            reports.append(self.session.run(case))
            if getattr(backend, "groups_started", 0) != started:
                # A group started for this case: its start-up is roughly the wall time less the
                # case and its isolated re-run.
                self.group_starts += 1
                self.start_s += max(0.0, time.monotonic() - t0 - 2 * reports[-1].duration_s)
        return reports

    def close(self) -> None:
        self.session.close()


def candidate_runner(cfg: RunConfig, stack=None) -> CandidateRunner:
    """A runner of case sequences on ``cfg``; ``stack``: the one this process loaded (else loaded here)."""
    return CandidateRunner(cfg, stack)
