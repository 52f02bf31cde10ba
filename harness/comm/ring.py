"""Ring-exchange all-gather overlapped with its GEMM (TE's column-parallel layers).

Numerics, defined so that a reference can follow them exactly (see
:mod:`harness.comm.reference`): chunk ``c`` (rank ``c``'s rows) is dequantized with the
*consumer's* ``scale_inv`` (TE assumes every rank's scale is the same) and multiplied on its own:
``out[c*m_local:(c+1)*m_local] = dequantize(chunk_c, scale_inv_local) @ weight.T`` in float32.
Rows come out in rank order whatever order the ring delivers them in.
"""

from __future__ import annotations

import dataclasses
import threading

import torch

from harness.comm.chunks import matrix, output_tensor, record_own_chunk, scalar, verify, weight_matrix
from harness.comm.communicator import Communicator
from harness.comm.methods import OverlapMethod
from harness.comm.operation import RING_ALLGATHER, Background, operation, reraise_primary, require_method
from harness.errors import HarnessError, UsageError
from harness.fp8.cast import cast_to_fp8
from harness.fp8.formats import Fp8Format


@dataclasses.dataclass(frozen=True)
class StagedChunk:
    """A rank's local chunk, already cast into its slot by :func:`cast_into_buffer`."""

    communicator: str
    rank: int
    seq: int
    shape: tuple[int, int]
    fmt: Fp8Format
    scale_inv: torch.Tensor


def cast_into_buffer(comm: Communicator, hp_local: torch.Tensor, scale, fmt: Fp8Format,
                     *, scale_inv=None) -> StagedChunk:
    """Cast ``hp_local`` ([m_local, k], high precision) straight into this rank's chunk of
    its buffer, for the communicator's next all-gather; record checksum and ``scale_inv``.

    The cast is :func:`harness.fp8.cast_to_fp8` (saturating, NaN -> 0x7F). ``scale_inv``
    defaults to ``1 / scale`` as a float32 tensor division, the recipe's own formula.
    Pass the result to :func:`ring_allgather_gemm` (or use :func:`ring_allgather_gemm_hp`).
    """
    if comm.closed:
        raise HarnessError(f"userbuffers {comm.name!r}: the communicator is closed")
    hp = matrix(hp_local, "hp_local")
    scale_t = scalar(scale, "scale")
    scale_inv_t = (torch.ones((), dtype=torch.float32) / scale_t) if scale_inv is None else \
        scalar(scale_inv, "scale_inv")
    m_local, k = hp.shape
    nbytes = m_local * k
    comm.check_chunk_fits(nbytes, RING_ALLGATHER)
    q = cast_to_fp8(hp, scale_t, fmt)
    comm.slot(comm.rank, comm.rank, nbytes).view(m_local, k).copy_(q)
    record_own_chunk(comm, comm.seq, nbytes, fmt, scale_inv_t)
    return StagedChunk(comm.name, comm.rank, comm.seq, (m_local, k), fmt, scale_inv_t)


def check_staged(comm: Communicator, staged: StagedChunk) -> None:
    if (staged.communicator, staged.rank) != (comm.name, comm.rank) or staged.seq != comm.seq:
        raise UsageError(f"userbuffers {comm.name!r} rank {comm.rank}: the staged chunk was cast into "
                         f"{staged.communicator!r} rank {staged.rank} for operation #{staged.seq}, but this "
                         f"communicator's next operation is #{comm.seq}")


