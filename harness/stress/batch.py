"""One batch of a stress run: drawn from the seed, run case by case on one rank group, ended.

A :class:`BatchRun` goes through its stages in order: :meth:`~BatchRun.draw` the cases,
:meth:`~BatchRun.run` them (the runner calls :meth:`~BatchRun.on_case` after every case, which
records it, counts it against its failure or opens a new one, and says when the batch must
stop), then :meth:`~BatchRun.close`: the batch's case file and a provisional repro for each new
failure, written at once so that a run killed while shrinking still leaves a command behind.
The new failures it found (:attr:`~BatchRun.pending`) are then shrunk by the session.

Called by :class:`harness.stress.session.StressSession` for each batch of its stream.
"""

from __future__ import annotations

import os
import time

from harness.case.data import derive_seed
from harness.errors import UsageError
from harness.oracles.findings import BROKE_GROUP, COMMUNICATION
from harness.report.stress_failure import FailureRecord, Status
from harness.report.stress_model import Batch
from harness.runner.interrupts import Interrupted
from harness.runner.session import run
from harness.stress.explore import draw
from harness.stress.repro import command_text, display_path, run_command, write_case_file
from harness.stress.shrink import FailureContext
from harness.stress.signature import case_signature
from harness.stress.strategies import describe

MAX_NAMES_PER_FAILURE = 200
MAX_TRIES = 3              # cases tried per kind of failure until one gives a repro that reproduces


class BatchStop(Exception):
    """Raised from the per-case callback to end a batch early (its group is stopped on the way out).

    Not a HarnessError: the runners treat those as the run failing, and this is no failure."""


