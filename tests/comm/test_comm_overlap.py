"""The overlapped operations against the same math done locally, bitwise, on spawned ranks.

The reference (:mod:`harness.comm.reference`) is defined as what the overlap computes:
each gathered chunk is dequantized with the *consumer's* scale_inv and multiplied on its
own (one GEMM over the concatenation may round differently), and reduce-scatter partials
are summed in rank order. Each rank computes it locally and compares bit patterns.
"""

from __future__ import annotations

import pytest

from harness.comm.spawn import raise_on_failure

import ub_rank_workers as workers

CASES = [
    dict(m_local=64, k=96, n=48, fmt="E4M3", scale=16.0, seed=1),
    # odd byte counts take the decode's fallback path; E5M2 with NaN/inf/huge/tiny inputs
    dict(m_local=33, k=47, n=17, fmt="E5M2", scale=0.25, seed=2, special=True),
    dict(m_local=128, k=256, n=64, fmt="E4M3", scale=1.0, seed=3, special=True),
]


@pytest.mark.parametrize("world_size", [2, 4])
def test_operations_equal_local_reference_bitwise(world_size, rank_groups, shm_prefix, store_path):
    outcomes = rank_groups.get(world_size).run(workers.equality_rank,
                                               dict(store_path=store_path, prefix=shm_prefix, cases=CASES),
                                               timeout_s=120)
    results = raise_on_failure(outcomes, f"equality at world size {world_size}")
    for rank, result in enumerate(results):
        assert result["mismatches"] == [], f"rank {rank}: " + "\n".join(result["mismatches"])
    # every rank issued the same operations (counters never reset: they must agree)
    assert all(r["ops"] == results[0]["ops"] for r in results)
    assert results[0]["ops"]["qkv"] == 2 * len(CASES)