class Ring:
    """One ring-exchange all-gather: the exchange (comm thread) and the per-chunk GEMM.

    ``own_bytes``: this rank's FP8 bytes as the caller passed them, not yet in the buffer.
    Then the communication thread first copies them into the rank's slot (and records the
    header) while the GEMM thread already multiplies the local chunk from the caller's
    tensor: that chunk never crosses a buffer, so there is nothing to verify for it.
    """

    def __init__(self, comm: Communicator, shape: tuple[int, int], seq: int, scale_inv: torch.Tensor,
                 fmt: Fp8Format, own_bytes: torch.Tensor | None = None):
        self.comm = comm
        self.seq = seq
        self.m_local, self.k = shape
        self.nbytes = self.m_local * self.k
        self.tp = comm.world_size
        self.rank = comm.rank
        self.scale_inv = scale_inv
        self.fmt = fmt
        self.own_bytes = own_bytes

    def order(self) -> list[int]:
        """Chunk multiplied at step i: ``(rank - i) mod tp`` (own chunk first)."""
        return [(self.rank - i) % self.tp for i in range(self.tp)]

    def stage(self) -> None:
        """Copy the caller's bytes into this rank's slot and record checksum and scale_inv."""
        if self.own_bytes is not None:
            self.comm.slot(self.rank, self.rank, self.nbytes).copy_(self.own_bytes.reshape(-1))
            record_own_chunk(self.comm, self.seq, self.nbytes, self.fmt, self.scale_inv)

    def exchange(self, cancel: threading.Event | None, on_ready) -> None:
        """Stage, then step i: send chunk ``(rank - i) mod tp`` to the next rank, receive
        ``(rank - i - 1) mod tp`` from the previous one. Every chunk travels with its
        producer's header."""
        self.stage()
        comm, tp, r = self.comm, self.tp, self.rank
        nxt, prv = (r + 1) % tp, (r - 1) % tp
        for i in range(tp - 1):
            comm.put(nxt, (r - i) % tp, self.nbytes, RING_ALLGATHER, cancel)
            recv = (r - i - 1) % tp
            comm.wait_data(prv, recv, RING_ALLGATHER, recv, cancel)
            on_ready(recv)

    def gemm_chunk(self, chunk: int, weight: torch.Tensor, out: torch.Tensor) -> None:
        """Verify chunk ``chunk`` (producer = rank ``chunk``), decode it with this rank's
        ``scale_inv``, multiply into its rows of ``out``."""
        comm = self.comm
        if chunk == self.rank and self.own_bytes is not None:
            data = self.own_bytes
        else:
            arrival = None
            if chunk != self.rank:            # (a staged own chunk was written here by this rank)
                arrival = comm.arrivals.check_arrived((self.rank - 1) % self.tp, chunk, RING_ALLGATHER, chunk)
            data = comm.slot(self.rank, chunk, self.nbytes)
            verify(comm, arrival, op=RING_ALLGATHER, chunk=chunk, producer=chunk, consumer=self.rank, seq=self.seq,
                    header=comm.read_header(chunk), data=data, consumer_scale_inv=self.scale_inv, fmt=self.fmt,
                    shadow=comm.shadow_view(chunk, self.seq, self.nbytes))
        x = comm.workspace("ag.decoded", (self.m_local, self.k), torch.float32)
        index = comm.workspace("ag.index", (self.nbytes // 2,), torch.int32)
        comm.decode_cache.table(self.fmt, self.scale_inv).decode_into(data, x, index)
        # multiply into an aligned workspace, then copy: MKL may round differently for
        # differently aligned operands, and a row block of ``out`` need not be aligned
        product = comm.workspace("ag.product", (self.m_local, weight.shape[0]), torch.float32)
        torch.mm(x, weight.t(), out=product)
        out[chunk * self.m_local:(chunk + 1) * self.m_local].copy_(product)

    def run(self, weight: torch.Tensor, out: torch.Tensor) -> None:
        background = Background(self.comm, RING_ALLGATHER, self.seq)
        background.start(self.exchange, background.cancel, background.mark_ready)
        try:
            for i, chunk in enumerate(self.order()):
                if i > 0:
                    background.wait_ready(chunk)
                self.gemm_chunk(chunk, weight, out)
        except BaseException as exc:
            background.abort()
            raise reraise_primary(background, exc)
        background.finish()


def ring_allgather_gemm(
    comm: Communicator,
    local_chunk_fp8: torch.Tensor | StagedChunk,
    scale_inv_local,
    fmt: Fp8Format | None,
    weight_hp: torch.Tensor,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """All-gather FP8 row chunks around the ring while multiplying them: ``[m_local*tp, n]``.

    ``local_chunk_fp8``: this rank's FP8 bytes (``uint8 [m_local, k]``), copied into its
    slot, or the :class:`StagedChunk` from :func:`cast_into_buffer` (already in place; then
    ``scale_inv_local`` and ``fmt`` may be None and default to the staged ones).
    ``scale_inv_local`` is what this rank dequantizes *every* chunk with; ``weight_hp``
    is ``[n, k]`` (computed in float32). At step ``i`` the rank multiplies chunk
    ``(rank - i) mod tp`` while its communication thread sends that chunk on and receives
    the next. Each chunk is verified (:mod:`harness.comm.integrity`) before use.
    """
    op = RING_ALLGATHER
    require_method(comm, OverlapMethod.RING_EXCHANGE, op)
    if isinstance(local_chunk_fp8, StagedChunk):
        check_staged(comm, local_chunk_fp8)
        fmt = local_chunk_fp8.fmt if fmt is None else fmt
        scale_inv = local_chunk_fp8.scale_inv if scale_inv_local is None else scalar(scale_inv_local, "scale_inv_local")
    else:
        if fmt is None or scale_inv_local is None:
            raise UsageError(f"{op}: fmt and scale_inv_local are required with a uint8 local chunk")
        scale_inv = scalar(scale_inv_local, "scale_inv_local")
    if not isinstance(fmt, Fp8Format):
        raise UsageError(f"{op}: fmt must be an Fp8Format, got {fmt!r}")
    # validate everything before the operation starts: a failure inside it poisons the communicator
    if isinstance(local_chunk_fp8, StagedChunk):
        local, (m_local, k) = None, local_chunk_fp8.shape
    else:
        local = matrix(local_chunk_fp8, "local_chunk_fp8", torch.uint8)
        m_local, k = local.shape
        comm.check_chunk_fits(m_local * k, op)
    weight = weight_matrix(weight_hp, k)
    result = output_tensor(out, m_local * comm.world_size, weight.shape[0])
    with operation(comm, op) as seq:
        Ring(comm, (m_local, k), seq, scale_inv, fmt, own_bytes=local).run(weight, result)
    return result


def ring_allgather_gemm_hp(
    comm: Communicator,
    hp_local: torch.Tensor,
    scale,
    fmt: Fp8Format,
    weight_hp: torch.Tensor,
    *,
    scale_inv=None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """:func:`cast_into_buffer` then :func:`ring_allgather_gemm`: the producer casts its
    high-precision input straight into its chunk, every consumer uses its own scale_inv."""
    staged = cast_into_buffer(comm, hp_local, scale, fmt, scale_inv=scale_inv)
    return ring_allgather_gemm(comm, staged, None, None, weight_hp, out=out)
