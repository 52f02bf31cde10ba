"""Figure 4: model build / step / destroy cycles per second per rank, under the harness and bare.

A persistent harness group and the bare group run the same stress-like cases
(:func:`~harness.bench.workload.cycle_cases`: many models per case, one step each) one case at
a time, alternating which side goes first. Both start from empty stack registries and both keep
what the stack keeps (the emulated stack's amax buffers grow on both sides alike). One sample
per case: harness cycles/s divided by bare cycles/s for that case.
"""

from __future__ import annotations

import statistics

from harness.bench.figures import Figure, figure
from harness.bench.harnessed import TimedSession, bench_config, expect_pass
from harness.bench.workload import cycle_cases


def throughput_figure(bare, cases: int = 6, models: int = 10, log=print) -> tuple[Figure, dict]:
    specs = cycle_cases(cases, models)
    bare.reset()
    session = TimedSession(bench_config()).start()
    ratios, harness_rate, bare_rate = [], [], []
    try:
        for i, case in enumerate(specs):
            def harness_side():
                expect_pass(session.run(case))
                return session.case_wall_s[-1]

            def bare_side():
                return max(a["wall_s"] for a in bare.run([case]).values())

            if i % 2 == 0:
                h, w = harness_side(), bare_side()
            else:
                w, h = bare_side(), harness_side()
            harness_rate.append(case.models / h)
            bare_rate.append(case.models / w)
            ratios.append(w / h)
    finally:
        session.close()
    log(f"  cycles/s per rank: harness {statistics.median(harness_rate):.1f}, bare {statistics.median(bare_rate):.1f}")
    fig = figure("stress_throughput", ratios, "x", ">= 0.8",
                 detail={"harness_cycles_per_s": statistics.median(harness_rate),
                         "bare_cycles_per_s": statistics.median(bare_rate), "cases": cases,
                         "cycles_per_case": models, "steps_per_cycle": specs[0].steps,
                         "harness_side": "persistent group, default oracles, isolation off",
                         "sample": "per case: harness cycles/s / bare cycles/s"})
    return fig, {"rank_results": session.rank_results}
