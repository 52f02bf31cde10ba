"""Unit tests in one process: segments, flags, integrity, decode, and communicators whose ranks
are threads sharing a HashStore (fast, and enough to exercise the protocol)."""

from __future__ import annotations

import os
import pickle
import threading
import time

import pytest
import torch
from torch.distributed import HashStore

from harness.comm import (
    BufferIntegrityError,
    Communicator,
    bulk_allgather,
    destroy_ub,
    gemm_reduce_scatter,
    get_ub,
    initialize_ub,
    leftover_segments,
    live_communicators,
    ring_allgather_gemm_hp,
    unlink_prefix,
)
from harness.comm.decode import PairTable, decode_fp8
from harness.comm.flags import FlagRegion, WaitCancelled, wait_counter
from harness.comm.integrity import ChunkHeader, checksum, float32_bits, make_header, verify_chunk
from harness.comm.reference import reference_ring_allgather_gemm
from harness.comm.segments import Segment, check_prefix, segment_name
from harness.errors import DeadlineExceeded, HarnessError, UsageError
from harness.fp8 import E4M3, E5M2, cast_to_fp8, dequantize


def run_threads(fn, world_size, timeout_s=30.0):
    """Run ``fn(rank)`` on one thread per rank; return (results, errors), threads joined."""
    results, errors = [None] * world_size, [None] * world_size

    def body(rank):
        try:
            results[rank] = fn(rank)
        except BaseException as exc:
            errors[rank] = exc

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(world_size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)
    assert not any(t.is_alive() for t in threads), "a rank thread did not finish"
    return results, errors


def bits_equal(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.int32), b.view(torch.int32))


# ----------------------------------------------------------------- segments
def test_prefix_and_names_are_validated():
    for bad in ["", "ab", "../etc", "a/b/c", "-abc", "fp8h x"]:
        with pytest.raises(UsageError):
            check_prefix(bad)
    with pytest.raises(UsageError):
        unlink_prefix("")
    with pytest.raises(UsageError):
        segment_name("fp8h-ok", "q/kv", 0, "data")
    assert segment_name("fp8h-1-ab", "qkv", 3, "flags") == "fp8h-1-ab-qkv-r3-flags"


def test_segment_create_attach_and_unlink(shm_prefix):
    name = f"{shm_prefix}-x-r0-data"
    own = Segment.create(name, 100)
    assert own.nbytes == os.sysconf("SC_PAGE_SIZE") and own.owner
    with pytest.raises(HarnessError, match="already exists"):
        Segment.create(name, 100)
    peer = Segment.attach(name, 100)
    own.view(10, 4).copy_(torch.tensor([1, 2, 3, 4], dtype=torch.uint8))
    assert peer.view(10, 4).tolist() == [1, 2, 3, 4]          # one memory, two mappings
    with pytest.raises(HarnessError, match="expected at least"):
        Segment.attach(name, 10 ** 6)
    peer.close()
    own.close()
    assert leftover_segments(shm_prefix) == [name]
    own.unlink()
    own.unlink()                                                # idempotent
    assert leftover_segments(shm_prefix) == []
    with pytest.raises(HarnessError, match="does not exist"):
        Segment.attach(name, 100)


def test_unlink_prefix_removes_only_its_prefix(shm_prefix):
    other = shm_prefix + "zz"            # shares our prefix: removed too (prefix semantics)
    unrelated = "fp8h-unrelated-" + shm_prefix[-8:]
    segs = [Segment.create(n, 1) for n in (f"{shm_prefix}-a-r0-data", f"{shm_prefix}-a-r1-flags", other, unrelated)]
    try:
        assert unlink_prefix(shm_prefix) == sorted([f"{shm_prefix}-a-r0-data", f"{shm_prefix}-a-r1-flags", other])
        assert leftover_segments(unrelated) == [unrelated]
    finally:
        for s in segs:
            s.close()
        unlink_prefix(unrelated)


# -------------------------------------------------------------------- flags
@pytest.fixture
def flag_region(shm_prefix):
    seg = Segment.create(f"{shm_prefix}-f-r0-flags", 4096)
    region = FlagRegion(seg, 8)
    yield region
    region.close()
    seg.close()
    seg.unlink()


