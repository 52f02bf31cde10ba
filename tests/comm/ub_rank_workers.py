"""Rank bodies for the multi-process tests (run in spawned processes by harness.comm.spawn).

Every rank regenerates every rank's data from seeds, so it can compute the reference
locally, with the same torch thread settings as the operation it checks. Fault
injection (a corrupted byte, a skipped operation, a SIGKILL) is done here, by patching a
communicator instance in the faulty rank only; the library has no fault hooks.
"""

from __future__ import annotations

import os
import signal
import time

import torch
from torch.distributed import FileStore

from harness.comm import (
    BufferIntegrityError,
    Communicator,
    bulk_allgather,
    bulk_reduce_scatter,
    gemm_reduce_scatter,
    ring_allgather_gemm,
    ring_allgather_gemm_hp,
)
from harness.comm.reference import (
    reference_allgather,
    reference_gemm_reduce_scatter,
    reference_reduce_scatter,
    reference_ring_allgather_gemm,
)
from harness.errors import DeadlineExceeded
from harness.fp8 import Fp8Format, cast_to_fp8, first_bit_mismatch


def _gen(*seed) -> torch.Generator:
    return torch.Generator().manual_seed(hash(seed) & 0x7FFFFFFF)


def _hp(seed: int, src: int, rows: int, cols: int, special: bool = False) -> torch.Tensor:
    x = torch.randn(rows, cols, generator=_gen(seed, src, rows, cols)) * 3.0
    if special and x.numel() >= 8:
        flat = x.view(-1)
        flat[:8] = torch.tensor([float("nan"), float("inf"), -float("inf"), 1e30, -1e30, 1e-30, -0.0, 0.0])
    return x


