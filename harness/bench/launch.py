"""Figures 1 and 2: what one persistent group saves over a launch per case, and what it costs
over a bare loop.

One round, all in this run, side by side:

* **persistent**: a fresh :class:`TimedSession` (one launch), the K cases one after another,
  close. Its cost is start + every case's wall time as the controller sees it + close.
* **bare**: the same K cases' model work in the bare group (:mod:`harness.bench.bare`), its
  stack registries emptied first (what a fresh launch gives). Cases run in blocks; a harness
  block and the same bare block alternate (which goes first alternates too), so a change in the
  machine's load hits both sides of a block's ratio.
* **fresh**: this round's share of the K cases, each in a group of its own: start a session,
  run the one case, close (what one launch per case costs, as PyTorch's ``MultiProcessTestCase``
  does it).

``amortization`` per fresh launch = (K x that launch) / the persistent run of its round; ``overhead`` per block =
harness block / bare block. A second persistent group with the reference oracle off runs the
same blocks too (``overhead_without_reference``), so the figure can be split between the
reference and the rest of the harness. When the fresh launches would run past their time budget (a loaded
machine), the rest of the K are estimated from the median of those measured; the figure's
detail says how many were measured.
"""

from __future__ import annotations

import statistics
import time

from harness.bench.figures import Figure, figure
from harness.bench.harnessed import TimedSession, bench_config, expect_pass
from harness.bench.workload import small_cases
from harness.runner.session import open_session


def fresh_launch(cfg, case) -> float:
    """Seconds for one case in a group of its own: start, run, close."""
    t0 = time.perf_counter()
    session = open_session(cfg)
    try:
        expect_pass(session.run(case))
    finally:
        session.close()
    return time.perf_counter() - t0


def launch_figures(bare, k: int = 40, rounds: int = 3, block: int = 10, fresh_per_round: int | None = None,
                   fresh_budget_s: float = 240.0, without_reference: bool = True,
                   log=print) -> tuple[list[Figure], dict]:
    """The ``amortization`` and ``overhead`` figures; also returns the persistent runs' rank results."""
    cases = small_cases(k)
    cfg = bench_config()
    noref_cfg = bench_config(check_reference=False) if without_reference else None
    share = max(1, fresh_per_round if fresh_per_round is not None else -(-k // rounds))
    nblocks = -(-k // block)
    persistent_totals, fresh_all, amort_samples = [], [], []
    block_ratios, block_overhead_ms, harness_case_ms, bare_case_ms = [], [], [], []
    rank_results = []
    fresh_spent = 0.0
    next_fresh = 0
    noref_ratios = []
    for r in range(rounds):
        bare.reset()
        session = TimedSession(cfg).start()
        noref = None
        try:
            # The same harness without the reference oracle, to show what the rest of the harness costs.
            noref = TimedSession(noref_cfg).start() if noref_cfg is not None else None
            for b, lo in enumerate(range(0, k, block)):
                chunk = cases[lo:lo + block]

                def harness_side(s=session):
                    n0 = len(s.case_wall_s)
                    for case in chunk:
                        expect_pass(s.run(case))
                    return sum(s.case_wall_s[n0:])

                def bare_side():
                    answers = bare.run(chunk)
                    return max(a["wall_s"] for a in answers.values())

                sides = [("h", harness_side), ("w", bare_side)]
                if noref is not None:
                    sides.append(("n", lambda: harness_side(noref)))
                shift = (r + b) % len(sides)        # rotate who goes first from block to block
                took = {name: fn() for name, fn in sides[shift:] + sides[:shift]}
                h, w = took["h"], took["w"]
                block_ratios.append(h / w)
                block_overhead_ms.append((h - w) / len(chunk) * 1e3)
                harness_case_ms.append(h / len(chunk) * 1e3)
                bare_case_ms.append(w / len(chunk) * 1e3)
                if "n" in took:
                    noref_ratios.append(took["n"] / w)
            t0 = time.perf_counter()
            session.close()
            close_s = time.perf_counter() - t0
        finally:
            session.close()            # a no-op once closed
            if noref is not None:
                noref.close()
        total = session.start_s + sum(session.case_wall_s) + close_s
        persistent_totals.append(total)
        rank_results += session.rank_results
        # This round's share of fresh launches, within the time budget.
        round_fresh = []
        for _ in range(share):
            if next_fresh >= k or (fresh_spent > fresh_budget_s and fresh_all):
                break
            t = fresh_launch(cfg, cases[next_fresh])
            next_fresh += 1
            fresh_spent += t
            round_fresh.append(t)
        fresh_all += round_fresh
        amort_samples += [k * t / total for t in round_fresh]
        fresh_median = statistics.median(round_fresh) if round_fresh else 0.0
        log(f"  round {r + 1}/{rounds}: persistent {total:.1f} s (start {session.start_s:.1f} s), "
            f"fresh launches {len(round_fresh)} (median {fresh_median:.1f} s), "
            f"harness/bare per block {', '.join(f'{x:.2f}' for x in block_ratios[-nblocks:])}")
    measured = len(fresh_all)
    fresh_total = sum(fresh_all) + (k - measured) * (statistics.median(fresh_all) if fresh_all else 0.0)
    persistent_median = statistics.median(persistent_totals)
    amort = figure(
        "amortization", amort_samples, "x", ">= 15",
        detail={"k_cases": k, "fresh_launches_measured": measured,
                "fresh_launch_median_s": statistics.median(fresh_all),
                "fresh_total_s": fresh_total, "fresh_total_estimated": measured < k,
                "persistent_total_median_s": persistent_median, "persistent_totals_s": persistent_totals,
                "ratio_of_totals": fresh_total / persistent_median,
                "case": "dims (16, 32, 16), 1 model, 2 steps, natural reuse, isolation off",
                "sample": "per fresh launch: K x that launch / the persistent run of its round"})
    overhead = figure(
        "overhead", block_ratios, "x", "<= 1.25",
        detail={"per_case_overhead_ms": statistics.median(block_overhead_ms),
                "per_case_overhead_ms_spread": [min(block_overhead_ms), max(block_overhead_ms)],
                "harness_case_ms_median": statistics.median(harness_case_ms),
                "bare_case_ms_median": statistics.median(bare_case_ms),
                "block_cases": block, "blocks": len(block_ratios),
                "harness_side": "controller wall per case: send, every rank's execute_case (reference, hygiene, "
                                "ledger, precheck), results back, judge; isolation off",
                "bare_side": "two gloo processes: build, steps, destroy with the same stack and seeded data"})
    figures = [amort, overhead]
    if noref_ratios:
        figures.append(figure(
            "overhead_without_reference", noref_ratios, "x", "",
            detail={"what": "the overhead figure's blocks, run also on a group with check_reference off (no "
                            "reference oracle; hygiene, ledger, precheck, snapshot and retention still on)",
                    "sample": "per block: that group's block / the bare block"}))
    return figures, {"rank_results": rank_results}
