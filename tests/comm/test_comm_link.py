"""The modelled link (:mod:`harness.comm.link`): a chunk reaches its consumer no earlier than
the link would deliver it, results stay bit for bit what they are on the unmodelled link,
and every rank must agree on the link."""

from __future__ import annotations

import threading
import time

import pytest
import torch
from torch.distributed import HashStore

from harness.comm import Communicator, gemm_reduce_scatter, ring_allgather_gemm_hp
from harness.comm import ring as ub_ring
from harness.comm.link import ENV_LINK_GBPS, LinkModel
from harness.comm.reference import reference_ring_allgather_gemm
from harness.errors import UsageError
from harness.fp8 import E4M3, cast_to_fp8

from test_comm_units import bits_equal, run_threads


def test_transfer_time_is_latency_plus_bytes_over_bandwidth():
    link = LinkModel(bytes_per_s=2e9, latency_s=0.001)
    assert link.transfer_s(4_000_000) == pytest.approx(0.003)
    assert LinkModel().transfer_s(1 << 30) == 0.0 and not LinkModel().modelled
    assert LinkModel.from_gbps(0.5).bytes_per_s == 5e8
    assert LinkModel.from_gbps(None) == LinkModel() == LinkModel.from_gbps(0)
    assert "0.5 GB/s" in LinkModel.from_gbps(0.5).describe()


@pytest.mark.parametrize("kwargs", [{"bytes_per_s": 0.0}, {"bytes_per_s": -1.0}, {"bytes_per_s": float("nan")},
                                    {"bytes_per_s": float("inf")}, {"latency_s": -0.1}])
def test_bad_link_parameters_are_refused(kwargs):
    with pytest.raises(UsageError):
        LinkModel(**kwargs)


def test_bad_bandwidth_in_gb_per_s_is_refused_in_those_units():
    with pytest.raises(UsageError, match="positive number of GB/s, got -1"):
        LinkModel.from_gbps(-1)


def test_link_from_the_environment(monkeypatch):
    monkeypatch.delenv(ENV_LINK_GBPS, raising=False)
    assert LinkModel.from_env() == LinkModel()
    monkeypatch.setenv(ENV_LINK_GBPS, "0.25")
    assert LinkModel.from_env().bytes_per_s == 2.5e8
    for bad in ("fast", "0", "-2", "inf"):
        monkeypatch.setenv(ENV_LINK_GBPS, bad)
        with pytest.raises(UsageError, match=ENV_LINK_GBPS):
            LinkModel.from_env()


def test_a_cancelled_operation_ends_the_hold_at_once():
    cancel = threading.Event()
    cancel.set()
    start = time.perf_counter()
    LinkModel(latency_s=3600.0).hold(start, 1 << 20, cancel)
    assert time.perf_counter() - start < 3600.0          # it did not wait out the link's latency


def _ring(shm_prefix, link, data, weights, scale):
    store = HashStore()

    def rank_fn(rank):
        with Communicator("qkv", rank, 2, 2 * 32 * 64, store, shm_prefix, 20.0, link=link) as comm:
            t0 = time.perf_counter()
            out = ring_allgather_gemm_hp(comm, data[rank], scale, E4M3, weights[rank])
            return out, time.perf_counter() - t0

    results, errors = run_threads(rank_fn, 2)
    assert errors == [None, None], errors
    return results


