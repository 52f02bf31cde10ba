"""Figure 6: resident memory per rank over many build / destroy cycles.

Three runs of the same cycles (:func:`~harness.bench.workload.cycle_cases`):

* the harness's own growth: a persistent group with ``reset_between_cases`` (the stack's
  registries are emptied before every case, so what still grows is the harness's);
* emulated-patched as it is: the same without the reset; its global amax buffers keep every
  dead module's meta alive and reduce all of them at every autocast exit (as TE's do);
* the bare loop without reset, which also times the stack's amax reduction at every cycle:
  the reduction time at cycle 1 and at the last cycle shows the cost the retention causes.

RSS is read from ``/proc/PID/statm`` after every case (harness) or every cycle (bare). Slopes are
least-squares fits of RSS against cycles, after the first ``warmup`` share of the cycles
(allocator pools and caches fill there), in MB per 100 cycles; one sample per rank.
"""

from __future__ import annotations

import statistics

from harness.bench.figures import Figure, figure, slope_mb_per_100
from harness.bench.harnessed import TimedSession, bench_config, expect_pass
from harness.bench.workload import cycle_cases


def _harness_rss(cases, reset: bool) -> tuple[dict[int, list[tuple[int, int]]], int]:
    """RSS per rank after every case, and how many keys the controller's store gained meanwhile."""
    session = TimedSession(bench_config(reset_between_cases=reset)).start()
    series: dict[int, list[tuple[int, int]]] = {}
    cycles = 0
    try:
        keys_before = session.group.store.num_keys()
        for r, kb in session.rss_kb().items():
            series.setdefault(r, []).append((0, kb))
        for case in cases:
            expect_pass(session.run(case))
            session.rank_results.clear()        # this figure keeps nothing per case
            cycles += case.models
            for r, kb in session.rss_kb().items():
                series.setdefault(r, []).append((cycles, kb))
        new_keys = session.group.store.num_keys() - keys_before
    finally:
        session.close()
    return series, new_keys


def _fit(series: dict[int, list[tuple[int, int]]], total: int, warmup: float) -> dict[int, float]:
    return {r: slope_mb_per_100([(c, kb) for c, kb in pts if c >= warmup * total]) for r, pts in series.items()}


def memory_figures(bare, cases: int = 50, models: int = 10, warmup: float = 0.2, log=print) -> list[Figure]:
    specs = cycle_cases(cases, models)
    total = cases * models
    own, own_keys = _harness_rss(specs, reset=True)
    grows, _ = _harness_rss(specs, reset=False)
    own_slopes, grow_slopes = _fit(own, total, warmup), _fit(grows, total, warmup)
    bare.reset()
    answers = bare.run(specs, per_cycle=True)
    bare.reset()
    amax = {r: a["amax_s"] for r, a in answers.items()}
    bare_slopes = {r: slope_mb_per_100([(i + 1, kb) for i, kb in enumerate(a["rss_kb"]) if i + 1 >= warmup * total])
                   for r, a in answers.items()}
    first = [v[0] * 1e3 for v in amax.values() if v]
    last = [v[-1] * 1e3 for v in amax.values() if v]
    head = [statistics.median(v[:10]) * 1e3 for v in amax.values() if v]
    tail = [statistics.median(v[-10:]) * 1e3 for v in amax.values() if v]
    log(f"  RSS slope MB/100 cycles: harness own {_med(own_slopes):.3f}, "
        f"emulated-patched as is {_med(grow_slopes):.3f}; amax reduction per cycle: "
        f"cycle 1 {statistics.median(first):.2f} ms, cycle {total} {statistics.median(last):.2f} ms")

    def growth_mb(series):
        return {r: round((pts[-1][1] - pts[0][1]) / 1024, 2) for r, pts in series.items()}

    common = {"cycles": total, "cases": cases, "cycles_per_case": models, "warmup_cycles": int(warmup * total),
              "sample": "per rank: least-squares slope of RSS against cycles after warm-up"}
    harness_own = figure("rss_slope_harness_own", list(own_slopes.values()), "MB/100 cycles", "< 1", detail={
        **common, "reset_between_cases": True, "rss_growth_mb_per_rank": growth_mb(own),
        "controller_store_keys_per_100_cycles": round(own_keys * 100 / total, 1),
        "store_keys_note": "precheck keys stay in the controller's TCP store for the life of the group",
        "rss_end_mb_per_rank": {r: round(pts[-1][1] / 1024, 1) for r, pts in own.items()}})
    as_is = figure("rss_slope_emulated_patched", list(grow_slopes.values()), "MB/100 cycles", "", detail={
        **common, "reset_between_cases": False, "rss_growth_mb_per_rank": growth_mb(grows),
        "bare_loop_slope_per_rank": {r: round(v, 3) for r, v in bare_slopes.items()},
        "amax_reduction_ms_cycle_1": statistics.median(first),
        f"amax_reduction_ms_cycle_{total}": statistics.median(last),
        "amax_reduction_ms_first_10_median": statistics.median(head),
        "amax_reduction_ms_last_10_median": statistics.median(tail),
        "amax_reduction_growth_x": statistics.median(tail) / statistics.median(head),
        "amax_note": "time in the stack's global amax reduce_and_update per cycle (1 step: forward and backward "
                     "reductions, all-reduce included), bare loop, median over ranks"})
    return [harness_own, as_is]


def _med(d: dict) -> float:
    vals = [v for v in d.values() if v == v]
    return statistics.median(vals) if vals else float("nan")
