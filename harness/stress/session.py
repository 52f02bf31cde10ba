"""The stress loop: batches of generated cases until the time budget is spent.

Each batch (:class:`harness.stress.batch.BatchRun`) is drawn from the seed by Hypothesis, inside what the stack declares it runs
(:mod:`harness.stacks.capabilities`), and run on ONE persistent rank group (in this process for
``--launcher inproc``) by :func:`harness.runner.session.run`, the runner of ``python -m harness
run``, from empty registries. After every case the record is updated and ``stress.json`` rewritten.
A batch ends when its time (``batch_seconds``) or the run's is up, or at the first failure of
a kind not seen before: that failure is then shrunk and its repro command checked (see
:mod:`harness.stress.shrink`) before the next batch starts. Later failures of a known kind are
counted against it; while its repro does not reproduce, a later failing case of that kind is
tried instead (at most ``MAX_TRIES`` cases per kind).

Which batches: the run's :class:`~harness.stress.streams.Stream` (its shard and group, see
:mod:`harness.stress.streams`) gives the seed's batch number of its j-th batch; case names and
data seeds come from that number, so no two shards or groups of one seed run the same case. A
"kind" of failure is its signature (:mod:`harness.stress.signature`); whether this process
shrinks a new one or another group of the run does is its :class:`~harness.stress.claims.Claims`.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time

from harness.errors import HarnessError, UsageError
from harness.report.stress_failure import OtherTry, Replay, Repro, Status
from harness.report.stress_model import Batch, StreamInfo, StressConfig
from harness.runner.config import RunConfig
from harness.runner.interrupts import Interrupted, raise_on_signals
from harness.stacks import load_stack
from harness.stacks.capabilities import capabilities_of, world_declined_reason
from harness.stress.batch import BatchRun
from harness.stress.candidates import candidate_runner
from harness.stress.claims import Claims, OwnClaims
from harness.stress.explore import DRAW_LIMIT
from harness.stress.progress import Progress
from harness.stress.record import StressRecord
from harness.stress.repro import command_text, display_path, run_command, write_case_file
from harness.stress.shrink import Budget, FailureContext, Shrinker
from harness.stress.streams import Stream

HTML_EVERY_S = 300.0       # index.html between batches at most this often (plots cost seconds)


@dataclasses.dataclass
class StressOptions:
    minutes: float
    out_dir: str
    seed: int
    batch_seconds: float = 60.0
    batch_size: int = 100           # cases drawn for the first batch; later ones follow the rate seen
    shrink_share: float = 0.25      # of the whole budget, for all shrinking together
    shrink_per_failure_s: float = 60.0
    max_cases: int | None = None
    max_failures: int | None = None     # stop once this many kinds of failure are found (and shrunk)
    stream: Stream = Stream()           # which of the seed's batches this process runs
    shard: Stream | None = None         # --shard, as given (None: not sharded)
    group: int | None = None            # this process's group of a --groups run (None: alone)
    groups: int = 1

    @property
    def budget_s(self) -> float:
        return self.minutes * 60.0


class StressSession:
    def __init__(self, cfg: RunConfig, opts: StressOptions, progress: Progress | None = None, config_extra=None,
                 claims: Claims | None = None, stack=None):
        self.cfg = cfg
        # The stack this process loaded at its entry point, handed down (loaded here when not given).
        self.stack = stack if stack is not None else load_stack(cfg.sut, cfg.sut_options())
        self.opts = opts
        self.claims = claims or OwnClaims()
        self.progress = progress or Progress(opts.budget_s)
        # What the stack runs: batches are drawn from it, and a world size it declines is bad input.
        self.capabilities = capabilities_of(self.stack)
        refused = world_declined_reason(self.capabilities, cfg.world_size)
        if refused is not None:
            raise UsageError(f"--sut {cfg.sut} declines {refused}")
        config = StressConfig(
            sut=cfg.sut, sut_options=dict(cfg.sut_options() or {}), launcher=cfg.launcher.value,
            world_size=cfg.world_size, seed=opts.seed, reuse=cfg.reuse.text(), minutes=opts.minutes,
            deadline_s=cfg.deadline_s, strict=cfg.strict, isolation=cfg.isolation,
            batch_seconds=opts.batch_seconds, batch_size=opts.batch_size, shrink_share=opts.shrink_share,
            shrink_per_failure_s=opts.shrink_per_failure_s, max_cases=opts.max_cases,
            max_failures=opts.max_failures, stream=StreamInfo(opts.stream.index, opts.stream.count),
            shard=opts.shard.text() if opts.shard is not None else None, groups=opts.groups, group=opts.group,
            capabilities=self.capabilities.to_dict(), **(config_extra or {}))
        self.record = StressRecord(config, opts.out_dir)
        self.shrinker = Shrinker(cfg, Budget(opts.budget_s * opts.shrink_share, opts.shrink_per_failure_s),
                                 lambda c: candidate_runner(c, self.stack), note=self.progress.note,
                                 capabilities=self.capabilities)
        self.deadline = time.monotonic() + opts.budget_s
        self._html_at = time.monotonic()

    # --- the loop ----------------------------------------------------------------------------
    def run(self) -> StressRecord:
        previous = raise_on_signals()     # the record is written, the groups stopped
        try:
            self.record.write_json()
            j = 0
            while not self.time_up() and not self.enough_cases():
                if j and self._too_late_for_a_batch():
                    break
                self._run_batch(self.opts.stream.batch(j))
                j += 1
                if not self.time_up() and not self.enough_cases():
                    self._write_reports(html=time.monotonic() - self._html_at >= HTML_EVERY_S)
            self.record.complete = True
        except Interrupted as exc:
            why = exc.args[0] if exc.args else "a signal"
            self.record.interrupted = why if " " in why else f"received {why}"
        except KeyboardInterrupt:
            self.record.interrupted = "received SIGINT"
        except HarnessError as exc:
            self.record.error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            try:
                self.shrinker.close()
            except (Interrupted, KeyboardInterrupt):
                pass     # interrupted again: its ranks end with this process (parent-death signal)
            self._account()
            self.record.finish()
            self.record.write_json()
            try:
                self._write_reports()
            except (Interrupted, KeyboardInterrupt):
                self.progress.note("interrupted again: stress.json is written; junit.xml and index.html may be older")
            finally:
                self.progress.phase = "done" if self.record.complete else "stopped"
                self.progress.close(self.record.totals())
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
        return self.record

    def time_up(self) -> bool:
        return time.monotonic() >= self.deadline

    def _too_late_for_a_batch(self) -> bool:
        """Starting a group that would spend most of the time left starting: not worth it."""
        startups = [b.startup_s for b in self.record.batches if b.startup_s is not None]
        startup = sum(startups) / len(startups) if startups else 0.0
        return self.deadline - time.monotonic() < max(5.0, 2 * startup)

    def enough_cases(self) -> bool:
        """Stop early: as many cases, or as many kinds of failure, as asked for."""
        if self.opts.max_cases is not None and len(self.record.cases) >= self.opts.max_cases:
            return True
        if self.opts.max_failures is None:
            return False
        # Every group's: failures another group shrinks count too (they are claimed by then).
        return max(len(self.record.failures), self.claims.count()) >= self.opts.max_failures

    def _account(self) -> None:
        t = self.record.time
        t.shrink_s = self.shrinker.shrink_s
        t.verify_s = self.shrinker.verify_s
        t.group_start_s = self.shrinker.group_start_s

    def _write_reports(self, html: bool = True) -> None:
        self._account()
        self.record.write_json()
        try:
            self.record.write_junit()
            if html:
                self.progress.phase = "drawing plots"
                self.progress.update(self.record.totals(), force=True)
                self.record.write_html()
                self._html_at = time.monotonic()
        except (Interrupted, KeyboardInterrupt):
            raise
        except Exception as exc:   # a plot that cannot be drawn must not cost the run its results
            self.progress.note(f"warning: could not write junit.xml/index.html: {type(exc).__name__}: {exc}")

    # --- one batch ---------------------------------------------------------------------------
    def _batch_size(self) -> int:
        """How many cases to draw: enough for the batch's time at the rate seen so far, with room."""
        t = self.record.time.running_s
        if not self.record.cases or t <= 0:
            # Short runs draw fewer (drawing a hundred cases takes about a second).
            return max(20, min(self.opts.batch_size, int(self.opts.budget_s * 2)))
        rate = len(self.record.cases) / t
        return max(20, min(DRAW_LIMIT, int(rate * self.opts.batch_seconds * 1.5) + 10))

    def _run_batch(self, b: int) -> None:
        batch = BatchRun(self, b)
        batch.draw(self._batch_size())
        batch.run()
        for ctx in batch.pending:
            self._reproduce(ctx, batch.info)

    # --- a new failure -----------------------------------------------------------------------
    def provisional(self, ctx: FailureContext, batch: Batch) -> None:
        """An unchecked repro (the case and what ran before it in its group), written at once, so
        that a run killed while shrinking still leaves a command behind."""
        failure = ctx.failure
        if failure.repro is not None:
            return     # a retry: keep the earlier (checked) repro until this one does better
        failure.replay = Replay(batch.file, batch.replay, ctx.batch_cases[ctx.index].name)
        path = os.path.join(self.opts.out_dir, f"repro-{failure.n}.json")
        provisional = ctx.batch_cases[ctx.segment_start:ctx.index + 1]
        write_case_file(path, provisional)
        failure.repro = Repro(file=display_path(path), command=command_text(run_command(self.cfg, path)),
                              kind="unshrunk", cases=len(provisional), verified=None)
        failure.status = Status.UNCHECKED

    def _reproduce(self, ctx: FailureContext, batch: Batch) -> None:
        failure = ctx.failure
        n = failure.n
        retry = failure.tries > 0
        failure.tries += 1
        if not retry:
            failure.status = Status.SHRINKING
        self.progress.phase = f"shrinking failure #{n}"
        self.record.write_json()
        final = os.path.join(self.opts.out_dir, f"repro-{n}.json")
        path = os.path.join(self.opts.out_dir, f"repro-{n}.retry.json") if retry else final
        try:
            result = self.shrinker.reproduce(ctx, path)
        except (Interrupted, KeyboardInterrupt):
            if not retry:
                failure.status = Status.INTERRUPTED
            raise
        finally:
            self._account()
        if retry and result.verified:
            # The same cases under the name the report promises; the command differs only in the path.
            os.replace(path, final)
            result = dataclasses.replace(result, file=display_path(final),
                                         command=command_text(run_command(self.cfg, final)))
        elif retry:
            os.unlink(path)
        if retry and not result.verified:
            failure.other_tries.append(OtherTry.of(result))
            self.record.write_json()
            self.progress.note(f"failure #{n} [{failure.oracle}]: {result.target} did not give a repro that "
                               f"reproduces either")
            return
        if retry:
            failure.other_tries.append(OtherTry.of(failure.repro))
        failure.repro = result
        failure.replay = Replay(batch.file, batch.replay, ctx.batch_cases[ctx.index].name)
        failure.status = Status.REPRODUCED if result.verified else Status.NOT_REPRODUCED
        self.record.write_json()
        if result.verified:
            self.progress.note(f"failure #{n} [{failure.oracle}]: {result.kind} repro, {result.cases} case"
                               f"{'s' * (result.cases != 1)} ({result.describe}), reproduced in a fresh "
                               f"process:\n  {result.command}")
        else:
            v = result.verification
            runs = f"; {v.reproduced_runs} of {v.runs} runs did" if v.runs > 1 else ""
            self.progress.note(f"failure #{n} [{failure.oracle}]: NOT reproduced in a fresh process (exit "
                               f"{v.exit_code}, oracle {v.oracle}{runs}); batch replay:\n  {batch.replay}")
