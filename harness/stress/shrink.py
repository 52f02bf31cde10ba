"""From a failing case in a batch to a verified, minimal repro file and command.

For a new failure signature (:mod:`harness.stress.signature`), within the shrink budget:

1. Which preceding cases matter: the case alone, from a fresh state; if that passes, the cases
   that ran before it in its group, then as few of them as still make it fail (the shortest
   suffix first: stale state is usually left by the case just before, then one at a time).
2. A failure that relied on natural id reuse is pinned, if it can be: whether a freed id
   comes back by itself depends on each process's allocation history (threads included), so
   the same one-case repro, run again in fresh processes, fails one time on hygiene, the next
   on cross-rank, the next on isolation. The cases that leave reuse to the allocator are
   given forced reuse instead, ``symmetric`` (every rank reuses: hygiene, isolation) then
   ``asymmetric`` (rank 0 only: ranks diverge); the first mode under which the sequence
   still fails the same way is kept, and every later candidate is pinned the same way. Each
   mode is tried alone, after the one case before it, then after the cases before it, those
   of another forced mode also set to it (:func:`_pin_reuse`), so a failure that did not come
   back with natural reuse gets its tries too.
3. Hypothesis shrinks the case itself (see :mod:`harness.stress.explore`), the preceding
   cases fixed, every candidate run on the shrink group; a candidate the stack declines is
   never run (it counts as passing).
4. The minimal sequence goes to ``repro-<n>.json``; the command that runs it is run in a
   fresh process, once, or three times where it still relies on natural reuse (every run
   must fail the same way). If it does not reproduce, the sequence as found (natural
   reuse, unshrunk) is written and checked instead, and failing that the whole batch up to
   the case (an exact replay of its group).
"""

from __future__ import annotations

import dataclasses
import time

from harness.errors import SetupError
from harness.report.stress_failure import Attempt, Check, FailureRecord, Repro, ShrinkInfo
from harness.stacks.capabilities import UNDECLARED, Capabilities
from harness.stress.explore import shrink_in_batch
from harness.stress.repro import command_text, display_path, run_command, verify, write_case_file
from harness.stress.signature import primary, same_failure
from harness.stress.strategies import complexity, describe


@dataclasses.dataclass
class FailureContext:
    """Where a new failure was found: its batch, its index, the cases before it in its group."""

    failure: FailureRecord
    batch_cases: list          # every case of the batch, in order (named)
    batch_seed: int
    batch_size: int
    index: int                 # of the failing case in the batch
    segment_start: int         # first case of the batch in the failing case's group incarnation
    wall_s: dict = dataclasses.field(default_factory=dict)   # case name -> seconds it took in the batch


class Budget:
    """Shrink time: a share of the whole run, and at most so much per failure signature."""

    def __init__(self, total_s: float, per_failure_s: float):
        self.left_s = total_s
        self.per_failure_s = per_failure_s

    def grant(self) -> float:
        """A deadline (monotonic) for one failure's shrinking.

        Not cut short by the run's own deadline: a failure found in the last seconds is worth
        its shrink as much as one found early, and the shrink budget bounds the overrun.
        """
        return time.monotonic() + max(0.0, min(self.left_s, self.per_failure_s))

    def charge(self, seconds: float) -> None:
        self.left_s = max(0.0, self.left_s - seconds)