def _bytes_needed(world_size: int, chunk_bytes: int) -> int:
    return world_size * (-(-chunk_bytes // 64) * 64)


def _check(mismatches: list, what: str, expected: torch.Tensor, actual: torch.Tensor) -> None:
    found = first_bit_mismatch(expected, actual, what)
    if found is not None:
        mismatches.append(str(found))


def equality_rank(rank: int, world_size: int, *, store_path: str, prefix: str, cases: list[dict]) -> dict:
    """Run every operation on every case; compare bitwise with the local reference."""
    store = FileStore(store_path, -1)
    ag_bytes = max(_bytes_needed(world_size, c["m_local"] * c["k"]) for c in cases)
    rs_bytes = max(_bytes_needed(world_size, c["m_local"] * c["n"] * 4) for c in cases)
    bulk_bytes = max(ag_bytes, rs_bytes)
    mismatches: list[str] = []
    with Communicator("qkv", rank, world_size, ag_bytes, store, prefix, 20.0) as ag, \
            Communicator("fc1", rank, world_size, ag_bytes, store, prefix, 20.0, integrity="full") as ag_full, \
            Communicator("fc2", rank, world_size, ag_bytes, store, prefix, 20.0, method="ring_exchange",
                         integrity="off") as ag_off, \
            Communicator("proj", rank, world_size, rs_bytes, store, prefix, 20.0) as rs, \
            Communicator("bulk", rank, world_size, bulk_bytes, store, prefix, 20.0, method="bulk") as bulk:
        for i, case in enumerate(cases):
            fmt = Fp8Format(case["fmt"])
            m_local, k, n, seed = case["m_local"], case["k"], case["n"], case["seed"]
            scale = torch.tensor(case["scale"], dtype=torch.float32)
            scale_inv = torch.ones(()) / scale
            hps = [_hp(seed, src, m_local, k, special=case.get("special", False)) for src in range(world_size)]
            weight = _hp(seed, 99, n, k)
            chunks = [cast_to_fp8(hp, scale, fmt) for hp in hps]
            ref = reference_ring_allgather_gemm(chunks, scale_inv, fmt, weight)
            tag = f"case {i} {case}"

            out = ring_allgather_gemm(ag, chunks[rank], scale_inv, fmt, weight)
            _check(mismatches, f"{tag}: ring_allgather_gemm", ref, out)
            out = ring_allgather_gemm_hp(ag, hps[rank], scale, fmt, weight)
            _check(mismatches, f"{tag}: ring_allgather_gemm_hp", ref, out)
            out = ring_allgather_gemm_hp(ag_full, hps[rank], scale, fmt, weight)
            _check(mismatches, f"{tag}: ring_allgather_gemm_hp (full integrity)", ref, out)

            # Each rank casts with its own scale, integrity off: every consumer still
            # dequantizes all chunks with its *own* scale_inv (silently mis-scaled).
            own_scales = [scale * (src + 1) for src in range(world_size)]
            skewed = [cast_to_fp8(hp, s, fmt) for hp, s in zip(hps, own_scales)]
            my_scale_inv = torch.ones(()) / own_scales[rank]
            out = ring_allgather_gemm(ag_off, skewed[rank], my_scale_inv, fmt, weight)
            _check(mismatches, f"{tag}: consumer scale_inv", reference_ring_allgather_gemm(skewed, my_scale_inv, fmt,
                                                                                          weight), out)

            inps = [_hp(seed, 200 + src, m_local * world_size, k) for src in range(world_size)]
            weights = [_hp(seed, 300 + src, n, k) for src in range(world_size)]
            out = gemm_reduce_scatter(rs, inps[rank], weights[rank])
            _check(mismatches, f"{tag}: gemm_reduce_scatter", reference_gemm_reduce_scatter(inps, weights, rank), out)

            out = bulk_allgather(bulk, chunks[rank], scale_inv_local=scale_inv, fmt=fmt)
            _check(mismatches, f"{tag}: bulk_allgather", reference_allgather(chunks), out)
            partials = [_hp(seed, 400 + src, m_local * world_size, n) for src in range(world_size)]
            out = bulk_reduce_scatter(bulk, partials[rank])
            _check(mismatches, f"{tag}: bulk_reduce_scatter", reference_reduce_scatter(partials, rank), out)
        ops = {c.name: c.seq for c in (ag, ag_full, ag_off, rs, bulk)}
    return {"mismatches": mismatches, "ops": ops}


def _run_scenario(fn):
    try:
        fn()
        return ("ok", None)
    except (BufferIntegrityError, DeadlineExceeded) as exc:
        return ("error", exc)


def integrity_rank(rank: int, world_size: int, *, store_path: str, prefix: str) -> dict:
    """Scenarios, each on a fresh communicator: good data, a producer with another scale,
    a corrupted byte (cheap and full mode)."""
    store = FileStore(store_path, -1)
    m_local, k, n = 32, 64, 16
    fmt = Fp8Format.E4M3
    hp = _hp(5, rank, m_local, k)
    weight = _hp(5, 99, n, k)
    nbytes = _bytes_needed(world_size, m_local * k)
    results = {}

    def ring(name, scale, integrity="cheap", corrupt=False):
        with Communicator(name, rank, world_size, nbytes, store, prefix, 5.0, method="ring_exchange",
                          integrity=integrity) as comm:
            if corrupt and rank == 1:
                signal_orig = comm.signal

                def corrupting_signal(dst, slot):
                    # flip one bit of the chunk just written into the peer, then announce it
                    view = comm.slot(dst, slot, 16)
                    view[5] = view[5] ^ 0x10
                    signal_orig(dst, slot)
                comm.signal = corrupting_signal
            return ring_allgather_gemm_hp(comm, hp, torch.tensor(scale), fmt, weight)

    results["good"] = _run_scenario(lambda: ring("ig_good", 4.0))
    results["scale"] = _run_scenario(lambda: ring("ig_scale", 4.0 * (rank + 1)))
    results["corrupt"] = _run_scenario(lambda: ring("ig_corrupt", 4.0, corrupt=True))
    results["corrupt_full"] = _run_scenario(lambda: ring("ig_corrupt_full", 4.0, integrity="full", corrupt=True))
    return results


def skip_rank(rank: int, world_size: int, *, store_path: str, prefix: str, deadline_s: float) -> dict:
    """Rank 0 issues three all-gathers, rank 1 skips the second: counters fall out of step."""
    store = FileStore(store_path, -1)
    fmt = Fp8Format.E4M3
    hp = _hp(6, rank, 16, 32)
    weight = _hp(6, 99, 8, 32)
    ops = [0, 1, 2] if rank == 0 else [0, 2]
    with Communicator("qkv", rank, world_size, _bytes_needed(world_size, 16 * 32), store, prefix, deadline_s) as comm:
        for op in ops:
            start = time.monotonic()
            try:
                ring_allgather_gemm_hp(comm, hp, torch.tensor(8.0), fmt, weight)
            except DeadlineExceeded as exc:
                return {"error": exc, "elapsed": time.monotonic() - start, "op": op}
    return {"error": None, "op": ops[-1]}


def sigkill_rank(rank: int, world_size: int, *, store_path: str, prefix: str, deadline_s: float) -> dict:
    """Rank 1 is SIGKILLed in its third all-gather, after writing its chunk into rank 0's
    buffer and before bumping rank 0's counter; rank 0 must hit its deadline."""
    store = FileStore(store_path, -1)
    fmt = Fp8Format.E4M3
    hp = _hp(7, rank, 64, 128)
    weight = _hp(7, 99, 16, 128)
    with Communicator("qkv", rank, world_size, _bytes_needed(world_size, 64 * 128), store, prefix,
                      deadline_s) as comm:
        if rank == 1:
            signal_orig = comm.signal

            def dying_signal(dst, slot):
                if comm.seq == 2:
                    os.kill(os.getpid(), signal.SIGKILL)
                signal_orig(dst, slot)
            comm.signal = dying_signal
        for op in range(5):
            start = time.monotonic()
            try:
                ring_allgather_gemm_hp(comm, hp, torch.tensor(8.0), fmt, weight)
            except DeadlineExceeded as exc:
                return {"error": exc, "elapsed": time.monotonic() - start, "op": op}
    return {"error": None}
