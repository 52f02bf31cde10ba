"""measure_overlap end to end at a small size (the figures themselves are not asserted:
this machine is shared, timings are noisy)."""

from __future__ import annotations

import math

from harness.comm.bench import measure_overlap


def test_measure_overlap_runs_and_reports(rank_groups):
    timing = measure_overlap(world_size=2, m=256, k=512, n=64, repeats=2, group=rank_groups.get(2))
    assert timing.allgather_s > 0 and timing.gemm_s > 0 and timing.overlapped_s > 0
    assert math.isclose(timing.ratio, timing.overlapped_s / (timing.allgather_s + timing.gemm_s))
    assert set(timing.samples) == {"rank0", "rank1"}
    assert all(len(v) == 2 for s in timing.samples.values() for v in s.values())
    assert "ratio" in timing.summary()
