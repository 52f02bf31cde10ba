"""Figure 5: the share of case time the oracles take, from every rank's own phase timings.

Each rank's :func:`~harness.runner.rank.execute.execute_case` times its phases (``phase_s``):
``reference`` (computing the expected model, hashing and comparing snapshots), ``hygiene``
(destroy, collect, the stale-id and survivor scans, retained state), ``ledger`` (recording
every collective and the store precheck before it) and ``stack`` (the stack's own work, the
snapshot the reference oracle reads, and the id-reuse accounting). One sample per case and
rank: (reference + hygiene + ledger) / the rank's case duration.

The precheck's wait includes the time a rank waits for its slower peer to reach the same
collective, which the collective itself would otherwise have waited: the ``ledger`` share is an
upper bound of what checking costs.
"""

from __future__ import annotations

import statistics

from harness.bench.figures import Figure, figure

CHECKS = ("reference", "hygiene", "ledger")


def oracle_cost_figure(rank_results: list[dict], name: str = "oracle_cost", mode: str = "default") -> Figure:
    shares, parts = [], {k: [] for k in (*CHECKS, "stack", "unattributed")}
    for per_rank in rank_results:
        for result in per_rank.values():
            phases, total = result.phase_s, result.duration_s
            if not total or not phases:
                continue
            checks = sum(phases.get(k, 0.0) for k in CHECKS)
            shares.append(100.0 * checks / total)
            for k in CHECKS + ("stack",):
                parts[k].append(100.0 * phases.get(k, 0.0) / total)
            parts["unattributed"].append(100.0 * (total - sum(phases.values())) / total)
    ms = [r.duration_s * 1e3 for per_rank in rank_results for r in per_rank.values() if r.duration_s]
    # The rank that reaches a collective last waits least in its precheck: per case, the smaller
    # of the ranks' ledger shares is a tighter upper bound of what recording and checking cost.
    ledger_low = [min(100.0 * r.phase_s.get("ledger", 0.0) / r.duration_s for r in per_rank.values())
                  for per_rank in rank_results if per_rank and all(r.duration_s for r in per_rank.values())]
    detail = {
        "mode": mode,
        "share_median_percent": {k: round(statistics.median(v), 2) for k, v in parts.items() if v},
        "case_ms_median": statistics.median(ms) if ms else None,
        "ledger_share_lowest_rank_percent_median": round(statistics.median(ledger_low), 2) if ledger_low else None,
        "ledger_measured": any("ledger" in r.phase_s for per_rank in rank_results for r in per_rank.values()),
        "samples": "one per case and rank: (reference + hygiene + ledger) / execute_case duration",
        "note": "ledger includes the precheck's wait for the slower peer (an upper bound); 'unattributed' is "
                "the retention registry sizing and the end-of-case collection",
    }
    return figure(name, shares, "%", "<= 30", detail=detail)
