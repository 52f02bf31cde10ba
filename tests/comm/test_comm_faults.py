"""Failure modes on spawned ranks: integrity violations, counters out of step, a killed rank."""

from __future__ import annotations

import os

import pytest

from harness.comm import BufferIntegrityError, leftover_segments, unlink_prefix
from harness.comm.spawn import raise_on_failure, run_ranks
from harness.errors import DeadlineExceeded

import ub_rank_workers as workers


def test_integrity_oracle_on_spawned_ranks(rank_groups, shm_prefix, store_path):
    outcomes = rank_groups.get(2).run(workers.integrity_rank, dict(store_path=store_path, prefix=shm_prefix),
                                      timeout_s=90)
    r0, r1 = raise_on_failure(outcomes, "integrity scenarios")

    # good data passes on both ranks
    assert r0["good"] == ("ok", None) and r1["good"] == ("ok", None)

    # rank 1 cast with twice rank 0's scale: each consumer refuses the other's chunk
    status, err = r0["scale"]
    assert status == "error" and isinstance(err, BufferIntegrityError), err
    assert (err.communicator, err.chunk, err.producer, err.consumer) == ("ig_scale", 1, 1, 0)
    assert err.producer_scale_inv == 0.125 and err.consumer_scale_inv == 0.25
    assert err.producer_scale_inv_bits == 0x3E000000 and err.consumer_scale_inv_bits == 0x3E800000
    assert err.ratio == 2.0                      # s_producer / s_consumer
    for text in ("'ig_scale'", "chunk 1", "rank 1", "rank 0", "0x3e000000", "0x3e800000", "= 2.0"):
        assert text in str(err), (text, str(err))
    status, err = r1["scale"]
    assert status == "error" and isinstance(err, BufferIntegrityError)
    assert (err.chunk, err.producer, err.consumer, err.ratio) == (0, 0, 1, 0.5)

    # a byte flipped after the producer recorded its checksum: the consumer of that chunk fails
    status, err = r0["corrupt"]
    assert status == "error" and isinstance(err, BufferIntegrityError), err
    assert (err.chunk, err.producer, err.consumer) == (1, 1, 0)
    assert "checksum" in err.problem and "scale" not in err.problem
    assert r1["corrupt"] == ("ok", None)

    # full mode names the byte
    status, err = r0["corrupt_full"]
    assert status == "error" and isinstance(err, BufferIntegrityError), err
    assert "byte 5 is" in err.problem and "1 byte(s) differ" in err.problem


def test_rank_skipping_an_operation_becomes_deadline_exceeded(rank_groups, shm_prefix, store_path):
    deadline_s = 1.0
    outcomes = rank_groups.get(2).run(workers.skip_rank, dict(store_path=store_path, prefix=shm_prefix,
                                                              deadline_s=deadline_s), timeout_s=60)
    r0, r1 = raise_on_failure(outcomes, "skip scenario")
    assert r1["error"] is None
    err = r0["error"]
    assert isinstance(err, DeadlineExceeded), r0
    assert r0["op"] == 2                          # pairs silently one op, hangs on the last
    assert r0["elapsed"] < deadline_s + 10.0     # the deadline, with a margin load cannot break
    assert err.what == ("userbuffers 'qkv' ring all-gather: rank 0 waiting for chunk 1 from rank 1 "
                        "(counter 2, expected 3)")
    assert err.seconds == deadline_s


def test_sigkilled_rank_leaves_segments_that_unlink_prefix_removes(shm_prefix, store_path):
    deadline_s = 1.5
    outcomes = run_ranks(workers.sigkill_rank, 2, dict(store_path=store_path, prefix=shm_prefix,
                                                       deadline_s=deadline_s), timeout_s=60)
    r0, r1 = outcomes
    assert r1.status == "died" and r1.exitcode == -9, r1.describe()
    assert r0.ok, r0.describe()
    err = r0.value["error"]
    assert isinstance(err, DeadlineExceeded), r0.value
    assert r0.value["op"] == 2 and r0.value["elapsed"] < deadline_s + 10.0
    assert "'qkv'" in err.what and "rank 0 waiting for chunk 1 from rank 1" in err.what

    # rank 0 closed and unlinked its own segments; the killed rank's are still there
    left = leftover_segments(shm_prefix)
    assert left == sorted([f"{shm_prefix}-qkv-r1-data", f"{shm_prefix}-qkv-r1-flags"])
    assert unlink_prefix(shm_prefix) == left
    assert leftover_segments(shm_prefix) == []
    # both ranks are gone: exited, reaped, no such process any more
    assert all(o.exitcode is not None for o in outcomes)
    for o in outcomes:
        with pytest.raises(ProcessLookupError):
            os.kill(o.pid, 0)