def test_wait_returns_once_the_writer_stores(flag_region):
    def writer():
        time.sleep(0.05)
        flag_region.store(3, 5)
    t = threading.Thread(target=writer)
    t.start()
    seen = wait_counter(flag_region, 3, 5, 5.0, lambda v: f"waiting (counter {v})")
    t.join()
    assert seen == 5 and flag_region.load(3) == 5 and flag_region.load(2) == 0


def test_wait_deadline_names_what_and_counter(flag_region):
    flag_region.store(1, 3)
    start = time.monotonic()
    with pytest.raises(DeadlineExceeded) as info:
        wait_counter(flag_region, 1, 4, 0.2, lambda v: f"rank 1 waiting for chunk 0 from rank 0 (counter {v}, "
                                                       f"expected 4)", where="here")
    elapsed = time.monotonic() - start
    assert 0.2 <= elapsed < 0.2 + 10.0     # not before its deadline; after it, with a margin load cannot break
    assert info.value.what == "rank 1 waiting for chunk 0 from rank 0 (counter 3, expected 4)"
    assert info.value.seconds == 0.2 and info.value.where == "here"
    again = pickle.loads(pickle.dumps(info.value))
    assert (again.what, again.seconds, again.where) == (info.value.what, 0.2, "here")


def test_wait_can_be_cancelled(flag_region):
    cancel = threading.Event()
    threading.Timer(0.05, cancel.set).start()
    start = time.monotonic()
    with pytest.raises(WaitCancelled):
        wait_counter(flag_region, 0, 1, 3600.0, lambda v: "never", cancel=cancel)
    assert time.monotonic() - start < 3600.0      # the cancel ended it, not its deadline