def test_a_chunk_arrives_no_earlier_than_the_link_delivers_it(shm_prefix):
    """With 0.4 s of link latency, neither rank can finish its all-gather + GEMM sooner: the
    peer's chunk is released to it only when the modelled transfer ends. The outputs are the
    reference's, bit for bit, as on the unmodelled link."""
    data = [torch.randn(32, 64, generator=torch.Generator().manual_seed(r)) for r in range(2)]
    weights = [torch.randn(8, 64, generator=torch.Generator().manual_seed(10 + r)) for r in range(2)]
    scale = torch.tensor(16.0)
    slow = _ring(shm_prefix, LinkModel(latency_s=0.4), data, weights, scale)
    plain = _ring(shm_prefix, LinkModel(), data, weights, scale)
    chunks = [cast_to_fp8(x, scale, E4M3) for x in data]
    for rank in range(2):
        (out_slow, took), (out_plain, _) = slow[rank], plain[rank]
        assert took >= 0.4, f"rank {rank} finished in {took:.3f} s, before its peer's chunk could arrive"
        ref = reference_ring_allgather_gemm(chunks, torch.ones(()) / scale, E4M3, weights[rank])
        assert bits_equal(out_slow, ref) and bits_equal(out_plain, ref), rank


def test_the_gemm_runs_while_the_peer_chunk_is_in_flight(shm_prefix, monkeypatch):
    """What the overlap figure relies on: with the peer's chunk in flight for 0.4 s, each rank
    multiplies its own chunk before the peer's arrives, not after (a ring that waited for the
    whole gather before its first GEMM would log the arrival first)."""
    log, lock = [], threading.Lock()
    gemm_chunk, wait_data = ub_ring.Ring.gemm_chunk, Communicator.wait_data

    def logged_gemm(ring, chunk, weight, out):
        with lock:
            log.append((ring.rank, "gemm", chunk))
        return gemm_chunk(ring, chunk, weight, out)

    def logged_wait(comm, src, slot, op, chunk, cancel=None):
        wait_data(comm, src, slot, op, chunk, cancel)
        with lock:
            log.append((comm.rank, "arrived", chunk))

    monkeypatch.setattr(ub_ring.Ring, "gemm_chunk", logged_gemm)
    monkeypatch.setattr(Communicator, "wait_data", logged_wait)
    data = [torch.randn(32, 64, generator=torch.Generator().manual_seed(r)) for r in range(2)]
    weights = [torch.randn(8, 64, generator=torch.Generator().manual_seed(10 + r)) for r in range(2)]
    _ring(shm_prefix, LinkModel(latency_s=0.4), data, weights, torch.tensor(16.0))
    for rank in range(2):
        mine = [(what, chunk) for r, what, chunk in log if r == rank]
        peer = 1 - rank
        assert mine.index(("gemm", rank)) < mine.index(("arrived", peer)) < mine.index(("gemm", peer)), mine


def test_pipelined_reduce_scatter_is_held_by_the_link_too(shm_prefix):
    store = HashStore()
    x = [torch.randn(16, 32, generator=torch.Generator().manual_seed(r)) for r in range(2)]
    w = [torch.randn(8, 32, generator=torch.Generator().manual_seed(5 + r)) for r in range(2)]

    def rank_fn(rank, link):
        with Communicator("fc2", rank, 2, 2 * 16 * 8 * 4, store, shm_prefix, 20.0,
                          link=link) as comm:
            t0 = time.perf_counter()
            out = gemm_reduce_scatter(comm, x[rank], w[rank])
            return out, time.perf_counter() - t0

    slow, errors = run_threads(lambda r: rank_fn(r, LinkModel(latency_s=0.3)), 2)
    assert errors == [None, None], errors
    plain, errors = run_threads(lambda r: rank_fn(r, LinkModel()), 2)
    assert errors == [None, None], errors
    for rank in range(2):
        assert slow[rank][1] >= 0.3, f"rank {rank} reduced its rows before the partner's partial could arrive"
        assert bits_equal(slow[rank][0], plain[rank][0]), rank


def test_ranks_must_agree_on_the_link(shm_prefix):
    store = HashStore()
    links = [LinkModel(), LinkModel.from_gbps(1.0)]
    _, errors = run_threads(lambda r: Communicator("qkv", r, 2, 4096, store, shm_prefix, 2.0, link=links[r]), 2)
    assert all(isinstance(e, UsageError) and "every rank must agree" in str(e) for e in errors), errors