class Shrinker:
    def __init__(self, cfg, budget: Budget, candidates_factory, note=print, verify_timeout_s=None,
                 capabilities: Capabilities = UNDECLARED):
        self.cfg = cfg
        self.capabilities = capabilities    # the batches were drawn from it; candidates stay inside it
        self.budget = budget
        self._factory = candidates_factory
        self._candidates = None
        self.note = note
        self.verify_timeout_s = verify_timeout_s or max(120.0, cfg.deadline_s * 12)
        self.shrink_s = 0.0
        self.verify_s = 0.0
        self._closed_start_s = 0.0

    @property
    def group_start_s(self) -> float:
        return self._closed_start_s + (self._candidates.start_s if self._candidates is not None else 0.0)

    def close(self) -> None:
        if self._candidates is not None:
            self._closed_start_s += self._candidates.start_s
            try:
                self._candidates.close()
            finally:
                self._candidates = None

    def runner(self):
        if self._candidates is None:
            self._candidates = self._factory(self.cfg)
        return self._candidates

    # --- the steps ---------------------------------------------------------------------------
    def reproduce(self, ctx: FailureContext, path: str) -> Repro:
        """Shrink (within budget), write the repro to ``path``, check it; returns the failure's repro."""
        failure = ctx.failure
        target = ctx.batch_cases[ctx.index]
        prefix = ctx.batch_cases[ctx.segment_start:ctx.index]
        minimal, kept, info, pin = target, list(prefix), ShrinkInfo(), None
        deadline = self.budget.grant()
        if time.monotonic() < deadline:
            try:
                minimal, kept, info, pin = Shrink(self, ctx, deadline).run()
            except SetupError as exc:
                info = ShrinkInfo(note=f"the shrink group could not start: {exc}")
        else:
            info = ShrinkInfo(note="shrink budget spent: not shrunk")
        attempts = [(kept, minimal, "minimal" if info.shrunk else "unshrunk", pin)]
        if (kept, minimal) != (prefix, target):
            attempts.append((prefix, target, "unshrunk", None))
        if ctx.segment_start > 0:
            attempts.append((ctx.batch_cases[:ctx.index], target, "batch replay", None))
        result = None
        tried = []
        for before, case, kind, pinned in attempts:
            write_case_file(path, before + [case])
            argv = run_command(self.cfg, path)
            self.note(f"failure #{failure.n} [{failure.oracle}]: checking the {kind} repro ({len(before) + 1} case"
                      f"{'s' * bool(before)}{f', id reuse pinned to {pinned}' if pinned else ''}) in a fresh process")
            t0 = time.monotonic()
            check = self._check(argv, before + [case], case.name, failure.oracle, failure.signature)
            self.verify_s += time.monotonic() - t0
            tried.append(Attempt(kind=kind, cases=len(before) + 1, describe=describe(case), reproduced=check.reproduced,
                                 exit_code=check.exit_code, oracle=check.oracle, seconds=check.seconds,
                                 runs=check.runs, reproduced_runs=check.reproduced_runs, reuse_pinned=pinned))
            result = Repro(file=display_path(path), command=command_text(argv), kind=kind, cases=len(before) + 1,
                           verified=check.reproduced, preceding_cases=len(before), target=case.name, spec=case,
                           describe=describe(case), reuse_pinned=pinned, verification=check,
                           attempts=tuple(tried), shrink=info, **complexity(case))
            if check.reproduced:
                break
        return result

    def _check(self, argv: list, cases: list, case_name: str, oracle: str, wanted) -> Check:
        """:func:`verify`, once for a sequence whose every case forces reuse; :data:`NATURAL_RUNS`
        times for one that leaves reuse to the allocator, which counts as reproduced only if
        every run does (the first that does not ends the check): a repro that fails now and
        then is reported as one that does not reproduce, never as one that does."""
        runs = 1 if _all_forced(cases, self.cfg) else NATURAL_RUNS
        checks = []
        for _ in range(runs):
            checks.append(verify(argv, case_name, oracle, self.verify_timeout_s, wanted))
            if not checks[-1].reproduced:
                break
        good = sum(1 for c in checks if c.reproduced)
        return dataclasses.replace(checks[-1], reproduced=good == runs, runs=len(checks), reproduced_runs=good,
                                   seconds=round(sum(c.seconds for c in checks), 2))


