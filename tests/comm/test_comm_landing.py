"""A counter raised before its payload, and a read before the write it expects, on threaded ranks.

Known bad: a producer whose ``put`` stores the counter first and copies the chunk after, and a
consumer whose wait ends one count short. Each is made to lose its race on purpose (an event
orders the two ranks), so the findings here are deterministic; ``tests/test_ub_early.py`` runs the
planted stacks on spawned ranks.
"""

from __future__ import annotations

import threading

import pytest
import torch
from torch.distributed import HashStore

from harness.comm import BufferIntegrityError, Communicator, bulk_allgather, ring_allgather_gemm_hp
from harness.comm.flags import wait_counter
from harness.comm.integrity import HEADER_BYTES, landing_problem, make_header
from harness.comm.stagger import CounterStagger
from harness.errors import UsageError
from harness.fp8 import E4M3
from tests.comm.test_comm_units import run_threads


def test_landing_problem_names_a_missing_header_another_operation_and_bytes_off_the_checksum():
    data = torch.arange(64, dtype=torch.uint8)
    header = make_header(producer=0, chunk=0, seq=2, data=data)
    assert landing_problem(header, 2, lambda n: data[:n]) is None
    assert landing_problem(None, 2, lambda n: data[:n]) == "no chunk header in the slot yet"
    assert "names producer 0, chunk 0, operation #1, not operation #2's chunk" in \
        landing_problem(make_header(producer=0, chunk=0, seq=1, data=data), 2, lambda n: data[:n])
    assert "not operation #2's chunk" in landing_problem(header, 2, lambda n: data[:n], producer=1)
    stale = data.clone()
    stale[5] ^= 1
    assert "the slot's 64 bytes have checksum 0x" in landing_problem(header, 2, lambda n: stale[:n])


def test_stagger_holds_one_rank_per_operation_and_rejects_bad_holds():
    stagger = CounterStagger(0.003)
    assert [[stagger.holds(seq, rank, 2) for rank in range(2)] for seq in range(3)] == \
        [[True, False], [False, True], [True, False]]
    assert not CounterStagger().holds(0, 0, 2) and not stagger.holds(0, 0, 1)
    for bad in (-1.0, float("nan"), float("inf"), True, "1"):
        with pytest.raises(UsageError, match="hold_s"):
            CounterStagger(bad)


def _signal_first(comm, landed_after: threading.Event):
    """A producer's put that raises the peer's counter, then copies once ``landed_after`` is set."""
    def put(dst, slot, nbytes, op, cancel=None):
        comm.wait_release(dst, op, cancel)
        comm.signal(dst, slot)
        landed_after.wait(10.0)
        h = comm.header_offset(slot)
        comm.data[dst].view(h, HEADER_BYTES).copy_(comm.data[comm.rank].view(h, HEADER_BYTES))
        comm.slot(dst, slot, nbytes).copy_(comm.slot(comm.rank, slot, nbytes))
    return put


def test_a_counter_raised_before_its_payload_fails_the_producer_and_the_early_read_says_so(shm_prefix):
    store = HashStore()
    consumer_read = threading.Event()

    def rank_fn(rank):
        with Communicator("qkv", rank, 2, 8192, store, shm_prefix, 5.0) as comm:
            if rank == 0:
                comm.put = _signal_first(comm, consumer_read)
            else:
                watch = comm.arrivals.wait_landed

                def wait_landed(*args):            # the read has failed: now let the write land
                    consumer_read.set()
                    return watch(*args)
                comm.arrivals.wait_landed = wait_landed
            ring_allgather_gemm_hp(comm, torch.randn(8, 16, generator=torch.Generator().manual_seed(rank)),
                                   4.0, E4M3, torch.randn(4, 16))

    _, errors = run_threads(rank_fn, 2)
    producer, consumer = errors
    assert isinstance(producer, BufferIntegrityError), producer
    assert str(producer).startswith(
        "userbuffers 'qkv' ring all-gather: rank 0 raised counter data[0][0] in rank 1's flags to 1 (its write #1 "
        "of chunk 0, operation #0) before the payload landed there: no chunk header in the slot yet; the producer "
        "signalled before its write"), producer
    assert isinstance(consumer, BufferIntegrityError), consumer
    assert consumer.problem == "read before the producer's write landed"
    assert str(consumer).startswith(
        "userbuffers 'qkv' ring all-gather: read before the producer's write landed: rank 1 read chunk 0 from "
        "rank 0 while counter data[0][0] was 1, expected 1 (the counter was raised before its payload); at the "
        "read, no chunk header in the slot yet; operation #0's chunk landed after the read (counter now 1), so "
        "the ranks' operation sequences agree"), consumer
    assert (consumer.communicator, consumer.chunk, consumer.producer, consumer.consumer) == ("qkv", 0, 0, 1)


def test_a_wait_one_count_short_is_a_read_before_the_write_landed(shm_prefix):
    store = HashStore()
    consumer_failed = threading.Event()

    def rank_fn(rank):
        with Communicator("fc2", rank, 2, 8192, store, shm_prefix, 5.0) as comm:
            if rank == 0:
                consumer_failed.wait(10.0)          # rank 1 reads before rank 0 has written anything
                return bulk_allgather(comm, torch.arange(32.0).reshape(2, 16))
            def short(src, slot, op, chunk, cancel=None):
                key = (src, slot)
                expected = comm._recv.get(key, 0) + 1
                wait_counter(comm.flags[1], src * 2 + slot, expected - 1, 5.0, str, "", cancel)
                comm._recv[key] = expected
            comm.wait_data = short
            try:
                return bulk_allgather(comm, torch.arange(32.0).reshape(2, 16))
            finally:
                consumer_failed.set()

    _, errors = run_threads(rank_fn, 2)
    assert errors[0] is None, errors[0]
    assert isinstance(errors[1], BufferIntegrityError), errors[1]
    assert str(errors[1]) == (
        "userbuffers 'fc2' bulk all-gather: read before the producer's write landed: rank 1 read chunk 0 from "
        "rank 0 while counter data[0][0] was 0, expected 1 (the wait before the read ended 1 count(s) short)")


def test_a_staggered_ring_gives_the_same_bits_and_holds_one_rank_per_operation(shm_prefix):
    """Known good: the stagger changes when counters are raised, never what is read."""
    store = HashStore()
    x = [torch.randn(8, 16, generator=torch.Generator().manual_seed(r)) for r in range(2)]
    w = torch.randn(4, 16, generator=torch.Generator().manual_seed(7))

    def rank_fn(rank, stagger):
        with Communicator("qkv", rank, 2, 8192, store, f"{shm_prefix}{int(stagger.hold_s * 1e3)}", 5.0,
                          stagger=stagger) as comm:
            return [ring_allgather_gemm_hp(comm, x[rank] * (op + 1), 4.0, E4M3, w) for op in range(3)]

    plain, errors = run_threads(lambda r: rank_fn(r, CounterStagger()), 2)
    assert errors == [None, None], errors
    staggered, errors = run_threads(lambda r: rank_fn(r, CounterStagger(0.005)), 2)
    assert errors == [None, None], errors
    for a, b in zip(plain, staggered):
        assert all(torch.equal(p.view(torch.int32), q.view(torch.int32)) for p, q in zip(a, b))
