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
    d = case.to_dict()
    d["name"] = PLACEHOLDER
    return json.dumps(d, sort_keys=True)


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
    target = canonical(failing)
    cache: dict[str, bool] = {target: True}
    state = {"calls": 0, "hit": False, "minimal": None, "run": 0, "seen": 0, "improved": 0, "late": False,
             "declined": 0}

    def body(case: CaseSpec) -> None:
        if declined_reason(capabilities, case, world_size) is not None:
            # Not in the batch (draw() dropped it) and never run: it neither counts nor fails.
            if state["hit"]:
                state["declined"] += 1
            return
        if not state["hit"]:
            i = state["calls"]
            state["calls"] += 1
            # The replay must meet the failing case at its index; equality is the safeguard.
            if canonical(case) != target or i < index:
                return
            state["hit"] = True
            state["minimal"] = case
            fails = True
        else:
            state["seen"] += 1
            key = canonical(case)
            if key not in cache:
                if time.monotonic() > deadline:
                    state["late"] = True
                    return
                state["run"] += 1
                cache[key] = bool(still_fails(case))
            fails = cache[key]
            if fails:
                if canonical(state["minimal"]) != key:
                    state["improved"] += 1
                state["minimal"] = case
        if fails:
            # One raise site: Hypothesis tells bugs apart by where they are raised.
            raise _Failing()

    try:
        _explore(body, batch_seed, (Phase.generate, Phase.shrink), capabilities)
    except _Failing:
        pass
    return ShrinkOutcome(found=state["hit"], minimal=state["minimal"] if state["hit"] else None,
                         candidates_run=state["run"], candidates_seen=state["seen"], improvements=state["improved"],
                         out_of_time=state["late"], declined=state["declined"],
                         seconds=time.monotonic() - started)
