"""A chunk in a Userbuffers buffer: its header written by the producer, checked by the consumer,
and the arguments an operation takes, checked before it starts (a failure inside an operation
poisons the communicator)."""

from __future__ import annotations

import threading
import time

import torch

from harness.comm.arrivals import Arrival
from harness.comm.communicator import Communicator
from harness.comm.integrity import (HEADER_BYTES, BufferIntegrityError, ChunkHeader, IntegrityMode, make_header,
                                    verify_chunk)
from harness.errors import UsageError
from harness.fp8.formats import Fp8Format


def scalar(value, what: str) -> torch.Tensor:
    t = value if isinstance(value, torch.Tensor) else torch.tensor(value)
    if t.numel() != 1:
        raise UsageError(f"{what} must be a single value, got shape {list(t.shape)}")
    return t.detach().reshape(()).to(torch.float32)


def matrix(t: torch.Tensor, what: str, dtype: torch.dtype | None = None) -> torch.Tensor:
    if not isinstance(t, torch.Tensor) or t.dim() != 2:
        raise UsageError(f"{what} must be a 2-D tensor, got "
                         f"{type(t).__name__ if not isinstance(t, torch.Tensor) else list(t.shape)}")
    if dtype is not None and t.dtype != dtype:
        raise UsageError(f"{what} must be {dtype}, got {t.dtype}")
    return t.detach().contiguous()


def weight_matrix(weight_hp: torch.Tensor, k: int, what: str = "weight_hp") -> torch.Tensor:
    w = matrix(weight_hp, what)
    if not w.is_floating_point():
        raise UsageError(f"{what} must be a floating-point tensor, got {w.dtype}")
    if w.shape[1] != k:
        raise UsageError(f"{what} is {list(w.shape)}; expected [n, {k}] to match the input")
    return w.to(torch.float32)


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def output_tensor(out: torch.Tensor | None, rows: int, n: int) -> torch.Tensor:
    if out is None:
        return torch.empty(rows, n, dtype=torch.float32)
    if out.shape != (rows, n) or out.dtype != torch.float32 or not out.is_contiguous():
        raise UsageError(f"out must be a contiguous float32 [{rows}, {n}] tensor, got "
                         f"{out.dtype}{list(out.shape)}")
    return out


def verify(comm: Communicator, arrival: Arrival | None = None, **fields) -> None:
    """The integrity oracle on one chunk, unless the communicator runs with integrity off.

    ``arrival``: what the read saw (``Arrivals.check_arrived``); a chunk that fails because
    the producer's write landed only after the read is reported as such
    (``Arrivals.explain_early_read``), not as a missing or foreign header."""
    if comm.integrity is IntegrityMode.OFF:
        return
    try:
        verify_chunk(communicator=comm.name, **fields)
    except BufferIntegrityError as exc:
        if arrival is None:
            raise
        raise comm.arrivals.explain_early_read(exc, arrival, producer=fields["producer"], seq=fields["seq"],
                                      header=fields["header"], data=fields["data"]) from None


def header_for(comm: Communicator, **fields) -> ChunkHeader | None:
    return None if comm.integrity is IntegrityMode.OFF else make_header(**fields)


def record_own_chunk(comm: Communicator, seq: int, nbytes: int, fmt: Fp8Format | None,
                      scale_inv: torch.Tensor | None) -> None:
    """Header (checksum, scale_inv) for this rank's chunk as it now sits in its slot; in
    full mode also the recorded copy consumers compare against."""
    r = comm.rank
    data = comm.slot(r, r, nbytes)
    header = header_for(comm, producer=r, chunk=r, seq=seq, data=data, fmt=fmt, scale_inv=scale_inv)
    if header is None:
        return
    comm.write_header(r, header)
    shadow = comm.shadow_view(r, seq, nbytes)
    if shadow is not None:
        shadow.copy_(data)


def put_tensor(comm: Communicator, dst: int, slot: int, data: torch.Tensor, header: ChunkHeader | None,
                op: str, cancel: threading.Event | None) -> None:
    """Write ``data`` (uint8) and its header into ``dst``'s ``slot``, then bump the counter."""
    comm.wait_release(dst, op, cancel)
    started = time.perf_counter()
    if header is not None:
        header.pack_into(comm.data[dst].buffer(), comm.header_offset(slot))
    comm.slot(dst, slot, data.numel()).copy_(data)
    comm.land(started, HEADER_BYTES + data.numel(), cancel)
    comm.signal(dst, slot)