# ---------------------------------------------------------------- integrity
def test_checksum_catches_every_single_byte_change():
    data = torch.randint(0, 256, (37,), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    base = checksum(data)
    assert checksum(data.clone()) == base
    for i in range(data.numel()):
        for flip in (0x01, 0x80):
            bad = data.clone()
            bad[i] ^= flip
            assert checksum(bad) != base, (i, flip)
    assert checksum(data[3:]) == checksum(data[3:].clone())    # unaligned views are handled


def _good_chunk(scale_inv=0.25):
    data = torch.randint(0, 256, (64, 8), dtype=torch.uint8, generator=torch.Generator().manual_seed(2))
    header = make_header(producer=1, chunk=1, seq=4, data=data, fmt=E4M3, scale_inv=torch.tensor(scale_inv))
    return data, header


def _verify(data, header, consumer_scale_inv=0.25, shadow=None, seq=4):
    verify_chunk(communicator="qkv", op="ring all-gather", chunk=1, producer=1, consumer=0, seq=seq,
                 header=header, data=data, consumer_scale_inv=torch.tensor(consumer_scale_inv), fmt=E4M3,
                 shadow=shadow)


def test_integrity_passes_good_data_and_round_trips_the_header():
    data, header = _good_chunk()
    _verify(data, header)
    _verify(data, header, shadow=data.clone())
    buf = bytearray(128)
    header.pack_into(memoryview(buf), 64)
    assert ChunkHeader.unpack_from(memoryview(buf), 64) == header
    assert ChunkHeader.unpack_from(memoryview(buf), 0) is None


def test_integrity_fails_on_a_corrupted_byte():
    data, header = _good_chunk()
    bad = data.clone()
    bad[10, 3] ^= 0x04
    with pytest.raises(BufferIntegrityError) as info:
        _verify(bad, header)
    err = info.value
    assert (err.communicator, err.chunk, err.producer, err.consumer) == ("qkv", 1, 1, 0)
    assert "checksum" in err.problem and err.ratio is None
    with pytest.raises(BufferIntegrityError, match=r"byte 83 is 0x.., the producer wrote 0x..; 1 byte\(s\) differ"):
        _verify(bad, header, shadow=data)


def test_integrity_fails_on_another_scale_and_names_both():
    data, header = _good_chunk(scale_inv=0.125)         # producer's scale is twice the consumer's
    with pytest.raises(BufferIntegrityError) as info:
        _verify(data, header, consumer_scale_inv=0.25)
    err = info.value
    assert err.producer_scale_inv == 0.125 and err.consumer_scale_inv == 0.25
    assert err.producer_scale_inv_bits == 0x3E000000 and err.consumer_scale_inv_bits == 0x3E800000
    assert err.ratio == 2.0
    assert "0x3e000000" in str(err) and "0x3e800000" in str(err) and "s_producer/s_consumer = 2.0" in str(err)
    assert "checksum" not in err.problem
    again = pickle.loads(pickle.dumps(err))
    assert isinstance(again, BufferIntegrityError) and again.__dict__ == err.__dict__ and str(again) == str(err)


def test_integrity_fails_on_a_missing_header_or_another_operation():
    data, header = _good_chunk()
    with pytest.raises(BufferIntegrityError, match="no chunk header"):
        _verify(data, None)
    with pytest.raises(BufferIntegrityError, match="operation #4; expected producer 1, chunk 1, operation #5"):
        _verify(data, header, seq=5)


def test_scale_bits_distinguish_signed_zero_and_nan():
    assert float32_bits(torch.tensor(-0.0)) == 0x80000000 and float32_bits(torch.tensor(0.0)) == 0


# -------------------------------------------------------------------- decode
@pytest.mark.parametrize("fmt", [E4M3, E5M2])
def test_decode_table_equals_dequantize_for_every_byte(fmt):
    every = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    pairs = torch.stack(torch.meshgrid(every, every, indexing="ij"), -1).reshape(-1)   # all byte pairs
    for scale_inv in [1.0, 0.25, 3.7, 1e-30, 1e30, 2.0 ** -149, 3.4e38, float("inf"), float("nan"), -0.0]:
        s = torch.tensor(scale_inv, dtype=torch.float32)
        expected = dequantize(pairs, s, fmt)
        actual = torch.empty_like(expected)
        PairTable(fmt, s).decode_into(pairs, actual)
        assert bits_equal(expected, actual), scale_inv
    odd = pairs[:12345]                                    # odd length: fallback path
    assert bits_equal(dequantize(odd, torch.tensor(0.5), fmt), decode_fp8(odd, torch.tensor(0.5), fmt))


# ------------------------------------------------------- communicators (threads)
class _SlowDecode:
    """Wraps a rank's decode tables so each chunk takes 20 ms longer to consume."""

    def __init__(self, cache):
        self.cache = cache

    def table(self, fmt, scale_inv):
        table = self.cache.table(fmt, scale_inv)
        def slow(data, out, index=None):
            time.sleep(0.02)
            return table.decode_into(data, out, index)
        return type("SlowTable", (), {"decode_into": staticmethod(slow)})()

    def clear(self):
        self.cache.clear()


def test_ring_allgather_gemm_world_3_with_a_slow_consumer(shm_prefix):
    """An odd ring, and a rank that consumes slowly: the release handshake must keep the
    fast ranks from overwriting chunks it has not consumed yet (back-to-back operations
    with different data each time)."""
    store, tp, m_local, k = HashStore(), 3, 32, 64
    data = [[torch.randn(m_local, k, generator=torch.Generator().manual_seed(10 * op + r)) for r in range(tp)]
            for op in range(6)]
    weights = [torch.randn(8, k, generator=torch.Generator().manual_seed(r)) for r in range(tp)]
    scale = torch.tensor(32.0)

    def rank_fn(rank):
        outs = []
        with Communicator("qkv", rank, tp, tp * m_local * k, store, shm_prefix, 10.0) as comm:
            if rank == 1:
                comm.decode_cache = _SlowDecode(comm.decode_cache)
            for op in range(6):
                outs.append(ring_allgather_gemm_hp(comm, data[op][rank], scale, E4M3, weights[rank]))
        return outs

    results, errors = run_threads(rank_fn, tp)
    assert errors == [None] * tp, errors
    for rank in range(tp):
        for op in range(6):
            chunks = [cast_to_fp8(x, scale, E4M3) for x in data[op]]
            ref = reference_ring_allgather_gemm(chunks, torch.ones(()) / scale, E4M3, weights[rank])
            assert bits_equal(ref, results[rank][op]), (rank, op)


def test_setup_deadline_names_the_missing_rank(shm_prefix):
    start = time.monotonic()
    with pytest.raises(DeadlineExceeded) as info:
        Communicator("qkv", 0, 2, 4096, HashStore(), shm_prefix, 0.3)
    assert time.monotonic() - start < 0.3 + 10.0     # the setup deadline, with a margin load cannot break
    assert "userbuffers 'qkv' setup: rank 0 waiting for rank(s) [1] to create their segments" in info.value.what
    assert leftover_segments(shm_prefix) == []            # what it created is gone again


def test_ranks_must_agree_on_the_configuration(shm_prefix):
    store = HashStore()
    _, errors = run_threads(lambda r: Communicator("qkv", r, 2, 4096 * (r + 1), store, shm_prefix, 2.0), 2)
    assert all(isinstance(e, UsageError) and "every rank must agree" in str(e) for e in errors), errors


def test_usage_errors(shm_prefix):
    store = HashStore()
    comm = Communicator("qkv", 0, 1, 1024, store, shm_prefix, 1.0)
    w = torch.randn(4, 16)
    with pytest.raises(UsageError, match="does not fit"):
        ring_allgather_gemm_hp(comm, torch.randn(64, 64), 1.0, E4M3, w)
    with pytest.raises(UsageError, match="needs a pipeline communicator"):
        gemm_reduce_scatter(comm, torch.randn(4, 16), w)
    with pytest.raises(UsageError, match=r"expected \[n, 16\]"):
        ring_allgather_gemm_hp(comm, torch.randn(4, 16), 1.0, E4M3, torch.randn(4, 8))
    with pytest.raises(UsageError, match="no default method"):
        Communicator("mine", 0, 1, 1024, store, shm_prefix, 1.0)
    with pytest.raises(UsageError, match="already live"):
        Communicator("qkv", 0, 1, 1024, store, shm_prefix, 1.0)
    # world size 1: the ring is just the local GEMM
    x = torch.randn(4, 16)
    out = ring_allgather_gemm_hp(comm, x, 2.0, E4M3, w)
    ref = reference_ring_allgather_gemm([cast_to_fp8(x, torch.tensor(2.0), E4M3)], torch.tensor(0.5), E4M3, w)
    assert bits_equal(ref, out)
    comm.close()
    comm.close()
    with pytest.raises(HarnessError, match="closed"):
        ring_allgather_gemm_hp(comm, x, 2.0, E4M3, w)


def test_failed_operation_poisons_the_communicator(shm_prefix):
    store = HashStore()
    scales = [torch.tensor(1.0), torch.tensor(2.0)]

    def rank_fn(rank):
        comm = Communicator("qkv", rank, 2, 8192, store, shm_prefix, 2.0)
        try:
            with pytest.raises(BufferIntegrityError):
                ring_allgather_gemm_hp(comm, torch.randn(8, 16), scales[rank], E4M3, torch.randn(4, 16))
            with pytest.raises(HarnessError, match="unusable after an earlier failure"):
                ring_allgather_gemm_hp(comm, torch.randn(8, 16), scales[rank], E4M3, torch.randn(4, 16))
        finally:
            comm.close()

    _, errors = run_threads(rank_fn, 2)
    assert errors == [None, None], errors


def test_initialize_get_and_destroy_ub(shm_prefix):
    store = HashStore()
    results, errors = run_threads(lambda r: initialize_ub(r, 2, store, shm_prefix, 1 << 16, 5.0), 2)
    assert errors == [None, None], errors
    assert sorted(results[0]) == ["fc1", "fc2", "proj", "qkv"]
    assert results[0]["proj"].method.value == "pipeline" and results[0]["qkv"].method.value == "ring_exchange"
    assert get_ub("fc1", rank=1, prefix=shm_prefix) is results[1]["fc1"]
    with pytest.raises(HarnessError, match="more than one"):
        get_ub("fc1", prefix=shm_prefix)
    assert len(leftover_segments(shm_prefix)) == 2 * 4 * 2      # data + flags per communicator and rank
    ours = [c for c in live_communicators() if c.prefix == shm_prefix]
    assert destroy_ub(ours) == 8
    assert leftover_segments(shm_prefix) == []
    assert not [c for c in live_communicators() if c.prefix == shm_prefix]


def test_bulk_allgather_of_high_precision_rows(shm_prefix):
    store = HashStore()
    xs = [torch.randn(3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(r)) for r in range(2)]

    def rank_fn(rank):
        with Communicator("bulk", rank, 2, 4096, store, shm_prefix, 5.0, method="bulk") as comm:
            return bulk_allgather(comm, xs[rank])

    results, errors = run_threads(rank_fn, 2)
    assert errors == [None, None], errors
    assert all(torch.equal(r, torch.cat(xs)) for r in results)