class Shrink:
    """One failure's shrink on the shrink group, as three named passes run in order by :meth:`run`.

    1. :meth:`find_preceding`: does the case fail alone, from a fresh state? If not, does it fail
       after the cases that ran before it in its group, and then after how few of them
       (:func:`_fewest_preceding`: the shortest suffix first, doubling, then dropping one case at
       a time while it still fails)?
    2. :meth:`pin_reuse`: where the failure relied on natural id reuse, the first forced mode of
       :data:`PIN_MODES` under which it comes back (:func:`_pin_reuse`); every later candidate
       is pinned to it.
    3. :meth:`shrink_case`: Hypothesis replays the batch's draw to the failing case and shrinks
       it (:func:`harness.stress.explore.shrink_in_batch`), each candidate judged by
       :meth:`still_fails` after the preceding cases kept.

    Every judgement is :meth:`fails`: the last case of the sequence fails with the failure's
    signature. Time spent starting groups is not charged to the shrink: the deadline moves
    along with it. A pass is skipped once time is out; what it would have found stays as the
    pass before left it."""

    def __init__(self, shrinker: Shrinker, ctx: FailureContext, deadline: float):
        self.shrinker = shrinker
        self.cfg = shrinker.cfg
        self.ctx = ctx
        self.oracle = ctx.failure.oracle
        self.wanted = ctx.failure.signature
        self.target = ctx.batch_cases[ctx.index]
        self.prefix = ctx.batch_cases[ctx.segment_start:ctx.index]
        self.deadline = deadline
        self.runner = shrinker.runner()
        self.started = time.monotonic()
        self.start_before = self.runner.start_s
        self.sequences = 0
        self.broken: str | None = None        # the shrink group could not start: stop judging
        self.kept = list(self.prefix)         # the preceding cases the failure needs
        self.reproducible = False
        self.pin: str | None = None
        self.note: str | None = None
        self.outcome = None                   # Hypothesis's (pass 3)

    # --- judging -------------------------------------------------------------------------------
    def _group_starts(self) -> float:
        return self.runner.start_s - self.start_before

    def fails(self, cases: list) -> bool:
        """The last case fails the same way: the same signature, or the same oracle where the
        failure has no signature of its own."""
        self.sequences += 1
        reports = self.runner.run(cases)
        if not (reports and reports[-1].name == cases[-1].name):
            return False
        return same_failure(primary(reports[-1]), self.oracle, self.wanted)

    def out_of_time(self) -> bool:
        return time.monotonic() - self._group_starts() > self.deadline

    def affordable(self, cases: list) -> bool:
        """Whether running ``cases`` (as long as they took in the batch) fits in the time left."""
        cost = sum(self.ctx.wall_s.get(c.name, 0.0) for c in cases)
        return time.monotonic() - self._group_starts() + cost <= self.deadline

    def stop(self, cases: list) -> bool:
        return self.out_of_time() or not self.affordable(cases)

    # --- the passes ----------------------------------------------------------------------------
    def find_preceding(self) -> None:
        prefix, target = self.prefix, self.target
        if self.fails([target]):
            self.kept, self.reproducible = [], True
        elif prefix and not self.affordable(prefix + [target]):
            self.note = (f"fails only after other cases, and the {len(prefix)} cases before it take longer than "
                         f"the shrink time left: not shrunk")
        elif prefix and self.fails(prefix + [target]):
            self.reproducible = True
            self.kept = _fewest_preceding(prefix, target, self.fails, self.stop)

    def pin_reuse(self) -> None:
        needed = (self.kept if self.reproducible else self.prefix) + [self.target]
        if self.out_of_time() or _all_forced(needed, self.cfg):
            return
        self.pin, self.kept = _pin_reuse(self.prefix, self.target, self.kept, self.reproducible, self.fails,
                                         self.stop, self.cfg)
        if self.pin is not None:
            self.note = None
            self.reproducible = True

    def still_fails(self, candidate) -> bool:
        """Pass 3's judge: ``candidate`` (pinned), after the preceding cases kept, fails the same way."""
        if self.broken is not None:
            return False
        candidate = _pinned(candidate, self.pin, self.cfg)
        if _forced(self.base, self.cfg) and not _forced(candidate, self.cfg):
            # From forced id reuse to natural reuse: whether an id comes back then depends on
            # each process's allocation history, so such a candidate may fail here, in a
            # long-lived group, and pass in the fresh process of the repro command.
            return False
        try:
            return self.fails(self.kept + [candidate.with_(name=self.target.name, data_seed=self.target.data_seed)])
        except SetupError as exc:   # no group any more: stop judging, keep what we have
            self.broken = str(exc)
            return False

    def shrink_case(self):
        """The smallest case Hypothesis finds that still fails (``self.base`` when none)."""
        ctx, target = self.ctx, self.target
        # The draw knows nothing of the data seed the session gave the case: replay it without.
        self.outcome = shrink_in_batch(ctx.batch_seed, ctx.index, dataclasses.replace(target, data_seed=0),
                                       self.still_fails, self.deadline + self._group_starts(),
                                       self.shrinker.capabilities, self.cfg.world_size)
        minimal = self.base
        if self.outcome.found and self.outcome.minimal is not None:
            minimal = _pinned(self.outcome.minimal, self.pin, self.cfg).with_(name=target.name,
                                                                              data_seed=target.data_seed)
        elif not self.outcome.found:
            self.note = "the batch's draw could not be replayed: case not shrunk"
        if self.broken is not None:
            self.note = f"shrinking stopped, the shrink group could not start: {self.broken}"
        return minimal

    # --- the driver ----------------------------------------------------------------------------
    def run(self) -> tuple:
        """``(minimal case, preceding cases kept, ShrinkInfo, reuse pinned or None)``."""
        self.shrinker.note(f"failure #{self.ctx.failure.n} [{self.oracle}] in {self.target.name}: shrinking")
        self.find_preceding()
        found_again = self.reproducible
        self.pin_reuse()
        if self.pin is None and not self.reproducible and self.note is None:
            self.note = "did not fail again from a fresh state: not shrunk"
        self.base = _pinned(self.target, self.pin, self.cfg)
        minimal = self.shrink_case() if self.reproducible and not self.out_of_time() else self.base
        spent = time.monotonic() - self.started - self._group_starts()
        self.shrinker.shrink_s += spent
        self.shrinker.budget.charge(spent)
        o = self.outcome
        info = ShrinkInfo(shrunk=minimal != self.base or len(self.kept) < len(self.prefix),
                          reproducible=found_again, candidates_run=o.candidates_run if o else 0,
                          candidates_seen=o.candidates_seen if o else 0, candidates_declined=o.declined if o else 0,
                          sequences_run=self.sequences, out_of_time=o.out_of_time if o else False,
                          shrink_s=round(spent, 2), note=self.note)
        # the mode pinned, or a forced one the shrink chose
        return minimal, self.kept, info, (minimal.reuse if self.pin is not None else None)


