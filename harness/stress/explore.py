"""Hypothesis, driven programmatically: draw a batch of cases, then shrink one that failed.

A batch is the first ``size`` examples Hypothesis generates for a ``@given`` function seeded
with ``@seed(batch_seed)``, ``database=None``, ``max_examples=DRAW_LIMIT``: the draw stops there
(the body raises once it has them). Hypothesis plans its generation by ``max_examples`` (with
``max_examples=size`` the first 20 cases of a 20-case and of a 120-case draw differ), so it is
the same for every size: a batch's i-th case depends on the seed and i only, not on how many
cases the batch drew (which follows the rate seen so far). Generation is deterministic for a
given seed, settings and sequence of outcomes, so to shrink the k-th case of a batch we run
the same function again: the first k calls pass without running anything (so Hypothesis walks
the very same examples), the k-th raises, and from there Hypothesis's own shrinker proposes
smaller cases, each judged by ``still_fails``. The last example that raised is the one
Hypothesis settles on (it replays its minimal example once more before reporting).

Draws are checked against the stack's declaration (:func:`harness.stacks.capabilities.declined_reason`):
a declined draw is dropped from the batch and counted (the strategies draw from the declaration,
so none is expected; the check is what guarantees it), and a declined shrink candidate counts as
passing, so shrinking never ends on a case the stack declines.

Nothing here runs a case: callers pass the judging function.
"""

from __future__ import annotations

import dataclasses
import json
import time

from hypothesis import HealthCheck, Phase, Verbosity, given, seed, settings

from harness.case.spec import CaseSpec
from harness.stacks.capabilities import UNDECLARED, Capabilities, declined_reason
from harness.stress.strategies import PLACEHOLDER, case_specs


# Hypothesis's example budget for every draw; a batch takes at most this many cases.
DRAW_LIMIT = 500


class _Failing(Exception):
    """Raised inside the Hypothesis test body when the case (still) fails."""


class _Enough(Exception):
    """Raised inside the Hypothesis test body once a draw has all the cases it wants."""


def _explore(body, batch_seed: int, phases, capabilities: Capabilities) -> None:
    @settings(database=None, deadline=None, max_examples=DRAW_LIMIT, phases=phases, derandomize=False,
              suppress_health_check=list(HealthCheck), report_multiple_bugs=False, verbosity=Verbosity.quiet,
              print_blob=False)
    @seed(batch_seed)
    @given(case_specs(capabilities=capabilities))
    def stress_batch(case):
        body(case)

    stress_batch()


@dataclasses.dataclass
class DrawnBatch:
    """A batch's cases (the stack runs every one), and the draws its declaration refused."""

    cases: list
    draws: int = 0
    declined: int = 0
    declined_reasons: dict = dataclasses.field(default_factory=dict)   # reason -> count


def draw(batch_seed: int, size: int, capabilities: Capabilities = UNDECLARED,
         world_size: int | None = None) -> DrawnBatch:
    """Up to ``size`` cases (named with the placeholder; at most :data:`DRAW_LIMIT`), the same
    ones for the same arguments; the first n of a larger size are those of size n."""
    batch = DrawnBatch(cases=[])
    if size > DRAW_LIMIT:
        raise ValueError(f"a batch draws at most {DRAW_LIMIT} cases, not {size}")

    def keep(case: CaseSpec) -> None:
        if len(batch.cases) >= size:
            raise _Enough()       # also on Hypothesis's replay of the example that raised
        batch.draws += 1
        reason = declined_reason(capabilities, case, world_size)
        if reason is None:
            batch.cases.append(case)
        else:
            batch.declined += 1
            batch.declined_reasons[reason] = batch.declined_reasons.get(reason, 0) + 1

    try:
        _explore(keep, batch_seed, (Phase.generate,), capabilities)
    except _Enough:
        pass
    return batch


def draw_batch(batch_seed: int, size: int, capabilities: Capabilities = UNDECLARED,
               world_size: int | None = None) -> list[CaseSpec]:
    """The cases of :func:`draw`."""
    return draw(batch_seed, size, capabilities, world_size).cases


