"""The bulk (non-overlapped) collectives through a communicator's buffers."""

from __future__ import annotations

import torch

from harness.comm.chunks import as_bytes, header_for, put_tensor, record_own_chunk, scalar, verify
from harness.comm.communicator import Communicator
from harness.comm.operation import BULK_ALLGATHER, BULK_REDUCE_SCATTER, operation
from harness.comm.reduce_scatter import sum_in_rank_order
from harness.errors import UsageError
from harness.fp8.formats import Fp8Format


def bulk_allgather(
    comm: Communicator,
    local: torch.Tensor,
    *,
    scale_inv_local=None,
    fmt: Fp8Format | None = None,
) -> torch.Tensor:
    """All-gather without overlap: ``[m_local * tp, ...]`` in rank order (a private tensor).

    ``local`` is any contiguous tensor (FP8 bytes as ``uint8``, or high precision). Each
    rank writes its chunk into every peer's buffer, then waits for and verifies the
    others'. With ``fmt`` and ``scale_inv_local`` the chunks are checked as FP8 data: each
    producer's scale_inv must equal this rank's.
    """
    op = BULK_ALLGATHER
    if not isinstance(local, torch.Tensor) or local.dim() < 1:
        raise UsageError(f"{op}: local must be a tensor with at least one dimension")
    if (fmt is None) != (scale_inv_local is None):
        raise UsageError(f"{op}: pass both fmt and scale_inv_local, or neither")
    scale_inv = None if scale_inv_local is None else scalar(scale_inv_local, "scale_inv_local")
    src_bytes = as_bytes(local)
    nbytes = src_bytes.numel()
    comm.check_chunk_fits(nbytes, op)
    tp, r = comm.world_size, comm.rank
    gathered = torch.empty((local.shape[0] * tp,) + tuple(local.shape[1:]), dtype=local.dtype)
    out_bytes = as_bytes(gathered) if gathered.numel() else gathered.view(torch.uint8)
    with operation(comm, op) as seq:
        comm.slot(r, r, nbytes).copy_(src_bytes)
        record_own_chunk(comm, seq, nbytes, fmt, scale_inv)
        for i in range(1, tp):
            comm.put((r + i) % tp, r, nbytes, op)
        out_bytes[r * nbytes:(r + 1) * nbytes].copy_(src_bytes)
        for src in range(tp):
            if src == r:
                continue
            comm.wait_data(src, src, op, src)
            arrival = comm.arrivals.check_arrived(src, src, op, src)
            data = comm.slot(r, src, nbytes)
            verify(comm, arrival, op=op, chunk=src, producer=src, consumer=r, seq=seq, header=comm.read_header(src),
                    data=data, consumer_scale_inv=scale_inv, fmt=fmt, shadow=comm.shadow_view(src, seq, nbytes))
            out_bytes[src * nbytes:(src + 1) * nbytes].copy_(data)
    return gathered


def bulk_reduce_scatter(comm: Communicator, partial: torch.Tensor) -> torch.Tensor:
    """Reduce-scatter without overlap: ``[m / tp, ...]``, summed in rank order 0..tp-1.

    ``partial`` is this rank's ``[m, ...]`` floating-point contribution; chunk ``j`` (rows
    ``j*m/tp ...``) goes to rank ``j``.
    """
    op = BULK_REDUCE_SCATTER
    if not isinstance(partial, torch.Tensor) or partial.dim() < 1 or not partial.is_floating_point():
        raise UsageError(f"{op}: partial must be a floating-point tensor with at least one dimension")
    tp, r = comm.world_size, comm.rank
    full = partial.detach().contiguous()
    if full.shape[0] % tp:
        raise UsageError(f"{op}: {full.shape[0]} rows do not split into {tp} equal chunks")
    mc = full.shape[0] // tp
    chunks = [full[j * mc:(j + 1) * mc] for j in range(tp)]
    nbytes = chunks[0].numel() * chunks[0].element_size()
    comm.check_chunk_fits(nbytes, op)
    result = torch.empty_like(chunks[r])
    with operation(comm, op) as seq:
        for i in range(1, tp):
            j = (r + i) % tp
            data = as_bytes(chunks[j])
            put_tensor(comm, j, r, data, header_for(comm, producer=r, chunk=j, seq=seq, data=data), op, None)
        sum_in_rank_order(comm, chunks[r], seq, op, result, None)
    return result
