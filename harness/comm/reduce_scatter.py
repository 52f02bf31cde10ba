"""A GEMM with its reduce-scatter pipelined behind it (TE's row-parallel layers).

Numerics, defined so that a reference can follow them exactly (see
:mod:`harness.comm.reference`): rank ``r`` computes partial chunk ``j`` as
``inp[j*mc:(j+1)*mc] @ weight.T`` (``mc = m / world_size``) and the owner of chunk ``j``
sums the partials in the fixed order rank 0, 1, ..., ``world_size - 1``:
``((p_0 + p_1) + p_2) + ...``, so the result is bitwise reproducible.
"""

from __future__ import annotations

import queue
import threading

import torch

from harness.comm.chunks import header_for, matrix, output_tensor, put_tensor, verify, weight_matrix
from harness.comm.communicator import Communicator
from harness.comm.methods import OverlapMethod
from harness.comm.operation import PIPELINED_REDUCE_SCATTER, Background, operation, reraise_primary, require_method
from harness.errors import UsageError


def receive_partial(comm: Communicator, src: int, seq: int, nbytes: int, op: str, shape, dtype,
                     cancel: threading.Event | None) -> torch.Tensor:
    """Wait for rank ``src``'s partial of this rank's chunk (in slot ``src``) and verify it."""
    r = comm.rank
    comm.wait_data(src, src, op, r, cancel)
    arrival = comm.arrivals.check_arrived(src, src, op, r)
    data = comm.slot(r, src, nbytes)
    verify(comm, arrival, op=op, chunk=r, producer=src, consumer=r, seq=seq, header=comm.read_header(src), data=data)
    return data.view(dtype).view(shape)


def sum_in_rank_order(comm: Communicator, own: torch.Tensor, seq: int, op: str, out: torch.Tensor,
                       cancel: threading.Event | None) -> torch.Tensor:
    """``out = ((p_0 + p_1) + p_2) + ...``: partials of this rank's chunk, rank order."""
    nbytes = own.numel() * own.element_size()
    for src in range(comm.world_size):
        part = own if src == comm.rank else \
            receive_partial(comm, src, seq, nbytes, op, tuple(own.shape), own.dtype, cancel)
        if src == 0:
            out.copy_(part)
        else:
            torch.add(out, part, out=out)
    return out


def gemm_reduce_scatter(
    comm: Communicator,
    inp_hp: torch.Tensor,
    weight_hp: torch.Tensor,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Row-parallel GEMM with its reduce-scatter pipelined behind it: ``[m / tp, n]``.

    ``inp_hp`` is this rank's ``[m, k_local]`` slice of the input, ``weight_hp`` its
    ``[n, k_local]`` slice of the weight. The rank computes its partial product chunk by
    chunk (chunk ``j`` = rows ``j*m/tp ...``, starting with the next rank's and ending with
    its own) and its communication thread ships each finished chunk to the chunk's owner
    while the next one is computed. The owner then sums the partials in rank order
    0, 1, ..., tp-1 (fixed, so the result is bitwise reproducible).
    """
    op = PIPELINED_REDUCE_SCATTER
    require_method(comm, OverlapMethod.PIPELINE, op)
    inp = matrix(inp_hp, "inp_hp").to(torch.float32)
    weight = weight_matrix(weight_hp, inp.shape[1])
    tp, r = comm.world_size, comm.rank
    m, n = inp.shape[0], weight.shape[0]
    if m % tp:
        raise UsageError(f"{op}: {m} rows do not split into {tp} equal chunks")
    mc = m // tp
    nbytes = mc * n * 4
    comm.check_chunk_fits(nbytes, op)
    result = output_tensor(out, mc, n)
    with operation(comm, op) as seq:
        background = Background(comm, op, seq)
        outbox: queue.Queue = queue.Queue()

        def ship() -> None:
            while True:
                item = outbox.get(timeout=background.bound_s)
                if item is None:
                    return
                j, part = item
                data = part.reshape(-1).view(torch.uint8)
                header = header_for(comm, producer=r, chunk=j, seq=seq, data=data)
                put_tensor(comm, j, r, data, header, op, background.cancel)
                background.mark_ready(j)

        background.start(ship)
        try:
            own = None
            for i in range(1, tp + 1):
                j = (r + i) % tp
                part = comm.workspace(f"rs.partial{j}", (mc, n), torch.float32)
                torch.mm(inp[j * mc:(j + 1) * mc], weight.t(), out=part)
                if j == r:
                    own = part
                else:
                    outbox.put((j, part))
            outbox.put(None)
            sum_in_rank_order(comm, own, seq, op, result, background.cancel)
        except BaseException as exc:
            outbox.put(None)
            background.abort()
            raise reraise_primary(background, exc)
        background.finish()
    return result