def canonical(case: CaseSpec) -> str:
    """A case's identity for caching, regardless of its name."""
    return json.dumps(case.with_(name=PLACEHOLDER).to_dict(), sort_keys=True)


@dataclasses.dataclass
class ShrinkOutcome:
    found: bool                   # the replay met the failing case (else nothing was shrunk)
    minimal: CaseSpec | None      # the smallest case that still failed (placeholder name)
    candidates_run: int = 0       # cases judged (cache misses)
    candidates_seen: int = 0      # cases Hypothesis proposed
    improvements: int = 0         # how often a smaller failing case was found
    out_of_time: bool = False
    declined: int = 0             # candidates the stack's declaration refused (never run)
    seconds: float = 0.0


class _Replay:
    """The body Hypothesis calls while it replays a batch's draw and then shrinks one case of it.

    Two stages, told apart by :attr:`hit`: :meth:`walk` lets every example before the failing
    one pass unrun until the replay meets the failing case at its index (equality with it is the
    safeguard); from then on :meth:`judge` runs each candidate Hypothesis proposes (once: judged
    candidates are cached by their identity) and keeps the last that failed as the minimal."""

    def __init__(self, index: int, failing: CaseSpec, still_fails, deadline: float, capabilities, world_size):
        self.index = index
        self.target = canonical(failing)
        self.still_fails = still_fails
        self.deadline = deadline
        self.capabilities = capabilities
        self.world_size = world_size
        self.cache: dict[str, bool] = {self.target: True}
        self.calls = 0
        self.hit = False
        self.minimal: CaseSpec | None = None
        self.run = self.seen = self.improved = self.declined = 0
        self.late = False

    def __call__(self, case: CaseSpec) -> None:
        if declined_reason(self.capabilities, case, self.world_size) is not None:
            # Not in the batch (draw() dropped it) and never run: it neither counts nor fails.
            if self.hit:
                self.declined += 1
            return
        fails = self.judge(case) if self.hit else self.walk(case)
        if fails:
            # One raise site: Hypothesis tells bugs apart by where they are raised.
            raise _Failing()

    def walk(self, case: CaseSpec) -> bool:
        i = self.calls
        self.calls += 1
        if canonical(case) != self.target or i < self.index:
            return False
        self.hit = True
        self.minimal = case
        return True

    def judge(self, case: CaseSpec) -> bool:
        self.seen += 1
        key = canonical(case)
        if key not in self.cache:
            if time.monotonic() > self.deadline:
                self.late = True
                return False
            self.run += 1
            self.cache[key] = bool(self.still_fails(case))
        fails = self.cache[key]
        if fails:
            if canonical(self.minimal) != key:
                self.improved += 1
            self.minimal = case
        return fails


def shrink_in_batch(batch_seed: int, index: int, failing: CaseSpec, still_fails,
                    deadline: float, capabilities: Capabilities = UNDECLARED,
                    world_size: int | None = None) -> ShrinkOutcome:
    """Replay the batch's draw up to ``failing`` (its ``index``-th case), then let Hypothesis shrink it.

    ``capabilities`` and ``world_size`` must be those the batch was drawn with (:func:`draw`):
    ``index`` counts the draws the declaration kept. ``still_fails(case) -> bool`` runs a
    candidate (placeholder name) and says whether it fails the same way; it is not called for a
    candidate the declaration refuses (``declined``), nor once ``time.monotonic()`` passes
    ``deadline`` (candidates then count as passing, and Hypothesis stops improving quickly).
    """
    started = time.monotonic()
    replay = _Replay(index, failing, still_fails, deadline, capabilities, world_size)
    try:
        _explore(replay, batch_seed, (Phase.generate, Phase.shrink), capabilities)
    except _Failing:
        pass
    return ShrinkOutcome(found=replay.hit, minimal=replay.minimal if replay.hit else None,
                         candidates_run=replay.run, candidates_seen=replay.seen, improvements=replay.improved,
                         out_of_time=replay.late, declined=replay.declined, seconds=time.monotonic() - started)