class BatchRun:
    """Batch ``b`` of the seed, run for ``session`` (its record, options, claims and progress)."""

    def __init__(self, session, b: int):
        self.session = session
        self.record = session.record
        self.b = b
        self.seed = batch_seed_of(session.opts.seed, b)
        self.cases: list = []
        self.info: Batch | None = None
        self.pending: list[FailureContext] = []
        self.seen = 0                  # cases of the batch that ran
        self.segment = 0               # the first case of the current group incarnation
        self.last_t = 0.0              # when the last case ended (the record's clock)
        self.walls: dict[str, float] = {}
        self.deadline = 0.0

    def _phase(self, text: str) -> None:
        self.session.progress.phase = text
        self.session.progress.update(self.record.totals(), force=True)

    # --- the stages ----------------------------------------------------------------------------
    def draw(self, size: int) -> None:
        """Draw the batch's cases, count the draws, and open its :class:`Batch` record."""
        session = self.session
        self._phase(f"batch {self.b}: drawing cases")
        drawn, self.cases = batch_cases(session.opts.seed, self.b, size, session.capabilities,
                                        session.cfg.world_size)
        self.record.add_draws(drawn)
        if not self.cases:
            reasons = ", ".join(drawn.declined_reasons) or "no case drawn"
            raise UsageError(f"--sut {session.cfg.sut} declined all {drawn.draws} cases drawn for batch "
                             f"{self.b}: {reasons}")
        self.last_t = self.record.elapsed()
        self.info = Batch(index=self.b, seed=self.seed, size=size, started_s=round(self.last_t, 3))
        self.record.batches.append(self.info)
        self.deadline = time.monotonic() + session.opts.batch_seconds
        self._phase(f"batch {self.b}: starting ranks")

    def run(self) -> None:
        """Run the cases on one rank group until they are done or :meth:`on_case` stops them."""
        cfg = self.session.cfg.replace(cases=self.cases, json_path=None, junit_path=None)
        ended = "all cases run"
        t_run = time.monotonic()
        try:
            report = run(cfg, self.on_case, stack=self.session.stack)
            if report.interrupted:
                raise Interrupted(report.interrupted)
        except BatchStop as stop:
            ended = str(stop)
        finally:
            self.record.time.running_s += time.monotonic() - t_run
            self.close(ended)

    def on_case(self, report) -> None:
        """The runner's callback after each case: record the new cases, then stop if it is time."""
        for case_report in report.cases[self.seen:]:
            self._take(case_report)
        self.session.progress.phase = f"batch {self.b}"
        self.record.write_json()
        self.session.progress.update(self.record.totals())
        if report.interrupted:
            return     # the runner is winding down after a signal or an error: let it finish
        if self.pending:
            raise BatchStop("a new kind of failure: shrink it first")
        if self.session.time_up():
            raise BatchStop("time budget spent")
        if time.monotonic() >= self.deadline:
            raise BatchStop("batch time spent")
        if self.session.enough_cases():
            raise BatchStop("enough cases")

    def close(self, ended: str) -> None:
        """The batch's end: why, how long, its case file and replay command, provisional repros."""
        info = self.info
        info.ended = ended
        info.duration_s = round(self.record.elapsed() - info.started_s, 2)
        if self.seen:
            path = os.path.join(self.session.opts.out_dir, "batches", f"batch-{self.b:03d}.json")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write_case_file(path, self.cases[:self.seen])
            info.file = display_path(path)
            info.replay = command_text(run_command(self.session.cfg, path))
        for ctx in self.pending:
            self.session.provisional(ctx, info)
        self.record.write_json()

    # --- one case ------------------------------------------------------------------------------
    def _take(self, case_report) -> None:
        i = self.seen
        self.seen += 1
        spec = self.cases[i]
        started = self.last_t
        if i == 0:   # the group's start-up is not the case's
            started = max(self.info.started_s, self.record.elapsed() - case_report.duration_s)
            self.info.startup_s = round(started - self.info.started_s, 2)
        oracle = case_report.oracle
        sig = case_signature(case_report) if oracle else None
        known = self.record.failure_for(sig) if oracle else None
        n = None
        if oracle:
            n = known.n if known is not None else len(self.record.failures) + 1
        entry = self.record.add_case(self.b, i, spec, case_report, started, n, sig)
        self.walls[spec.name] = entry.wall_s
        self.last_t = self.record.elapsed()
        if oracle and known is None:
            self._new_failure(i, spec, case_report, entry, sig)
        elif known is not None:
            self._again(i, spec, case_report, known)
        if set(case_report.oracles) & COMMUNICATION or any(f.kind == BROKE_GROUP for f in case_report.failures):
            self.segment = i + 1    # the runner recycles or restarts the group here
        self.info.cases_run = self.seen

    def _context(self, failure: FailureRecord, i: int) -> FailureContext:
        return FailureContext(failure, self.cases, self.seed, self.info.size, i, self.segment, self.walls)

    def _new_failure(self, i: int, spec, case_report, entry, sig: str) -> None:
        failure = self.record.new_failure(case_report.oracle, entry, spec, i - self.segment, sig)
        head = f"FAIL  {case_report.name} [{case_report.oracle}] {describe(spec)}: new failure #{failure.n}"
        owner = self.session.claims.claim(sig)
        if owner is None:
            self.pending.append(self._context(failure, i))
            self.session.progress.note(head)
        else:
            failure.status = Status.SHRUNK_ELSEWHERE
            failure.shrunk_by_group = owner
            self.session.progress.note(f"{head}, found first by group {owner}, which shrinks it")

    def _again(self, i: int, spec, case_report, known: FailureRecord) -> None:
        known.count += 1
        if len(known.cases) < MAX_NAMES_PER_FAILURE:
            known.cases.append(case_report.name)
        retry = known.status is Status.NOT_REPRODUCED and known.tries < MAX_TRIES
        if retry:
            # Its repro did not reproduce (a failure that depends on where the allocator put
            # things): this case may give a repro that does.
            self.pending.append(self._context(known, i))
        self.session.progress.note(f"FAIL  {case_report.name} [{case_report.oracle}] {describe(spec)}: failure "
                                   f"#{known.n} again"
                                   + ("; its repro did not reproduce, trying this case" if retry else ""))


def batch_seed_of(seed: int, b: int) -> int:
    """The Hypothesis seed of the seed's batch number ``b``."""
    return derive_seed("stress-batch", seed, b)


def batch_cases(seed: int, b: int, size: int, capabilities, world_size: int) -> tuple:
    """Batch ``b`` of ``seed``: its draw (:class:`~harness.stress.explore.DrawnBatch`) and its
    first ``size`` cases as they run. The batch number (the seed's, not a stream's count) names
    each case and seeds its data, so that no two batches of a seed, in any shard or group, run a
    case with the same spec and data seed (Hypothesis starts every draw with the simplest case)."""
    drawn = draw(batch_seed_of(seed, b), size, capabilities, world_size)
    cases = [c.with_(name=f"stress/b{b:03d}/c{i:03d}", data_seed=derive_seed("stress-data", seed, b, i))
             for i, c in enumerate(drawn.cases)]
    return drawn, cases