def _forced(case, cfg) -> bool:
    """Whether ``case`` forces id reuse (or forbids it): a deterministic outcome, unlike natural reuse."""
    return (case.reuse or cfg.reuse.mode) != "natural"


def _all_forced(cases: list, cfg) -> bool:
    return all(_forced(c, cfg) for c in cases)


# Fresh runs that a repro relying on natural reuse must all fail (one measured case failed
# another way in one run of six: docs/nightly.md, "Pinning natural reuse").
NATURAL_RUNS = 3

# Forced modes a natural-reuse failure is pinned to, in this order (see the module docstring).
PIN_MODES = ("symmetric", "asymmetric")


def _pinned(case, mode: str | None, cfg):
    """``case`` forcing reuse ``mode`` if it leaves reuse to the allocator; else as it is."""
    return case if mode is None or _forced(case, cfg) else case.with_(reuse=mode)


def _pin_reuse(prefix: list, target, kept: list, reproducible: bool, fails, stop, cfg) -> tuple:
    """The first of :data:`PIN_MODES` under which the failure comes back, and the preceding cases
    it then needs: ``(mode, kept)``, or ``(None, kept)`` as given when none does.

    Each mode is tried alone, then after the one case before it (a failure that needs what
    another case left, such as an isolation finding, usually needs only a case that parks ids
    for it to reuse, and the one before is cheap where all of them may take longer than the
    shrink has left), then after the cases it needed with natural reuse (``kept``, or all of
    ``prefix`` when it did not come back), as few of them kept as still fail. Where a case
    before it forces another mode (``asymmetric`` before a natural case pinned ``symmetric``:
    the other rank never freed what that case parked), the cases before it are then also
    tried all in the one mode.
    """
    tries = []
    for before in ([], prefix[-1:], kept if reproducible else prefix):
        if before not in tries:
            tries.append(before)
    for mode in PIN_MODES:
        for before in tries:
            pinned = [_pinned(c, mode, cfg) for c in before]
            aligned = [c.with_(reuse=mode) for c in before]
            for ahead in [pinned] + ([aligned] if aligned != pinned else []):
                seq = ahead + [_pinned(target, mode, cfg)]
                if seq == before + [target]:
                    continue     # nothing to pin: every case of it forces reuse already
                if stop(seq):
                    continue
                if fails(seq):
                    if len(before) > 1:
                        return mode, _fewest_preceding(seq[:-1], seq[-1], fails, stop)
                    return mode, seq[:-1]
    return None, kept


def _fewest_preceding(prefix: list, target, fails, stop) -> list:
    """As few preceding cases as still make ``target`` fail (``prefix + [target]`` is known to).

    ``stop(cases)`` says when to give up: out of time, or ``cases`` would take too long.
    """
    best = list(prefix)
    length = 1
    while length < len(best):
        trial = best[-length:] + [target]
        if stop(trial):
            return best
        if fails(trial):
            best = best[-length:]
            break
        length *= 2
    i = 0
    while len(best) > 1 and i < len(best):
        trial = best[:i] + best[i + 1:]
        if stop(trial + [target]):
            break
        if fails(trial + [target]):
            best = trial
        else:
            i += 1
    return best
